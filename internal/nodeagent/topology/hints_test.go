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
	"fmt"
	"maps"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/util/sets"
)

var twoNodes = []int{0, 1}

func hint(t testing.TB, preferred bool, nodes ...int) Hint {
	t.Helper()
	return Hint{NUMANodeAffinity: mask(t, nodes...), Preferred: preferred}
}

// onNode returns a device ID → NUMA node map with every device on one node.
func onNode(pairs map[string]int) DeviceNodes {
	d := DeviceNodes{}
	for id, n := range pairs {
		d[id] = []int{n}
	}
	return d
}

// hintCase is a port of the kubelet's topologyHintTestCase: the devices of
// each resource (all healthy), the devices already allocated to containers
// of the pod under test or held by other pods, and the container's (or
// pod's) requests.
type hintCase struct {
	devices   map[string]DeviceNodes
	allocated map[string]map[string][]string // container of the pod → resource → device IDs
	otherPods map[string][]string            // resource → device IDs held by other pods
	requests  map[string]int
	want      map[string][]Hint
}

// hintsFor computes the hints of every requested resource as the kubelet
// does for container "fakeContainer" (podScope false) or the whole pod.
func hintsFor(tc hintCase, podScope bool) map[string][]Hint {
	got := map[string][]Hint{}
	for r, request := range tc.requests {
		devices := tc.devices[r]
		inUse, mine := sets.New(tc.otherPods[r]...), sets.New[string]()
		for container, byResource := range tc.allocated {
			inUse.Insert(byResource[r]...)
			if podScope || container == "fakeContainer" {
				mine.Insert(byResource[r]...)
			}
		}
		hints := ResourceHints(HintInput{
			MachineNodes: twoNodes,
			Devices:      devices,
			Available:    sets.KeySet(devices).Difference(inUse),
			Allocated:    mine,
			Request:      request,
		})
		SortHints(hints)
		got[r] = hints
	}
	return got
}

// commonHintCases are the kubelet's getCommonTestCases (topology_hints_test.go),
// on a machine with NUMA nodes 0 and 1, pod "fakePod", container "fakeContainer".
func commonHintCases(t *testing.T) map[string]hintCase {
	fourDevices := onNode(map[string]int{"Dev1": 0, "Dev2": 1, "Dev3": 0, "Dev4": 1})
	return map[string]hintCase{
		"Single Request, no alignment": {
			devices:  map[string]DeviceNodes{"testdevice": {"Dev1": nil, "Dev2": nil, "Dev3": {}, "Dev4": nil}},
			requests: map[string]int{"testdevice": 1},
			want:     map[string][]Hint{"testdevice": nil},
		},
		"Single Request, only one with alignment": {
			devices:  map[string]DeviceNodes{"testdevice": {"Dev1": nil, "Dev2": {1}}},
			requests: map[string]int{"testdevice": 1},
			want:     map[string][]Hint{"testdevice": {hint(t, true, 1)}},
		},
		"Single Request, one device per socket": {
			devices:  map[string]DeviceNodes{"testdevice": onNode(map[string]int{"Dev1": 0, "Dev2": 1})},
			requests: map[string]int{"testdevice": 1},
			want:     map[string][]Hint{"testdevice": {hint(t, true, 0), hint(t, true, 1), hint(t, false, 0, 1)}},
		},
		"Request for 2, one device per socket": {
			devices:  map[string]DeviceNodes{"testdevice": onNode(map[string]int{"Dev1": 0, "Dev2": 1})},
			requests: map[string]int{"testdevice": 2},
			want:     map[string][]Hint{"testdevice": {hint(t, true, 0, 1)}},
		},
		"Request for 2, 2 devices per socket": {
			devices:  map[string]DeviceNodes{"testdevice": fourDevices},
			requests: map[string]int{"testdevice": 2},
			want:     map[string][]Hint{"testdevice": {hint(t, true, 0), hint(t, true, 1), hint(t, false, 0, 1)}},
		},
		"Request for 2, optimal on 1 NUMA node, forced cross-NUMA": {
			devices:   map[string]DeviceNodes{"testdevice": fourDevices},
			allocated: map[string]map[string][]string{"fakeOtherContainer": {"testdevice": {"Dev1", "Dev2"}}},
			requests:  map[string]int{"testdevice": 2},
			want:      map[string][]Hint{"testdevice": {hint(t, false, 0, 1)}},
		},
		"2 device types, mixed configuration": {
			devices: map[string]DeviceNodes{
				"testdevice1": fourDevices,
				"testdevice2": onNode(map[string]int{"Dev1": 0}),
			},
			requests: map[string]int{"testdevice1": 2, "testdevice2": 1},
			want: map[string][]Hint{
				"testdevice1": {hint(t, true, 0), hint(t, true, 1), hint(t, false, 0, 1)},
				"testdevice2": {hint(t, true, 0)},
			},
		},
		"Single device type, more requested than available": {
			devices:  map[string]DeviceNodes{"testdevice": onNode(map[string]int{"Dev1": 0, "Dev2": 0, "Dev3": 1, "Dev4": 1})},
			requests: map[string]int{"testdevice": 6},
			want:     map[string][]Hint{"testdevice": {}},
		},
		"Single device type, all already allocated to container": {
			devices:   map[string]DeviceNodes{"testdevice": onNode(map[string]int{"Dev1": 0, "Dev2": 0})},
			allocated: map[string]map[string][]string{"fakeContainer": {"testdevice": {"Dev1", "Dev2"}}},
			requests:  map[string]int{"testdevice": 2},
			want:      map[string][]Hint{"testdevice": {hint(t, true, 0)}},
		},
		"Single device type, less already allocated to container than requested": {
			devices:   map[string]DeviceNodes{"testdevice": onNode(map[string]int{"Dev1": 0, "Dev2": 0, "Dev3": 1, "Dev4": 1})},
			allocated: map[string]map[string][]string{"fakeContainer": {"testdevice": {"Dev1", "Dev2"}}},
			requests:  map[string]int{"testdevice": 4},
			want:      map[string][]Hint{"testdevice": {}},
		},
		"Single device type, more already allocated to container than requested": {
			devices:   map[string]DeviceNodes{"testdevice": onNode(map[string]int{"Dev1": 0, "Dev2": 0, "Dev3": 1, "Dev4": 1})},
			allocated: map[string]map[string][]string{"fakeContainer": {"testdevice": {"Dev1", "Dev2", "Dev3", "Dev4"}}},
			requests:  map[string]int{"testdevice": 2},
			want:      map[string][]Hint{"testdevice": {}},
		},
	}
}

func TestResourceHintsContainerScope(t *testing.T) {
	for name, tc := range commonHintCases(t) {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, hintsFor(tc, false)); diff != "" {
				t.Errorf("hints mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestResourceHintsPodScope runs the common cases and the kubelet's
// getPodScopeTestCases with the pod's allocations and the pod's request.
// (The pod request itself, max of init containers vs sum of app
// containers, is the caller's: here it is given.)
func TestResourceHintsPodScope(t *testing.T) {
	fourDevices := onNode(map[string]int{"Dev1": 0, "Dev2": 0, "Dev3": 1, "Dev4": 1})
	cases := commonHintCases(t)
	maps.Copy(cases, map[string]hintCase{
		// fakeContainer1 asks 2 of testdevice1, fakeContainer2 2 of testdevice2.
		"2 device types, user container only": {
			devices:  map[string]DeviceNodes{"testdevice1": fourDevices, "testdevice2": fourDevices},
			requests: map[string]int{"testdevice1": 2, "testdevice2": 2},
			want: map[string][]Hint{
				"testdevice1": {hint(t, true, 0), hint(t, true, 1), hint(t, false, 0, 1)},
				"testdevice2": {hint(t, true, 0), hint(t, true, 1), hint(t, false, 0, 1)},
			},
		},
		// Init containers ask {1,1} and {1,2}, app containers {1,1} and {1,1}:
		// the pod asks max(1,1+1)=2 of testdevice1 and max(2,1+1)=2 of testdevice2.
		"2 device types, request resources for init containers and user container": {
			devices:  map[string]DeviceNodes{"testdevice1": fourDevices, "testdevice2": fourDevices},
			requests: map[string]int{"testdevice1": 2, "testdevice2": 2},
			want: map[string][]Hint{
				"testdevice1": {hint(t, true, 0), hint(t, true, 1), hint(t, false, 0, 1)},
				"testdevice2": {hint(t, true, 0), hint(t, true, 1), hint(t, false, 0, 1)},
			},
		},
		// Another pod holds one device of each type on each node.
		"2 device types, user container only, optimal on 1 NUMA node, forced cross-NUMA": {
			devices:   map[string]DeviceNodes{"testdevice1": fourDevices, "testdevice2": fourDevices},
			otherPods: map[string][]string{"testdevice1": {"Dev1", "Dev3"}, "testdevice2": {"Dev1", "Dev3"}},
			requests:  map[string]int{"testdevice1": 2, "testdevice2": 2},
			want: map[string][]Hint{
				"testdevice1": {hint(t, false, 0, 1)},
				"testdevice2": {hint(t, false, 0, 1)},
			},
		},
	})
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, hintsFor(tc, true)); diff != "" {
				t.Errorf("hints mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestResourceHintsReusable(t *testing.T) {
	devices := onNode(map[string]int{"a0": 0, "b0": 0, "c1": 1, "d1": 1})
	cases := map[string]struct {
		available, reusable sets.Set[string]
		request             int
		want                []Hint
	}{
		// A reused device pins the mask to its node.
		"reusable device pins the node": {
			available: sets.New("b0", "c1", "d1"),
			reusable:  sets.New("a0"),
			request:   2,
			want:      []Hint{hint(t, true, 0), hint(t, false, 0, 1)},
		},
		"reusable devices count towards the request": {
			available: sets.New[string](),
			reusable:  sets.New("a0", "b0"),
			request:   2,
			want:      []Hint{hint(t, true, 0), hint(t, false, 0, 1)},
		},
		"reusable and available short of the request": {
			available: sets.New("c1"),
			reusable:  sets.New("a0"),
			request:   3,
			want:      []Hint{},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := ResourceHints(HintInput{MachineNodes: twoNodes, Devices: devices, Available: tc.available, Reusable: tc.reusable, Request: tc.request})
			SortHints(got)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("hints mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestGenerateDeviceHintsReusableWithoutMask(t *testing.T) {
	cases := map[string]struct {
		devices DeviceNodes
		want    []Hint
	}{
		// Skipped: it neither constrains the mask nor counts.
		"reusable device without topology": {
			devices: DeviceNodes{"a0": {0}, "r": nil},
			want:    []Hint{hint(t, true, 0)},
		},
		"reusable device unknown to the resource": {
			devices: DeviceNodes{"a0": {0}},
			want:    []Hint{hint(t, true, 0)},
		},
		// Its topology names no node a mask can hold: as in the kubelet,
		// no mask contains it, so nothing qualifies.
		"reusable device on a node outside 0..63": {
			devices: DeviceNodes{"a0": {0}, "r": {99}},
			want:    []Hint{},
		},
		"reusable device on a node the machine lacks": {
			devices: DeviceNodes{"a0": {0}, "r": {5}},
			want:    []Hint{},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := GenerateDeviceHints(twoNodes, tc.devices, sets.New("a0"), sets.New("r"), 1)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("hints mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRegenerateHints(t *testing.T) {
	devices := onNode(map[string]int{"a0": 0, "b0": 0, "c1": 1})
	cases := map[string]struct {
		allocated sets.Set[string]
		request   int
		want      []Hint
	}{
		"same node":          {allocated: sets.New("a0", "b0"), request: 2, want: []Hint{hint(t, true, 0), hint(t, false, 0, 1)}},
		"across nodes":       {allocated: sets.New("a0", "c1"), request: 2, want: []Hint{hint(t, false, 0, 1)}},
		"fewer than request": {allocated: sets.New("a0"), request: 2, want: []Hint{}},
		"more than request":  {allocated: sets.New("a0", "b0", "c1"), request: 2, want: []Hint{}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := RegenerateHints(twoNodes, devices, tc.allocated, tc.request)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("hints mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDeviceNUMANodes(t *testing.T) {
	cases := map[string]struct {
		machine []int
		devices DeviceNodes
		want    []int
	}{
		"collects NUMA nodes from all devices": {
			machine: []int{0, 3, 5, 7},
			devices: DeviceNodes{"a": {3}, "b": {5}},
			want:    []int{3, 5},
		},
		"device without topology is ignored": {
			machine: []int{0, 4},
			devices: DeviceNodes{"a": {4}, "b": nil},
			want:    []int{4},
		},
		"returns empty when no device has topology": {
			machine: nil,
			devices: DeviceNodes{"a": nil, "b": nil},
			want:    nil,
		},
		"unknown NUMA IDs from device plugin are dropped": {
			machine: []int{0, 1},
			devices: DeviceNodes{"a": {0}, "b": {99}, "c": {5}},
			want:    []int{0},
		},
		"device on several nodes": {
			machine: []int{0, 1, 2},
			devices: DeviceNodes{"a": {2, 0}},
			want:    []int{0, 2},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, tc.devices.NUMANodes(tc.machine)); diff != "" {
				t.Errorf("NUMANodes() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestGenerateDeviceTopologyHintsFiltersNUMANodes(t *testing.T) {
	nodes34 := make([]int, 34)
	for i := range nodes34 {
		nodes34[i] = i
	}
	cases := map[string]struct {
		machine             []int
		devices             DeviceNodes
		available, reusable sets.Set[string]
		request             int
		want                []Hint
	}{
		"two node machine, device on one node": {
			machine:   twoNodes,
			devices:   DeviceNodes{"a": {0}},
			available: sets.New("a"),
			request:   1,
			want:      []Hint{hint(t, true, 0)},
		},
		// Iterating all 34 nodes would be 2^34 masks; only the two nodes
		// with devices are considered.
		"large NUMA machine with devices on small subset": {
			machine:   nodes34,
			devices:   DeviceNodes{"gpu0": {0}, "gpu1": {1}},
			available: sets.New("gpu0", "gpu1"),
			request:   1,
			want:      []Hint{hint(t, true, 0), hint(t, true, 1), hint(t, false, 0, 1)},
		},
		"devices span all NUMA nodes": {
			machine:   twoNodes,
			devices:   DeviceNodes{"a": {0}, "b": {1}},
			available: sets.New("a", "b"),
			request:   1,
			want:      []Hint{hint(t, true, 0), hint(t, true, 1), hint(t, false, 0, 1)},
		},
		"reusable device on filtered node": {
			machine:  []int{0, 1, 2, 3},
			devices:  DeviceNodes{"a": {0}},
			reusable: sets.New("a"),
			request:  1,
			want:     []Hint{hint(t, true, 0)},
		},
		"reusable and available on different nodes": {
			machine:   []int{0, 1, 2, 3},
			devices:   DeviceNodes{"a": {0}, "b": {1}},
			available: sets.New("b"),
			reusable:  sets.New("a"),
			request:   2,
			want:      []Hint{hint(t, true, 0, 1)},
		},
		"no device with a known node: all machine nodes are candidates": {
			machine:   twoNodes,
			devices:   DeviceNodes{"a": {9}},
			available: sets.New("a"),
			request:   1,
			want:      []Hint{},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := GenerateDeviceHints(tc.machine, tc.devices, tc.available, tc.reusable, tc.request)
			SortHints(got)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("GenerateDeviceHints() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestGenerateDeviceHintsCountsAllDevicesForPreference(t *testing.T) {
	// Node 0 holds 3 devices, 2 of them unhealthy or allocated (not
	// available); node 1 holds 1. A request for 2 fits on node 0 counting
	// all devices, so the only possible hint {0,1} is not preferred.
	devices := DeviceNodes{"a0": {0}, "b0": {0}, "c0": {0}, "d1": {1}}
	got := GenerateDeviceHints(twoNodes, devices, sets.New("a0", "d1"), nil, 2)
	if diff := cmp.Diff([]Hint{hint(t, false, 0, 1)}, got); diff != "" {
		t.Errorf("GenerateDeviceHints() mismatch (-want +got):\n%s", diff)
	}
}

func TestTopologyHintString(t *testing.T) {
	for h, want := range map[Hint]string{
		{}:                  "any not preferred",
		{Preferred: true}:   "any preferred",
		hint(t, true, 0, 1): "{0,1} preferred",
		hint(t, false, 3):   "{3} not preferred",
	} {
		if got := h.String(); got != want {
			t.Errorf("String() = %q, want %q", got, want)
		}
	}
}

// BenchmarkGenerateDeviceHints generates hints for a resource of 64 devices
// spread over 8 NUMA nodes (255 candidate masks).
func BenchmarkGenerateDeviceHints(b *testing.B) {
	machine := []int{0, 1, 2, 3, 4, 5, 6, 7}
	devices := DeviceNodes{}
	available := sets.New[string]()
	for i := range 64 {
		id := fmt.Sprintf("dev-%02d", i)
		devices[id] = []int{i % 8}
		if i%4 != 0 { // a quarter is allocated
			available.Insert(id)
		}
	}
	for _, request := range []int{1, 4, 16} {
		b.Run(fmt.Sprintf("request=%d", request), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if hints := GenerateDeviceHints(machine, devices, available, nil, request); len(hints) == 0 {
					b.Fatal("no hints")
				}
			}
		})
	}
	b.Run("request=4,reusable=2", func(b *testing.B) {
		reusable := sets.New("dev-00", "dev-08")
		b.ReportAllocs()
		for b.Loop() {
			if hints := GenerateDeviceHints(machine, devices, available, reusable, 4); len(hints) == 0 {
				b.Fatal("no hints")
			}
		}
	})
}
