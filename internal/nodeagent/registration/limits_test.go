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
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/kubedevice/kubedevice/internal/nodeagent/dptest"
)

// expectRefused asserts that err is a gRPC error with code and a message containing msg.
func expectRefused(t *testing.T, err error, code codes.Code, msg string) {
	t.Helper()
	if status.Code(err) != code || !strings.Contains(err.Error(), msg) {
		t.Fatalf("Register = %v, want %s saying %q", err, code, msg)
	}
}

func TestRegisterRateLimited(t *testing.T) {
	ts := newTestServer(t, true, func(c *Config) { c.RegistrationRate, c.RegistrationBurst = 0.001, 3 })
	p := newPlugin(t, ts.dir, "p.sock", testResource, dptest.Device("a", pluginapi.Healthy))
	for i := range 3 {
		if err := register(t, p, ts.SocketPath()); err != nil {
			t.Fatalf("Register %d within the burst: %v", i, err)
		}
	}
	expectRefused(t, register(t, p, ts.SocketPath()), codes.ResourceExhausted,
		"registration of "+testResource+" refused: more than 0.001 registrations per second (burst 3) on this node; retry later")
}

func TestRegisterCaps(t *testing.T) {
	ts := newTestServer(t, true, func(c *Config) { c.MaxResources, c.MaxEndpoints = 2, 3 })
	plugin := func(name, resource string) *dptest.Plugin {
		return newPlugin(t, ts.dir, name, resource, dptest.Device("a", pluginapi.Healthy))
	}
	a1, a2, b1 := plugin("a1.sock", "example.com/a"), plugin("a2.sock", "example.com/a"), plugin("b1.sock", "example.com/b")
	for _, p := range []*dptest.Plugin{a1, a2, b1} {
		if err := register(t, p, ts.SocketPath()); err != nil {
			t.Fatalf("Register %s: %v", p.SocketPath(), err)
		}
	}
	ts.handler.waitEvents(t, 6)

	expectRefused(t, register(t, plugin("b2.sock", "example.com/b"), ts.SocketPath()), codes.ResourceExhausted,
		"registration of example.com/b refused: 3 device plugin endpoints are connected, the most this node's agent accepts is 3")
	// A plugin registering again on its socket replaces its connection: always admitted.
	if err := register(t, a1, ts.SocketPath()); err != nil {
		t.Fatalf("Register again on the same socket: %v", err)
	}
	ts.handler.waitEvents(t, 9) // a1's old connection went, the new one is streaming

	p := plugin("a3.sock", "example.com/a")
	a2.Stop()
	ts.handler.waitEvents(t, 10)
	expectRefused(t, register(t, plugin("c1.sock", "example.com/c"), ts.SocketPath()), codes.ResourceExhausted,
		"registration of example.com/c refused: 2 resources are registered, the most this node's agent accepts is 2")
	if err := register(t, p, ts.SocketPath()); err != nil {
		t.Fatalf("Register a known resource below the endpoint cap: %v", err)
	}
}

func TestRegisterRefusesSymlinkedEndpoint(t *testing.T) {
	ts := newTestServer(t, true)
	// A socket elsewhere on the node (the container runtime's, say), and a link to it in the
	// plugin directory.
	elsewhere := newPlugin(t, dptest.ShortTempDir(t), "runtime.sock", testResource, dptest.Device("a", pluginapi.Healthy))
	if err := os.Symlink(elsewhere.SocketPath(), filepath.Join(ts.dir, "link.sock")); err != nil {
		t.Fatal(err)
	}
	req := &pluginapi.RegisterRequest{Version: pluginapi.Version, Endpoint: "link.sock", ResourceName: testResource}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	err := dptest.Register(ctx, ts.SocketPath(), req)
	expectRefused(t, err, codes.InvalidArgument, `the device plugin endpoint "`+filepath.Join(ts.dir, "link.sock")+`" is refused: `+filepath.Join(ts.dir, "link.sock")+" is a symbolic link")
	// Nor may a directory on the way be a link.
	if err := os.Symlink(filepath.Dir(elsewhere.SocketPath()), filepath.Join(ts.dir, "sub")); err != nil {
		t.Fatal(err)
	}
	if got := checkEndpoint(filepath.Join(ts.dir, "sub", "runtime.sock"), ts.dir); got == nil || !strings.Contains(got.Error(), "is a symbolic link") {
		t.Errorf("checkEndpoint through a linked directory = %v, want a refusal", got)
	}
	if events := ts.handler.Events(); len(events) != 0 {
		t.Errorf("handler events = %+v, want none", events)
	}
	if calls := elsewhere.Calls(); len(calls) != 0 {
		t.Errorf("the socket behind the link was called: %v", calls)
	}
}

func TestWatcherRefusesEndpointsOutsideThePluginDirectories(t *testing.T) {
	elsewhereDir := dptest.ShortTempDir(t)
	cases := map[string]func(ts *testServer) (endpoint, want string){
		"a socket in another directory": func(ts *testServer) (string, string) {
			p := newPlugin(t, elsewhereDir, "x.sock", testResource, dptest.Device("x", pluginapi.Healthy))
			return p.SocketPath(), `is refused: it must be a clean absolute path inside ` + ts.dir + " or " + ts.registryDir
		},
		"a path that climbs out": func(ts *testServer) (string, string) {
			return ts.dir + "/../x.sock", `is refused: it must be a clean absolute path`
		},
		"a link in the plugin directory": func(ts *testServer) (string, string) {
			p := newPlugin(t, elsewhereDir, "y.sock", testResource, dptest.Device("y", pluginapi.Healthy))
			link := filepath.Join(ts.dir, "y.sock")
			if err := os.Symlink(p.SocketPath(), link); err != nil {
				t.Fatal(err)
			}
			return link, "is a symbolic link"
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ts := newRegistryServer(t)
			endpoint, want := tc(ts)
			p := dptest.New(filepath.Join(ts.registryDir, "p.sock"), testResource, nil)
			p.SetInfo(&registerapi.PluginInfo{Type: registerapi.DevicePlugin, Name: testResource, Endpoint: endpoint, SupportedVersions: []string{"v1beta1"}})
			if err := p.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(p.Stop)
			got := waitStatuses(t, p)
			if len(got) != 1 || got[0].GetPluginRegistered() || !strings.Contains(got[0].GetError(), want) {
				t.Fatalf("registration statuses = %v, want a refusal saying %q", got, want)
			}
			ts.Stop()
			if events := ts.handler.Events(); len(events) != 0 {
				t.Errorf("handler events = %+v, want none", events)
			}
		})
	}
}

// The registration socket's mode is SocketMode whatever the umask, as soon as it can be
// connected to, and again when it is re-created.
func TestRegistrationSocketMode(t *testing.T) {
	old := syscall.Umask(0)
	t.Cleanup(func() { syscall.Umask(old) })
	ts := newTestServer(t, true)
	mode := func() os.FileMode {
		t.Helper()
		fi, err := os.Lstat(ts.SocketPath())
		if err != nil {
			t.Fatal(err)
		}
		return fi.Mode()
	}
	if got := mode(); got != os.ModeSocket|SocketMode {
		t.Errorf("registration socket mode = %v, want %v", got, os.ModeSocket|SocketMode)
	}
	if err := os.Remove(ts.SocketPath()); err != nil {
		t.Fatal(err)
	}
	dptest.Eventually(t, waitTimeout, func() error {
		_, err := os.Lstat(ts.SocketPath())
		return err
	})
	if got := mode(); got != os.ModeSocket|SocketMode {
		t.Errorf("re-created registration socket mode = %v, want %v", got, os.ModeSocket|SocketMode)
	}
	// No temporary socket is left beside it.
	entries, err := os.ReadDir(ts.dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if diff := cmp.Diff([]string{SocketName}, names, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("plugin directory (-want +got):\n%s", diff)
	}
}
