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

package nodeagent

import (
	"errors"
	"strings"
	"testing"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kubedevice/kubedevice/internal/allocpolicy"
)

// A plugin's Allocate response goes through internal/allocpolicy before it is committed: a
// malformed one, or one the administrator's policy forbids, fails the allocation with a clear
// AllocateFailed refusal and holds nothing; the same plugin's well-formed answer is taken.
// Plugins answer over real gRPC on unix sockets.
func TestAllocateChecksTheResponse(t *testing.T) {
	policy, err := allocpolicy.Parse([]byte(`
resources:
- resource: ` + res2 + `
  forbiddenEnvNames: [LD_PRELOAD]
  allowedHostPathPrefixes: [/dev, /host/lib]
`))
	if err != nil {
		t.Fatal(err)
	}
	tm := newAllocManager(t, withConfig(func(c *Config) { c.AllocatePolicy = policy }))
	p1 := startPlugin(t, tm, "r1.sock", res1, false, false, healthy("a1", "a2")...)
	p2 := startPlugin(t, tm, "r2.sock", res2, false, false, healthy("b1", "b2")...)

	answer := func(p *testPlugin, edit func(*pluginapi.ContainerAllocateResponse)) {
		p.SetAllocateFunc(func(r *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
			resp := echoResponse(p.resource, r.GetContainerRequests()[0].GetDevicesIds())
			edit(resp)
			return &pluginapi.AllocateResponse{ContainerResponses: []*pluginapi.ContainerAllocateResponse{resp}}, nil
		})
	}
	cases := map[string]struct {
		plugin *testPlugin
		edit   func(*pluginapi.ContainerAllocateResponse)
		want   string
	}{
		"device node escaping /dev": {
			plugin: p1,
			edit: func(r *pluginapi.ContainerAllocateResponse) {
				r.Devices = append(r.Devices, &pluginapi.DeviceSpec{ContainerPath: "/dev/sda", HostPath: "/dev/../dev/sda", Permissions: "rw"})
			},
			want: `devices[1].hostPath: Invalid value: "/dev/../dev/sda"`,
		},
		"malformed CDI name": {
			plugin: p1,
			edit: func(r *pluginapi.ContainerAllocateResponse) {
				r.CdiDevices = []*pluginapi.CDIDevice{{Name: "nvidia.com/gpu"}}
			},
			want: "cdiDevices[0].name",
		},
		"8 MiB, under gRPC's 16 MiB limit": {
			plugin: p1,
			edit: func(r *pluginapi.ContainerAllocateResponse) {
				r.Annotations = map[string]string{"example.com/blob": strings.Repeat("x", 8<<20)}
			},
			want: "response: Too long",
		},
		"LD_PRELOAD, forbidden by the policy of " + res2: {
			plugin: p2,
			edit:   func(r *pluginapi.ContainerAllocateResponse) { r.Envs["LD_PRELOAD"] = "/tmp/evil.so" },
			want:   "envs[LD_PRELOAD]: Forbidden",
		},
		"a mount of / outside the policy's host paths": {
			plugin: p2,
			edit: func(r *pluginapi.ContainerAllocateResponse) {
				r.Mounts = append(r.Mounts, &pluginapi.Mount{ContainerPath: "/host", HostPath: "/"})
			},
			want: "allows host paths under /dev, /host/lib only",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			answer(tc.plugin, tc.edit)
			pod := makePod("p").container("c", req{tc.plugin.resource, 1}).obj()
			err := tm.Allocate(tm.ctx, pod, &pod.Spec.Containers[0])
			var perr *allocpolicy.Error
			if AllocationReasonOf(err) != AllocationAllocateFailed || !errors.As(err, &perr) || IsRetryable(err) {
				t.Fatalf("Allocate = %v, want a final AllocateFailed refusal by the allocate policy", err)
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "refusing the Allocate response of the "+tc.plugin.resource+" device plugin") {
				t.Errorf("Allocate = %v, want it to say %q", err, tc.want)
			}
			tm.assertNothingHeld(t)
		})
	}
	t.Run("well-formed answers are taken", func(t *testing.T) {
		answer(p1, func(r *pluginapi.ContainerAllocateResponse) { r.Envs["LD_PRELOAD"] = "/opt/ok.so" }) // no policy for res1
		answer(p2, func(*pluginapi.ContainerAllocateResponse) {})
		pod := makePod("ok").container("c", req{res1, 1}, req{res2, 1}).obj()
		if err := tm.AllocatePod(tm.ctx, pod); err != nil {
			t.Fatal(err)
		}
	})
}
