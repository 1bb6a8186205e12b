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

package nri

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/kubedevice/kubedevice/internal/nodeagent/poddevices"
)

// injected is what an adjustment gives a container, in the fields the plugin sets.
type injected struct {
	Env         []*api.KeyValue
	Mounts      []*api.Mount
	Devices     []*api.LinuxDevice
	Rules       []*api.LinuxDeviceCgroup
	Annotations map[string]string
	CDIDevices  []*api.CDIDevice
}

func injectedBy(adj *api.ContainerAdjustment) injected {
	got := injected{
		Env:         adj.GetEnv(),
		Mounts:      adj.GetMounts(),
		Devices:     adj.GetLinux().GetDevices(),
		Rules:       adj.GetLinux().GetResources().GetDevices(),
		Annotations: adj.GetAnnotations(),
		CDIDevices:  adj.GetCDIDevices(),
	}
	// The runtime returns empty collections where nothing was adjusted.
	if len(got.Env) == 0 {
		got.Env = nil
	}
	if len(got.Mounts) == 0 {
		got.Mounts = nil
	}
	if len(got.Devices) == 0 {
		got.Devices = nil
	}
	if len(got.Rules) == 0 {
		got.Rules = nil
	}
	if len(got.Annotations) == 0 {
		got.Annotations = nil
	}
	if len(got.CDIDevices) == 0 {
		got.CDIDevices = nil
	}
	return got
}

// TestCreateContainerThroughNRI runs the plugin against the runtime side of NRI over its real
// protocol: the runner connects to a socket the nri module's adaptation serves (with containerd's
// default validator), and the runtime asks it to adjust containers.
func TestCreateContainerThroughNRI(t *testing.T) {
	dir := shortDir(t)
	socket := filepath.Join(dir, "nri.sock")
	rt := startRuntime(t, socket)

	index := NewIndex("")
	index.SetReady("ready", "ns", "trainer", map[string]Container{
		"app": {Options: gopherOptions(), Resources: []string{gopherResource}},
		"init": {Options: &poddevices.RunContainerOptions{
			Envs:    []poddevices.EnvVar{{Name: "GOPHER", Value: "g2"}},
			Devices: []poddevices.DeviceSpec{{ContainerPath: "/dev/ro", HostPath: "/dev/null", Permissions: "r"}},
		}, Resources: []string{gopherResource}},
	})
	index.SetPending("pending", "ns", "waiting", "PluginUnavailable: no healthy devices present")
	index.SetNoDevices("plain", "ns", "plain")
	pods := &fakePods{needs: map[string]bool{"uncached-needs": true}}
	runner := startRunner(t, socket, index, nil, pods)
	waitFor(t, "the plugin to connect", func() bool { return runner.Status().State == StateConnected })
	waitForPlugins(t, rt, 1)
	required := map[string]string{RequiredPluginsAnnotation: `["kubedevice"]`}

	null := devNull(t)
	nullDevice := func(path string) *api.LinuxDevice {
		return &api.LinuxDevice{Path: path, Type: "c", Major: 1, Minor: 3, FileMode: api.FileMode(null.mode), Uid: api.UInt32(null.uid), Gid: api.UInt32(null.gid)}
	}
	nullRule := func(allow bool, access string) *api.LinuxDeviceCgroup {
		return &api.LinuxDeviceCgroup{Allow: allow, Type: "c", Major: api.Int64(1), Minor: api.Int64(3), Access: access}
	}

	for _, tc := range []struct {
		name      string
		pod       *api.PodSandbox
		container string
		want      injected
		wantErr   string
	}{{
		name:      "a container holding devices gets them all",
		pod:       sandbox("ready", "ns", "trainer", required),
		container: "app",
		want: injected{
			Env: []*api.KeyValue{{Key: "GOPHER", Value: "g1"}, {Key: "GOPHER_VISIBLE_DEVICES", Value: "g1"}},
			Mounts: []*api.Mount{
				{Destination: "/gophers/g1", Source: "/var/lib/gophers/g1", Type: "bind", Options: []string{"rbind", "rprivate", "ro"}},
				{Destination: "/scratch", Source: "/var/lib/gophers/scratch", Type: "bind", Options: []string{"rbind", "rprivate", "rw"}},
			},
			Devices:     []*api.LinuxDevice{nullDevice("/dev/gopher0")},
			Rules:       []*api.LinuxDeviceCgroup{nullRule(true, "rwm")},
			Annotations: map[string]string{"example.com/gopher": "g1"},
			CDIDevices:  []*api.CDIDevice{{Name: "example.com/gopher=g1"}},
		},
	}, {
		name:      "an init container gets its own, with no more access than its plugin gave",
		pod:       sandbox("ready", "ns", "trainer", nil),
		container: "init",
		want: injected{
			Env:     []*api.KeyValue{{Key: "GOPHER", Value: "g2"}},
			Devices: []*api.LinuxDevice{nullDevice("/dev/ro")},
			Rules:   []*api.LinuxDeviceCgroup{nullRule(true, "r"), nullRule(false, "w")},
		},
	}, {
		name:      "a container of the pod that holds no device is untouched",
		pod:       sandbox("ready", "ns", "trainer", nil),
		container: "sidecar",
	}, {
		name:      "a pod without kubedevice devices is untouched",
		pod:       sandbox("plain", "ns", "plain", nil),
		container: "app",
	}, {
		name:      "a pod the agent does not know is untouched",
		pod:       sandbox("stranger", "other", "stranger", nil),
		container: "app",
	}, {
		name:      "a pod whose devices are not allocated yet is refused",
		pod:       sandbox("pending", "ns", "waiting", required),
		container: "app",
		wantErr:   "PluginUnavailable: no healthy devices present",
	}, {
		name:      "an unrecorded pod that requires the plugin is refused",
		pod:       sandbox("unseen", "ns", "unseen", map[string]string{RequiredPluginsAnnotation: `["other", "kubedevice"]`}),
		container: "app",
		wantErr:   "has not seen the pod yet",
	}, {
		name:      "an unrecorded pod the cache shows asking for devices is refused",
		pod:       sandbox("uncached-needs", "ns", "fresh", nil),
		container: "app",
		wantErr:   "has not allocated them yet",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			adj, err := createContainer(rt, tc.pod, tc.container)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), ErrDevicesNotReady.Error()) {
					t.Fatalf("CreateContainer: got error %v, want one saying %q and %q", err, ErrDevicesNotReady, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("CreateContainer: %v", err)
			}
			if diff := cmp.Diff(tc.want, injectedBy(adj), protocmp.Transform()); diff != "" {
				t.Errorf("adjustment (-want +got):\n%s", diff)
			}
		})
	}
}

// TestRequiredPluginsGate checks that the annotation the admission policy adds is the one
// containerd's default validator enforces: while the plugin is away, a pod carrying it is
// refused and a plain pod is not; once the plugin is connected, the pod is admitted.
func TestRequiredPluginsGate(t *testing.T) {
	dir := shortDir(t)
	socket := filepath.Join(dir, "nri.sock")
	rt := startRuntime(t, socket)
	gated := sandbox("gated", "ns", "gated", map[string]string{RequiredPluginsAnnotation: `["kubedevice"]`})

	if _, err := createContainer(rt, gated, "app"); err == nil || !strings.Contains(err.Error(), `required plugin "kubedevice" not present`) {
		t.Fatalf("CreateContainer of a gated pod without the plugin: got %v, want the validator's refusal", err)
	}
	if _, err := createContainer(rt, sandbox("plain", "ns", "plain", nil), "app"); err != nil {
		t.Fatalf("CreateContainer of a plain pod without the plugin: %v", err)
	}

	index := NewIndex("")
	index.SetNoDevices("gated", "ns", "gated")
	runner := startRunner(t, socket, index, nil, &fakePods{})
	waitFor(t, "the gated pod to be admitted", func() bool {
		_, err := createContainer(rt, gated, "app")
		return err == nil
	})
	if got := runner.Status().State; got != StateConnected {
		t.Errorf("state: got %q, want %q", got, StateConnected)
	}
}

// TestRunnerReconnects checks that the runner reports a missing socket, connects once the runtime
// serves one, and connects again after the runtime restarts: its connections close and it serves
// its socket anew.
func TestRunnerReconnects(t *testing.T) {
	dir := shortDir(t)
	socket := filepath.Join(dir, "nri.sock")
	index := NewIndex("")
	index.SetReady("ready", "ns", "trainer", map[string]Container{"app": {Options: gopherOptions(), Resources: []string{gopherResource}}})
	runner := startRunner(t, socket, index, nil, &fakePods{})
	pod := sandbox("ready", "ns", "trainer", nil)

	waitFor(t, "the missing socket to be reported", func() bool { return runner.Status().State == StateSocketMissing })
	rt := startRuntime(t, socket)
	waitFor(t, "the plugin to connect", func() bool { return runner.Status().State == StateConnected })
	injects := func() bool {
		adj, err := createContainer(rt, pod, "app")
		return err == nil && len(adj.GetEnv()) == 2
	}
	waitFor(t, "the runtime to get the devices", injects)

	for i := range 2 {
		rt.Stop()
		waitFor(t, "the closed connection to be reported", func() bool { return runner.Status().State != StateConnected })
		if err := rt.Start(); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the plugin to reconnect", func() bool { return runner.Status().State == StateConnected })
		waitForPlugins(t, rt, 1)
		waitFor(t, "the restarted runtime to get the devices", injects)
		t.Logf("restart %d: reconnected", i+1)
	}
}

func TestOptionsComplete(t *testing.T) {
	got, err := Options{}.Complete()
	if err != nil {
		t.Fatal(err)
	}
	if got.SocketPath != "/var/run/nri/nri.sock" || got.PluginIndex != "10" || got.InitialRetryDelay != DefaultInitialRetryDelay || got.MaxRetryDelay != DefaultMaxRetryDelay {
		t.Errorf("defaults: got %+v", got)
	}
	if _, err := (Options{PluginIndex: "7"}).Complete(); err == nil {
		t.Error("a one-digit plugin index was accepted")
	}
}
