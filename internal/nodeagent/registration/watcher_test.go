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
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/protobuf/testing/protocmp"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/kubedevice/kubedevice/internal/nodeagent/dptest"
)

func newRegistryServer(t *testing.T) *testServer {
	t.Helper()
	return newTestServer(t, true, withRegistry(filepath.Join(dptest.ShortTempDir(t), "reg")))
}

// waitStatuses waits until the plugin received a registration status.
func waitStatuses(t *testing.T, p *dptest.Plugin) []*registerapi.RegistrationStatus {
	t.Helper()
	dptest.Eventually(t, waitTimeout, func() error {
		if len(p.RegistrationStatuses()) == 0 {
			return fmt.Errorf("no registration status for %s", p.SocketPath())
		}
		return nil
	})
	return p.RegistrationStatuses()
}

func TestWatcherRegistersPlugins(t *testing.T) {
	registryDir := filepath.Join(dptest.ShortTempDir(t), "reg")
	if err := os.MkdirAll(registryDir, 0o750); err != nil {
		t.Fatal(err)
	}
	// One plugin is there before the server starts, one comes later.
	early := newPlugin(t, registryDir, "early.sock", "example.com/early", dptest.Device("e", pluginapi.Healthy))
	ts := newTestServer(t, true, withRegistry(registryDir))
	late := newPlugin(t, registryDir, "late.sock", "example.com/late", dptest.Device("l", pluginapi.Healthy))

	for _, p := range []*dptest.Plugin{early, late} {
		got := waitStatuses(t, p)
		if diff := cmp.Diff([]*registerapi.RegistrationStatus{{PluginRegistered: true}}, got, protocmp.Transform()); diff != "" {
			t.Errorf("%s: registration statuses (-want +got):\n%s", p.SocketPath(), diff)
		}
	}
	events := ts.handler.waitEvents(t, 4)
	connected := map[string]string{}
	for _, e := range events {
		if e.Kind == "Connected" {
			connected[e.Resource] = e.Socket
		}
	}
	// An empty PluginInfo.Endpoint means the registry socket itself.
	want := map[string]string{"example.com/early": early.SocketPath(), "example.com/late": late.SocketPath()}
	if diff := cmp.Diff(want, connected); diff != "" {
		t.Errorf("connected plugins (-want +got):\n%s", diff)
	}
	wantCalls := []string{dptest.CallGetInfo, dptest.CallGetDevicePluginOptions, dptest.CallListAndWatch, dptest.CallNotifyRegistrationStatus}
	dptest.Eventually(t, waitTimeout, func() error {
		// ListAndWatch and NotifyRegistrationStatus race.
		if diff := cmp.Diff(wantCalls, late.Calls(), cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
			return fmt.Errorf("plugin calls (-want +got):\n%s", diff)
		}
		return nil
	})
	if diff := cmp.Diff([]string{"example.com/early", "example.com/late"}, slices.Sorted(slices.Values(ts.Registrations()))); diff != "" {
		t.Errorf("registrations counted (-want +got):\n%s", diff)
	}
}

func TestWatcherEndpointElsewhere(t *testing.T) {
	ts := newRegistryServer(t)
	// The device plugin service may live on another socket than the
	// registry one.
	other := newPlugin(t, ts.dir, "other.sock", testResource, dptest.Device("x", pluginapi.Healthy))
	p := dptest.New(filepath.Join(ts.registryDir, "p.sock"), testResource, nil)
	p.SetInfo(&registerapi.PluginInfo{
		Type: registerapi.DevicePlugin, Name: testResource, Endpoint: other.SocketPath(), SupportedVersions: []string{"v1beta1"},
	})
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	waitStatuses(t, p)
	want := []event{
		{Kind: "Connected", Resource: testResource, Socket: other.SocketPath(), ID: 1, Options: &pluginapi.DevicePluginOptions{}},
		{Kind: "Devices", Resource: testResource, Socket: other.SocketPath(), ID: 1, Devices: []string{"x"}},
	}
	if diff := cmp.Diff(want, ts.handler.waitEvents(t, 2), protocmp.Transform()); diff != "" {
		t.Errorf("handler events (-want +got):\n%s", diff)
	}
}

func TestWatcherRefusals(t *testing.T) {
	info := func(typ, name string, versions ...string) *registerapi.PluginInfo {
		return &registerapi.PluginInfo{Type: typ, Name: name, SupportedVersions: versions}
	}
	cases := map[string]struct {
		info       *registerapi.PluginInfo
		optionsErr error
		want       func(socket string) string
	}{
		"no handler for the type": {
			info: info(registerapi.CSIPlugin, testResource, "v1beta1"),
			want: func(socket string) string {
				return "RegisterPlugin error -- no handler registered for plugin type: CSIPlugin at socket " + socket
			},
		},
		"unsupported versions": {
			info: info(registerapi.DevicePlugin, testResource, "v1alpha1", "v2"),
			want: func(string) string {
				return "RegisterPlugin error -- plugin validation failed with err: manager version, v1beta1, is not among plugin supported versions [v1alpha1 v2]"
			},
		},
		"invalid resource name": {
			info: info(registerapi.DevicePlugin, "gopher", "v1beta1"),
			want: func(string) string {
				return `RegisterPlugin error -- plugin validation failed with err: invalid name of device plugin socket: the ResourceName "gopher" is invalid`
			},
		},
		"relative endpoint": {
			info: &registerapi.PluginInfo{Type: registerapi.DevicePlugin, Name: testResource, Endpoint: "p.sock", SupportedVersions: []string{"v1beta1"}},
			want: func(string) string {
				return `RegisterPlugin error -- plugin validation failed with err: invalid endpoint of device plugin: "p.sock" is not an absolute path`
			},
		},
		"GetDevicePluginOptions fails": {
			info:       info(registerapi.DevicePlugin, testResource, "v1beta1"),
			optionsErr: dptest.ErrInjected,
			want: func(string) string {
				return "RegisterPlugin error -- plugin registration failed with err: failed to get device plugin options: rpc error: code = Unknown desc = injected failure"
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ts := newRegistryServer(t)
			// Configure before serving on the registry socket: the watcher acts
			// on creation.
			p := dptest.New(filepath.Join(ts.registryDir, "p.sock"), testResource, nil)
			p.SetInfo(tc.info)
			p.FailGetDevicePluginOptions(tc.optionsErr)
			if err := p.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(p.Stop)
			got := waitStatuses(t, p)
			want := []*registerapi.RegistrationStatus{{PluginRegistered: false, Error: tc.want(p.SocketPath())}}
			if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
				t.Errorf("registration statuses (-want +got):\n%s", diff)
			}
			ts.Stop()
			if events := ts.handler.Events(); len(events) != 0 {
				t.Errorf("handler events = %+v, want none", events)
			}
			for _, c := range p.Calls() {
				if c == dptest.CallListAndWatch {
					t.Errorf("ListAndWatch called on a refused plugin: %v", p.Calls())
				}
			}
		})
	}
}

func TestWatcherDeregistersWhenSocketRemoved(t *testing.T) {
	ts := newRegistryServer(t)
	p := newPlugin(t, ts.registryDir, "p.sock", testResource, dptest.Device("a", pluginapi.Healthy))
	waitStatuses(t, p)
	ts.handler.waitEvents(t, 2)
	// Removing the file is enough: the plugin's server keeps running.
	if err := os.Remove(p.SocketPath()); err != nil {
		t.Fatal(err)
	}
	dptest.Eventually(t, waitTimeout, func() error {
		if diff := cmp.Diff([]string{"Connected", "Devices", "Disconnected"}, ts.handler.kinds(1)); diff != "" {
			return fmt.Errorf("client events (-want +got):\n%s", diff)
		}
		return nil
	})
}

func TestWatcherReRegistersRecreatedSocket(t *testing.T) {
	ts := newRegistryServer(t)
	p := newPlugin(t, ts.registryDir, "p.sock", testResource, dptest.Device("a", pluginapi.Healthy))
	waitStatuses(t, p)
	ts.handler.waitEvents(t, 2)
	p.Stop()
	p2 := newPlugin(t, ts.registryDir, "p.sock", testResource, dptest.Device("b", pluginapi.Healthy))
	waitStatuses(t, p2)
	dptest.Eventually(t, waitTimeout, func() error {
		if diff := cmp.Diff([]string{"Connected", "Devices", "Disconnected"}, ts.handler.kinds(1)); diff != "" {
			return fmt.Errorf("old client events (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]string{"Connected", "Devices"}, ts.handler.kinds(2)); diff != "" {
			return fmt.Errorf("new client events (-want +got):\n%s", diff)
		}
		return nil
	})
}

func TestWatcherIgnoresHiddenAndNonSocketFiles(t *testing.T) {
	ts := newRegistryServer(t)
	hidden := newPlugin(t, ts.registryDir, ".hidden.sock", testResource)
	if err := os.WriteFile(filepath.Join(ts.registryDir, "notes.sock"), []byte("not a socket"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A plugin created afterwards is registered, so the watcher has seen the
	// earlier files by then.
	p := newPlugin(t, ts.registryDir, "p.sock", testResource)
	waitStatuses(t, p)
	if calls := hidden.Calls(); len(calls) != 0 {
		t.Errorf("hidden plugin got calls %v, want none", calls)
	}
}

// A registry socket that never answers does not block the others.
func TestWatcherNotBlockedByHangingPlugin(t *testing.T) {
	ts := newRegistryServer(t)
	hang, err := dptest.ListenAndHang(filepath.Join(ts.registryDir, "hang.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer hang.Close()
	dptest.Eventually(t, waitTimeout, func() error {
		if hang.Accepted() == 0 {
			return errors.New("the hanging socket was not dialed yet")
		}
		return nil
	})
	p := newPlugin(t, ts.registryDir, "p.sock", testResource)
	waitStatuses(t, p)
}
