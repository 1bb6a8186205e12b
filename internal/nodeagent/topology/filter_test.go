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

package topology

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/util/sets"
)

func TestFilterByAffinity(t *testing.T) {
	// The kubelet's TestFilterByAffinity devices: dev2 is on nodes 1 and 2.
	kubeletDevices := DeviceNodes{
		"dev1": {1},
		"dev2": {1, 2},
		"dev3": {2},
		"dev4": {2},
		"dev5": nil,
	}
	cases := map[string]struct {
		devices             DeviceNodes
		available           sets.Set[string]
		affinity            BitMask
		wantAligned         []string
		wantNotAligned      []string
		wantWithoutTopology []string
	}{
		"kubelet: device on {1,2} with affinity {2} is aligned": {
			devices:        kubeletDevices,
			available:      sets.New("dev1", "dev2"),
			affinity:       mask(t, 2),
			wantAligned:    []string{"dev2"},
			wantNotAligned: []string{"dev1"},
		},
		"kubelet: four devices": {
			devices:        kubeletDevices,
			available:      sets.New("dev1", "dev2", "dev3", "dev4"),
			affinity:       mask(t, 2),
			wantAligned:    []string{"dev2", "dev3", "dev4"},
			wantNotAligned: []string{"dev1"},
		},
		"device without topology": {
			devices:             kubeletDevices,
			available:           sets.New("dev1", "dev3", "dev5"),
			affinity:            mask(t, 2),
			wantAligned:         []string{"dev3"},
			wantNotAligned:      []string{"dev1"},
			wantWithoutTopology: []string{"dev5"},
		},
		"available device unknown to the resource has no topology": {
			devices:             kubeletDevices,
			available:           sets.New("dev3", "ghost"),
			affinity:            mask(t, 2),
			wantAligned:         []string{"dev3"},
			wantWithoutTopology: []string{"ghost"},
		},
		"no affinity: everything without topology": {
			devices:             kubeletDevices,
			available:           sets.New("dev1", "dev3", "dev5"),
			affinity:            0,
			wantWithoutTopology: []string{"dev1", "dev3", "dev5"},
		},
		"resource without topology: everything without topology": {
			devices:             DeviceNodes{"a": nil, "b": {}},
			available:           sets.New("b", "a"),
			affinity:            mask(t, 0),
			wantWithoutTopology: []string{"a", "b"},
		},
		"nothing available": {
			devices:   kubeletDevices,
			available: sets.New[string](),
			affinity:  mask(t, 2),
		},
		// Nodes in the affinity come first, fewest available devices first:
		// node 1 (1 device) before node 0 (2 devices).
		"aligned order: affinity nodes by ascending device count": {
			devices:     DeviceNodes{"a0": {0}, "b0": {0}, "c1": {1}},
			available:   sets.New("a0", "b0", "c1"),
			affinity:    mask(t, 0, 1),
			wantAligned: []string{"c1", "a0", "b0"},
		},
		// Other nodes by ascending device count, ties by node ID; -1 last.
		"not aligned order: other nodes by ascending device count": {
			devices: DeviceNodes{
				"x0": {0}, "y2": {2}, "z2": {2}, "w3": {3}, "n1": nil, "n2": nil,
			},
			available:           sets.New("x0", "y2", "z2", "w3", "n1", "n2"),
			affinity:            mask(t, 5),
			wantNotAligned:      []string{"x0", "w3", "y2", "z2"},
			wantWithoutTopology: []string{"n1", "n2"},
		},
		// A device on two nodes goes to the first sorted node holding it:
		// both nodes 0 and 1 are outside the affinity, node 1 has fewer
		// devices, so "ab" is listed with node 1's devices.
		"device on two nodes goes to the first sorted node": {
			devices:        DeviceNodes{"ab": {0, 1}, "a": {0}, "a2": {0}, "b": {1}},
			available:      sets.New("ab", "a", "a2", "b"),
			affinity:       mask(t, 3),
			wantNotAligned: []string{"ab", "b", "a", "a2"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			aligned, notAligned, without := FilterByAffinity(tc.devices, tc.available, tc.affinity)
			if diff := cmp.Diff(tc.wantAligned, aligned); diff != "" {
				t.Errorf("aligned mismatch (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantNotAligned, notAligned); diff != "" {
				t.Errorf("notAligned mismatch (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantWithoutTopology, without); diff != "" {
				t.Errorf("withoutTopology mismatch (-want +got):\n%s", diff)
			}
			// The three lists partition the available devices.
			all := sets.New(aligned...).Union(sets.New(notAligned...)).Union(sets.New(without...))
			if n := len(aligned) + len(notAligned) + len(without); n != tc.available.Len() || !all.Equal(tc.available) {
				t.Errorf("lists %v %v %v do not partition %v", aligned, notAligned, without, sets.List(tc.available))
			}
		})
	}
}
