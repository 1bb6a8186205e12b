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

package controller

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
)

// da returns a live DeviceAllocation on node n1 whose containers hold the given devices of
// example.com/gopher, one container per argument.
func da(ns, name string, containers ...[]string) kdv1alpha1.DeviceAllocation {
	o := kdv1alpha1.DeviceAllocation{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(ns + "/" + name), Generation: 1},
		Spec:       kdv1alpha1.DeviceAllocationSpec{NodeName: "n1", PodName: name, PodUID: "uid-" + name},
	}
	for i, ids := range containers {
		o.Status.Containers = append(o.Status.Containers, kdv1alpha1.ContainerAllocation{
			Name:      "c" + string(rune('0'+i)),
			Resources: []kdv1alpha1.ResourceAllocation{{ResourceName: gopher, DeviceIDs: ids}},
		})
	}
	return o
}

func released(o kdv1alpha1.DeviceAllocation) kdv1alpha1.DeviceAllocation {
	o.Status.Conditions = append(o.Status.Conditions, metav1.Condition{
		Type: kdv1alpha1.DeviceAllocationReleased, Status: metav1.ConditionTrue, Reason: kdv1alpha1.ReasonPodTerminated,
	})
	return o
}

func onNode(o kdv1alpha1.DeviceAllocation, node string) kdv1alpha1.DeviceAllocation {
	o.Spec.NodeName = node
	return o
}

func TestFindConflicts(t *testing.T) {
	a := da("ns1", "a", []string{"g0", "g1"})
	cases := map[string]struct {
		da    kdv1alpha1.DeviceAllocation
		peers []kdv1alpha1.DeviceAllocation
		want  []deviceConflict
	}{
		"alone": {da: a, peers: []kdv1alpha1.DeviceAllocation{a}},
		"an init container's devices reused by the app container are not a conflict": {
			da: da("ns1", "a", []string{"g0"}, []string{"g0"}),
		},
		"another live allocation holds one device": {
			da:    a,
			peers: []kdv1alpha1.DeviceAllocation{a, da("ns2", "b", []string{"g1", "g2"})},
			want:  []deviceConflict{{resourceName: gopher, deviceID: "g1", holders: []string{"ns2/b"}}},
		},
		"several holders, sorted": {
			da: a,
			peers: []kdv1alpha1.DeviceAllocation{
				da("ns2", "c", []string{"g0"}), da("ns1", "b", []string{"g0", "g1"}),
			},
			want: []deviceConflict{
				{resourceName: gopher, deviceID: "g0", holders: []string{"ns1/b", "ns2/c"}},
				{resourceName: gopher, deviceID: "g1", holders: []string{"ns1/b"}},
			},
		},
		"a released peer does not conflict": {
			da: a, peers: []kdv1alpha1.DeviceAllocation{released(da("ns2", "b", []string{"g1"}))},
		},
		"a released allocation conflicts with nothing": {
			da: released(a), peers: []kdv1alpha1.DeviceAllocation{da("ns2", "b", []string{"g1"})},
		},
		"the same device ID on another node is another device": {
			da: a, peers: []kdv1alpha1.DeviceAllocation{onNode(da("ns2", "b", []string{"g1"}), "n2")},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := findConflicts(&tc.da, tc.peers)
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(deviceConflict{})); diff != "" {
				t.Errorf("findConflicts (-want +got):\n%s", diff)
			}
		})
	}
}

func TestConflictCondition(t *testing.T) {
	now := metav1.NewTime(testNow)
	earlier := metav1.NewTime(testNow.Add(-time.Minute))
	a := da("ns1", "a", []string{"g0", "g1"})
	conflicts := []deviceConflict{{resourceName: gopher, deviceID: "g1", holders: []string{"ns2/b"}}}

	if got := conflictCondition(&a, nil, now); got != nil {
		t.Errorf("conflictCondition without conflicts = %+v, want nil", got)
	}

	want := &metav1.Condition{
		Type: kdv1alpha1.DeviceAllocationConflict, Status: metav1.ConditionTrue, Reason: kdv1alpha1.ReasonDeviceHeldTwice,
		Message:            "Devices on node n1 held by another live DeviceAllocation: example.com/gopher g1 is also held by ns2/b.",
		LastTransitionTime: now,
	}
	if diff := cmp.Diff(want, conflictCondition(&a, conflicts, now)); diff != "" {
		t.Errorf("first conflict (-want +got):\n%s", diff)
	}

	a.Status.Conditions = []metav1.Condition{*want}
	a.Status.Conditions[0].LastTransitionTime = earlier
	if got := conflictCondition(&a, conflicts, now); got.LastTransitionTime != earlier {
		t.Errorf("a lasting conflict moved its transition time to %v", got.LastTransitionTime)
	}

	// No status subresource: the generation counts the agent's writes too, so the condition
	// observes none, and one a controller wrote while there was a status subresource is no reason
	// to write; any other difference is.
	a.Generation = 5
	old := *want
	old.ObservedGeneration = 1
	if conflictChanged(&old, conflictCondition(&a, conflicts, now)) {
		t.Error("an earlier controller's observedGeneration on an unchanged conflict asks for a write")
	}
	if !conflictChanged(&old, nil) || !conflictChanged(nil, want) {
		t.Error("a conflict that started or ended asks for no write")
	}
	other := *want
	other.Message = "other"
	if !conflictChanged(&old, &other) {
		t.Error("a changed message asks for no write")
	}

	many := make([]deviceConflict, 40)
	for i := range many {
		many[i] = deviceConflict{resourceName: gopher, deviceID: strings.Repeat("x", 200) + string(rune('A'+i)),
			holders: []string{strings.Repeat("h", 300)}}
	}
	msg := conflictCondition(&a, many, now).Message
	if !strings.HasSuffix(msg, "and 24 more.") || len(msg) > maxConditionMessage {
		t.Errorf("a long conflict list gave a message of %d characters ending %q", len(msg), msg[len(msg)-20:])
	}
}

func TestConflictStarted(t *testing.T) {
	conflict := &metav1.Condition{Type: kdv1alpha1.DeviceAllocationConflict, Status: metav1.ConditionTrue}
	cases := map[string]struct {
		got, want *metav1.Condition
		started   bool
	}{
		"new conflict":      {want: conflict, started: true},
		"lasting conflict":  {got: conflict, want: conflict},
		"conflict ended":    {got: conflict},
		"still no conflict": {},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := conflictStarted(tc.got, tc.want); got != tc.started {
				t.Errorf("conflictStarted = %v, want %v", got, tc.started)
			}
		})
	}
}
