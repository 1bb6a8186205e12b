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

package poddevices

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// TestDeviceRunContainerOptions ports the kubelet's cases of the same name and adds the conflict
// precedence, which the kubelet leaves to map order and we make deterministic: resources merge in
// name order and the first setting wins.
func TestDeviceRunContainerOptions(t *testing.T) {
	const (
		resource1 = "example1.com/resource1"
		resource2 = "example2.com/resource2"
		resource3 = "example3.com/resource3"
	)
	testCases := map[string]struct {
		responsesPerResource map[string]*pluginapi.ContainerAllocateResponse
		want                 *RunContainerOptions
		wantConflicts        []Conflict
	}{
		"empty response": {
			responsesPerResource: map[string]*pluginapi.ContainerAllocateResponse{
				resource1: newResp().Obj(),
			},
			want: &RunContainerOptions{},
		},
		"cdi devices are handled": {
			responsesPerResource: map[string]*pluginapi.ContainerAllocateResponse{
				resource1: newResp().CDI("vendor1.com/class1=device1", "vendor2.com/class2=device2").Obj(),
			},
			want: &RunContainerOptions{
				CDIDevices: []string{"vendor1.com/class1=device1", "vendor2.com/class2=device2"},
			},
		},
		"cdi devices from multiple resources are handled": {
			responsesPerResource: map[string]*pluginapi.ContainerAllocateResponse{
				resource1: newResp().CDI("vendor1.com/class1=device1", "vendor2.com/class2=device2").Obj(),
				resource2: newResp().CDI("vendor3.com/class3=device3", "vendor4.com/class4=device4").Obj(),
			},
			want: &RunContainerOptions{
				CDIDevices: []string{
					"vendor1.com/class1=device1", "vendor2.com/class2=device2",
					"vendor3.com/class3=device3", "vendor4.com/class4=device4",
				},
			},
		},
		"duplicate cdi devices are skipped": {
			responsesPerResource: map[string]*pluginapi.ContainerAllocateResponse{
				resource1: newResp().CDI("vendor1.com/class1=device1", "vendor2.com/class2=device2").Obj(),
				resource2: newResp().CDI("vendor2.com/class2=device2", "vendor3.com/class3=device3").Obj(),
			},
			want: &RunContainerOptions{
				CDIDevices: []string{"vendor1.com/class1=device1", "vendor2.com/class2=device2", "vendor3.com/class3=device3"},
			},
		},
		"cdi devices keep the first-seen order, not name order": {
			responsesPerResource: map[string]*pluginapi.ContainerAllocateResponse{
				resource2: newResp().CDI("a.com/x=1").Obj(),
				resource1: newResp().CDI("z.com/x=2", "m.com/x=3", "z.com/x=2").Obj(),
			},
			want: &RunContainerOptions{CDIDevices: []string{"z.com/x=2", "m.com/x=3", "a.com/x=1"}},
		},
		"every field maps to its place": {
			responsesPerResource: map[string]*pluginapi.ContainerAllocateResponse{
				resource1: newResp().
					Env("E", "v").
					Mount("/ctr/lib", "/host/lib", true).
					Device("/dev/ctr0", "/dev/host0", "rw").
					Annotation("k", "a").
					CDI("vendor.com/gpu=0").Obj(),
			},
			want: &RunContainerOptions{
				Envs:        []EnvVar{{Name: "E", Value: "v"}},
				Mounts:      []Mount{{ContainerPath: "/ctr/lib", HostPath: "/host/lib", ReadOnly: true}},
				Devices:     []DeviceSpec{{ContainerPath: "/dev/ctr0", HostPath: "/dev/host0", Permissions: "rw"}},
				Annotations: []Annotation{{Key: "k", Value: "a"}},
				CDIDevices:  []string{"vendor.com/gpu=0"},
			},
		},
		"results are sorted across resources": {
			responsesPerResource: map[string]*pluginapi.ContainerAllocateResponse{
				resource1: newResp().Env("Z", "1").Env("B", "1").
					Mount("/z", "/hz", false).Mount("/b", "/hb", false).
					Device("/dev/z", "/dev/hz", "r").Device("/dev/b", "/dev/hb", "r").
					Annotation("z", "1").Annotation("b", "1").Obj(),
				resource2: newResp().Env("M", "2").Env("A", "2").
					Mount("/m", "/hm", false).Mount("/a", "/ha", false).
					Device("/dev/m", "/dev/hm", "r").Device("/dev/a", "/dev/ha", "r").
					Annotation("m", "2").Annotation("a", "2").Obj(),
			},
			want: &RunContainerOptions{
				Envs: []EnvVar{{Name: "A", Value: "2"}, {Name: "B", Value: "1"}, {Name: "M", Value: "2"}, {Name: "Z", Value: "1"}},
				Mounts: []Mount{
					{ContainerPath: "/a", HostPath: "/ha"}, {ContainerPath: "/b", HostPath: "/hb"},
					{ContainerPath: "/m", HostPath: "/hm"}, {ContainerPath: "/z", HostPath: "/hz"},
				},
				Devices: []DeviceSpec{
					{ContainerPath: "/dev/a", HostPath: "/dev/ha", Permissions: "r"},
					{ContainerPath: "/dev/b", HostPath: "/dev/hb", Permissions: "r"},
					{ContainerPath: "/dev/m", HostPath: "/dev/hm", Permissions: "r"},
					{ContainerPath: "/dev/z", HostPath: "/dev/hz", Permissions: "r"},
				},
				Annotations: []Annotation{{Key: "a", Value: "2"}, {Key: "b", Value: "1"}, {Key: "m", Value: "2"}, {Key: "z", Value: "1"}},
			},
		},
		"equal settings from several resources are merged without conflict": {
			responsesPerResource: map[string]*pluginapi.ContainerAllocateResponse{
				resource1: newResp().Env("E", "v").Mount("/c", "/h", true).Device("/dev/c", "/dev/h", "rw").Annotation("k", "a").Obj(),
				resource2: newResp().Env("E", "v").Mount("/c", "/h", true).Device("/dev/c", "/dev/h", "rw").Annotation("k", "a").Obj(),
			},
			want: &RunContainerOptions{
				Envs:        []EnvVar{{Name: "E", Value: "v"}},
				Mounts:      []Mount{{ContainerPath: "/c", HostPath: "/h", ReadOnly: true}},
				Devices:     []DeviceSpec{{ContainerPath: "/dev/c", HostPath: "/dev/h", Permissions: "rw"}},
				Annotations: []Annotation{{Key: "k", Value: "a"}},
			},
		},
		"env conflict: the resource first by name wins": {
			responsesPerResource: map[string]*pluginapi.ContainerAllocateResponse{
				resource3: newResp().Env("VISIBLE", "3").Obj(),
				resource1: newResp().Env("VISIBLE", "1").Obj(),
				resource2: newResp().Env("VISIBLE", "2").Obj(),
			},
			want: &RunContainerOptions{Envs: []EnvVar{{Name: "VISIBLE", Value: "1"}}},
			wantConflicts: []Conflict{
				{Kind: ConflictEnv, Key: "VISIBLE", KeptResource: resource1, KeptValue: "1", DroppedResource: resource2, DroppedValue: "2"},
				{Kind: ConflictEnv, Key: "VISIBLE", KeptResource: resource1, KeptValue: "1", DroppedResource: resource3, DroppedValue: "3"},
			},
		},
		"device conflict: the first host path wins": {
			responsesPerResource: map[string]*pluginapi.ContainerAllocateResponse{
				resource2: newResp().Device("/dev/gpu", "/dev/nvidia1", "rw").Obj(),
				resource1: newResp().Device("/dev/gpu", "/dev/nvidia0", "rw").Obj(),
			},
			want: &RunContainerOptions{Devices: []DeviceSpec{{ContainerPath: "/dev/gpu", HostPath: "/dev/nvidia0", Permissions: "rw"}}},
			wantConflicts: []Conflict{{
				Kind: ConflictDevice, Key: "/dev/gpu",
				KeptResource: resource1, KeptValue: "/dev/nvidia0:rw",
				DroppedResource: resource2, DroppedValue: "/dev/nvidia1:rw",
			}},
		},
		"device conflict on permissions only": {
			responsesPerResource: map[string]*pluginapi.ContainerAllocateResponse{
				resource1: newResp().Device("/dev/gpu", "/dev/nvidia0", "r").Obj(),
				resource2: newResp().Device("/dev/gpu", "/dev/nvidia0", "rwm").Obj(),
			},
			want: &RunContainerOptions{Devices: []DeviceSpec{{ContainerPath: "/dev/gpu", HostPath: "/dev/nvidia0", Permissions: "r"}}},
			wantConflicts: []Conflict{{
				Kind: ConflictDevice, Key: "/dev/gpu",
				KeptResource: resource1, KeptValue: "/dev/nvidia0:r",
				DroppedResource: resource2, DroppedValue: "/dev/nvidia0:rwm",
			}},
		},
		"mount conflict: the first host path wins, read-only counts": {
			responsesPerResource: map[string]*pluginapi.ContainerAllocateResponse{
				resource1: newResp().Mount("/lib", "/opt/a", true).Mount("/etc/x", "/etc/x", true).Obj(),
				resource2: newResp().Mount("/lib", "/opt/b", true).Mount("/etc/x", "/etc/x", false).Obj(),
			},
			want: &RunContainerOptions{Mounts: []Mount{
				{ContainerPath: "/etc/x", HostPath: "/etc/x", ReadOnly: true},
				{ContainerPath: "/lib", HostPath: "/opt/a", ReadOnly: true},
			}},
			wantConflicts: []Conflict{
				{Kind: ConflictMount, Key: "/lib", KeptResource: resource1, KeptValue: "/opt/a:ro", DroppedResource: resource2, DroppedValue: "/opt/b:ro"},
				{Kind: ConflictMount, Key: "/etc/x", KeptResource: resource1, KeptValue: "/etc/x:ro", DroppedResource: resource2, DroppedValue: "/etc/x:rw"},
			},
		},
		"annotation conflict: the resource first by name wins": {
			responsesPerResource: map[string]*pluginapi.ContainerAllocateResponse{
				resource2: newResp().Annotation("cdi.k8s.io/x", "two").Obj(),
				resource1: newResp().Annotation("cdi.k8s.io/x", "one").Obj(),
			},
			want: &RunContainerOptions{Annotations: []Annotation{{Key: "cdi.k8s.io/x", Value: "one"}}},
			wantConflicts: []Conflict{{
				Kind: ConflictAnnotation, Key: "cdi.k8s.io/x",
				KeptResource: resource1, KeptValue: "one", DroppedResource: resource2, DroppedValue: "two",
			}},
		},
		"a container path repeated in one response: the first wins": {
			responsesPerResource: map[string]*pluginapi.ContainerAllocateResponse{
				resource1: newResp().Device("/dev/x", "/dev/a", "rw").Device("/dev/x", "/dev/b", "rw").Device("/dev/x", "/dev/a", "rw").Obj(),
			},
			want: &RunContainerOptions{Devices: []DeviceSpec{{ContainerPath: "/dev/x", HostPath: "/dev/a", Permissions: "rw"}}},
			wantConflicts: []Conflict{{
				Kind: ConflictDevice, Key: "/dev/x",
				KeptResource: resource1, KeptValue: "/dev/a:rw", DroppedResource: resource1, DroppedValue: "/dev/b:rw",
			}},
		},
		"conflicts are listed by resource, then kind, then key": {
			responsesPerResource: map[string]*pluginapi.ContainerAllocateResponse{
				resource1: newResp().Env("A", "1").Env("B", "1").Annotation("k", "1").Device("/dev/x", "/dev/1", "r").Obj(),
				resource2: newResp().Env("B", "2").Env("A", "2").Annotation("k", "2").Device("/dev/x", "/dev/2", "r").Obj(),
				resource3: newResp().Env("A", "3").Obj(),
			},
			want: &RunContainerOptions{
				Envs:        []EnvVar{{Name: "A", Value: "1"}, {Name: "B", Value: "1"}},
				Devices:     []DeviceSpec{{ContainerPath: "/dev/x", HostPath: "/dev/1", Permissions: "r"}},
				Annotations: []Annotation{{Key: "k", Value: "1"}},
			},
			wantConflicts: []Conflict{
				{Kind: ConflictEnv, Key: "A", KeptResource: resource1, KeptValue: "1", DroppedResource: resource2, DroppedValue: "2"},
				{Kind: ConflictEnv, Key: "B", KeptResource: resource1, KeptValue: "1", DroppedResource: resource2, DroppedValue: "2"},
				{Kind: ConflictDevice, Key: "/dev/x", KeptResource: resource1, KeptValue: "/dev/1:r", DroppedResource: resource2, DroppedValue: "/dev/2:r"},
				{Kind: ConflictAnnotation, Key: "k", KeptResource: resource1, KeptValue: "1", DroppedResource: resource2, DroppedValue: "2"},
				{Kind: ConflictEnv, Key: "A", KeptResource: resource1, KeptValue: "1", DroppedResource: resource3, DroppedValue: "3"},
			},
		},
	}
	for name, tc := range testCases {
		t.Run(name, func(t *testing.T) {
			s := New()
			i := 0
			for resource, resp := range tc.responsesPerResource {
				i++
				allocate(t, s, "pod", "container", resource, map[int64][]string{0: {fmt.Sprintf("dev%d", i)}}, resp)
			}
			// Go randomizes map iteration on every range, so repeating the call would expose any
			// dependence on the Store's map order.
			for range 20 {
				got, conflicts := s.RunContainerOptions("pod", "container")
				if diff := cmp.Diff(tc.want, got); diff != "" {
					t.Fatalf("options (-want +got):\n%s", diff)
				}
				if diff := cmp.Diff(tc.wantConflicts, conflicts); diff != "" {
					t.Fatalf("conflicts (-want +got):\n%s", diff)
				}
			}
		})
	}
}

func TestRunContainerOptionsUnknown(t *testing.T) {
	s := New()
	allocate(t, s, "pod", "container", "example.com/r", map[int64][]string{0: {"d1"}}, newResp().Env("A", "1").Obj())
	if err := s.Reserve("pod", "reserving", "example.com/r", "d2"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ pod, container string }{
		{"other", "container"},
		{"pod", "other"},
		{"pod", "reserving"},
	} {
		if opts, conflicts := s.RunContainerOptions(tc.pod, tc.container); opts != nil || conflicts != nil {
			t.Errorf("RunContainerOptions(%s, %s) = %+v, %v, want nil, nil", tc.pod, tc.container, opts, conflicts)
		}
	}
}
