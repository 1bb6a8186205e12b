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
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kubedevice/kubedevice/internal/nodeagent/dptest"
	"github.com/kubedevice/kubedevice/internal/nodeagent/topology"
)

// devRange returns healthy devices Dev<from>..Dev<to-1> on one NUMA node.
func devRange(from, to int, node int64) []*pluginapi.Device {
	var out []*pluginapi.Device
	for i := from; i < to; i++ {
		out = append(out, numaDevice(fmt.Sprintf("Dev%d", i), node))
	}
	return out
}

func preferredAnswer(ids ...string) func(*pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	return func(*pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
		return &pluginapi.PreferredAllocationResponse{ContainerResponses: []*pluginapi.ContainerPreferredAllocationResponse{{DeviceIDs: ids}}}, nil
	}
}

// The kubelet's TestTopologyAlignedAllocation: with the affinity the
// topology manager chose, aligned devices come first, the plugin's
// preference counts only where aligned, and bogus answers are ignored.
func TestTopologyAlignedAllocation(t *testing.T) {
	cases := []struct {
		name          string
		request       int
		devices       []*pluginapi.Device
		affinity      []int
		preferred     []string // the plugin's answer; nil: no GetPreferredAllocation
		wantPreferred []string
		wantAlignment map[int64]int
	}{
		{
			name:          "Single Request, no alignment",
			request:       1,
			devices:       healthy("Dev1", "Dev2"),
			affinity:      []int{0, 1},
			wantAlignment: map[int64]int{},
		},
		{
			name:          "Request for 1, partial alignment",
			request:       1,
			devices:       []*pluginapi.Device{dptest.Device("Dev1", pluginapi.Healthy), numaDevice("Dev2", 1)},
			affinity:      []int{1},
			wantAlignment: map[int64]int{1: 1},
		},
		{
			name:          "Single Request, socket 0",
			request:       1,
			devices:       []*pluginapi.Device{numaDevice("Dev1", 0), numaDevice("Dev2", 1)},
			affinity:      []int{0},
			wantAlignment: map[int64]int{0: 1},
		},
		{
			name:          "Single Request, socket 1",
			request:       1,
			devices:       []*pluginapi.Device{numaDevice("Dev1", 0), numaDevice("Dev2", 1)},
			affinity:      []int{1},
			wantAlignment: map[int64]int{1: 1},
		},
		{
			name:          "Request for 2, socket 0",
			request:       2,
			devices:       []*pluginapi.Device{numaDevice("Dev1", 0), numaDevice("Dev2", 1), numaDevice("Dev3", 0), numaDevice("Dev4", 1)},
			affinity:      []int{0},
			wantAlignment: map[int64]int{0: 2},
		},
		{
			name:          "Request for 2, socket 1",
			request:       2,
			devices:       []*pluginapi.Device{numaDevice("Dev1", 0), numaDevice("Dev2", 1), numaDevice("Dev3", 0), numaDevice("Dev4", 1)},
			affinity:      []int{1},
			wantAlignment: map[int64]int{1: 2},
		},
		{
			name:    "Request for 4, unsatisfiable, prefer socket 0",
			request: 4,
			devices: []*pluginapi.Device{
				numaDevice("Dev1", 0), numaDevice("Dev2", 1), numaDevice("Dev3", 0),
				numaDevice("Dev4", 1), numaDevice("Dev5", 0), numaDevice("Dev6", 1),
			},
			affinity:      []int{0},
			wantAlignment: map[int64]int{0: 3, 1: 1},
		},
		{
			name:    "Request for 4, unsatisfiable, prefer socket 1",
			request: 4,
			devices: []*pluginapi.Device{
				numaDevice("Dev1", 0), numaDevice("Dev2", 1), numaDevice("Dev3", 0),
				numaDevice("Dev4", 1), numaDevice("Dev5", 0), numaDevice("Dev6", 1),
			},
			affinity:      []int{1},
			wantAlignment: map[int64]int{0: 1, 1: 3},
		},
		{
			name:    "Request for 4, multisocket",
			request: 4,
			devices: []*pluginapi.Device{
				numaDevice("Dev1", 0), numaDevice("Dev2", 1), numaDevice("Dev3", 2), numaDevice("Dev4", 3),
				numaDevice("Dev5", 0), numaDevice("Dev6", 1), numaDevice("Dev7", 2), numaDevice("Dev8", 3),
			},
			affinity:      []int{1, 3},
			wantAlignment: map[int64]int{1: 2, 3: 2},
		},
		{
			name:          "Request for 5, socket 0, preferred aligned accepted",
			request:       5,
			devices:       append(devRange(0, 100, 0), devRange(100, 200, 1)...),
			affinity:      []int{0},
			preferred:     []string{"Dev0", "Dev19", "Dev83", "Dev42", "Dev77"},
			wantPreferred: []string{"Dev0", "Dev19", "Dev83", "Dev42", "Dev77"},
			wantAlignment: map[int64]int{0: 5},
		},
		{
			name:          "Request for 5, socket 0, preferred aligned accepted, unaligned ignored",
			request:       5,
			devices:       append(devRange(0, 100, 0), devRange(100, 200, 1)...),
			affinity:      []int{0},
			preferred:     []string{"Dev0", "Dev19", "Dev83", "Dev150", "Dev186"},
			wantPreferred: []string{"Dev0", "Dev19", "Dev83"},
			wantAlignment: map[int64]int{0: 5},
		},
		{
			name:          "Request for 5, socket 1, preferred aligned accepted, bogus ignored",
			request:       5,
			devices:       devRange(0, 100, 1),
			affinity:      []int{1},
			preferred:     []string{"Dev0", "Dev19", "Dev83", "bogus0", "bogus1"},
			wantPreferred: []string{"Dev0", "Dev19", "Dev83"},
			wantAlignment: map[int64]int{1: 5},
		},
		{
			name:          "Request for 5, multisocket, preferred accepted",
			request:       5,
			devices:       append(devRange(0, 3, 0), devRange(3, 100, 1)...),
			affinity:      []int{0},
			preferred:     []string{"Dev0", "Dev1", "Dev2", "Dev42", "Dev83"},
			wantPreferred: []string{"Dev0", "Dev1", "Dev2", "Dev42", "Dev83"},
			wantAlignment: map[int64]int{0: 3, 1: 2},
		},
		{
			name:          "Request for 5, multisocket, preferred unaligned accepted, bogus ignored",
			request:       5,
			devices:       append(devRange(0, 3, 0), devRange(3, 100, 1)...),
			affinity:      []int{0},
			preferred:     []string{"Dev0", "Dev1", "Dev2", "Dev42", "bogus0"},
			wantPreferred: []string{"Dev0", "Dev1", "Dev2", "Dev42"},
			wantAlignment: map[int64]int{0: 3, 1: 2},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tm := newAllocManager(t)
			p := startPlugin(t, tm, "r.sock", res1, false, tc.preferred != nil, tc.devices...)
			if tc.preferred != nil {
				p.SetGetPreferredAllocationFunc(preferredAnswer(tc.preferred...))
			}
			pod := makePod("p").container("c", req{res1, int64(tc.request)}).obj()
			if err := tm.allocateResourceWith(tm.ctx, pod, "c", res1, tc.request, mask(t, tc.affinity...)); err != nil {
				t.Fatalf("allocating: %v", err)
			}
			got := tm.containerDevices(pod, "c", res1)
			if got.Len() != tc.request {
				t.Errorf("allocated %d devices, want %d: %v", got.Len(), tc.request, sets.List(got))
			}
			if !got.HasAll(tc.wantPreferred...) {
				t.Errorf("allocated %v, want it to include the preferred %v", sets.List(got), tc.wantPreferred)
			}
			numa := map[string]int64{}
			for _, d := range tc.devices {
				if nodes := d.GetTopology().GetNodes(); len(nodes) > 0 {
					numa[d.GetID()] = nodes[0].GetID()
				}
			}
			alignment := map[int64]int{}
			for id := range got {
				if n, ok := numa[id]; ok {
					alignment[n]++
				}
			}
			if diff := cmp.Diff(tc.wantAlignment, alignment); diff != "" {
				t.Errorf("devices per NUMA node (-want +got):\n%s", diff)
			}
		})
	}
}

// The kubelet's TestGetPreferredAllocationParameters, with the must-include
// check the kubelet's version forgets: exactly what the plugin receives.
// Reusable devices are held by the pod's regular init container, the other
// allocated devices by another pod.
func TestGetPreferredAllocationParameters(t *testing.T) {
	cases := []struct {
		name            string
		request         int
		devices         []*pluginapi.Device
		allocated       []string
		reusable        []string
		affinity        []int
		wantAvailable   []string
		wantMustInclude []string
		wantSize        int32
	}{
		{
			name:          "Request for 1, socket 0, 0 already allocated, 0 reusable",
			request:       1,
			devices:       devRange(0, 4, 0),
			affinity:      []int{0},
			wantAvailable: []string{"Dev0", "Dev1", "Dev2", "Dev3"},
			wantSize:      1,
		},
		{
			name:            "Request for 4, socket 0, 2 already allocated, 2 reusable",
			request:         4,
			devices:         devRange(0, 8, 0),
			allocated:       []string{"Dev0", "Dev5"},
			reusable:        []string{"Dev0", "Dev5"},
			affinity:        []int{0},
			wantAvailable:   []string{"Dev0", "Dev1", "Dev2", "Dev3", "Dev4", "Dev5", "Dev6", "Dev7"},
			wantMustInclude: []string{"Dev0", "Dev5"},
			wantSize:        4,
		},
		{
			name:            "Request for 4, socket 0, 4 already allocated, 2 reusable",
			request:         4,
			devices:         devRange(0, 8, 0),
			allocated:       []string{"Dev0", "Dev5", "Dev4", "Dev1"},
			reusable:        []string{"Dev0", "Dev5"},
			affinity:        []int{0},
			wantAvailable:   []string{"Dev0", "Dev2", "Dev3", "Dev5", "Dev6", "Dev7"},
			wantMustInclude: []string{"Dev0", "Dev5"},
			wantSize:        4,
		},
		{
			name:            "Request for 6, multisocket, 2 already allocated, 2 reusable",
			request:         6,
			devices:         append(devRange(0, 4, 0), devRange(4, 8, 1)...),
			allocated:       []string{"Dev1", "Dev6"},
			reusable:        []string{"Dev1", "Dev6"},
			affinity:        []int{0},
			wantAvailable:   []string{"Dev0", "Dev1", "Dev2", "Dev3", "Dev4", "Dev5", "Dev6", "Dev7"},
			wantMustInclude: []string{"Dev0", "Dev1", "Dev2", "Dev3", "Dev6"},
			wantSize:        6,
		},
		{
			name:            "Request for 6, multisocket, 4 already allocated, 2 reusable",
			request:         6,
			devices:         append(devRange(0, 4, 0), devRange(4, 8, 1)...),
			allocated:       []string{"Dev0", "Dev1", "Dev6", "Dev7"},
			reusable:        []string{"Dev1", "Dev6"},
			affinity:        []int{0},
			wantAvailable:   []string{"Dev1", "Dev2", "Dev3", "Dev4", "Dev5", "Dev6"},
			wantMustInclude: []string{"Dev1", "Dev2", "Dev3", "Dev6"},
			wantSize:        6,
		},
	}
	type request struct {
		Available, MustInclude []string
		Size                   int32
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tm := newAllocManager(t)
			p := startPlugin(t, tm, "r.sock", res1, false, true, tc.devices...)
			pod := makePod("p").init("init", req{res1, int64(len(tc.reusable))}).container("app", req{res1, int64(tc.request)}).obj()
			if len(tc.reusable) > 0 {
				tm.hold(t, pod, "init", res1, tc.reusable...)
			}
			if others := sets.New(tc.allocated...).Difference(sets.New(tc.reusable...)); others.Len() > 0 {
				tm.hold(t, makePod("other").obj(), "c", res1, sets.List(others)...)
			}
			if err := tm.allocateResourceWith(tm.ctx, pod, "app", res1, tc.request, mask(t, tc.affinity...)); err != nil {
				t.Fatalf("allocating: %v", err)
			}
			var got []request
			for _, r := range p.preferredCalls() {
				got = append(got, request{
					Available:   sets.List(sets.New(r.GetAvailableDeviceIDs()...)),
					MustInclude: sets.List(sets.New(r.GetMustIncludeDeviceIDs()...)),
					Size:        r.GetAllocationSize(),
				})
			}
			want := []request{{Available: tc.wantAvailable, MustInclude: tc.wantMustInclude, Size: tc.wantSize}}
			if diff := cmp.Diff(want, got, cmpEmpty); diff != "" {
				t.Errorf("GetPreferredAllocation requests (-want +got):\n%s", diff)
			}
			if got := tm.containerDevices(pod, "app", res1); got.Len() != tc.request || !got.IsSuperset(sets.New(tc.reusable...)) {
				t.Errorf("allocated %v, want %d devices including the reusable %v", sets.List(got), tc.request, tc.reusable)
			}
		})
	}
}

// hintCase is the kubelet's topologyHintTestCase: devices per resource (all
// healthy), devices held per pod UID, container and resource, and the hints
// expected.
type hintCase struct {
	name      string
	pod       *v1.Pod
	devices   map[string][]*pluginapi.Device
	allocated map[string]map[string]map[string][]string
	want      map[string][]topology.Hint
}

const (
	testDevice1   = "example.com/testdevice1"
	testDevice2   = "example.com/testdevice2"
	notRegistered = "example.com/notregistered"
)

func hints(t testing.TB, pairs ...any) []topology.Hint {
	t.Helper()
	out := []topology.Hint{}
	for i := 0; i < len(pairs); i += 2 {
		out = append(out, topology.Hint{NUMANodeAffinity: mask(t, pairs[i].([]int)...), Preferred: pairs[i+1].(bool)})
	}
	return out
}

func fakePodWith(reqs ...req) *v1.Pod {
	return makePod("fakePod").uid("fakePod").container("fakeContainer", reqs...).obj()
}

// commonHintCases are the kubelet's getCommonTestCases.
func commonHintCases(t testing.TB) []hintCase {
	twoPerSocket := []*pluginapi.Device{numaDevice("Dev1", 0), numaDevice("Dev2", 1), numaDevice("Dev3", 0), numaDevice("Dev4", 1)}
	return []hintCase{
		{
			name:    "Single Request, no alignment",
			pod:     fakePodWith(req{testDevice1, 1}),
			devices: map[string][]*pluginapi.Device{testDevice1: healthy("Dev1", "Dev2", "Dev3", "Dev4")},
			want:    map[string][]topology.Hint{testDevice1: nil},
		},
		{
			name:    "Single Request, only one with alignment",
			pod:     fakePodWith(req{testDevice1, 1}),
			devices: map[string][]*pluginapi.Device{testDevice1: {dptest.Device("Dev1", pluginapi.Healthy), numaDevice("Dev2", 1)}},
			want:    map[string][]topology.Hint{testDevice1: hints(t, []int{1}, true)},
		},
		{
			name:    "Single Request, one device per socket",
			pod:     fakePodWith(req{testDevice1, 1}),
			devices: map[string][]*pluginapi.Device{testDevice1: {numaDevice("Dev1", 0), numaDevice("Dev2", 1)}},
			want:    map[string][]topology.Hint{testDevice1: hints(t, []int{0}, true, []int{1}, true, []int{0, 1}, false)},
		},
		{
			name:    "Request for 2, one device per socket",
			pod:     fakePodWith(req{testDevice1, 2}),
			devices: map[string][]*pluginapi.Device{testDevice1: {numaDevice("Dev1", 0), numaDevice("Dev2", 1)}},
			want:    map[string][]topology.Hint{testDevice1: hints(t, []int{0, 1}, true)},
		},
		{
			name:    "Request for 2, 2 devices per socket",
			pod:     fakePodWith(req{testDevice1, 2}),
			devices: map[string][]*pluginapi.Device{testDevice1: twoPerSocket},
			want:    map[string][]topology.Hint{testDevice1: hints(t, []int{0}, true, []int{1}, true, []int{0, 1}, false)},
		},
		{
			name:      "Request for 2, optimal on 1 NUMA node, forced cross-NUMA",
			pod:       fakePodWith(req{testDevice1, 2}),
			devices:   map[string][]*pluginapi.Device{testDevice1: twoPerSocket},
			allocated: map[string]map[string]map[string][]string{"fakePod": {"fakeOtherContainer": {testDevice1: {"Dev1", "Dev2"}}}},
			want:      map[string][]topology.Hint{testDevice1: hints(t, []int{0, 1}, false)},
		},
		{
			name: "2 device types, mixed configuration",
			pod:  fakePodWith(req{testDevice1, 2}, req{testDevice2, 1}),
			devices: map[string][]*pluginapi.Device{
				testDevice1: twoPerSocket,
				testDevice2: {numaDevice("Dev1", 0)},
			},
			want: map[string][]topology.Hint{
				testDevice1: hints(t, []int{0}, true, []int{1}, true, []int{0, 1}, false),
				testDevice2: hints(t, []int{0}, true),
			},
		},
		{
			name:    "Single device type, more requested than available",
			pod:     fakePodWith(req{testDevice1, 6}),
			devices: map[string][]*pluginapi.Device{testDevice1: {numaDevice("Dev1", 0), numaDevice("Dev2", 0), numaDevice("Dev3", 1), numaDevice("Dev4", 1)}},
			want:    map[string][]topology.Hint{testDevice1: {}},
		},
		{
			name:      "Single device type, all already allocated to container",
			pod:       fakePodWith(req{testDevice1, 2}),
			devices:   map[string][]*pluginapi.Device{testDevice1: {numaDevice("Dev1", 0), numaDevice("Dev2", 0)}},
			allocated: map[string]map[string]map[string][]string{"fakePod": {"fakeContainer": {testDevice1: {"Dev1", "Dev2"}}}},
			want:      map[string][]topology.Hint{testDevice1: hints(t, []int{0}, true)},
		},
		{
			name:      "Single device type, less already allocated to container than requested",
			pod:       fakePodWith(req{testDevice1, 4}),
			devices:   map[string][]*pluginapi.Device{testDevice1: {numaDevice("Dev1", 0), numaDevice("Dev2", 0), numaDevice("Dev3", 1), numaDevice("Dev4", 1)}},
			allocated: map[string]map[string]map[string][]string{"fakePod": {"fakeContainer": {testDevice1: {"Dev1", "Dev2"}}}},
			want:      map[string][]topology.Hint{testDevice1: {}},
		},
		{
			name:      "Single device type, more already allocated to container than requested",
			pod:       fakePodWith(req{testDevice1, 2}),
			devices:   map[string][]*pluginapi.Device{testDevice1: {numaDevice("Dev1", 0), numaDevice("Dev2", 0), numaDevice("Dev3", 1), numaDevice("Dev4", 1)}},
			allocated: map[string]map[string]map[string][]string{"fakePod": {"fakeContainer": {testDevice1: {"Dev1", "Dev2", "Dev3", "Dev4"}}}},
			want:      map[string][]topology.Hint{testDevice1: {}},
		},
	}
}

// podScopeHintCases are the kubelet's getPodScopeTestCases.
func podScopeHintCases(t testing.TB) []hintCase {
	twoPerSocket := []*pluginapi.Device{numaDevice("Dev1", 0), numaDevice("Dev2", 0), numaDevice("Dev3", 1), numaDevice("Dev4", 1)}
	devices := map[string][]*pluginapi.Device{testDevice1: twoPerSocket, testDevice2: twoPerSocket}
	aligned := hints(t, []int{0}, true, []int{1}, true, []int{0, 1}, false)
	return []hintCase{
		{
			name: "2 device types, user container only",
			pod: makePod("fakePod").uid("fakePod").
				container("fakeContainer1", req{testDevice1, 2}).
				container("fakeContainer2", req{testDevice2, 2}).
				container("fakeContainer3", req{notRegistered, 2}).obj(),
			devices: devices,
			want:    map[string][]topology.Hint{testDevice1: aligned, testDevice2: aligned},
		},
		{
			name: "2 device types, request resources for init containers and user container",
			pod: makePod("fakePod").uid("fakePod").
				init("init1", req{testDevice1, 1}, req{testDevice2, 1}).
				init("init2", req{testDevice1, 1}, req{testDevice2, 2}).
				container("fakeContainer1", req{testDevice1, 1}, req{testDevice2, 1}).
				container("fakeContainer2", req{testDevice1, 1}, req{testDevice2, 1}).
				container("fakeContainer3", req{notRegistered, 1}).obj(),
			devices: devices,
			want:    map[string][]topology.Hint{testDevice1: aligned, testDevice2: aligned},
		},
		{
			name: "2 device types, user container only, optimal on 1 NUMA node, forced cross-NUMA",
			pod: makePod("fakePod").uid("fakePod").
				container("fakeContainer1", req{testDevice1, 1}, req{testDevice2, 1}).
				container("fakeContainer2", req{testDevice1, 1}, req{testDevice2, 1}).
				container("fakeContainer3", req{notRegistered, 1}).obj(),
			devices: devices,
			allocated: map[string]map[string]map[string][]string{
				"fakeOtherPod": {"fakeOtherContainer": {testDevice1: {"Dev1", "Dev3"}, testDevice2: {"Dev1", "Dev3"}}},
			},
			want: map[string][]topology.Hint{
				testDevice1: hints(t, []int{0, 1}, false),
				testDevice2: hints(t, []int{0, 1}, false),
			},
		},
	}
}

// setupHintCase registers tc's resources on a two-node machine and commits
// its allocations.
func setupHintCase(t *testing.T, tc hintCase) *testManager {
	t.Helper()
	tm := newAllocManager(t, withNUMANodes(0, 1))
	i := 0
	for r, devs := range tc.devices {
		startPlugin(t, tm, fmt.Sprintf("p%d.sock", i), r, false, false, devs...)
		i++
	}
	for uid, containers := range tc.allocated {
		pod := makePod(uid).uid(uid).obj()
		for c, byResource := range containers {
			for r, ids := range byResource {
				tm.hold(t, pod, c, r, ids...)
			}
		}
	}
	return tm
}

// The kubelet's TestGetTopologyHints, through the manager.
func TestGetTopologyHints(t *testing.T) {
	for _, tc := range commonHintCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			tm := setupHintCase(t, tc)
			got := tm.topologyHints(tc.pod, &tc.pod.Spec.Containers[0])
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("hints (-want +got):\n%s", diff)
			}
		})
	}
}

// The kubelet's TestGetPodTopologyHints, through the manager: unregistered
// resources give no hint.
func TestGetPodTopologyHints(t *testing.T) {
	for _, tc := range append(commonHintCases(t), podScopeHintCases(t)...) {
		t.Run(tc.name, func(t *testing.T) {
			tm := setupHintCase(t, tc)
			if diff := cmp.Diff(tc.want, tm.podTopologyHints(tc.pod)); diff != "" {
				t.Errorf("hints (-want +got):\n%s", diff)
			}
		})
	}
}

// The kubelet's TestGetPodDeviceRequest: the pod-level request is the pod's
// effective limit.
func TestPodRequests(t *testing.T) {
	cases := []struct {
		name string
		pod  *v1.Pod
		want []deviceRequest
	}{
		{name: "empty pod", pod: makePod("p").obj()},
		{
			name: "init containers request device plugin resource",
			pod:  makePod("p").init("i1", req{res1, 2}).init("i2", req{res1, 4}).obj(),
			want: []deviceRequest{{res1, 4}},
		},
		{
			name: "init containers and user containers request the same amount",
			pod:  makePod("p").init("i1", req{res1, 2}).init("i2", req{res1, 3}).container("c1", req{res1, 1}).container("c2", req{res1, 1}).obj(),
			want: []deviceRequest{{res1, 3}},
		},
		{
			name: "user containers request more than init containers",
			pod:  makePod("p").init("i1", req{res1, 2}).init("i2", req{res1, 2}).container("c1", req{res1, 3}).container("c2", req{res1, 3}).obj(),
			want: []deviceRequest{{res1, 6}},
		},
		{
			name: "sidecars add to the app containers",
			pod:  makePod("p").sidecar("s", req{res1, 1}).init("i", req{res1, 2}).container("c", req{res1, 2}).obj(),
			want: []deviceRequest{{res1, 3}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, podRequests(tc.pod), cmp.AllowUnexported(deviceRequest{})); diff != "" {
				t.Errorf("podRequests (-want +got):\n%s", diff)
			}
		})
	}
}

// The topology policy decides the affinity at allocation: best-effort
// aligns when it can and admits anyway, restricted and single-numa-node
// refuse an unaligned allocation without reserving anything, pod scope gives
// every container of the pod the same NUMA node, none does no alignment.
func TestTopologyPolicyAllocation(t *testing.T) {
	devs := []*pluginapi.Device{numaDevice("a0", 0), numaDevice("a1", 1), numaDevice("b0", 0), numaDevice("b1", 1)}
	numaOf := map[string]int{"a0": 0, "b0": 0, "a1": 1, "b1": 1}
	nodesOf := func(ids sets.Set[string]) sets.Set[int] {
		out := sets.New[int]()
		for id := range ids {
			out.Insert(numaOf[id])
		}
		return out
	}
	pod2 := makePod("p").container("c", req{res1, 2}).obj()

	t.Run("best-effort aligns", func(t *testing.T) {
		tm := newAllocManager(t, withNUMANodes(0, 1), withTopology(topology.PolicyBestEffort, topology.ScopeContainer))
		startPlugin(t, tm, "r.sock", res1, false, false, devs...)
		for _, name := range []string{"p", "q"} {
			pod := makePod(name).container("c", req{res1, 2}).obj()
			if err := tm.AllocatePod(tm.ctx, pod); err != nil {
				t.Fatal(err)
			}
			if got := nodesOf(tm.containerDevices(pod, "c", res1)); got.Len() != 1 {
				t.Errorf("pod %s got devices on NUMA nodes %v, want one node", name, sets.List(got))
			}
		}
	})
	for _, policy := range []topology.Policy{topology.PolicyBestEffort, topology.PolicyRestricted, topology.PolicySingleNUMANode, topology.PolicyNone} {
		t.Run(string(policy)+" when only cross-NUMA is left", func(t *testing.T) {
			tm := newAllocManager(t, withNUMANodes(0, 1), withTopology(policy, topology.ScopeContainer))
			startPlugin(t, tm, "r.sock", res1, false, false, devs...)
			tm.hold(t, makePod("other").obj(), "c", res1, "a0", "a1")
			err := tm.AllocatePod(tm.ctx, pod2)
			if policy == topology.PolicyBestEffort || policy == topology.PolicyNone {
				if err != nil {
					t.Fatalf("AllocatePod = %v", err)
				}
				return
			}
			want := &errorView{Message: "Resources cannot be allocated with Topology locality", Reason: AllocationTopologyAffinityError}
			if diff := cmp.Diff(want, viewError(err)); diff != "" {
				t.Errorf("AllocatePod error (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(sets.New("a0", "a1"), tm.inUse(res1)); diff != "" {
				t.Errorf("devices in use (-want +got):\n%s", diff)
			}
		})
	}
	t.Run("pod scope", func(t *testing.T) {
		tm := newAllocManager(t, withNUMANodes(0, 1), withTopology(topology.PolicySingleNUMANode, topology.ScopePod))
		startPlugin(t, tm, "r1.sock", res1, false, false, devs...)
		startPlugin(t, tm, "r2.sock", res2, false, false, devs...)
		tm.hold(t, makePod("other").obj(), "c", res1, "a0")
		pod := makePod("p").container("c1", req{res1, 1}, req{res2, 1}).container("c2", req{res1, 1}, req{res2, 1}).obj()
		if err := tm.AllocatePod(tm.ctx, pod); err != nil {
			t.Fatal(err)
		}
		all := sets.New[string]()
		for _, c := range []string{"c1", "c2"} {
			for _, r := range []string{res1, res2} {
				all = all.Union(tm.containerDevices(pod, c, r))
			}
		}
		// NUMA node 0 has one res1 device left, node 1 two: the pod goes to 1.
		if diff := cmp.Diff(sets.New(1), nodesOf(all)); diff != "" {
			t.Errorf("NUMA nodes of the pod's devices (-want +got):\n%s", diff)
		}
	})
}

// topologyHints is what the allocation path computes for a container's
// topology admission (container scope).
func (tm *testManager) topologyHints(pod *v1.Pod, container *v1.Container) map[string][]topology.Hint {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	return tm.containerHintsLocked(pod, container)
}

// podTopologyHints is what the allocation path computes for a pod's
// topology admission (pod scope).
func (tm *testManager) podTopologyHints(pod *v1.Pod) map[string][]topology.Hint {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	return tm.podHintsLocked(pod)
}
