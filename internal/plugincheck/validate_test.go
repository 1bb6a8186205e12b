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

package plugincheck

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

func TestValidateCDIName(t *testing.T) {
	tests := map[string]bool{
		"vendor.com/gpu=gpudevice1":    true,
		"nvidia.com/gpu=all":           true,
		"example.com/testplugin=dev:0": true,
		"a/b=c":                        true,
		"gpu0":                         false,
		"vendor.com=gpu":               false,
		"vendor.com/gpu=":              false,
		"/gpu=x":                       false,
		"1vendor.com/gpu=x":            false,
		"vendor.com/g.pu=x":            false,
		"vendor.com/gpu=-x":            false,
		"vendor.com/gpu=x/y":           false,
		"vendor.com-/gpu=x":            false,
	}
	for name, valid := range tests {
		if got := validateCDIName(name) == ""; got != valid {
			t.Errorf("validateCDIName(%q) valid = %t, want %t (%s)", name, got, valid, validateCDIName(name))
		}
	}
}

func TestValidateResourceName(t *testing.T) {
	tests := map[string]bool{
		"example.com/gopher":     true,
		"vendor.io/gpu-a100":     true,
		"gopher":                 false,
		"kubernetes.io/gpu":      false,
		"foo.kubernetes.io/gpu":  false,
		"requests.example.com/x": false,
		"example.com/":           false,
		"example.com/bad_end_":   false,
		"Example_com/x":          false,
	}
	for name, valid := range tests {
		if got := len(validateResourceName(name)) == 0; got != valid {
			t.Errorf("validateResourceName(%q) valid = %t, want %t (%v)", name, got, valid, validateResourceName(name))
		}
	}
}

func TestValidateEndpoint(t *testing.T) {
	for ep, valid := range map[string]bool{"gopher.sock": true, "": false, "../x.sock": false, "sub/x.sock": false, "..": false, "kubelet.sock": false} {
		if got := len(validateEndpoint(ep)) == 0; got != valid {
			t.Errorf("validateEndpoint(%q) valid = %t, want %t", ep, got, valid)
		}
	}
}

func TestValidatePermissions(t *testing.T) {
	for perm, valid := range map[string]bool{"r": true, "rw": true, "mrw": true, "": false, "rx": false, "rr": false, "RW": false} {
		if got := validatePermissions(perm) == ""; got != valid {
			t.Errorf("validatePermissions(%q) valid = %t, want %t", perm, got, valid)
		}
	}
}

func TestValidateDeviceIDs(t *testing.T) {
	long := "x123456789012345678901234567890123456789012345678901234567890123"
	// Control characters, NUL included, are accepted: the kubelet accepts any ID.
	devs := []*v1beta1.Device{{ID: "a"}, {ID: ""}, {ID: "a"}, {ID: long}, {ID: "tab\there"}, {ID: "\x00"}}
	want := []string{
		"device 1 has an empty ID",
		`ID "` + long + `" is 64 characters long, more than 63`,
		`ID "a" is listed 2 times`,
	}
	if diff := cmp.Diff(want, validateDeviceIDs(devs)); diff != "" {
		t.Errorf("validateDeviceIDs (-want +got):\n%s", diff)
	}
}

func TestValidateContainerResponse(t *testing.T) {
	r := &v1beta1.ContainerAllocateResponse{
		Envs:   map[string]string{"A": "1", "B=C": "2"},
		Mounts: []*v1beta1.Mount{{ContainerPath: "/m", HostPath: "/h"}, {ContainerPath: "/m", HostPath: "/h2"}, {ContainerPath: "rel", HostPath: "/h"}},
		Devices: []*v1beta1.DeviceSpec{
			{ContainerPath: "/dev/x", HostPath: "/dev/x", Permissions: "rwx"}, {ContainerPath: "/dev/y/../z", HostPath: "/dev/z", Permissions: "r"},
			{ContainerPath: "/dev/s", HostPath: "/dev/s", Permissions: "rw"}, {ContainerPath: "/dev/s", HostPath: "/dev/s", Permissions: "rw"},
			{ContainerPath: "/dev/p", HostPath: "/dev/p", Permissions: "rw"}, {ContainerPath: "/dev/p", HostPath: "/dev/p", Permissions: "r"},
		},
		CdiDevices: []*v1beta1.CDIDevice{{Name: "v.com/c=d"}, {Name: "v.com/c=d"}, {Name: "bad"}},
	}
	got := validateContainerResponse(r)
	want := responseProblems{
		paths: []string{
			`mount container path "rel" is not absolute`,
			`device container path "/dev/y/../z" is not clean ("/dev/z")`,
			`env name "B=C" is not a variable name`,
		},
		permissions: []string{`device "/dev/x": permissions "rwx" hold 'x', not one of r, w, m`},
		duplicates: []string{
			`mount "/m" is listed 2 times with different settings (host path "/h" read-only false; host path "/h2" read-only false): the kubelet keeps one and drops the others`,
			`device node "/dev/p" is listed 2 times with different settings (host path "/dev/p" permissions "rw"; host path "/dev/p" permissions "r"): the kubelet keeps one and drops the others`,
		},
		cdi:     []string{`CDI device "bad": it is not fully qualified (vendor.com/class=name): no '='`},
		repeats: []string{`device node "/dev/s" is listed 2 times, identically`, `CDI device "v.com/c=d" is listed 2 times, identically`},
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(responseProblems{})); diff != "" {
		t.Errorf("validateContainerResponse (-want +got):\n%s", diff)
	}
}
