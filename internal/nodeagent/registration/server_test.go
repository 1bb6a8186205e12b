/*
Copyright 2026 The kubedevice Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package registration

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kubedevice/kubedevice/internal/nodeagent/dptest"
)

func TestNewServerRejectsRelativeDir(t *testing.T) {
	for _, dir := range []string{"", "relative/dir"} {
		_, err := NewServer(Config{PluginDir: dir, Handler: &recordingHandler{}})
		want := fmt.Sprintf("bad socketPath, must be an absolute path: %s", filepath.Join(dir, SocketName))
		if err == nil || err.Error() != want {
			t.Errorf("NewServer(%q) error = %v, want %q", dir, err, want)
		}
	}
}

func TestRegisterRefused(t *testing.T) {
	ts := newTestServer(t, true)
	valid := func(mutate func(*pluginapi.RegisterRequest)) *pluginapi.RegisterRequest {
		r := &pluginapi.RegisterRequest{Version: pluginapi.Version, Endpoint: "p.sock", ResourceName: testResource}
		mutate(r)
		return r
	}
	endpointErr := func(e string) string {
		return fmt.Sprintf("the Endpoint %q is invalid: it must be the name of a socket file in %s", e, ts.dir)
	}
	cases := map[string]struct {
		req  *pluginapi.RegisterRequest
		want string
	}{
		"unsupported version": {
			req:  valid(func(r *pluginapi.RegisterRequest) { r.Version = "v1alpha1" }),
			want: `requested API version "v1alpha1" is not supported by kubelet. Supported version is ["v1beta1"]`,
		},
		"resource name without domain": {
			req:  valid(func(r *pluginapi.RegisterRequest) { r.ResourceName = "gopher" }),
			want: `the ResourceName "gopher" is invalid`,
		},
		"native resource name": {
			req:  valid(func(r *pluginapi.RegisterRequest) { r.ResourceName = "kubernetes.io/gopher" }),
			want: `the ResourceName "kubernetes.io/gopher" is invalid`,
		},
		"quota prefix": {
			req:  valid(func(r *pluginapi.RegisterRequest) { r.ResourceName = "requests.example.com/gopher" }),
			want: `the ResourceName "requests.example.com/gopher" is invalid`,
		},
		"not a qualified name": {
			req:  valid(func(r *pluginapi.RegisterRequest) { r.ResourceName = "example.com/go pher" }),
			want: `the ResourceName "example.com/go pher" is invalid`,
		},
		"endpoint escapes the directory": {
			req:  valid(func(r *pluginapi.RegisterRequest) { r.Endpoint = "../x" }),
			want: endpointErr("../x"),
		},
		"endpoint in a subdirectory": {
			req:  valid(func(r *pluginapi.RegisterRequest) { r.Endpoint = "a/b" }),
			want: endpointErr("a/b"),
		},
		"endpoint dot": {
			req:  valid(func(r *pluginapi.RegisterRequest) { r.Endpoint = "." }),
			want: endpointErr("."),
		},
		"endpoint dot dot": {
			req:  valid(func(r *pluginapi.RegisterRequest) { r.Endpoint = ".." }),
			want: endpointErr(".."),
		},
		"empty endpoint": {
			req:  valid(func(r *pluginapi.RegisterRequest) { r.Endpoint = "" }),
			want: endpointErr(""),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			before := len(ts.Registrations())
			ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
			defer cancel()
			err := dptest.Register(ctx, ts.SocketPath(), tc.req)
			if err == nil {
				t.Fatal("Register succeeded, want an error")
			}
			if diff := cmp.Diff(tc.want, status.Convert(err).Message()); diff != "" {
				t.Errorf("Register error (-want +got):\n%s", diff)
			}
			// Counted before validation, like the kubelet.
			if diff := cmp.Diff([]string{tc.req.ResourceName}, ts.Registrations()[before:]); diff != "" {
				t.Errorf("registrations counted (-want +got):\n%s", diff)
			}
		})
	}
	if got := ts.handler.Events(); len(got) != 0 {
		t.Errorf("handler called for refused registrations: %+v", got)
	}
}

func TestRegisterConnectsAndStreams(t *testing.T) {
	ts := newTestServer(t, true)
	p := newPlugin(t, ts.dir, "p.sock", testResource, dptest.Device("a", pluginapi.Healthy))
	p.SetOptions(true, true)
	if err := register(t, p, ts.SocketPath()); err != nil {
		t.Fatalf("Register: %v", err)
	}
	ts.handler.waitEvents(t, 2) // the stream is open
	p.Update([]*pluginapi.Device{dptest.Device("a", pluginapi.Healthy), dptest.Device("b", pluginapi.Unhealthy)})
	ts.handler.waitEvents(t, 3)
	p.EndStreams(errors.New("plugin going away"))
	got := ts.handler.waitEvents(t, 4)

	socket := filepath.Join(ts.dir, "p.sock")
	wantOpts := &pluginapi.DevicePluginOptions{PreStartRequired: true, GetPreferredAllocationAvailable: true}
	want := []event{
		{Kind: "Connected", Resource: testResource, Socket: socket, ID: 1, Options: wantOpts},
		{Kind: "Devices", Resource: testResource, Socket: socket, ID: 1, Devices: []string{"a"}},
		{Kind: "Devices", Resource: testResource, Socket: socket, ID: 1, Devices: []string{"a", "b"}},
		{Kind: "Disconnected", Resource: testResource, Socket: socket, ID: 1},
	}
	if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
		t.Errorf("handler events (-want +got):\n%s", diff)
	}
	// The stream is never re-opened: the plugin must register again.
	wantCalls := []string{dptest.CallGetDevicePluginOptions, dptest.CallListAndWatch}
	if diff := cmp.Diff(wantCalls, p.Calls()); diff != "" {
		t.Errorf("plugin calls (-want +got):\n%s", diff)
	}
}

func TestRegisterGetDevicePluginOptionsFails(t *testing.T) {
	ts := newTestServer(t, true)
	p := newPlugin(t, ts.dir, "p.sock", testResource, dptest.Device("a", pluginapi.Healthy))
	p.FailGetDevicePluginOptions(dptest.ErrInjected)
	err := register(t, p, ts.SocketPath())
	want := "failed to get device plugin options: rpc error: code = Unknown desc = injected failure"
	if err == nil || status.Convert(err).Message() != want {
		t.Fatalf("Register error = %v, want %q", err, want)
	}
	ts.Stop()
	if diff := cmp.Diff([]string{dptest.CallGetDevicePluginOptions}, p.Calls()); diff != "" {
		t.Errorf("plugin calls (-want +got):\n%s", diff)
	}
	if got := ts.handler.Events(); len(got) != 0 {
		t.Errorf("handler events = %+v, want none", got)
	}
}

func TestRegisterHandlerRefuses(t *testing.T) {
	ts := newTestServer(t, true)
	ts.handler.connectErr = errors.New("refused by the manager")
	p := newPlugin(t, ts.dir, "p.sock", testResource)
	err := register(t, p, ts.SocketPath())
	if err == nil || status.Convert(err).Message() != "refused by the manager" {
		t.Fatalf("Register error = %v, want the handler's error", err)
	}
	ts.Stop()
	if diff := cmp.Diff([]string{dptest.CallGetDevicePluginOptions}, p.Calls()); diff != "" {
		t.Errorf("plugin calls (-want +got):\n%s", diff)
	}
}

func TestRegisterDialFails(t *testing.T) {
	ts := newTestServer(t, true, withDialTimeout(200*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	err := dptest.Register(ctx, ts.SocketPath(), &pluginapi.RegisterRequest{
		Version: pluginapi.Version, Endpoint: "absent.sock", ResourceName: testResource,
	})
	if msg := status.Convert(err).Message(); err == nil || !strings.HasPrefix(msg, "failed to dial device plugin: ") {
		t.Fatalf("Register error = %v, want the kubelet's dial error", err)
	}
}

// A plugin whose dial hangs must not delay another plugin's registration.
func TestRegisterNotBlockedByHangingPlugin(t *testing.T) {
	ts := newTestServer(t, true)
	hang, err := dptest.ListenAndHang(filepath.Join(ts.dir, "hang.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer hang.Close()

	ctxA, cancelA := context.WithCancel(context.Background())
	defer cancelA()
	errA := make(chan error, 1)
	go func() {
		errA <- dptest.Register(ctxA, ts.SocketPath(), &pluginapi.RegisterRequest{
			Version: pluginapi.Version, Endpoint: "hang.sock", ResourceName: "example.com/slow",
		})
	}()
	dptest.Eventually(t, waitTimeout, func() error {
		if hang.Accepted() == 0 {
			return errors.New("the hanging plugin was not dialed yet")
		}
		return nil
	})

	b := newPlugin(t, ts.dir, "b.sock", testResource, dptest.Device("b", pluginapi.Healthy))
	start := time.Now()
	if err := register(t, b, ts.SocketPath()); err != nil {
		t.Fatalf("Register of B: %v", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("Register of B took %v while A's dial hung", took)
	}
	select {
	case err := <-errA:
		t.Fatalf("Register of A returned early: %v", err)
	default:
	}
	cancelA()
	if err := <-errA; err == nil {
		t.Error("Register of A succeeded, want an error")
	}
}

// A second registration on the same socket while the first connection is
// still up takes over: the old connection is closed, the new one streams.
func TestRegisterSameSocketTakesOver(t *testing.T) {
	ts := newTestServer(t, true)
	p := newPlugin(t, ts.dir, "p.sock", testResource, dptest.Device("a", pluginapi.Healthy))
	if err := register(t, p, ts.SocketPath()); err != nil {
		t.Fatalf("first Register: %v", err)
	}
	ts.handler.waitEvents(t, 2)
	if err := register(t, p, ts.SocketPath()); err != nil {
		t.Fatalf("second Register: %v", err)
	}
	dptest.Eventually(t, waitTimeout, func() error {
		if diff := cmp.Diff([]string{"Connected", "Devices", "Disconnected"}, ts.handler.kinds(1)); diff != "" {
			return fmt.Errorf("client 1 events (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]string{"Connected", "Devices"}, ts.handler.kinds(2)); diff != "" {
			return fmt.Errorf("client 2 events (-want +got):\n%s", diff)
		}
		if n := p.OpenStreams(); n != 1 {
			return fmt.Errorf("%d open streams, want 1", n)
		}
		return nil
	})
	// The new connection is the live one.
	p.Update([]*pluginapi.Device{dptest.Device("b", pluginapi.Healthy)})
	dptest.Eventually(t, waitTimeout, func() error {
		if diff := cmp.Diff([]string{"Connected", "Devices", "Devices"}, ts.handler.kinds(2)); diff != "" {
			return fmt.Errorf("client 2 events (-want +got):\n%s", diff)
		}
		return nil
	})
}

func TestStartRemovesOnlyStaleSockets(t *testing.T) {
	ts := newTestServer(t, false)
	dir := ts.dir
	if err := os.MkdirAll(filepath.Join(dir, "subdir"), 0o750); err != nil {
		t.Fatal(err)
	}
	outside := dptest.ShortTempDir(t)
	for _, name := range []string{filepath.Join(dir, "stale.sock"), filepath.Join(dir, SocketName), filepath.Join(dir, "subdir", "nested.sock"), filepath.Join(outside, "target.sock")} {
		leaveSocket(t, name)
	}
	for _, name := range []string{"kubelet_internal_checkpoint", "notes.txt"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("keep"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(outside, "target.sock"), filepath.Join(dir, "link.sock")); err != nil {
		t.Fatal(err)
	}

	if err := ts.Start(ts.ctx); err != nil {
		t.Fatalf("Start: %v", err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	want := []string{SocketName, "kubelet_internal_checkpoint", "link.sock", "notes.txt", "subdir"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("directory after Start (-want +got):\n%s", diff)
	}
	for _, path := range []string{filepath.Join(dir, "subdir", "nested.sock"), filepath.Join(outside, "target.sock")} {
		if _, err := os.Lstat(path); err != nil {
			t.Errorf("%s was removed: %v", path, err)
		}
	}
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm&0o027 != 0 {
		t.Errorf("plugin directory mode = %v, want at most 0750", perm)
	}
	assertServes(t, ts)
}

func TestStartCreatesDirectoryWithMode0750(t *testing.T) {
	ts := newTestServer(t, true)
	fi, err := os.Stat(ts.dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != 0o750 {
		t.Errorf("plugin directory mode = %v, want 0750", got)
	}
}

// leaveSocket creates a socket file at path with nothing behind it, as a
// crashed process leaves it.
func leaveSocket(t *testing.T, path string) {
	t.Helper()
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()
}

// assertServes checks that a plugin can register on the server's socket.
func assertServes(t *testing.T, ts *testServer) {
	t.Helper()
	name := fmt.Sprintf("probe-%d.sock", len(ts.handler.Events()))
	p := newPlugin(t, ts.dir, name, testResource)
	if err := register(t, p, ts.SocketPath()); err != nil {
		t.Fatalf("Register on %s: %v", ts.SocketPath(), err)
	}
}

func TestSocketRecreatedWhenRemoved(t *testing.T) {
	cases := map[string]func(t *testing.T, ts *testServer){
		"socket removed": func(t *testing.T, ts *testServer) {
			if err := os.Remove(ts.SocketPath()); err != nil {
				t.Fatal(err)
			}
		},
		"socket renamed": func(t *testing.T, ts *testServer) {
			if err := os.Rename(ts.SocketPath(), ts.SocketPath()+".old"); err != nil {
				t.Fatal(err)
			}
		},
		"directory moved away": func(t *testing.T, ts *testServer) {
			// Atomic, unlike RemoveAll, which races with the re-creation.
			if err := os.Rename(ts.dir, ts.dir+".old"); err != nil {
				t.Fatal(err)
			}
		},
	}
	for name, remove := range cases {
		t.Run(name, func(t *testing.T) {
			ts := newTestServer(t, true)
			before, err := os.Lstat(ts.SocketPath())
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			remove(t, ts)
			dptest.Eventually(t, time.Second, func() error {
				fi, err := os.Lstat(ts.SocketPath())
				if err != nil {
					return err
				}
				if os.SameFile(before, fi) || fi.Mode()&os.ModeSocket == 0 {
					return errors.New("registration socket not re-created yet")
				}
				return nil
			})
			t.Logf("registration socket re-created after %v", time.Since(start))
			if err := ts.Check(); err != nil {
				t.Errorf("Check() = %v, want nil", err)
			}
			assertServes(t, ts)

			// And again: the watch survived the first recovery.
			again, err := os.Lstat(ts.SocketPath())
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Remove(ts.SocketPath()); err != nil {
				t.Fatal(err)
			}
			dptest.Eventually(t, time.Second, func() error {
				fi, err := os.Lstat(ts.SocketPath())
				if err != nil {
					return err
				}
				if os.SameFile(again, fi) {
					return errors.New("registration socket not re-created yet")
				}
				return nil
			})
			assertServes(t, ts)
		})
	}
}

func TestCheck(t *testing.T) {
	ts := newTestServer(t, false)
	if err := ts.Check(); err == nil || !strings.HasPrefix(err.Error(), errServerUnhealthy) {
		t.Errorf("Check() before Start = %v, want %q", err, errServerUnhealthy)
	}
	if err := ts.Start(ts.ctx); err != nil {
		t.Fatal(err)
	}
	if err := ts.Check(); err != nil {
		t.Errorf("Check() after Start = %v, want nil", err)
	}
	ts.Stop()
	if err := ts.Check(); err != nil {
		t.Errorf("Check() after Stop = %v, want nil", err)
	}
}

func TestStop(t *testing.T) {
	t.Run("without Start, twice", func(t *testing.T) {
		ts := newTestServer(t, false)
		ts.Stop()
		ts.Stop()
		if err := ts.Start(ts.ctx); err == nil {
			t.Error("Start after Stop succeeded")
		}
	})
	t.Run("after Start, twice", func(t *testing.T) {
		ts := newTestServer(t, true)
		p := newPlugin(t, ts.dir, "p.sock", testResource, dptest.Device("a", pluginapi.Healthy))
		if err := register(t, p, ts.SocketPath()); err != nil {
			t.Fatal(err)
		}
		ts.handler.waitEvents(t, 2)
		ts.Stop()
		ts.Stop()
		// Every connected plugin was disconnected before Stop returned.
		if diff := cmp.Diff([]string{"Connected", "Devices", "Disconnected"}, ts.handler.kinds(1)); diff != "" {
			t.Errorf("client events (-want +got):\n%s", diff)
		}
		if _, err := os.Lstat(ts.SocketPath()); !os.IsNotExist(err) {
			t.Errorf("registration socket still present after Stop: %v", err)
		}
	})
}

func TestIsExtendedResourceName(t *testing.T) {
	cases := map[string]bool{
		"example.com/gopher":                     true,
		"nvidia.com/gpu":                         true,
		"example.com/a.b-c_d":                    true,
		"gopher":                                 false,
		"kubernetes.io/gopher":                   false,
		"sub.kubernetes.io/gopher":               false,
		"requests.example.com/gopher":            false,
		"example.com/":                           false,
		"/gopher":                                false,
		"example.com/" + strings.Repeat("a", 64): false,
		"Example_com/gopher":                     false,
	}
	var got []string
	for name, want := range cases {
		if IsExtendedResourceName(name) != want {
			got = append(got, name)
		}
	}
	slices.Sort(got)
	if len(got) > 0 {
		t.Errorf("IsExtendedResourceName wrong for %q", got)
	}
}
