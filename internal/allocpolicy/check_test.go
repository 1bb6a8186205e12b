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

package allocpolicy

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// good is a response as real plugins give: envs, a read-only mount, a device node, an
// annotation and a CDI device.
func good() *pluginapi.ContainerAllocateResponse {
	return &pluginapi.ContainerAllocateResponse{
		Envs:        map[string]string{"GOPHER": "gopher-0", "NVIDIA_VISIBLE_DEVICES": "0,1"},
		Mounts:      []*pluginapi.Mount{{ContainerPath: "/gophers/", HostPath: "/var/lib/gophers", ReadOnly: true}},
		Devices:     []*pluginapi.DeviceSpec{{ContainerPath: "/dev/nvidia0", HostPath: "/dev/nvidia0", Permissions: "rwm"}, {ContainerPath: "/dev/dri/card0", HostPath: "/dev/dri/card0"}},
		Annotations: map[string]string{"example.com/gopher": "gopher-0"},
		CdiDevices:  []*pluginapi.CDIDevice{{Name: "nvidia.com/gpu=0"}, {Name: "vendor.example.com/class-x=dev_1.a:b"}},
	}
}

func TestCheckStructure(t *testing.T) {
	cases := map[string]struct {
		edit func(*pluginapi.ContainerAllocateResponse)
		// want are the field errors, each as the start of its message; none: accepted.
		want []string
	}{
		"real plugins' answer":  {edit: func(*pluginapi.ContainerAllocateResponse) {}},
		"empty answer":          {edit: func(r *pluginapi.ContainerAllocateResponse) { *r = pluginapi.ContainerAllocateResponse{} }},
		"read-write mount of /": {edit: func(r *pluginapi.ContainerAllocateResponse) { r.Mounts[0].HostPath = "/" }},
		"relative host path": {
			edit: func(r *pluginapi.ContainerAllocateResponse) { r.Mounts[0].HostPath = "var/lib" },
			want: []string{`mounts[0].hostPath: Invalid value: "var/lib"`},
		},
		"dot-dot in a container path": {
			edit: func(r *pluginapi.ContainerAllocateResponse) { r.Mounts[0].ContainerPath = "/gophers/../etc" },
			want: []string{`mounts[0].containerPath: Invalid value: "/gophers/../etc"`},
		},
		"doubled slash": {
			edit: func(r *pluginapi.ContainerAllocateResponse) { r.Mounts[0].HostPath = "/var//lib" },
			want: []string{`mounts[0].hostPath: Invalid value: "/var//lib"`},
		},
		"mount over the container's root": {
			edit: func(r *pluginapi.ContainerAllocateResponse) { r.Mounts[0].ContainerPath = "/" },
			want: []string{`mounts[0].containerPath: Invalid value: "/": a mount must not cover`},
		},
		"empty path": {
			edit: func(r *pluginapi.ContainerAllocateResponse) { r.Mounts[0].HostPath = "" },
			want: []string{`mounts[0].hostPath: Invalid value: ""`},
		},
		"NUL in a path": {
			edit: func(r *pluginapi.ContainerAllocateResponse) { r.Mounts[0].HostPath = "/var/lib\x00/x" },
			want: []string{`mounts[0].hostPath: Invalid value:`},
		},
		"device through /dev/..": {
			edit: func(r *pluginapi.ContainerAllocateResponse) { r.Devices[0].HostPath = "/dev/../dev/sda" },
			want: []string{`devices[0].hostPath: Invalid value: "/dev/../dev/sda": want a clean absolute path`},
		},
		"device outside /dev": {
			edit: func(r *pluginapi.ContainerAllocateResponse) {
				r.Devices[0].HostPath = "/proc/1/root"
				r.Devices[1].ContainerPath = "/etc/passwd"
			},
			want: []string{
				`devices[0].hostPath: Invalid value: "/proc/1/root": a device node must be a path under /dev/`,
				`devices[1].containerPath: Invalid value: "/etc/passwd": a device node must be a path under /dev/`,
			},
		},
		"/dev itself": {
			edit: func(r *pluginapi.ContainerAllocateResponse) { r.Devices[0].HostPath = "/dev" },
			want: []string{`devices[0].hostPath: Invalid value: "/dev": a device node must be a path under /dev/`},
		},
		"/devices is not /dev": {
			edit: func(r *pluginapi.ContainerAllocateResponse) { r.Devices[0].HostPath = "/devices/x" },
			want: []string{`devices[0].hostPath: Invalid value: "/devices/x": a device node`},
		},
		"permissions": {
			edit: func(r *pluginapi.ContainerAllocateResponse) {
				r.Devices[0].Permissions = "rwx"
				r.Devices[1].Permissions = "rr"
			},
			want: []string{`devices[0].permissions: Invalid value: "rwx"`, `devices[1].permissions: Invalid value: "rr"`},
		},
		"env names": {
			edit: func(r *pluginapi.ContainerAllocateResponse) {
				r.Envs[""] = "x"
				r.Envs["A=B"] = "x"
			},
			want: []string{`envs[]: Required value`, `envs[A=B]: Invalid value: "A=B": an env name must not hold '=' or NUL`},
		},
		"annotation key": {
			edit: func(r *pluginapi.ContainerAllocateResponse) { r.Annotations["not a key"] = "x" },
			want: []string{`annotations[not a key]: Invalid value: "not a key"`},
		},
		"CDI names": {
			edit: func(r *pluginapi.ContainerAllocateResponse) {
				r.CdiDevices = []*pluginapi.CDIDevice{{Name: "gpu0"}, {Name: "nvidia.com/gpu"}, {Name: "nvidia.com/gpu=/dev/x"}, {Name: "-bad.com/gpu=0"}}
			},
			want: []string{`cdiDevices[0].name: Invalid value: "gpu0"`, `cdiDevices[1].name: Invalid value: "nvidia.com/gpu"`,
				`cdiDevices[2].name: Invalid value: "nvidia.com/gpu=/dev/x"`, `cdiDevices[3].name: Invalid value: "-bad.com/gpu=0"`},
		},
		"too many mounts": {
			edit: func(r *pluginapi.ContainerAllocateResponse) {
				r.Mounts = nil
				for range MaxItems + 1 {
					r.Mounts = append(r.Mounts, &pluginapi.Mount{ContainerPath: "/a", HostPath: "/b"})
				}
			},
			want: []string{`mounts: Too many: 1025: must have at most 1024 items`},
		},
		"value longer than the CRD takes": {
			edit: func(r *pluginapi.ContainerAllocateResponse) { r.Envs["BIG"] = strings.Repeat("x", MaxValueLength+1) },
			want: []string{`envs[BIG]: Too long: may not be more than 32768 bytes`},
		},
		"response larger than MaxResponseBytes": {
			edit: func(r *pluginapi.ContainerAllocateResponse) {
				r.Annotations["example.com/a"] = strings.Repeat("x", MaxResponseBytes)
			},
			want: []string{`response: Too long`},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			resp := good()
			tc.edit(resp)
			err := (*Policy)(nil).Check("example.com/gopher", resp)
			if diff := cmp.Diff(tc.want, fieldErrors(t, err), cmp.Comparer(hasPrefix)); diff != "" {
				t.Errorf("Check = %v (-want +got):\n%s", err, diff)
			}
		})
	}
}

func TestCheckPolicy(t *testing.T) {
	policy, err := Parse([]byte(`
resources:
- resource: example.com/gopher
  allowedHostPathPrefixes: [/var/lib/gophers, /dev/gopher]
  forbiddenEnvNames: [LD_PRELOAD, LD_LIBRARY_PATH]
  forbiddenAnnotationPrefixes: [org.systemd.property., cdi.k8s.io/]
- resource: example.com/*
  forbiddenEnvNames: [DOMAIN_RULE]
- resource: "*"
  forbiddenEnvNames: [ANY_RULE]
`))
	if err != nil {
		t.Fatal(err)
	}
	gopher := func(edit func(*pluginapi.ContainerAllocateResponse)) *pluginapi.ContainerAllocateResponse {
		r := &pluginapi.ContainerAllocateResponse{
			Envs:        map[string]string{"GOPHER": "gopher-0"},
			Mounts:      []*pluginapi.Mount{{ContainerPath: "/gophers", HostPath: "/var/lib/gophers/gopher-0", ReadOnly: true}},
			Devices:     []*pluginapi.DeviceSpec{{ContainerPath: "/dev/gopher0", HostPath: "/dev/gopher/0"}},
			Annotations: map[string]string{"example.com/gopher": "x"},
		}
		edit(r)
		return r
	}
	cases := map[string]struct {
		resource string
		resp     *pluginapi.ContainerAllocateResponse
		want     []string
	}{
		"within the policy": {resource: "example.com/gopher", resp: gopher(func(*pluginapi.ContainerAllocateResponse) {})},
		"LD_PRELOAD": {
			resource: "example.com/gopher",
			resp:     gopher(func(r *pluginapi.ContainerAllocateResponse) { r.Envs["LD_PRELOAD"] = "/x.so" }),
			want:     []string{"envs[LD_PRELOAD]: Forbidden: the allocate policy of example.com/gopher forbids this env"},
		},
		"mount of /": {
			resource: "example.com/gopher",
			resp:     gopher(func(r *pluginapi.ContainerAllocateResponse) { r.Mounts[0].HostPath = "/" }),
			want:     []string{"mounts[0].hostPath: Forbidden: /: the allocate policy of example.com/gopher allows host paths under /var/lib/gophers, /dev/gopher only"},
		},
		"a sibling that shares the prefix's characters": {
			resource: "example.com/gopher",
			resp:     gopher(func(r *pluginapi.ContainerAllocateResponse) { r.Mounts[0].HostPath = "/var/lib/gophers-evil" }),
			want:     []string{"mounts[0].hostPath: Forbidden: /var/lib/gophers-evil"},
		},
		"device node outside the policy": {
			resource: "example.com/gopher",
			resp:     gopher(func(r *pluginapi.ContainerAllocateResponse) { r.Devices[0].HostPath = "/dev/sda" }),
			want:     []string{"devices[0].hostPath: Forbidden: /dev/sda"},
		},
		"annotations": {
			resource: "example.com/gopher",
			resp: gopher(func(r *pluginapi.ContainerAllocateResponse) {
				r.Annotations["org.systemd.property.ExecStartPre"] = "x"
				r.Annotations["cdi.k8s.io/gopher"] = "x"
			}),
			want: []string{"annotations[cdi.k8s.io/gopher]: Forbidden", "annotations[org.systemd.property.ExecStartPre]: Forbidden"},
		},
		"the domain's rule for another resource of it": {
			resource: "example.com/other",
			resp: gopher(func(r *pluginapi.ContainerAllocateResponse) {
				r.Envs["LD_PRELOAD"] = "x"
				r.Envs["DOMAIN_RULE"] = "x"
				r.Mounts[0].HostPath = "/"
			}),
			want: []string{"envs[DOMAIN_RULE]: Forbidden: the allocate policy of example.com/* forbids this env"},
		},
		"the catch-all for any other resource": {
			resource: "other.io/x",
			resp:     gopher(func(r *pluginapi.ContainerAllocateResponse) { r.Envs["ANY_RULE"] = "x"; r.Envs["DOMAIN_RULE"] = "x" }),
			want:     []string{"envs[ANY_RULE]: Forbidden: the allocate policy of * forbids this env"},
		},
		"structure is checked too": {
			resource: "example.com/gopher",
			resp:     gopher(func(r *pluginapi.ContainerAllocateResponse) { r.Devices[0].HostPath = "/dev/gopher/../sda" }),
			want:     []string{`devices[0].hostPath: Invalid value: "/dev/gopher/../sda"`},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := policy.Check(tc.resource, tc.resp)
			if diff := cmp.Diff(tc.want, fieldErrors(t, err), cmp.Comparer(hasPrefix)); diff != "" {
				t.Errorf("Check = %v (-want +got):\n%s", err, diff)
			}
		})
	}
}

func TestParse(t *testing.T) {
	cases := map[string]struct {
		in      string
		wantErr string
	}{
		"empty file":        {in: ""},
		"rules":             {in: "resources:\n- resource: example.com/gopher\n  forbiddenEnvNames: [LD_PRELOAD]\n"},
		"unknown field":     {in: "resources:\n- resource: example.com/gopher\n  forbidenEnvNames: [LD_PRELOAD]\n", wantErr: "unknown field"},
		"bad pattern":       {in: "resources:\n- resource: example.com/go*\n", wantErr: `resources[0].resource "example.com/go*"`},
		"twice":             {in: "resources:\n- resource: \"*\"\n- resource: \"*\"\n", wantErr: "appears twice"},
		"relative prefix":   {in: "resources:\n- resource: \"*\"\n  allowedHostPathPrefixes: [dev]\n", wantErr: "want a clean absolute path"},
		"empty annotation":  {in: "resources:\n- resource: \"*\"\n  forbiddenAnnotationPrefixes: [\"\"]\n", wantErr: "would forbid every annotation"},
		"no resource named": {in: "resources:\n- forbiddenEnvNames: [X]\n", wantErr: "resources[0].resource"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Parse([]byte(tc.in))
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("Parse: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.Is(err, errInvalidPolicy)):
				t.Fatalf("Parse = %v, want an invalid policy error saying %q", err, tc.wantErr)
			}
		})
	}
}

// fieldErrors returns the messages of a Check error's field errors, nil for no error.
func fieldErrors(t *testing.T, err error) []string {
	t.Helper()
	if err == nil {
		return nil
	}
	var perr *Error
	if !errors.As(err, &perr) {
		t.Fatalf("Check returned %T %v, want an *Error", err, err)
	}
	var out []string
	for _, e := range perr.Errs {
		out = append(out, e.Error())
	}
	return out
}

// hasPrefix compares a wanted message prefix with a message, either way round.
func hasPrefix(a, b string) bool { return strings.HasPrefix(a, b) || strings.HasPrefix(b, a) }
