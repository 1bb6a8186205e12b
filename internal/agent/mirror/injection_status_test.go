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

package mirror

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
	"github.com/kubedevice/kubedevice/internal/nodeagent"
)

// The condition keeps its transition time while its status holds; while the state is unknown
// (the agent has just started) the object's condition is kept, so a restart writes no transient state of it.
func TestWithRuntimeInjection(t *testing.T) {
	snap := registered(devices(2)...)
	connected := metav1.Condition{Status: metav1.ConditionTrue, Reason: kdv1alpha1.ReasonNRIConnected, Message: "connected"}
	first := withRuntimeInjection(nodeDeviceStatus(snap, snap.Devices, nil, nodeagent.CheckpointInfo{}, 1, t0), nil, connected, true, 1, t0)
	got := meta.FindStatusCondition(first.Conditions, kdv1alpha1.NodeDeviceRuntimeInjectionReady)
	if got == nil || got.Status != metav1.ConditionTrue || !got.LastTransitionTime.Time.Equal(t0.Truncate(time.Second)) {
		t.Fatalf("first condition: %+v", got)
	}
	current := &kdv1alpha1.NodeDevice{ObjectMeta: metav1.ObjectMeta{Generation: 1}, Status: first}
	later := t0.Add(time.Hour)

	again := withRuntimeInjection(nodeDeviceStatus(snap, snap.Devices, current, nodeagent.CheckpointInfo{}, 1, later), current, connected, true, 1, later)
	if !nodeDeviceStatusUpToDate(current, again) {
		t.Errorf("the same state is a change:\n%s", cmp.Diff(current.Status, again))
	}
	unknown := withRuntimeInjection(nodeDeviceStatus(snap, snap.Devices, current, nodeagent.CheckpointInfo{}, 1, later), current, metav1.Condition{}, false, 1, later)
	if !nodeDeviceStatusUpToDate(current, unknown) {
		t.Errorf("the unknown state is a change:\n%s", cmp.Diff(current.Status, unknown))
	}
	if c := withRuntimeInjection(nodeDeviceStatus(snap, snap.Devices, nil, nodeagent.CheckpointInfo{}, 1, later), nil, metav1.Condition{}, false, 1, later); meta.FindStatusCondition(c.Conditions, kdv1alpha1.NodeDeviceRuntimeInjectionReady) != nil {
		t.Error("the unknown state sets a condition on a new object")
	}

	disconnected := metav1.Condition{Status: metav1.ConditionFalse, Reason: kdv1alpha1.ReasonNRIDisconnected, Message: "disconnected"}
	down := withRuntimeInjection(nodeDeviceStatus(snap, snap.Devices, current, nodeagent.CheckpointInfo{}, 1, later), current, disconnected, true, 1, later)
	if nodeDeviceStatusUpToDate(current, down) {
		t.Fatal("a disconnection is not a change")
	}
	want := metav1.Condition{Type: kdv1alpha1.NodeDeviceRuntimeInjectionReady, Status: metav1.ConditionFalse, Reason: kdv1alpha1.ReasonNRIDisconnected,
		ObservedGeneration: 1, LastTransitionTime: metav1.NewTime(later.Truncate(time.Second))}
	if diff := cmp.Diff(want, *meta.FindStatusCondition(down.Conditions, kdv1alpha1.NodeDeviceRuntimeInjectionReady), cmpopts.IgnoreFields(metav1.Condition{}, "Message")); diff != "" {
		t.Errorf("condition after a disconnection (-want +got):\n%s", diff)
	}
}

// An agent that injects nothing (observe mode) writes its path and no RuntimeInjectionReady, and
// drops the one a managing agent wrote on the same node before.
func TestObservedStatusCarriesNoRuntimeInjection(t *testing.T) {
	snap := registered(devices(2)...)
	connected := metav1.Condition{Status: metav1.ConditionTrue, Reason: kdv1alpha1.ReasonNRIConnected, Message: "connected"}
	managed := withRuntimeInjection(nodeDeviceStatus(snap, snap.Devices, nil, nodeagent.CheckpointInfo{}, 1, t0), nil, connected, true, 1, t0)
	current := &kdv1alpha1.NodeDevice{ObjectMeta: metav1.ObjectMeta{Generation: 1}, Status: managed}

	r := &reconciler{Options: Options{Path: kdv1alpha1.DevicePathObserved, Injection: noInjection{}}}
	st := r.desiredStatus(snap, snap.Devices, current, nodeagent.CheckpointInfo{}, 1, t0)
	if st.Path != kdv1alpha1.DevicePathObserved {
		t.Errorf("path %q, want %q", st.Path, kdv1alpha1.DevicePathObserved)
	}
	if c := meta.FindStatusCondition(st.Conditions, kdv1alpha1.NodeDeviceRuntimeInjectionReady); c != nil {
		t.Errorf("observed status carries %+v", c)
	}
	if nodeDeviceStatusUpToDate(current, st) {
		t.Error("dropping the condition is not a change")
	}
}
