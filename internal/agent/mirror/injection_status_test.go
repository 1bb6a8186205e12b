package mirror

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
	"github.com/kubedevice/kubedevice/internal/agent/injection/nri"
	"github.com/kubedevice/kubedevice/internal/nodeagent"
)

func TestRuntimeInjectionCondition(t *testing.T) {
	status := func(s nri.State) nri.Status {
		return nri.Status{State: s, SocketPath: "/var/run/nri/nri.sock", Plugin: "10-kubedevice"}
	}
	for _, tc := range []struct {
		state      nri.State
		wantStatus metav1.ConditionStatus
		wantReason string
	}{
		{nri.StateConnected, metav1.ConditionTrue, kdv1alpha1.ReasonNRIConnected},
		{nri.StateSocketMissing, metav1.ConditionFalse, kdv1alpha1.ReasonNRISocketMissing},
		{nri.StateDisconnected, metav1.ConditionFalse, kdv1alpha1.ReasonNRIDisconnected},
		{nri.StateDisabled, metav1.ConditionFalse, kdv1alpha1.ReasonInjectionDisabled},
	} {
		c, known := runtimeInjectionCondition(status(tc.state), 4)
		if !known || c.Status != tc.wantStatus || c.Reason != tc.wantReason || c.ObservedGeneration != 4 || c.Message == "" {
			t.Errorf("%s: got %+v (known %v), want %s/%s at generation 4 with a message", tc.state, c, known, tc.wantStatus, tc.wantReason)
		}
	}
	if _, known := runtimeInjectionCondition(status(nri.StateUnknown), 4); known {
		t.Error("the unknown state gives a condition")
	}
}

// The condition keeps its transition time while its status holds; while the state is unknown
// (the agent has just started) the object's condition is kept, so a restart writes nothing.
func TestWithRuntimeInjection(t *testing.T) {
	snap := registered(devices(2)...)
	connected := nri.Status{State: nri.StateConnected, SocketPath: "/s", Plugin: "10-kubedevice"}
	first := withRuntimeInjection(nodeDeviceStatus(snap, snap.Devices, nil, nodeagent.CheckpointInfo{}, 1, t0), nil, connected, 1, t0)
	got := meta.FindStatusCondition(first.Conditions, kdv1alpha1.NodeDeviceRuntimeInjectionReady)
	if got == nil || got.Status != metav1.ConditionTrue || !got.LastTransitionTime.Time.Equal(t0.Truncate(time.Second)) {
		t.Fatalf("first condition: %+v", got)
	}
	current := &kdv1alpha1.NodeDevice{ObjectMeta: metav1.ObjectMeta{Generation: 1}, Status: first}
	later := t0.Add(time.Hour)

	again := withRuntimeInjection(nodeDeviceStatus(snap, snap.Devices, current, nodeagent.CheckpointInfo{}, 1, later), current, connected, 1, later)
	if !nodeDeviceStatusUpToDate(current, again) {
		t.Errorf("the same state is a change:\n%s", cmp.Diff(current.Status, again))
	}
	unknown := withRuntimeInjection(nodeDeviceStatus(snap, snap.Devices, current, nodeagent.CheckpointInfo{}, 1, later), current, nri.Status{}, 1, later)
	if !nodeDeviceStatusUpToDate(current, unknown) {
		t.Errorf("the unknown state is a change:\n%s", cmp.Diff(current.Status, unknown))
	}
	if c := withRuntimeInjection(nodeDeviceStatus(snap, snap.Devices, nil, nodeagent.CheckpointInfo{}, 1, later), nil, nri.Status{}, 1, later); meta.FindStatusCondition(c.Conditions, kdv1alpha1.NodeDeviceRuntimeInjectionReady) != nil {
		t.Error("the unknown state sets a condition on a new object")
	}

	disconnected := connected
	disconnected.State = nri.StateDisconnected
	down := withRuntimeInjection(nodeDeviceStatus(snap, snap.Devices, current, nodeagent.CheckpointInfo{}, 1, later), current, disconnected, 1, later)
	if nodeDeviceStatusUpToDate(current, down) {
		t.Fatal("a disconnection is not a change")
	}
	want := metav1.Condition{Type: kdv1alpha1.NodeDeviceRuntimeInjectionReady, Status: metav1.ConditionFalse, Reason: kdv1alpha1.ReasonNRIDisconnected,
		ObservedGeneration: 1, LastTransitionTime: metav1.NewTime(later.Truncate(time.Second))}
	if diff := cmp.Diff(want, *meta.FindStatusCondition(down.Conditions, kdv1alpha1.NodeDeviceRuntimeInjectionReady), cmpopts.IgnoreFields(metav1.Condition{}, "Message")); diff != "" {
		t.Errorf("condition after a disconnection (-want +got):\n%s", diff)
	}
}
