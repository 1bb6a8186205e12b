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

package kube

import (
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

// nodeOfName returns the node part of a name as the admission policy reads it: everything
// before the name's last dot, provided that the name starts with it and a dot.
func nodeOfName(name string) string {
	return name[:max(strings.LastIndex(name, "."), 0)]
}

func TestNodeDeviceName(t *testing.T) {
	longNode := strings.Repeat("n", 60) + "." + strings.Repeat("a", 60) + "." + strings.Repeat("b", 60) + "." + strings.Repeat("c", 20)
	longResource := strings.Repeat("d", 60) + "." + strings.Repeat("e", 183) + "/" + strings.Repeat("F", 63)
	cases := map[string]struct {
		node, resource string
		shard          int
		wantPrefix     string
	}{
		"simple":         {node: "node-1", resource: "example.com/gopher", wantPrefix: "node-1.example-com-gopher-"},
		"shard":          {node: "node-1", resource: "example.com/gopher", shard: 2, wantPrefix: "node-1.example-com-gopher-"},
		"upper and dots": {node: "n1.zone", resource: "vendor.io/GPU_x.y", wantPrefix: "n1.zone.vendor-io-gpu-x-y-"},
		"longest":        {node: longNode, resource: longResource, shard: 1023, wantPrefix: longNode + ".dddd"},
		"no room":        {node: strings.Repeat("a", 236) + ".b", resource: "example.com/gopher", wantPrefix: strings.Repeat("a", 236) + ".b."},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := NodeDeviceName(tc.node, tc.resource, tc.shard)
			if errs := validation.IsDNS1123Subdomain(got); len(errs) > 0 {
				t.Fatalf("NodeDeviceName(%q, %q, %d) = %q, not a DNS subdomain: %v", tc.node, tc.resource, tc.shard, got, errs)
			}
			if !strings.HasPrefix(got, tc.wantPrefix) {
				t.Errorf("NodeDeviceName = %q, want prefix %q", got, tc.wantPrefix)
			}
			if n := nodeOfName(got); n != tc.node {
				t.Errorf("NodeDeviceName = %q, whose node part is %q, want %q", got, n, tc.node)
			}
			if again := NodeDeviceName(tc.node, tc.resource, tc.shard); again != got {
				t.Errorf("NodeDeviceName is not deterministic: %q then %q", got, again)
			}
			if tc.shard > 0 && !strings.HasSuffix(got, "-"+strconv.Itoa(tc.shard)) {
				t.Errorf("NodeDeviceName = %q, want the shard number as suffix", got)
			}
		})
	}
}

func TestNodeDeviceNameDistinguishes(t *testing.T) {
	names := map[string]string{}
	for _, in := range [][3]string{
		{"n1", "example.com/gopher", "0"},
		{"n1", "example.com/Gopher", "0"},
		{"n1", "example-com/gopher", "0"},
		{"n2", "example.com/gopher", "0"},
		{"n1-example.com", "gopher.io/x", "0"},
		{"n1", "example.com-gopher.io/x", "0"},
		{"n1.example", "com/gopher", "0"},
	} {
		got := NodeDeviceName(in[0], in[1], 0)
		if prev, ok := names[got]; ok {
			t.Errorf("NodeDeviceName(%q, %q) = %q, the same as for %s", in[0], in[1], got, prev)
		}
		names[got] = in[0] + " " + in[1]
	}
	if NodeDeviceName("n1", "example.com/gopher", 0) == NodeDeviceName("n1", "example.com/gopher", 1) {
		t.Error("shards 0 and 1 have the same name")
	}
}

func TestDeviceAllocationName(t *testing.T) {
	const uid1, uid2 = "5e1c1b7a-8e63-4b4b-9d7f-1d2a3c4e5f60", "0b7d3c1e-2f4a-4c6b-8d9e-a1b2c3d4e5f6"
	long := strings.Repeat("p", 250) + ".x"
	for _, node := range []string{"n1", "n1.zone.example.com", strings.Repeat("n", 230)} {
		for _, pod := range []string{"gpu-job", "gpu.job", long, strings.Repeat("q", 253)} {
			a, b := DeviceAllocationName(node, pod, uid1), DeviceAllocationName(node, pod, uid2)
			for _, n := range []string{a, b} {
				if errs := validation.IsDNS1123Subdomain(n); len(errs) > 0 {
					t.Errorf("DeviceAllocationName(%q, %q) = %q, not a DNS subdomain: %v", node, pod, n, errs)
				}
				if got := nodeOfName(n); got != node {
					t.Errorf("DeviceAllocationName(%q, %q) = %q, whose node part is %q", node, pod, n, got)
				}
			}
			if a == b {
				t.Errorf("two pods named %q with different UIDs share the name %q", pod, a)
			}
			if DeviceAllocationName(node, pod, uid1) != a {
				t.Errorf("DeviceAllocationName(%q, %q) is not deterministic", node, pod)
			}
		}
	}
	if got := DeviceAllocationName("n1", "gpu-job", uid1); !strings.HasPrefix(got, "n1.gpu-job-") {
		t.Errorf("DeviceAllocationName = %q, want it to start with the node and pod names", got)
	}
	if DeviceAllocationName("n1", "p", uid1) == DeviceAllocationName("n2", "p", uid1) {
		t.Error("the same pod on two nodes has the same name")
	}
}

func TestLabelValue(t *testing.T) {
	cases := map[string]struct {
		in       string
		wantSame bool
	}{
		"valid node name":    {in: "node-1", wantSame: true},
		"resource name":      {in: "example.com/gopher"},
		"long node name":     {in: strings.Repeat("n", 100)},
		"leading separators": {in: "/_x"},
		"only separators":    {in: "//"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := LabelValue(tc.in)
			if errs := validation.IsValidLabelValue(got); len(errs) > 0 {
				t.Fatalf("LabelValue(%q) = %q, not a label value: %v", tc.in, got, errs)
			}
			if (got == tc.in) != tc.wantSame {
				t.Errorf("LabelValue(%q) = %q; want unchanged: %v", tc.in, got, tc.wantSame)
			}
		})
	}
	if LabelValue("example.com/gopher") == LabelValue("example.com_gopher") {
		t.Error("LabelValue maps two resources to the same value")
	}
}
