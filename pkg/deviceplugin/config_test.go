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
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	"k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kubedevice/kubedevice/pkg/deviceplugin"
)

func TestNewRefusesBadConfigs(t *testing.T) {
	for name, tc := range map[string]struct {
		cfg     deviceplugin.Config
		wantErr string
	}{
		"no resource name":          {cfg: deviceplugin.Config{}, wantErr: "domain prefix"},
		"no domain":                 {cfg: deviceplugin.Config{ResourceName: "gopher"}, wantErr: "domain prefix"},
		"native resource":           {cfg: deviceplugin.Config{ResourceName: "kubernetes.io/gopher"}, wantErr: "reserved"},
		"native resource subdomain": {cfg: deviceplugin.Config{ResourceName: "dev.kubernetes.io/gopher"}, wantErr: "reserved"},
		"requests prefix":           {cfg: deviceplugin.Config{ResourceName: "requests.example.com/gopher"}, wantErr: "requests."},
		"bad name part":             {cfg: deviceplugin.Config{ResourceName: "example.com/-gopher"}, wantErr: "name part"},
		"bad domain":                {cfg: deviceplugin.Config{ResourceName: "Example_com/gopher"}, wantErr: "prefix part"},
		"two slashes":               {cfg: deviceplugin.Config{ResourceName: "example.com/a/b"}, wantErr: "label key"},
		"socket name with a slash": {
			cfg: deviceplugin.Config{ResourceName: testResource, SocketName: "a/b.sock"}, wantErr: "plain file name",
		},
		"socket name ..": {cfg: deviceplugin.Config{ResourceName: testResource, SocketName: ".."}, wantErr: "plain file name"},
		"kubelet.sock": {
			cfg: deviceplugin.Config{ResourceName: testResource, SocketName: "kubelet.sock"}, wantErr: "device manager's",
		},
		"hidden socket": {cfg: deviceplugin.Config{ResourceName: testResource, SocketName: ".gopher.sock"}, wantErr: "dot"},
		"unknown registration mode": {
			cfg: deviceplugin.Config{ResourceName: testResource, Registration: "carrier-pigeon"}, wantErr: "registration mode",
		},
		"socket path too long": {
			cfg:     deviceplugin.Config{ResourceName: testResource, SocketDir: "/" + strings.Repeat("d", 100)},
			wantErr: "longer than the 107",
		},
		"duplicate device": {
			cfg:     deviceplugin.Config{ResourceName: testResource, Devices: []*v1beta1.Device{{ID: "a"}, {ID: "a"}}},
			wantErr: "listed twice",
		},
		"empty device ID": {
			cfg: deviceplugin.Config{ResourceName: testResource, Devices: []*v1beta1.Device{{ID: ""}}}, wantErr: "empty ID",
		},
		"device ID with a newline": {
			cfg: deviceplugin.Config{ResourceName: testResource, Devices: []*v1beta1.Device{{ID: "a\nb"}}}, wantErr: "control characters",
		},
		"device ID too long": {
			cfg:     deviceplugin.Config{ResourceName: testResource, Devices: []*v1beta1.Device{{ID: strings.Repeat("a", 254)}}},
			wantErr: "longer than 253",
		},
		"unknown health": {
			cfg:     deviceplugin.Config{ResourceName: testResource, Devices: []*v1beta1.Device{{ID: "a", Health: "Meh"}}},
			wantErr: `health "Meh"`,
		},
		"nil device": {
			cfg: deviceplugin.Config{ResourceName: testResource, Devices: []*v1beta1.Device{nil}}, wantErr: "nil",
		},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := deviceplugin.New(tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("New: %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestNewDefaults(t *testing.T) {
	for name, tc := range map[string]struct {
		cfg        deviceplugin.Config
		wantSocket string
	}{
		"direct": {
			cfg:        deviceplugin.Config{ResourceName: testResource},
			wantSocket: "/var/lib/kubelet/device-plugins/example.com_gopher.sock",
		},
		"watcher": {
			cfg:        deviceplugin.Config{ResourceName: testResource, Registration: deviceplugin.RegistrationWatcher, SocketName: "g.sock"},
			wantSocket: "/var/lib/kubelet/plugins_registry/g.sock",
		},
		"own directories": {
			cfg: deviceplugin.Config{
				ResourceName: testResource, SocketDir: "/var/lib/kubedevice/device-plugins/", SocketName: "gopher.sock",
				RegistryDir: "/elsewhere",
			},
			wantSocket: "/var/lib/kubedevice/device-plugins/gopher.sock",
		},
	} {
		t.Run(name, func(t *testing.T) {
			p, err := deviceplugin.New(tc.cfg)
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			if got := p.SocketPath(); got != tc.wantSocket {
				t.Errorf("SocketPath() = %q, want %q", got, tc.wantSocket)
			}
			if got := p.ResourceName(); got != testResource {
				t.Errorf("ResourceName() = %q, want %q", got, testResource)
			}
			if st := p.Status(); st != (deviceplugin.Status{}) {
				t.Errorf("Status() before Run = %+v, want the zero Status", st)
			}
		})
	}
}

func TestDevicesAreNormalized(t *testing.T) {
	p, err := deviceplugin.New(deviceplugin.Config{
		ResourceName: testResource,
		Devices: []*v1beta1.Device{
			{ID: "gopher-b"},
			deviceplugin.Device("gopher-a", false, 1, 0),
			{ID: "gopher-c", Health: v1beta1.Healthy},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []*v1beta1.Device{
		{ID: "gopher-a", Health: v1beta1.Unhealthy, Topology: &v1beta1.TopologyInfo{Nodes: []*v1beta1.NUMANode{{ID: 1}, {ID: 0}}}},
		{ID: "gopher-b", Health: v1beta1.Healthy},
		{ID: "gopher-c", Health: v1beta1.Healthy},
	}
	got := p.Devices()
	if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
		t.Errorf("Devices() (-want +got):\n%s", diff)
	}
	// Devices returns copies.
	got[0].Health = v1beta1.Healthy
	if p.Devices()[0].GetHealth() != v1beta1.Unhealthy {
		t.Error("changing a device returned by Devices changed the plugin's device")
	}
	if err := p.SetHealth("gopher-a", true); err != nil {
		t.Fatal(err)
	}
	if h := p.Devices()[0].GetHealth(); h != v1beta1.Healthy {
		t.Errorf("health after SetHealth(gopher-a, true) = %q, want Healthy", h)
	}
}
