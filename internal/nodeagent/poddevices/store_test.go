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
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/util/sets"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

const (
	res1 = "domain1.com/resource1"
	res2 = "domain2.com/resource2"
)

// TestPodDevicesReservationLifecycle walks one store through the transaction lifecycle and checks
// every view after every step: reservations are used devices but invisible to the committed views
// and to garbage collection.
func TestPodDevicesReservationLifecycle(t *testing.T) {
	s := New()
	resp := newResp().Env("GOPHER", "1").Obj()
	steps := []struct {
		name    string
		op      func() error
		wantErr error
		want    view
	}{
		{
			name: "reserve is used but not committed",
			op:   func() error { return s.Reserve("pod1", "c1", res1, "d1", "d2") },
			want: view{Used: map[string][]string{res1: {"d1", "d2"}}, Committed: map[string][]string{}},
		},
		{
			name:    "another pod cannot reserve a reserved device",
			op:      func() error { return s.Reserve("pod2", "c1", res1, "d2") },
			wantErr: ErrDeviceInUse,
			want:    view{Used: map[string][]string{res1: {"d1", "d2"}}, Committed: map[string][]string{}},
		},
		{
			name: "the same ID of another resource is another device",
			op:   func() error { return s.Reserve("pod2", "c1", res2, "d2") },
			want: view{Used: map[string][]string{res1: {"d1", "d2"}, res2: {"d2"}}, Committed: map[string][]string{}},
		},
		{
			name: "rollback frees only that reservation",
			op:   func() error { s.Rollback("pod2", "c1", res2); return nil },
			want: view{Used: map[string][]string{res1: {"d1", "d2"}}, Committed: map[string][]string{}},
		},
		{
			name: "garbage collection of the pod keeps its reservation",
			op: func() error {
				if n := s.Delete("pod1"); n != 0 {
					t.Errorf("Delete removed %d commits, want 0", n)
				}
				return nil
			},
			want: view{Used: map[string][]string{res1: {"d1", "d2"}}, Committed: map[string][]string{}},
		},
		{
			name: "reserve again adds to the reservation",
			op:   func() error { return s.Reserve("pod1", "c1", res1, "d2", "d3") },
			want: view{Used: map[string][]string{res1: {"d1", "d2", "d3"}}, Committed: map[string][]string{}},
		},
		{
			name: "commit makes the devices visible everywhere and frees the reserved rest",
			op: func() error {
				return s.Commit(podRef("pod1"), "c1", res1, map[int64][]string{0: {"d1"}, 1: {"d2"}}, resp)
			},
			want: view{
				Used:      map[string][]string{res1: {"d1", "d2"}},
				Committed: map[string][]string{"pod1/c1/" + res1: {"d1", "d2"}},
				Pods:      []string{"pod1"},
			},
		},
		{
			name: "reserve on top of a commit for another container",
			op:   func() error { return s.Reserve("pod1", "c2", res1, "d3", "d4") },
			want: view{
				Used:      map[string][]string{res1: {"d1", "d2", "d3", "d4"}},
				Committed: map[string][]string{"pod1/c1/" + res1: {"d1", "d2"}},
				Pods:      []string{"pod1"},
			},
		},
		{
			name: "rollback restores the state before the reservation",
			op:   func() error { s.Rollback("pod1", "c2", res1); return nil },
			want: view{
				Used:      map[string][]string{res1: {"d1", "d2"}},
				Committed: map[string][]string{"pod1/c1/" + res1: {"d1", "d2"}},
				Pods:      []string{"pod1"},
			},
		},
		{
			name: "reserve for another container again",
			op:   func() error { return s.Reserve("pod1", "c2", res1, "d3") },
			want: view{
				Used:      map[string][]string{res1: {"d1", "d2", "d3"}},
				Committed: map[string][]string{"pod1/c1/" + res1: {"d1", "d2"}},
				Pods:      []string{"pod1"},
			},
		},
		{
			name: "garbage collection removes the commit and keeps the reservation",
			op: func() error {
				if n := s.Delete("pod1", "unknown"); n != 1 {
					t.Errorf("Delete removed %d commits, want 1", n)
				}
				return nil
			},
			want: view{Used: map[string][]string{res1: {"d3"}}, Committed: map[string][]string{}},
		},
		{
			name: "the reservation still commits after garbage collection",
			op: func() error {
				return s.Commit(podRef("pod1"), "c2", res1, map[int64][]string{NodeWithoutTopology: {"d3"}}, resp)
			},
			want: view{
				Used:      map[string][]string{res1: {"d3"}},
				Committed: map[string][]string{"pod1/c2/" + res1: {"d3"}},
				Pods:      []string{"pod1"},
			},
		},
		{
			name: "release undoes a commit",
			op: func() error {
				if !s.Release("pod1", "c2", res1) {
					t.Errorf("Release found nothing")
				}
				return nil
			},
			want: view{Used: map[string][]string{}, Committed: map[string][]string{}},
		},
	}
	for _, step := range steps {
		err := step.op()
		if !errors.Is(err, step.wantErr) {
			t.Fatalf("%s: error %v, want %v", step.name, err, step.wantErr)
		}
		if diff := cmp.Diff(step.want, viewOf(s)); diff != "" {
			t.Fatalf("%s: view (-want +got):\n%s", step.name, diff)
		}
		for _, uid := range []string{"pod1", "pod2"} {
			if got, want := s.HasPod(uid), sets.New(step.want.Pods...).Has(uid); got != want {
				t.Errorf("%s: HasPod(%s) = %t, want %t", step.name, uid, got, want)
			}
		}
		checkInvariants(t, s)
	}
	if len(s.pods) != 0 {
		t.Errorf("store not empty at the end: %v", s.pods)
	}
}

// TestReservationsAreInvisibleToCommittedViews checks every committed view of a container that
// holds only a reservation.
func TestReservationsAreInvisibleToCommittedViews(t *testing.T) {
	s := New()
	if err := s.Reserve("pod1", "c1", res1, "d1"); err != nil {
		t.Fatal(err)
	}
	if got := s.ContainerDevices("pod1", "c1", res1); got != nil {
		t.Errorf("ContainerDevices = %v, want nil", got)
	}
	if got := s.PodDevices("pod1", res1); got != nil {
		t.Errorf("PodDevices = %v, want nil", got)
	}
	if got := s.GetContainerDevices("pod1", "c1"); got != nil {
		t.Errorf("GetContainerDevices = %v, want nil", got)
	}
	if pod, c, ok := s.PodAndContainerForDevice(res1, "d1"); ok {
		t.Errorf("PodAndContainerForDevice = %s, %s, want not found", pod, c)
	}
	if opts, conflicts := s.RunContainerOptions("pod1", "c1"); opts != nil || conflicts != nil {
		t.Errorf("RunContainerOptions = %v, %v, want nil", opts, conflicts)
	}
	reuse := map[string]sets.Set[string]{}
	s.AddContainerAllocatedResources("pod1", "c1", reuse)
	if len(reuse) != 0 {
		t.Errorf("AddContainerAllocatedResources added %v", reuse)
	}
	if got := s.Entries(); got != nil {
		t.Errorf("Entries = %v, want nil", got)
	}
	if s.Release("pod1", "c1", res1) {
		t.Errorf("Release of a reservation reported a commit")
	}
	if diff := cmp.Diff(map[string]sets.Set[string]{res1: sets.New("d1")}, s.Devices()); diff != "" {
		t.Errorf("Devices (-want +got):\n%s", diff)
	}
}

func TestReserve(t *testing.T) {
	testCases := map[string]struct {
		pod, container string
		ids            []string
		wantErr        error
		wantUsed       []string
	}{
		"free devices": {
			pod: "pod2", container: "c1", ids: []string{"d5", "d6"},
			wantUsed: []string{"d1", "d2", "d3", "d5", "d6"},
		},
		"nothing to reserve": {
			pod: "pod2", container: "c1",
			wantUsed: []string{"d1", "d2", "d3"},
		},
		"duplicate IDs in one call": {
			pod: "pod2", container: "c1", ids: []string{"d5", "d5"},
			wantUsed: []string{"d1", "d2", "d3", "d5"},
		},
		"device committed to another pod, nothing reserved": {
			pod: "pod2", container: "c1", ids: []string{"d5", "d1"},
			wantErr:  ErrDeviceInUse,
			wantUsed: []string{"d1", "d2", "d3"},
		},
		"device reserved by another pod, nothing reserved": {
			pod: "pod2", container: "c1", ids: []string{"d5", "d3"},
			wantErr:  ErrDeviceInUse,
			wantUsed: []string{"d1", "d2", "d3"},
		},
		"device committed to another container of the same pod (reuse)": {
			pod: "pod1", container: "c9", ids: []string{"d1"},
			wantUsed: []string{"d1", "d2", "d3"},
		},
		"device committed to the same container": {
			pod: "pod1", container: "c1", ids: []string{"d1", "d4"},
			wantUsed: []string{"d1", "d2", "d3", "d4"},
		},
		"empty device ID": {
			pod: "pod2", container: "c1", ids: []string{"d5", ""},
			wantErr:  ErrInvalidAllocation,
			wantUsed: []string{"d1", "d2", "d3"},
		},
	}
	for name, tc := range testCases {
		t.Run(name, func(t *testing.T) {
			s := New()
			allocate(t, s, "pod1", "c1", res1, map[int64][]string{0: {"d1", "d2"}}, newResp().Obj())
			if err := s.Reserve("pod3", "c1", res1, "d3"); err != nil {
				t.Fatal(err)
			}
			err := s.Reserve(tc.pod, tc.container, res1, tc.ids...)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Reserve error %v, want %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.wantUsed, sets.List(s.Devices()[res1])); diff != "" {
				t.Errorf("used devices (-want +got):\n%s", diff)
			}
			checkInvariants(t, s)
		})
	}
}

func TestCommitErrorsChangeNothing(t *testing.T) {
	testCases := map[string]struct {
		container string
		perNUMA   map[int64][]string
		resp      *pluginapi.ContainerAllocateResponse
		wantErr   error
	}{
		"nil response": {
			container: "c1", perNUMA: map[int64][]string{0: {"d1"}},
			wantErr: ErrInvalidAllocation,
		},
		"no devices": {
			container: "c1", resp: newResp().Obj(),
			wantErr: ErrInvalidAllocation,
		},
		"only empty device lists": {
			container: "c1", perNUMA: map[int64][]string{0: {}, 1: nil}, resp: newResp().Obj(),
			wantErr: ErrInvalidAllocation,
		},
		"empty device ID": {
			container: "c1", perNUMA: map[int64][]string{0: {"d1", ""}}, resp: newResp().Obj(),
			wantErr: ErrInvalidAllocation,
		},
		"device not reserved": {
			container: "c1", perNUMA: map[int64][]string{0: {"d1"}, 1: {"d9"}}, resp: newResp().Obj(),
			wantErr: ErrNotReserved,
		},
		"reservation of another container": {
			container: "c2", perNUMA: map[int64][]string{0: {"d1"}}, resp: newResp().Obj(),
			wantErr: ErrNotReserved,
		},
		"response the checkpoint cannot encode": {
			container: "c1", perNUMA: map[int64][]string{0: {"d1"}}, resp: newResp().Env("BAD", "\xff").Obj(),
			wantErr: ErrInvalidAllocation,
		},
	}
	for name, tc := range testCases {
		t.Run(name, func(t *testing.T) {
			s := New()
			if err := s.Reserve("pod1", "c1", res1, "d1"); err != nil {
				t.Fatal(err)
			}
			before := viewOf(s)
			err := s.Commit(podRef("pod1"), tc.container, res1, tc.perNUMA, tc.resp)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Commit error %v, want %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(before, viewOf(s)); diff != "" {
				t.Errorf("failed Commit changed the store (-want +got):\n%s", diff)
			}
			checkInvariants(t, s)
			// The reservation is intact and still resolves.
			if err := s.Commit(podRef("pod1"), "c1", res1, map[int64][]string{0: {"d1"}}, newResp().Obj()); err != nil {
				t.Errorf("Commit after the failed one: %v", err)
			}
		})
	}
}

func TestCommitReplacesAnEarlierCommit(t *testing.T) {
	s := New()
	allocate(t, s, "pod1", "c1", res1, map[int64][]string{0: {"d1", "d2"}}, newResp().Env("A", "1").Obj())
	allocate(t, s, "pod1", "c1", res1, map[int64][]string{1: {"d3"}}, newResp().Env("A", "2").Obj())
	want := view{
		Used:      map[string][]string{res1: {"d3"}},
		Committed: map[string][]string{"pod1/c1/" + res1: {"d3"}},
		Pods:      []string{"pod1"},
	}
	if diff := cmp.Diff(want, viewOf(s)); diff != "" {
		t.Errorf("view (-want +got):\n%s", diff)
	}
	opts, _ := s.RunContainerOptions("pod1", "c1")
	if diff := cmp.Diff([]EnvVar{{Name: "A", Value: "2"}}, opts.Envs); diff != "" {
		t.Errorf("envs (-want +got):\n%s", diff)
	}
	checkInvariants(t, s)
}

// TestCommitCopiesItsInputs checks that the caller may reuse what it passed to Commit.
func TestCommitCopiesItsInputs(t *testing.T) {
	s := New()
	perNUMA := map[int64][]string{0: {"d1"}}
	resp := newResp().Env("A", "1").Mount("/c", "/h", false).Obj()
	allocate(t, s, "pod1", "c1", res1, perNUMA, resp)
	perNUMA[0][0] = "changed"
	perNUMA[1] = []string{"added"}
	resp.Envs["A"] = "changed"
	resp.Mounts[0].HostPath = "changed"

	if diff := cmp.Diff(sets.New("d1"), s.ContainerDevices("pod1", "c1", res1)); diff != "" {
		t.Errorf("ContainerDevices (-want +got):\n%s", diff)
	}
	want := &RunContainerOptions{
		Envs:   []EnvVar{{Name: "A", Value: "1"}},
		Mounts: []Mount{{ContainerPath: "/c", HostPath: "/h"}},
	}
	got, _ := s.RunContainerOptions("pod1", "c1")
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("RunContainerOptions (-want +got):\n%s", diff)
	}
}

// TestResultsDoNotAlias checks that the caller may modify what the Store returns.
func TestResultsDoNotAlias(t *testing.T) {
	s := New()
	allocate(t, s, "pod1", "c1", res1, map[int64][]string{0: {"d1"}}, newResp().Obj())
	before := viewOf(s)

	s.Devices()[res1].Insert("x")
	s.ContainerDevices("pod1", "c1", res1).Insert("x")
	s.PodDevices("pod1", res1).Insert("x")
	s.Pods().Insert("x")
	s.Entries()[0].DeviceIDs[0][0] = "x"

	if diff := cmp.Diff(before, viewOf(s)); diff != "" {
		t.Errorf("modifying results changed the store (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(sets.New("d1"), s.ContainerDevices("pod1", "c1", res1)); diff != "" {
		t.Errorf("ContainerDevices (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(sets.New("d1"), s.PodDevices("pod1", res1)); diff != "" {
		t.Errorf("PodDevices (-want +got):\n%s", diff)
	}
}

func TestReleaseKeepsSharedDevices(t *testing.T) {
	s := New()
	allocate(t, s, "pod1", "init", res1, map[int64][]string{0: {"d1", "d2"}}, newResp().Obj())
	allocate(t, s, "pod1", "app", res1, map[int64][]string{0: {"d1"}}, newResp().Obj())
	if err := s.Reserve("pod1", "app2", res1, "d2"); err != nil {
		t.Fatal(err)
	}
	if !s.Release("pod1", "init", res1) {
		t.Fatal("Release found no commit")
	}
	if s.Release("pod1", "init", res1) {
		t.Error("second Release found a commit")
	}
	// d1 is still committed to app, d2 still reserved by app2.
	if diff := cmp.Diff(map[string]sets.Set[string]{res1: sets.New("d1", "d2")}, s.Devices()); diff != "" {
		t.Errorf("Devices (-want +got):\n%s", diff)
	}
	if err := s.Reserve("pod2", "c", res1, "d1"); !errors.Is(err, ErrDeviceInUse) {
		t.Errorf("Reserve of a device still held in the pod: %v, want %v", err, ErrDeviceInUse)
	}
	checkInvariants(t, s)
}

func TestContainerAndPodDevices(t *testing.T) {
	s := New()
	allocate(t, s, "pod1", "c1", res1, map[int64][]string{0: {"d1"}, 1: {"d1", "d2"}}, newResp().Obj())
	allocate(t, s, "pod1", "c2", res1, map[int64][]string{NodeWithoutTopology: {"d3"}}, newResp().Obj())
	allocate(t, s, "pod1", "c2", res2, map[int64][]string{0: {"d1"}}, newResp().Obj())
	if err := s.Reserve("pod1", "c3", res1, "d4"); err != nil {
		t.Fatal(err)
	}

	testCases := map[string]struct {
		got, want sets.Set[string]
	}{
		"container":                         {s.ContainerDevices("pod1", "c1", res1), sets.New("d1", "d2")},
		"container, other resource":         {s.ContainerDevices("pod1", "c2", res2), sets.New("d1")},
		"container without that resource":   {s.ContainerDevices("pod1", "c1", res2), nil},
		"unknown container":                 {s.ContainerDevices("pod1", "c9", res1), nil},
		"unknown pod":                       {s.ContainerDevices("pod9", "c1", res1), nil},
		"pod: union of committed":           {s.PodDevices("pod1", res1), sets.New("d1", "d2", "d3")},
		"pod, other resource":               {s.PodDevices("pod1", res2), sets.New("d1")},
		"pod without that resource":         {s.PodDevices("pod1", "other.com/x"), nil},
		"unknown pod, pod devices":          {s.PodDevices("pod9", res1), nil},
		"container with only a reservation": {s.ContainerDevices("pod1", "c3", res1), nil},
	}
	for name, tc := range testCases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, tc.got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestGetContainerDevices ports the kubelet's test of the same name (a device under NUMA 0 and 1
// reports both) and covers the ordering and the PodResources expansion.
func TestGetContainerDevices(t *testing.T) {
	testCases := map[string]struct {
		allocs    map[string]map[int64][]string // resource → devices per NUMA, for pod1/con1
		container string
		want      []ContainerDevice
	}{
		"a device under NUMA 0 and 1 reports both": {
			allocs:    map[string]map[int64][]string{res1: {0: {"dev1"}, 1: {"dev1"}}},
			container: "con1",
			want: []ContainerDevice{
				{ResourceName: res1, DeviceID: "dev1", NUMANode: 0},
				{ResourceName: res1, DeviceID: "dev1", NUMANode: 1},
			},
		},
		"devices without topology": {
			allocs:    map[string]map[int64][]string{res1: {NodeWithoutTopology: {"dev2", "dev1"}}},
			container: "con1",
			want: []ContainerDevice{
				{ResourceName: res1, DeviceID: "dev1", NUMANode: NodeWithoutTopology},
				{ResourceName: res1, DeviceID: "dev2", NUMANode: NodeWithoutTopology},
			},
		},
		"sorted by resource, device, NUMA node": {
			allocs: map[string]map[int64][]string{
				res2: {1: {"b", "a"}, 0: {"b"}},
				res1: {3: {"z"}, 2: {"y"}},
			},
			container: "con1",
			want: []ContainerDevice{
				{ResourceName: res1, DeviceID: "y", NUMANode: 2},
				{ResourceName: res1, DeviceID: "z", NUMANode: 3},
				{ResourceName: res2, DeviceID: "a", NUMANode: 1},
				{ResourceName: res2, DeviceID: "b", NUMANode: 0},
				{ResourceName: res2, DeviceID: "b", NUMANode: 1},
			},
		},
		"duplicates under one node are listed once": {
			allocs:    map[string]map[int64][]string{res1: {0: {"dev1", "dev1"}}},
			container: "con1",
			want:      []ContainerDevice{{ResourceName: res1, DeviceID: "dev1", NUMANode: 0}},
		},
		"unknown container": {
			allocs:    map[string]map[int64][]string{res1: {0: {"dev1"}}},
			container: "con2",
		},
	}
	for name, tc := range testCases {
		t.Run(name, func(t *testing.T) {
			s := New()
			for r, perNUMA := range tc.allocs {
				allocate(t, s, "pod1", "con1", r, perNUMA,
					newResp().Device("/dev/r1dev1", "/dev/r1dev1", "rw").Mount("/home/r1lib1", "/usr/r1lib1", false).Obj())
			}
			if diff := cmp.Diff(tc.want, s.GetContainerDevices("pod1", tc.container)); diff != "" {
				t.Errorf("GetContainerDevices (-want +got):\n%s", diff)
			}
		})
	}
}

// TestGetPodAndContainerForDevice ports the kubelet's test of the same name and covers the
// resource scoping of the lookup (device IDs are unique only within a resource).
func TestGetPodAndContainerForDevice(t *testing.T) {
	s := New()
	allocate(t, s, "pod1", "con1", res1, map[int64][]string{0: {"dev1"}, 1: {"dev1"}},
		newResp().Device("/dev/r1dev1", "/dev/r1dev1", "rw").Mount("/home/r1lib1", "/usr/r1lib1", false).Obj())
	allocate(t, s, "pod2", "con1", res2, map[int64][]string{0: {"dev1"}}, newResp().Obj())
	// pod3's init container's device is reused by two later containers.
	allocate(t, s, "pod3", "init", res1, map[int64][]string{0: {"dev7"}}, newResp().Obj())
	allocate(t, s, "pod3", "b-app", res1, map[int64][]string{0: {"dev7"}}, newResp().Obj())
	allocate(t, s, "pod3", "a-app", res1, map[int64][]string{0: {"dev7"}}, newResp().Obj())
	if err := s.Reserve("pod4", "con1", res1, "dev9"); err != nil {
		t.Fatal(err)
	}

	type result struct {
		Pod, Container string
		Found          bool
	}
	testCases := map[string]struct {
		resource, id string
		want         result
	}{
		"new device":                  {resource: res1, id: "dev2", want: result{}},
		"existing device":             {resource: res1, id: "dev1", want: result{"pod1", "con1", true}},
		"same ID in another resource": {resource: res2, id: "dev1", want: result{"pod2", "con1", true}},
		"unknown resource":            {resource: "other.com/x", id: "dev1", want: result{}},
		"reserved only":               {resource: res1, id: "dev9", want: result{}},
		"shared device: first name":   {resource: res1, id: "dev7", want: result{"pod3", "a-app", true}},
	}
	for name, tc := range testCases {
		t.Run(name, func(t *testing.T) {
			pod, container, found := s.PodAndContainerForDevice(tc.resource, tc.id)
			if diff := cmp.Diff(tc.want, result{pod, container, found}); diff != "" {
				t.Errorf("PodAndContainerForDevice (-want +got):\n%s", diff)
			}
		})
	}
}

// TestReuseHelpers replays the kubelet's TestInitContainerDeviceAllocation and
// TestRestartableInitContainerDeviceAllocation bookkeeping (the kubelet's Allocate in devicemanager/manager.go): regular init containers add
// their devices to the reuse pool, sidecars and app containers take theirs out.
func TestReuseHelpers(t *testing.T) {
	s := New()
	reuse := map[string]sets.Set[string]{}
	resp := newResp().Obj()
	type step struct {
		name string
		do   func()
		want map[string]sets.Set[string]
	}
	var poolBeforeApp sets.Set[string]
	steps := []step{
		{
			name: "regular init container adds its devices",
			do: func() {
				allocate(t, s, "pod", "init1", res1, map[int64][]string{0: {"d1"}}, resp)
				allocate(t, s, "pod", "init1", res2, map[int64][]string{0: {"n1"}}, resp)
				s.AddContainerAllocatedResources("pod", "init1", reuse)
			},
			want: map[string]sets.Set[string]{res1: sets.New("d1"), res2: sets.New("n1")},
		},
		{
			name: "second init container reuses and adds",
			do: func() {
				allocate(t, s, "pod", "init2", res1, map[int64][]string{0: {"d1", "d2"}}, resp)
				s.AddContainerAllocatedResources("pod", "init2", reuse)
			},
			want: map[string]sets.Set[string]{res1: sets.New("d1", "d2"), res2: sets.New("n1")},
		},
		{
			name: "sidecar keeps its device",
			do: func() {
				allocate(t, s, "pod", "sidecar", res1, map[int64][]string{0: {"d2"}}, resp)
				s.RemoveContainerAllocatedResources("pod", "sidecar", reuse)
			},
			want: map[string]sets.Set[string]{res1: sets.New("d1"), res2: sets.New("n1")},
		},
		{
			name: "unknown container changes nothing",
			do: func() {
				s.AddContainerAllocatedResources("pod", "nope", reuse)
				s.RemoveContainerAllocatedResources("pod", "nope", reuse)
				s.RemoveContainerAllocatedResources("pod9", "init1", reuse)
			},
			want: map[string]sets.Set[string]{res1: sets.New("d1"), res2: sets.New("n1")},
		},
		{
			name: "reservation only changes nothing",
			do: func() {
				if err := s.Reserve("pod", "app1", res1, "d1"); err != nil {
					t.Fatal(err)
				}
				poolBeforeApp = reuse[res1]
				s.RemoveContainerAllocatedResources("pod", "app1", reuse)
			},
			want: map[string]sets.Set[string]{res1: sets.New("d1"), res2: sets.New("n1")},
		},
		{
			name: "app container takes its reused device out; empty sets are dropped",
			do: func() {
				if err := s.Commit(podRef("pod"), "app1", res1, map[int64][]string{0: {"d1"}}, resp); err != nil {
					t.Fatal(err)
				}
				s.RemoveContainerAllocatedResources("pod", "app1", reuse)
			},
			want: map[string]sets.Set[string]{res2: sets.New("n1")},
		},
	}
	for _, st := range steps {
		st.do()
		if diff := cmp.Diff(st.want, reuse); diff != "" {
			t.Fatalf("%s: reuse (-want +got):\n%s", st.name, diff)
		}
	}
	if diff := cmp.Diff(sets.New("d1"), poolBeforeApp); diff != "" {
		t.Errorf("a set the caller held was modified in place (-want +got):\n%s", diff)
	}
	checkInvariants(t, s)
}
