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

package deviceplugin_test

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/testing/protocmp"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/kubedevice/kubedevice/internal/nodeagent"
	"github.com/kubedevice/kubedevice/internal/nodeagent/dptest"
	"github.com/kubedevice/kubedevice/pkg/deviceplugin"
)

func TestDirectRegistration(t *testing.T) {
	dir, _ := dirs(t)
	m := startManager(t, dir, "")
	p := runPlugin(t, deviceplugin.Config{
		ResourceName: testResource,
		SocketDir:    dir,
		SocketName:   "gopher.sock",
		Devices:      []*v1beta1.Device{deviceplugin.Device("gopher-1", false), deviceplugin.Device("gopher-0", true)},
		Hooks:        deviceplugin.Hooks{PreStartContainer: func(context.Context, []string) error { return nil }},
	})

	socket := filepath.Join(dir, "gopher.sock")
	if p.SocketPath() != socket {
		t.Errorf("SocketPath() = %q, want %q", p.SocketPath(), socket)
	}
	waitForView(t, m, registered(socket, nodeagent.PluginOptions{PreStartRequired: true}, "gopher-0=Healthy", "gopher-1=Unhealthy"))
	if s, ok := m.Snapshot(testResource); !ok || s.Capacity != 2 || s.Allocatable != 1 {
		t.Errorf("capacity/allocatable = %d/%d (known %t), want 2/1", s.Capacity, s.Allocatable, ok)
	}
	waitForStatus(t, p, "one registration and one stream, serving", func(s deviceplugin.Status) bool {
		return s.Registrations == 1 && s.Streams == 1 && s.LastError == nil && s.Serving
	})
	fi, err := os.Stat(socket)
	if err != nil {
		t.Fatal(err)
	}
	if mode := fi.Mode().Perm(); mode != 0o600 {
		t.Errorf("socket mode = %v, want 0600", mode)
	}
}

func TestWatcherRegistration(t *testing.T) {
	dir, reg := dirs(t)
	m := startManager(t, dir, reg)
	p := runPlugin(t, deviceplugin.Config{
		ResourceName: testResource,
		SocketDir:    dir,
		SocketName:   "gopher.sock",
		Registration: deviceplugin.RegistrationWatcher,
		RegistryDir:  reg,
		Devices:      []*v1beta1.Device{deviceplugin.Device("gopher-0", true)},
		Hooks: deviceplugin.Hooks{
			GetPreferredAllocation: func(context.Context, []string, []string, int) ([]string, error) { return nil, nil },
		},
	})

	socket := filepath.Join(reg, "gopher.sock")
	if p.SocketPath() != socket {
		t.Errorf("SocketPath() = %q, want %q", p.SocketPath(), socket)
	}
	waitForView(t, m, registered(socket, nodeagent.PluginOptions{GetPreferredAllocationAvailable: true}, "gopher-0=Healthy"))
	// The manager tells the plugin with NotifyRegistrationStatus.
	waitForStatus(t, p, "one registration and one stream", func(s deviceplugin.Status) bool {
		return s.Registrations == 1 && s.Streams == 1 && s.LastError == nil
	})
	if _, err := os.Stat(filepath.Join(dir, "gopher.sock")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a socket in the plugin directory: %v; want none on the watcher path", err)
	}
}

// The plugin watcher's side by hand: GetInfo, a refusal, the plugin
// announcing itself again, then success.
func TestWatcherGetInfoAndRefusal(t *testing.T) {
	_, reg := dirs(t)
	p := runPlugin(t, deviceplugin.Config{
		ResourceName: testResource,
		SocketName:   "gopher.sock",
		Registration: deviceplugin.RegistrationWatcher,
		RegistryDir:  reg,
	})
	var first os.FileInfo
	dptest.Eventually(t, waitTimeout, func() error {
		var err error
		first, err = os.Stat(p.SocketPath())
		return err
	})
	// The socket file exists from bind, a moment before the plugin listens:
	// wait until it is served.
	conn, err := grpc.NewClient("unix://"+p.SocketPath(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.WaitForReady(true)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	watcher := registerapi.NewRegistrationClient(conn)
	ctx := rpcContext(t)

	info, err := watcher.GetInfo(ctx, &registerapi.InfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	want := &registerapi.PluginInfo{Type: registerapi.DevicePlugin, Name: testResource, SupportedVersions: []string{v1beta1.Version}}
	if diff := cmp.Diff(want, info, protocmp.Transform()); diff != "" {
		t.Errorf("GetInfo (-want +got):\n%s", diff)
	}

	if _, err := watcher.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{Error: "no handler for you"}); err != nil {
		t.Fatal(err)
	}
	if st := p.Status(); st.LastError == nil || !strings.Contains(st.LastError.Error(), "no handler for you") || st.Registrations != 0 {
		t.Errorf("status after a refusal: %+v, want the refusal as LastError", st)
	}
	// Not registered, no stream: the plugin announces itself again by
	// re-creating its socket, after watcherBackoff.initial (5 s).
	dptest.Eventually(t, 3*waitTimeout, func() error {
		fi, err := os.Stat(p.SocketPath())
		if err != nil {
			return err
		}
		if os.SameFile(first, fi) {
			return errors.New("socket not re-created yet")
		}
		return nil
	})

	conn2 := dialPlugin(t, p.SocketPath()) // the new socket serves the plugin
	if _, err := conn2.GetDevicePluginOptions(ctx, &v1beta1.Empty{}); err != nil {
		t.Fatalf("GetDevicePluginOptions on the re-created socket: %v", err)
	}
	watcher2, err := grpc.NewClient("unix://"+p.SocketPath(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.WaitForReady(true)))
	if err != nil {
		t.Fatal(err)
	}
	defer watcher2.Close()
	if _, err := registerapi.NewRegistrationClient(watcher2).NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		t.Fatal(err)
	}
	if st := p.Status(); st.LastError != nil || st.Registrations != 1 {
		t.Errorf("status after registration: %+v, want one registration and no error", st)
	}
}

func TestDeviceUpdatesPropagate(t *testing.T) {
	dir, _ := dirs(t)
	m := startManager(t, dir, "")
	p := runPlugin(t, deviceplugin.Config{
		ResourceName: testResource,
		SocketDir:    dir,
		SocketName:   "gopher.sock",
		Devices:      []*v1beta1.Device{deviceplugin.Device("gopher-0", true)},
	})
	socket := filepath.Join(dir, "gopher.sock")
	waitForView(t, m, registered(socket, nodeagent.PluginOptions{}, "gopher-0=Healthy"))

	if err := p.SetDevices([]*v1beta1.Device{
		{ID: "gopher-2"}, deviceplugin.Device("gopher-1", true), deviceplugin.Device("gopher-0", true),
	}); err != nil {
		t.Fatalf("SetDevices: %v", err)
	}
	waitForView(t, m, registered(socket, nodeagent.PluginOptions{}, "gopher-0=Healthy", "gopher-1=Healthy", "gopher-2=Healthy"))

	if err := p.SetHealth("gopher-1", false); err != nil {
		t.Fatalf("SetHealth: %v", err)
	}
	waitForView(t, m, registered(socket, nodeagent.PluginOptions{}, "gopher-0=Healthy", "gopher-1=Unhealthy", "gopher-2=Healthy"))
	if err := p.SetHealth("gopher-1", true); err != nil {
		t.Fatalf("SetHealth: %v", err)
	}
	waitForView(t, m, registered(socket, nodeagent.PluginOptions{}, "gopher-0=Healthy", "gopher-1=Healthy", "gopher-2=Healthy"))

	if err := p.SetDevices([]*v1beta1.Device{deviceplugin.Device("gopher-2", false)}); err != nil {
		t.Fatalf("SetDevices: %v", err)
	}
	waitForView(t, m, registered(socket, nodeagent.PluginOptions{}, "gopher-2=Unhealthy"))

	if err := p.SetHealth("gopher-0", true); !errors.Is(err, deviceplugin.ErrUnknownDevice) {
		t.Errorf("SetHealth of a removed device: %v, want ErrUnknownDevice", err)
	}
	if err := p.SetDevices([]*v1beta1.Device{{ID: "a"}, {ID: "a"}}); err == nil {
		t.Error("SetDevices with a duplicate ID succeeded")
	}
	if diff := cmp.Diff([]string{"gopher-2=Unhealthy"}, deviceList(&v1beta1.ListAndWatchResponse{Devices: p.Devices()})); diff != "" {
		t.Errorf("Devices() after a refused SetDevices (-want +got):\n%s", diff)
	}
}

func TestReregistersWhenKubeletSocketIsRecreated(t *testing.T) {
	dir, _ := dirs(t)
	m := startManager(t, dir, "")
	p := runPlugin(t, deviceplugin.Config{
		ResourceName: testResource,
		SocketDir:    dir,
		SocketName:   "gopher.sock",
		Devices:      []*v1beta1.Device{deviceplugin.Device("gopher-0", true)},
	})
	socket := filepath.Join(dir, "gopher.sock")
	want := registered(socket, nodeagent.PluginOptions{}, "gopher-0=Healthy")
	waitForView(t, m, want)
	waitForStatus(t, p, "registered once", func(s deviceplugin.Status) bool { return s.Registrations == 1 && s.Streams == 1 })

	// kubedevice re-creates its socket when it is removed, as a restarted
	// kubelet creates a new one.
	if err := os.Remove(m.SocketPath()); err != nil {
		t.Fatal(err)
	}
	waitForStatus(t, p, "registered again, one stream", func(s deviceplugin.Status) bool { return s.Registrations == 2 && s.Streams == 1 })
	waitForView(t, m, want)
}

func TestReregistersAfterManagerRestart(t *testing.T) {
	for _, mode := range []deviceplugin.RegistrationMode{deviceplugin.RegistrationDirect, deviceplugin.RegistrationWatcher} {
		t.Run(string(mode), func(t *testing.T) {
			dir, reg := dirs(t)
			if mode == deviceplugin.RegistrationDirect {
				reg = ""
			}
			m1 := startManager(t, dir, reg)
			p := runPlugin(t, deviceplugin.Config{
				ResourceName: testResource,
				SocketDir:    dir,
				SocketName:   "gopher.sock",
				Registration: mode,
				RegistryDir:  reg,
				Devices:      []*v1beta1.Device{deviceplugin.Device("gopher-0", true)},
			})
			want := registered(p.SocketPath(), nodeagent.PluginOptions{}, "gopher-0=Healthy")
			waitForView(t, m1, want)
			waitForStatus(t, p, "registered once", func(s deviceplugin.Status) bool { return s.Registrations == 1 && s.Streams == 1 })

			// Stopping the manager ends the stream; the new manager removes
			// stale sockets (the plugin's, on the direct path) when it starts.
			m1.Stop()
			waitForStatus(t, p, "no stream", func(s deviceplugin.Status) bool { return s.Streams == 0 })
			m2 := startManager(t, dir, reg)
			waitForView(t, m2, want)
			waitForStatus(t, p, "registered again, one stream", func(s deviceplugin.Status) bool { return s.Registrations == 2 && s.Streams == 1 })
		})
	}
}

func TestReregistersWhenStreamDrops(t *testing.T) {
	dir := dptest.ShortTempDir(t)
	manager, err := startToyManager(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(manager.stop)
	p := runPlugin(t, deviceplugin.Config{
		ResourceName: testResource,
		SocketDir:    dir,
		SocketName:   "gopher.sock",
		Devices:      []*v1beta1.Device{deviceplugin.Device("gopher-0", true)},
	})
	first := []string{
		"register example.com/gopher endpoint=gopher.sock version=v1beta1",
		"options preStartRequired=false getPreferredAllocationAvailable=false",
		"devices gopher-0=Healthy",
	}
	var got []string
	for range first {
		got = append(got, manager.next())
	}
	if diff := cmp.Diff(first, got); diff != "" {
		t.Fatalf("manager saw (-want +got):\n%s", diff)
	}

	// Nothing changes on disk: only the stream ends.
	manager.dropStream()
	want := append([]string{"stream ended"}, first...)
	got = nil
	for range want {
		got = append(got, manager.next())
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("after the stream dropped, manager saw (-want +got):\n%s", diff)
	}
	waitForStatus(t, p, "registered twice", func(s deviceplugin.Status) bool { return s.Registrations == 2 && s.Streams == 1 })
}

func TestWaitsForTheManager(t *testing.T) {
	dir, _ := dirs(t)
	p := runPlugin(t, deviceplugin.Config{
		ResourceName: testResource,
		SocketDir:    dir,
		SocketName:   "gopher.sock",
		Devices:      []*v1beta1.Device{deviceplugin.Device("gopher-0", true)},
	})
	waitForStatus(t, p, "an error saying kubelet.sock is missing", func(s deviceplugin.Status) bool {
		return errors.Is(s.LastError, fs.ErrNotExist) && s.Registrations == 0
	})
	// The manager starts later: the plugin registers when kubelet.sock
	// appears, well before its backoff would retry.
	m := startManager(t, dir, "")
	waitForView(t, m, registered(p.SocketPath(), nodeagent.PluginOptions{}, "gopher-0=Healthy"))
	waitForStatus(t, p, "registered", func(s deviceplugin.Status) bool { return s.Registrations == 1 && s.LastError == nil })
}

func TestConcurrentStreams(t *testing.T) {
	dir, _ := dirs(t)
	p := runPlugin(t, deviceplugin.Config{
		ResourceName: testResource,
		SocketDir:    dir,
		SocketName:   "gopher.sock",
		Devices:      []*v1beta1.Device{deviceplugin.Device("gopher-1", true), deviceplugin.Device("gopher-0", true)},
	})
	open := func() (v1beta1.DevicePlugin_ListAndWatchClient, context.CancelFunc) {
		ctx, cancel := context.WithCancel(rpcContext(t))
		s, err := dialPlugin(t, p.SocketPath()).ListAndWatch(ctx, &v1beta1.Empty{})
		if err != nil {
			t.Fatalf("ListAndWatch: %v", err)
		}
		return s, cancel
	}
	expect := func(name string, s v1beta1.DevicePlugin_ListAndWatchClient, want ...string) {
		t.Helper()
		resp, err := s.Recv()
		if err != nil {
			t.Fatalf("%s: Recv: %v", name, err)
		}
		if diff := cmp.Diff(want, deviceList(resp)); diff != "" {
			t.Errorf("%s received (-want +got):\n%s", name, diff)
		}
	}

	s1, cancel1 := open()
	expect("stream 1", s1, "gopher-0=Healthy", "gopher-1=Healthy")
	s2, _ := open()
	expect("stream 2", s2, "gopher-0=Healthy", "gopher-1=Healthy")
	waitForStatus(t, p, "two streams", func(s deviceplugin.Status) bool { return s.Streams == 2 })

	if err := p.SetHealth("gopher-0", false); err != nil {
		t.Fatal(err)
	}
	expect("stream 1", s1, "gopher-0=Unhealthy", "gopher-1=Healthy")
	expect("stream 2", s2, "gopher-0=Unhealthy", "gopher-1=Healthy")

	// A stream opened later starts from the current list.
	s3, _ := open()
	expect("stream 3", s3, "gopher-0=Unhealthy", "gopher-1=Healthy")

	// One stream going away leaves the others served.
	cancel1()
	waitForStatus(t, p, "two streams", func(s deviceplugin.Status) bool { return s.Streams == 2 })
	if err := p.SetDevices([]*v1beta1.Device{deviceplugin.Device("gopher-1", true)}); err != nil {
		t.Fatal(err)
	}
	expect("stream 2", s2, "gopher-1=Healthy")
	expect("stream 3", s3, "gopher-1=Healthy")

	// Stop ends the streams cleanly.
	p.Stop()
	for name, s := range map[string]v1beta1.DevicePlugin_ListAndWatchClient{"stream 2": s2, "stream 3": s3} {
		if resp, err := s.Recv(); err == nil {
			t.Errorf("%s: received %v after Stop, want the end of the stream", name, resp)
		}
	}
}

func TestStop(t *testing.T) {
	t.Run("removes its socket and disconnects", func(t *testing.T) {
		dir, _ := dirs(t)
		m := startManager(t, dir, "")
		p := runPlugin(t, deviceplugin.Config{
			ResourceName: testResource,
			SocketDir:    dir,
			SocketName:   "gopher.sock",
			Devices:      []*v1beta1.Device{deviceplugin.Device("gopher-0", true)},
		})
		waitForView(t, m, registered(p.SocketPath(), nodeagent.PluginOptions{}, "gopher-0=Healthy"))
		p.Stop()
		if _, err := os.Stat(p.SocketPath()); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("socket after Stop: %v, want it removed", err)
		}
		waitForView(t, m, view{State: nodeagent.PluginDisconnected, Devices: []string{"gopher-0=Unhealthy"}})
		p.Stop() // idempotent
	})
	t.Run("by cancelling the context", func(t *testing.T) {
		dir, _ := dirs(t)
		p, err := deviceplugin.New(deviceplugin.Config{ResourceName: testResource, SocketDir: dir, SocketName: "gopher.sock"})
		if err != nil {
			t.Fatal(err)
		}
		_, ctx := ktesting.NewTestContext(t)
		ctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- p.Run(ctx) }()
		dptest.Eventually(t, waitTimeout, func() error {
			_, err := os.Stat(p.SocketPath())
			return err
		})
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(waitTimeout):
			t.Fatal("Run did not return after its context was cancelled")
		}
		if _, err := os.Stat(p.SocketPath()); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("socket after Run returned: %v, want it removed", err)
		}
		if err := p.Run(context.Background()); err == nil {
			t.Error("a second Run succeeded")
		}
	})
	t.Run("before Run", func(t *testing.T) {
		dir, _ := dirs(t)
		p, err := deviceplugin.New(deviceplugin.Config{ResourceName: testResource, SocketDir: dir})
		if err != nil {
			t.Fatal(err)
		}
		p.Stop()
		if err := p.Run(context.Background()); err != nil {
			t.Errorf("Run after Stop: %v, want nil", err)
		}
		if _, err := os.Stat(p.SocketPath()); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("socket of a stopped plugin: %v, want none", err)
		}
	})
}

// Two instances of one plugin with the same socket name, as during a rolling
// update with surge: the newer one takes the socket over, the older one
// yields instead of fighting, and takes over again once the path is free.
func TestSocketTakeover(t *testing.T) {
	dir, _ := dirs(t)
	m := startManager(t, dir, "")
	cfg := deviceplugin.Config{ResourceName: testResource, SocketDir: dir, SocketName: "gopher.sock"}
	cfg.Devices = []*v1beta1.Device{deviceplugin.Device("old", true)}
	older := runPlugin(t, cfg)
	socket := older.SocketPath()
	waitForView(t, m, registered(socket, nodeagent.PluginOptions{}, "old=Healthy"))

	cfg.Devices = []*v1beta1.Device{deviceplugin.Device("new", true)}
	newer := runPlugin(t, cfg)
	waitForView(t, m, registered(socket, nodeagent.PluginOptions{}, "new=Healthy"))
	waitForStatus(t, older, "no stream, not serving", func(s deviceplugin.Status) bool { return s.Streams == 0 && !s.Serving })
	// Give the older instance time to (wrongly) re-create the socket or
	// register again: its first retry would come after 250 ms.
	time.Sleep(time.Second)
	if st := older.Status(); st.Registrations != 1 {
		t.Errorf("older instance registered %d times, want 1", st.Registrations)
	}
	waitForView(t, m, registered(socket, nodeagent.PluginOptions{}, "new=Healthy"))

	// The newer instance stops and removes its socket; the older one takes
	// the path back and registers.
	newer.Stop()
	waitForView(t, m, registered(socket, nodeagent.PluginOptions{}, "old=Healthy"))
	waitForStatus(t, older, "registered again", func(s deviceplugin.Status) bool {
		return s.Registrations == 2 && s.Streams == 1 && s.Serving
	})
}

func TestStopLeavesAForeignSocket(t *testing.T) {
	dir, _ := dirs(t)
	p := runPlugin(t, deviceplugin.Config{ResourceName: testResource, SocketDir: dir, SocketName: "gopher.sock"})
	dptest.Eventually(t, waitTimeout, func() error {
		_, err := os.Stat(p.SocketPath())
		return err
	})
	waitForStatus(t, p, "serving", func(s deviceplugin.Status) bool { return s.Serving })
	// Another process replaces the socket (the plugin waits a little before
	// re-creating a removed socket, so the other process gets the path).
	if err := os.Remove(p.SocketPath()); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", p.SocketPath())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	waitForStatus(t, p, "not serving", func(s deviceplugin.Status) bool { return !s.Serving })
	// The plugin leaves the path to the other process.
	time.Sleep(time.Second)
	if st := p.Status(); st.Serving {
		t.Errorf("status %+v: the plugin took the path back from another process", st)
	}
	p.Stop()
	if _, err := os.Stat(p.SocketPath()); err != nil {
		t.Errorf("the other process's socket after Stop: %v, want it left alone", err)
	}
}

func TestHooks(t *testing.T) {
	type call struct {
		Hook        string
		IDs         []string
		MustInclude []string
		Size        int
	}
	calls := make(chan call, 10)
	dir, _ := dirs(t)
	p := runPlugin(t, deviceplugin.Config{
		ResourceName: testResource,
		SocketDir:    dir,
		SocketName:   "gopher.sock",
		Hooks: deviceplugin.Hooks{
			Allocate: func(_ context.Context, ids []string) (*v1beta1.ContainerAllocateResponse, error) {
				calls <- call{Hook: "Allocate", IDs: ids}
				if len(ids) == 0 {
					return nil, nil
				}
				return &v1beta1.ContainerAllocateResponse{Envs: map[string]string{"IDS": strings.Join(ids, ",")}}, nil
			},
			GetPreferredAllocation: func(_ context.Context, available, mustInclude []string, size int) ([]string, error) {
				calls <- call{Hook: "GetPreferredAllocation", IDs: available, MustInclude: mustInclude, Size: size}
				return append(mustInclude, available[0]), nil
			},
			PreStartContainer: func(_ context.Context, ids []string) error {
				calls <- call{Hook: "PreStartContainer", IDs: ids}
				if ids[0] == "bad" {
					return errors.New("bad device")
				}
				return nil
			},
		},
	})
	client := dialPlugin(t, p.SocketPath())
	ctx := rpcContext(t)
	expectCalls := func(want ...call) {
		t.Helper()
		var got []call
		for len(got) < len(want) {
			select {
			case c := <-calls:
				got = append(got, c)
			case <-time.After(waitTimeout):
				t.Fatalf("got calls %+v, want %+v", got, want)
			}
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("hook calls (-want +got):\n%s", diff)
		}
	}

	opts, err := client.GetDevicePluginOptions(ctx, &v1beta1.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	if !opts.GetPreStartRequired() || !opts.GetGetPreferredAllocationAvailable() {
		t.Errorf("options %v, want both set: the hooks are", opts)
	}

	alloc, err := client.Allocate(ctx, &v1beta1.AllocateRequest{ContainerRequests: []*v1beta1.ContainerAllocateRequest{
		{DevicesIds: []string{"a", "b"}}, {DevicesIds: []string{"c"}}, {},
	}})
	if err != nil {
		t.Fatal(err)
	}
	expectCalls(call{Hook: "Allocate", IDs: []string{"a", "b"}}, call{Hook: "Allocate", IDs: []string{"c"}}, call{Hook: "Allocate"})
	var envs []map[string]string
	for _, c := range alloc.GetContainerResponses() {
		envs = append(envs, c.GetEnvs())
	}
	if diff := cmp.Diff([]map[string]string{{"IDS": "a,b"}, {"IDS": "c"}, nil}, envs); diff != "" {
		t.Errorf("Allocate responses' envs (-want +got):\n%s", diff)
	}

	pref, err := client.GetPreferredAllocation(ctx, &v1beta1.PreferredAllocationRequest{ContainerRequests: []*v1beta1.ContainerPreferredAllocationRequest{
		{AvailableDeviceIDs: []string{"x", "y", "z"}, MustIncludeDeviceIDs: []string{"y"}, AllocationSize: 2},
	}})
	if err != nil {
		t.Fatal(err)
	}
	expectCalls(call{Hook: "GetPreferredAllocation", IDs: []string{"x", "y", "z"}, MustInclude: []string{"y"}, Size: 2})
	if diff := cmp.Diff([]string{"y", "x"}, pref.GetContainerResponses()[0].GetDeviceIDs()); diff != "" {
		t.Errorf("preferred allocation (-want +got):\n%s", diff)
	}

	if _, err := client.PreStartContainer(ctx, &v1beta1.PreStartContainerRequest{DevicesIds: []string{"a"}}); err != nil {
		t.Errorf("PreStartContainer: %v", err)
	}
	expectCalls(call{Hook: "PreStartContainer", IDs: []string{"a"}})
	_, err = client.PreStartContainer(ctx, &v1beta1.PreStartContainerRequest{DevicesIds: []string{"bad"}})
	if err == nil || !strings.Contains(err.Error(), "bad device") {
		t.Errorf("PreStartContainer with a failing hook: %v, want the hook's error", err)
	}
	expectCalls(call{Hook: "PreStartContainer", IDs: []string{"bad"}})
}

func TestDefaultHooks(t *testing.T) {
	for name, tc := range map[string]struct {
		options *v1beta1.DevicePluginOptions
		want    *v1beta1.DevicePluginOptions
	}{
		"options derived from the hooks": {want: &v1beta1.DevicePluginOptions{}},
		"explicit options": {
			options: &v1beta1.DevicePluginOptions{PreStartRequired: true, GetPreferredAllocationAvailable: true},
			want:    &v1beta1.DevicePluginOptions{PreStartRequired: true, GetPreferredAllocationAvailable: true},
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir, _ := dirs(t)
			p := runPlugin(t, deviceplugin.Config{ResourceName: testResource, SocketDir: dir, SocketName: "gopher.sock", Options: tc.options})
			client := dialPlugin(t, p.SocketPath())
			ctx := rpcContext(t)
			opts, err := client.GetDevicePluginOptions(ctx, &v1beta1.Empty{})
			if err != nil {
				t.Fatal(err)
			}
			if opts.GetPreStartRequired() != tc.want.GetPreStartRequired() ||
				opts.GetGetPreferredAllocationAvailable() != tc.want.GetGetPreferredAllocationAvailable() {
				t.Errorf("options %v, want %v", opts, tc.want)
			}
			alloc, err := client.Allocate(ctx, &v1beta1.AllocateRequest{ContainerRequests: []*v1beta1.ContainerAllocateRequest{
				{DevicesIds: []string{"a"}}, {DevicesIds: []string{"b"}},
			}})
			if err != nil {
				t.Fatal(err)
			}
			if n := len(alloc.GetContainerResponses()); n != 2 {
				t.Errorf("Allocate for 2 containers answered %d responses, want 2 empty ones", n)
			}
			pref, err := client.GetPreferredAllocation(ctx, &v1beta1.PreferredAllocationRequest{ContainerRequests: []*v1beta1.ContainerPreferredAllocationRequest{
				{AvailableDeviceIDs: []string{"a"}, AllocationSize: 1},
			}})
			if err != nil {
				t.Fatal(err)
			}
			if r := pref.GetContainerResponses(); len(r) != 1 || len(r[0].GetDeviceIDs()) != 0 {
				t.Errorf("GetPreferredAllocation answered %v, want one empty preference", r)
			}
			if _, err := client.PreStartContainer(ctx, &v1beta1.PreStartContainerRequest{DevicesIds: []string{"a"}}); err != nil {
				t.Errorf("PreStartContainer: %v", err)
			}
		})
	}
}
