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
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"
	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/kubedevice/kubedevice/internal/nodeagent/poddevices"
)

func TestIndexForget(t *testing.T) {
	x := NewIndex("")
	x.SetReady("old", "ns", "web", nil)
	x.SetPending("new", "ns", "web", "waiting")
	x.SetNoDevices("other", "ns", "db")

	x.Forget("ns", "web", "new")
	if x.lookup("old") != nil || x.lookup("new") == nil || x.lookup("other") == nil {
		t.Fatalf("after forgetting ns/web but the new pod: old=%v new=%v other=%v", x.lookup("old"), x.lookup("new"), x.lookup("other"))
	}
	x.Forget("ns", "web", "")
	if x.lookup("new") != nil || x.Len() != 1 {
		t.Fatalf("after forgetting ns/web: new=%v, %d pods left, want 1", x.lookup("new"), x.Len())
	}
	// A UID recorded again under another name is forgotten under the new one only.
	x.SetNoDevices("other", "ns", "db-renamed")
	x.Forget("ns", "db", "")
	if x.lookup("other") == nil {
		t.Fatal("forgetting the old name dropped the pod recorded under its new name")
	}
	x.Forget("ns", "db-renamed", "")
	if x.Len() != 0 || len(x.pods.byName) != 0 {
		t.Fatalf("after forgetting everything: %d pods, %d names", x.Len(), len(x.pods.byName))
	}
}

func TestAdjustmentDevices(t *testing.T) {
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "dev"), 0o755); err != nil {
		t.Fatal(err)
	}
	// The host's /dev/null, as a DaemonSet that mounts the host's /dev under a root sees it.
	if err := os.Symlink("/dev/null", filepath.Join(root, "dev", "gopher0")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "dev", "file"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	null := devNull(t)
	rule := func(allow bool, access string) *api.LinuxDeviceCgroup {
		return &api.LinuxDeviceCgroup{Allow: allow, Type: "c", Major: api.Int64(1), Minor: api.Int64(3), Access: access}
	}

	for _, tc := range []struct {
		name      string
		root      string
		dev       poddevices.DeviceSpec
		wantRules []*api.LinuxDeviceCgroup
		wantErr   error
	}{
		{name: "the plugin's permissions", dev: poddevices.DeviceSpec{ContainerPath: "/dev/g", HostPath: "/dev/null", Permissions: "rw"}, wantRules: []*api.LinuxDeviceCgroup{rule(true, "rw")}},
		{name: "no permissions means rwm", dev: poddevices.DeviceSpec{ContainerPath: "/dev/g", HostPath: "/dev/null"}, wantRules: []*api.LinuxDeviceCgroup{rule(true, "rwm")}},
		{name: "write only takes read back", dev: poddevices.DeviceSpec{ContainerPath: "/dev/g", HostPath: "/dev/null", Permissions: "w"}, wantRules: []*api.LinuxDeviceCgroup{rule(true, "w"), rule(false, "r")}},
		{name: "under a host root", root: root, dev: poddevices.DeviceSpec{ContainerPath: "/dev/g", HostPath: "/dev/gopher0", Permissions: "rwm"}, wantRules: []*api.LinuxDeviceCgroup{rule(true, "rwm")}},
		{name: "a missing node", dev: poddevices.DeviceSpec{ContainerPath: "/dev/g", HostPath: "/dev/kubedevice-missing"}, wantErr: fs.ErrNotExist},
		{name: "a file that is no device", root: root, dev: poddevices.DeviceSpec{ContainerPath: "/dev/g", HostPath: "/dev/file"}, wantErr: errNotDevice},
	} {
		t.Run(tc.name, func(t *testing.T) {
			adj, err := adjustment(&poddevices.RunContainerOptions{Devices: []poddevices.DeviceSpec{tc.dev}}, newStatCache(tc.root))
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), tc.dev.HostPath) {
					t.Fatalf("got error %v, want %v naming %s", err, tc.wantErr, tc.dev.HostPath)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			wantDev := &api.LinuxDevice{Path: "/dev/g", Type: "c", Major: 1, Minor: 3, FileMode: api.FileMode(null.mode), Uid: api.UInt32(null.uid), Gid: api.UInt32(null.gid)}
			if diff := cmp.Diff([]*api.LinuxDevice{wantDev}, adj.GetLinux().GetDevices(), protocmp.Transform()); diff != "" {
				t.Errorf("devices (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantRules, adj.GetLinux().GetResources().GetDevices(), protocmp.Transform()); diff != "" {
				t.Errorf("cgroup rules (-want +got):\n%s", diff)
			}
		})
	}
}

// TestStatCacheRefresh checks that a device node is looked up once, until the pod using it is
// recorded again, and that a node that went away is refused rather than served from the cache.
func TestStatCacheRefresh(t *testing.T) {
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "dev"), 0o755); err != nil {
		t.Fatal(err)
	}
	node := filepath.Join(root, "dev", "gopher0")
	if err := os.Symlink("/dev/null", node); err != nil {
		t.Fatal(err)
	}
	x := NewIndex(root)
	opts := map[string]Container{"app": {Options: &poddevices.RunContainerOptions{Devices: []poddevices.DeviceSpec{{ContainerPath: "/dev/g", HostPath: "/dev/gopher0", Permissions: "rw"}}}}}
	x.SetReady("uid", "ns", "pod", opts)
	p := &plugin{name: PluginName, index: x, pods: &fakePods{}, logger: logr.Discard()}
	create := func() (*api.ContainerAdjustment, error) {
		adj, _, err := p.CreateContainer(context.Background(), sandbox("uid", "ns", "pod", nil), &api.Container{Name: "app"})
		return adj, err
	}

	if adj, err := create(); err != nil || adj.GetLinux().GetDevices()[0].GetMinor() != 3 {
		t.Fatalf("first creation: %v, %v", adj, err)
	}
	// /dev/zero is 1:5. The cache still says 1:3 until the pod is recorded again.
	if err := os.Remove(node); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/zero", node); err != nil {
		t.Fatal(err)
	}
	if adj, err := create(); err != nil || adj.GetLinux().GetDevices()[0].GetMinor() != 3 {
		t.Fatalf("creation from the cache: %v, %v", adj, err)
	}
	x.SetReady("uid", "ns", "pod", opts)
	if adj, err := create(); err != nil || adj.GetLinux().GetDevices()[0].GetMinor() != 5 {
		t.Fatalf("creation after the pod was recorded again: %v, %v", adj, err)
	}
	if err := os.Remove(node); err != nil {
		t.Fatal(err)
	}
	x.SetReady("uid", "ns", "pod", opts)
	if _, err := create(); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("creation after the node went away: got %v, want %v", err, fs.ErrNotExist)
	}
}

func TestRequires(t *testing.T) {
	for _, tc := range []struct {
		annotations map[string]string
		want        bool
	}{
		{nil, false},
		{map[string]string{RequiredPluginsAnnotation: `["kubedevice"]`}, true},
		{map[string]string{RequiredPluginsAnnotation: `[other, kubedevice]`}, true},
		{map[string]string{RequiredPluginsAnnotation: "- other\n- kubedevice\n"}, true},
		{map[string]string{RequiredPluginsAnnotation: `["other"]`}, false},
		{map[string]string{RequiredPluginsAnnotation: `kubedevice`}, false},
		// The container-scoped annotation takes precedence for its container.
		{map[string]string{RequiredPluginsAnnotation: `["kubedevice"]`, "required-plugins.noderesource.dev/container.app": `[]`}, false},
		{map[string]string{"required-plugins.noderesource.dev/container.app": `["kubedevice"]`}, true},
		{map[string]string{"required-plugins.noderesource.dev/container.other": `["kubedevice"]`}, false},
	} {
		if got := requires(sandbox("u", "ns", "p", tc.annotations), "app", PluginName); got != tc.want {
			t.Errorf("requires(%v): got %v, want %v", tc.annotations, got, tc.want)
		}
	}
}
