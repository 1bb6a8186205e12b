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
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

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

// The checker judges a response with the agent's own check (allocpolicy), and says whose rule
// each refusal is; conflicting duplicates and empty permissions are its own.
func TestValidateContainerResponse(t *testing.T) {
	r := &v1beta1.ContainerAllocateResponse{
		Envs:        map[string]string{"A": "1", "B=C": "2"},
		Annotations: map[string]string{"bad key": "x"},
		Mounts:      []*v1beta1.Mount{{ContainerPath: "/m", HostPath: "/h"}, {ContainerPath: "/m", HostPath: "/h2"}, {ContainerPath: "rel", HostPath: "/h"}},
		Devices: []*v1beta1.DeviceSpec{
			{ContainerPath: "/dev/x", HostPath: "/dev/x", Permissions: "rwx"}, {ContainerPath: "/dev/y/../z", HostPath: "/dev/z", Permissions: "r"},
			{ContainerPath: "/dev/s", HostPath: "/dev/s", Permissions: "rw"}, {ContainerPath: "/dev/s", HostPath: "/dev/s", Permissions: "rw"},
			{ContainerPath: "/dev/p", HostPath: "/dev/p", Permissions: "rw"}, {ContainerPath: "/dev/p", HostPath: "/dev/p", Permissions: "r"},
			{ContainerPath: "/opt/q", HostPath: "/dev/q"}, {ContainerPath: "/dev/e", HostPath: "/dev/e"},
		},
		CdiDevices: []*v1beta1.CDIDevice{{Name: "v.com/c=d"}, {Name: "v.com/c=d"}, {Name: "bad"}},
	}
	got := validateContainerResponse("example.com/x", r)
	want := responseProblems{
		paths: []string{
			`envs[B=C]: Invalid value: "B=C": an env name must not hold '=' or NUL (` + kubeletRule + `)`,
			`mounts[2].containerPath: Invalid value: "rel": want a clean absolute path (no '.' or '..' element, no '//', no NUL) (` + kubeletRule + `)`,
			`devices[1].containerPath: Invalid value: "/dev/y/../z": want a clean absolute path (no '.' or '..' element, no '//', no NUL) (` +
				fmt.Sprintf(stricterRule, "paths are clean, with no '.' or '..' element and no '//'") + `)`,
			`devices[6].containerPath: Invalid value: "/opt/q": a device node must be a path under /dev/ (` +
				fmt.Sprintf(stricterRule, "device nodes stay under /dev/ on both sides") + `)`,
			`annotations[bad key]: Invalid value: "bad key": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') (` +
				fmt.Sprintf(stricterRule, "annotation keys are qualified names, as Kubernetes annotations are") + `)`,
		},
		permissions: []string{`devices[0].permissions: Invalid value: "rwx": want a subset of "rwm" (` + kubeletRule + `)`},
		duplicates: []string{
			`mount "/m" is listed 2 times with different settings (host path "/h" read-only false; host path "/h2" read-only false): the kubelet keeps one and drops the others`,
			`device node "/dev/p" is listed 2 times with different settings (host path "/dev/p" permissions "rw"; host path "/dev/p" permissions "r"): the kubelet keeps one and drops the others`,
		},
		cdi:     []string{`cdiDevices[2].name: Invalid value: "bad": unqualified device "bad", missing vendor (` + kubeletRule + `)`},
		repeats: []string{`device node "/dev/s" is listed 2 times, identically`, `CDI device "v.com/c=d" is listed 2 times, identically`},
		warnings: []string{
			`device "/opt/q" has no permissions: the API asks for one or more of r, w, m; the kubelet and the agent pass none on, and the runtime's default applies`,
			`device "/dev/e" has no permissions: the API asks for one or more of r, w, m; the kubelet and the agent pass none on, and the runtime's default applies`,
		},
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(responseProblems{})); diff != "" {
		t.Errorf("validateContainerResponse (-want +got):\n%s", diff)
	}
}

// Each of the agent's refusals is told as the kubelet's rule or kubedevice's stricter one.
func TestRuleOfTheAgentsRefusals(t *testing.T) {
	tests := []struct {
		resp *v1beta1.ContainerAllocateResponse
		want string
	}{
		{&v1beta1.ContainerAllocateResponse{Mounts: []*v1beta1.Mount{{ContainerPath: "/", HostPath: "/h"}}},
			fmt.Sprintf(stricterRule, "no mount covers the container's root")},
		{&v1beta1.ContainerAllocateResponse{Envs: map[string]string{"A": strings.Repeat("x", 32769)}},
			fmt.Sprintf(stricterRule, "within the limits of the DeviceAllocation object that records it")},
		{&v1beta1.ContainerAllocateResponse{Devices: []*v1beta1.DeviceSpec{{ContainerPath: "dev/x", HostPath: "/dev/x", Permissions: "r"}}}, kubeletRule},
		{&v1beta1.ContainerAllocateResponse{Devices: []*v1beta1.DeviceSpec{{ContainerPath: "/dev/x", HostPath: "/proc/1/root", Permissions: "r"}}},
			fmt.Sprintf(stricterRule, "device nodes stay under /dev/ on both sides")},
	}
	for _, tc := range tests {
		p := validateContainerResponse("example.com/x", tc.resp)
		if len(p.paths) != 1 || !strings.HasSuffix(p.paths[0], "("+tc.want+")") {
			t.Errorf("%v: paths %q, want one ending in (%s)", tc.resp, p.paths, tc.want)
		}
	}
}
