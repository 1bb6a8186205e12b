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

package allocation

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
	"github.com/kubedevice/kubedevice/internal/agent/kube"
	"github.com/kubedevice/kubedevice/internal/nodeagent"
	"github.com/kubedevice/kubedevice/internal/nodeagent/poddevices"
	"github.com/kubedevice/kubedevice/internal/testutil"
)

func TestDeviceAllocationStatus(t *testing.T) {
	pod := testutil.MakePod("p", "ns").Node("n1").
		InitContainer("init", testResource, 1).
		Request(testResource, 2).
		Container("side").Obj()
	opts := &poddevices.RunContainerOptions{
		Envs:       []poddevices.EnvVar{{Name: "GOPHERS", Value: "dev-0,dev-1"}},
		Mounts:     []poddevices.Mount{{ContainerPath: "/c", HostPath: "/h", ReadOnly: true}},
		Devices:    []poddevices.DeviceSpec{{ContainerPath: "/dev/g0", HostPath: "/dev/g0", Permissions: "rw"}},
		CDIDevices: []string{"example.com/gopher=dev-0"},
	}
	// The core lists containers by name; the status follows the pod: init containers first.
	alloc := &nodeagent.PodAllocation{PodUID: "uid-1", Namespace: "ns", Name: "p", Containers: []nodeagent.ContainerAllocation{
		{Name: "app", Resources: []nodeagent.ResourceAllocation{
			{ResourceName: testResource, DeviceIDs: []string{"dev-1", "dev-0"}, NUMANodes: []int64{0}},
			{ResourceName: "acme.io/fpga", DeviceIDs: []string{"f-0"}},
		}, RuntimeOptions: opts},
		{Name: "init", Resources: []nodeagent.ResourceAllocation{{ResourceName: testResource, DeviceIDs: []string{"dev-0"}}}},
	}}

	st := stamped(desiredStatus(pod, alloc, nil, t1), nil)
	want := kdv1alpha1.DeviceAllocationStatus{
		Summary: "acme.io/fpga=f-0;example.com/gopher=dev-0,dev-1",
		Containers: []kdv1alpha1.ContainerAllocation{
			{Name: "init", Resources: []kdv1alpha1.ResourceAllocation{{ResourceName: testResource, DeviceIDs: []string{"dev-0"}}}},
			{Name: "app", Resources: []kdv1alpha1.ResourceAllocation{
				{ResourceName: "acme.io/fpga", DeviceIDs: []string{"f-0"}},
				{ResourceName: testResource, DeviceIDs: []string{"dev-0", "dev-1"}, NUMANodes: []int64{0}},
			}, RuntimeOptions: &kdv1alpha1.ContainerRuntimeOptions{
				Envs:       []kdv1alpha1.EnvVar{{Name: "GOPHERS", Value: "dev-0,dev-1"}},
				Mounts:     []kdv1alpha1.Mount{{ContainerPath: "/c", HostPath: "/h", ReadOnly: true}},
				Devices:    []kdv1alpha1.DeviceSpec{{ContainerPath: "/dev/g0", HostPath: "/dev/g0", Permissions: "rw"}},
				CDIDevices: []string{"example.com/gopher=dev-0"},
			}},
		},
		Conditions: []metav1.Condition{{
			Type: kdv1alpha1.DeviceAllocationAllocated, Status: metav1.ConditionTrue,
			Reason: kdv1alpha1.ReasonAllocated, Message: "The pod's 3 devices are allocated and checkpointed on node n1.",
			LastTransitionTime: metav1.NewTime(t1.Truncate(1e9)),
		}},
	}
	if diff := cmp.Diff(want, st); diff != "" {
		t.Errorf("status (-want +got):\n%s", diff)
	}

	// The same status later keeps its transition time and is up to date.
	current := &kdv1alpha1.DeviceAllocation{ObjectMeta: metav1.ObjectMeta{Generation: 1}, Status: *want.DeepCopy()}
	current.Status.Conditions = append(current.Status.Conditions, metav1.Condition{
		Type: kdv1alpha1.DeviceAllocationConflict, Status: metav1.ConditionFalse, Reason: "NoConflict", LastTransitionTime: metav1.Now(),
	})
	again := stamped(desiredStatus(pod, alloc, nil, t1.Add(3600e9)), current)
	if !statusUpToDate(current, again) {
		t.Errorf("an unchanged allocation is not up to date:\n%s", cmp.Diff(current.Status, again))
	}
	if !preStartDone(current, again) {
		t.Error("an allocation recorded as Allocated must not call PreStartContainer again")
	}
}

func TestDeviceAllocationStatusRefused(t *testing.T) {
	pod := testutil.MakePod("p", "ns").Node("n1").Request(testResource, 5).Obj()
	err := &nodeagent.AllocationError{Reason: nodeagent.AllocationInsufficientDevices, Err: errors.New("requested number of devices unavailable for example.com/gopher. Requested: 5, Available: 4")}
	st := stamped(desiredStatus(pod, nil, err, t1), nil)
	if st.Summary != "" || len(st.Containers) != 0 {
		t.Errorf("a refused pod lists devices: %+v", st)
	}
	want := []metav1.Condition{{
		Type: kdv1alpha1.DeviceAllocationAllocated, Status: metav1.ConditionFalse,
		Reason: kdv1alpha1.ReasonInsufficientDevices, Message: err.Error(), LastTransitionTime: metav1.NewTime(t1.Truncate(1e9)),
	}}
	if diff := cmp.Diff(want, st.Conditions); diff != "" {
		t.Errorf("conditions (-want +got):\n%s", diff)
	}
	// Any other error is AllocateFailed.
	st = stamped(desiredStatus(pod, nil, errors.New("rpc error"), t1), nil)
	if got := st.Conditions[0].Reason; got != kdv1alpha1.ReasonAllocateFailed {
		t.Errorf("reason for a plain error = %s, want %s", got, kdv1alpha1.ReasonAllocateFailed)
	}
	if preStartDone(&kdv1alpha1.DeviceAllocation{Status: st}, st) {
		t.Error("a refused allocation counts as started")
	}
}

func TestReleasedStatus(t *testing.T) {
	da := testutil.MakeDeviceAllocation("p-x", "ns").Container("app", testResource, "dev-0").Summary("example.com/gopher=dev-0").
		Condition(metav1.Condition{Type: kdv1alpha1.DeviceAllocationAllocated, Status: metav1.ConditionTrue, Reason: kdv1alpha1.ReasonAllocated}).
		Condition(metav1.Condition{Type: kdv1alpha1.DeviceAllocationConflict, Status: metav1.ConditionFalse, Reason: "NoConflict"}).Obj()
	st := releasedStatus(da, kdv1alpha1.ReasonPodDeleted, "gone", t1)
	var types []string
	for _, c := range st.Conditions {
		types = append(types, c.Type)
	}
	if diff := cmp.Diff([]string{kdv1alpha1.DeviceAllocationAllocated, kdv1alpha1.DeviceAllocationReleased}, types); diff != "" {
		t.Errorf("condition types (-want +got):\n%s", diff)
	}
	if st.Summary != da.Status.Summary || len(st.Containers) != 1 {
		t.Errorf("the released status dropped the devices: %+v", st)
	}
}

// The corrupt-checkpoint rebuild reads back what the agent wrote.
func TestPodAllocationOfRoundTrip(t *testing.T) {
	pod := testutil.MakePod("p", "ns").UID("uid-1").Node("n1").Request(testResource, 2).Obj()
	alloc := nodeagent.PodAllocation{PodUID: "uid-1", Namespace: "ns", Name: "p", Containers: []nodeagent.ContainerAllocation{{
		Name:      "app",
		Resources: []nodeagent.ResourceAllocation{{ResourceName: testResource, DeviceIDs: []string{"dev-0", "dev-1"}, NUMANodes: []int64{1}}},
		RuntimeOptions: &poddevices.RunContainerOptions{
			Envs:        []poddevices.EnvVar{{Name: "A", Value: "b"}},
			Annotations: []poddevices.Annotation{{Key: "k", Value: "v"}},
		},
	}}}
	da := kube.NewDeviceAllocation(pod)
	da.Status = stamped(desiredStatus(pod, &alloc, nil, t1), nil)
	got, ok := podAllocationOf(da)
	if !ok {
		t.Fatal("an allocated DeviceAllocation was not rebuilt")
	}
	if diff := cmp.Diff(alloc, got); diff != "" {
		t.Errorf("rebuilt allocation (-want +got):\n%s", diff)
	}

	released := da.DeepCopy()
	released.Status = releasedStatus(da, kdv1alpha1.ReasonPodTerminated, "done", t1)
	refused := da.DeepCopy()
	refused.Status = stamped(desiredStatus(pod, nil, errors.New("no"), t1), nil)
	if got := PodAllocationsOf([]kdv1alpha1.DeviceAllocation{*da, *released, *refused}); len(got) != 1 {
		t.Errorf("rebuilt %d allocations, want only the live one", len(got))
	}
}

func TestSummaryAndTruncate(t *testing.T) {
	var ids []string
	for i := range 300 {
		ids = append(ids, strings.Repeat("x", 5)+string(rune('a'+i%26))+strings.Repeat("y", i%7))
	}
	s := summary([]kdv1alpha1.ContainerAllocation{{Name: "app", Resources: []kdv1alpha1.ResourceAllocation{{ResourceName: testResource, DeviceIDs: ids}}}})
	if len(s) > maxSummaryLength || !strings.HasSuffix(s, "...") {
		t.Errorf("summary of %d bytes, want at most %d ending in ...", len(s), maxSummaryLength)
	}
	if got := kube.Truncate("héllo wörld", 8); got != "héll..." {
		t.Errorf("truncate = %q, want a cut at a rune boundary", got)
	}
}

// The status is computed once per reconcile and stamped for each object it is compared with:
// stamping observes no generation (a DeviceAllocation has no status subresource, so its generation
// counts the writes themselves) and leaves the computed status as it was.
func TestStampedLeavesWantAlone(t *testing.T) {
	pod := testutil.MakePod("p", "ns").Node("n1").Request(testResource, 1).Obj()
	want := desiredStatus(pod, nil, errors.New("no"), t1)
	want.Conditions[0].ObservedGeneration = 7
	before := want.DeepCopy()
	current := &kdv1alpha1.DeviceAllocation{ObjectMeta: metav1.ObjectMeta{Generation: 3}}
	st := stamped(want, current)
	if got := st.Conditions[0].ObservedGeneration; got != 0 {
		t.Errorf("stamped condition observes generation %d, want none", got)
	}
	if diff := cmp.Diff(*before, want); diff != "" {
		t.Errorf("stamping changed the computed status (-before +after):\n%s", diff)
	}
}

// An object an agent wrote while the kind had a status subresource carries observedGeneration on
// its conditions: it is up to date all the same (no write for it), and a release drops it.
func TestObservedGenerationOfAnEarlierAgent(t *testing.T) {
	pod := testutil.MakePod("p", "ns").UID("uid-1").Node("n1").Request(testResource, 1).Obj()
	alloc := &nodeagent.PodAllocation{PodUID: "uid-1", Namespace: "ns", Name: "p", Containers: []nodeagent.ContainerAllocation{
		{Name: "app", Resources: []nodeagent.ResourceAllocation{{ResourceName: testResource, DeviceIDs: []string{"dev-0"}}}},
	}}
	old := kube.NewDeviceAllocation(pod)
	old.Generation = 1
	old.Status = stamped(desiredStatus(pod, alloc, nil, t1), nil)
	old.Status.Conditions[0].ObservedGeneration = 1
	if !statusUpToDate(old, stamped(desiredStatus(pod, alloc, nil, t1.Add(3600e9)), old)) {
		t.Error("an earlier agent's observedGeneration makes an unchanged allocation out of date")
	}
	changed := stamped(desiredStatus(pod, nil, errors.New("no"), t1), old)
	if statusUpToDate(old, changed) {
		t.Error("a refusal of an allocated pod is up to date")
	}
	for _, c := range releasedStatus(old, kdv1alpha1.ReasonPodDeleted, "gone", t1).Conditions {
		if c.ObservedGeneration != 0 {
			t.Errorf("released status: condition %s observes generation %d, want none", c.Type, c.ObservedGeneration)
		}
	}
}
