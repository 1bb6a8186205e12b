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
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
	"github.com/kubedevice/kubedevice/internal/contract"
	"github.com/kubedevice/kubedevice/internal/indexer"
	"github.com/kubedevice/kubedevice/internal/nodeagent"
)

const testResource = "example.com/gopher"

var (
	t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	t1 = t0.Add(90*time.Second + 250*time.Millisecond)
)

// fakeSnapshots serves resource snapshots and counts the reads.
type fakeSnapshots struct {
	snaps map[string]nodeagent.ResourceSnapshot
	reads int
}

func (f *fakeSnapshots) snapshot(name string) (nodeagent.ResourceSnapshot, bool) {
	f.reads++
	s, ok := f.snaps[name]
	return s, ok
}

func devicesOf(devs ...nodeagent.DeviceSnapshot) map[string]nodeagent.ResourceSnapshot {
	return map[string]nodeagent.ResourceSnapshot{testResource: {ResourceName: testResource, Devices: devs}}
}

func sick(id, reason string) nodeagent.DeviceSnapshot {
	return nodeagent.DeviceSnapshot{ID: id, Health: nodeagent.Unhealthy, Reason: reason, Message: reason + " message", LastTransitionTime: t0}
}

func TestHealthViewReasons(t *testing.T) {
	f := &fakeSnapshots{snaps: devicesOf(
		nodeagent.DeviceSnapshot{ID: "ok", Health: nodeagent.Healthy, Reason: nodeagent.ReasonReportedHealthy},
		sick("reported", nodeagent.ReasonReportedUnhealthy),
		sick("dropped", nodeagent.ReasonNotReported),
		sick("disconnected", nodeagent.ReasonPluginDisconnected),
		sick("awaiting", nodeagent.ReasonAwaitingPlugin),
		// Observe mode's: the kubelet does not list the device as allocatable.
		sick("notAllocatable", kdv1alpha1.DeviceReasonKubeletNotAllocatable),
	)}
	v := NewHealthView(f.snapshot)
	for id, want := range map[string]deviceHealth{
		"ok":           {},
		"unlisted":     {},
		"reported":     {state: deviceUnhealthy, reason: kdv1alpha1.DeviceReasonPluginReportedUnhealthy, message: "PluginReportedUnhealthy message", since: t0},
		"dropped":      {state: deviceUnhealthy, reason: kdv1alpha1.DeviceReasonNotReported, message: "NotReportedByPlugin message", since: t0},
		"disconnected": {state: deviceUnknown},
		"awaiting":     {state: deviceUnknown},
		"notAllocatable": {state: deviceUnhealthy, reason: kdv1alpha1.DeviceReasonKubeletNotAllocatable,
			message: "KubeletNotAllocatable message", since: t0},
	} {
		if got := v.device(testResource, id); got != want {
			t.Errorf("device %s: %+v, want %+v", id, got, want)
		}
	}
	if f.reads != 1 {
		t.Errorf("the resource was read %d times, want once", f.reads)
	}
	if got := v.device("acme.io/gone", "g-0"); got.state != deviceUnhealthy || got.reason != kdv1alpha1.DeviceReasonResourceRemoved {
		t.Errorf("a device of a resource the core does not know: %+v, want unhealthy, ResourceRemoved", got)
	}

	// A refresh reads the resource again: the device is healthy now.
	f.snaps = devicesOf()
	if got := v.device(testResource, "reported"); got.state != deviceUnhealthy {
		t.Errorf("before the refresh: %+v, want what was read", got)
	}
	v.refresh([]string{testResource})
	if got := v.device(testResource, "reported"); got.state != deviceHealthy {
		t.Errorf("after the refresh: %+v, want healthy", got)
	}
}

// lookupOf answers the health of the devices named in m, healthy for the others.
func lookupOf(m map[string]deviceHealth) healthLookup {
	return func(_, id string) deviceHealth { return m[id] }
}

// heldStatus is the status of a pod whose init container and app container share dev-0, and
// whose app container also holds dev-1.
func heldStatus() kdv1alpha1.DeviceAllocationStatus {
	return kdv1alpha1.DeviceAllocationStatus{Containers: []kdv1alpha1.ContainerAllocation{
		{Name: "init", Resources: []kdv1alpha1.ResourceAllocation{{ResourceName: testResource, DeviceIDs: []string{"dev-0"}}}},
		{Name: "app", Resources: []kdv1alpha1.ResourceAllocation{{ResourceName: testResource, DeviceIDs: []string{"dev-0", "dev-1"}}}},
	}}
}

func TestWithHealth(t *testing.T) {
	healthy := withHealth(heldStatus(), lookupOf(nil), nil, t1)
	if len(healthy.UnhealthyDevices) != 0 {
		t.Errorf("unhealthy devices of healthy ones: %+v", healthy.UnhealthyDevices)
	}
	c := meta.FindStatusCondition(healthy.Conditions, kdv1alpha1.DeviceAllocationHealthy)
	if c == nil || c.Status != metav1.ConditionTrue || c.Reason != kdv1alpha1.ReasonAllDevicesHealthy || c.Message != "All 2 devices the pod holds are healthy." {
		t.Errorf("Healthy of healthy devices: %+v", c)
	}
	if got := withHealth(kdv1alpha1.DeviceAllocationStatus{}, lookupOf(nil), nil, t1); got.Conditions != nil {
		t.Errorf("a status without devices got %+v, want no Healthy condition", got.Conditions)
	}

	reported := deviceHealth{state: deviceUnhealthy, reason: kdv1alpha1.DeviceReasonPluginReportedUnhealthy, message: "bad", since: t0}
	st := withHealth(heldStatus(), lookupOf(map[string]deviceHealth{"dev-0": reported}), nil, t1)
	want := []kdv1alpha1.UnhealthyDevice{{ResourceName: testResource, DeviceID: "dev-0", Containers: []string{"init", "app"},
		Reason: kdv1alpha1.DeviceReasonPluginReportedUnhealthy, Message: "bad", LastTransitionTime: ptrTime(t0)}}
	if diff := cmp.Diff(want, st.UnhealthyDevices); diff != "" {
		t.Errorf("unhealthy devices (-want +got):\n%s", diff)
	}
	c = meta.FindStatusCondition(st.Conditions, kdv1alpha1.DeviceAllocationHealthy)
	if c == nil || c.Status != metav1.ConditionFalse || c.Message != "1 of 2 devices the pod holds are unhealthy: example.com/gopher dev-0 (PluginReportedUnhealthy)." {
		t.Errorf("Healthy of an unhealthy device: %+v", c)
	}

	// Unknown (the plugin disconnected): what the object says stands, whatever it says.
	current := &kdv1alpha1.DeviceAllocation{Status: st}
	unknown := lookupOf(map[string]deviceHealth{"dev-0": {state: deviceUnknown}, "dev-1": {state: deviceUnknown}})
	if got := withHealth(heldStatus(), unknown, current, t1.Add(time.Hour)); !cmp.Equal(got.UnhealthyDevices, st.UnhealthyDevices) {
		t.Errorf("unknown devices: %+v, want what the object says, %+v", got.UnhealthyDevices, st.UnhealthyDevices)
	}
	if got := withHealth(heldStatus(), unknown, nil, t1); len(got.UnhealthyDevices) != 0 {
		t.Errorf("unknown devices of a new object: %+v, want none listed", got.UnhealthyDevices)
	}

	// The same reason keeps the object's time; another reason takes the core's, or now.
	later := reported
	later.since = t1
	if got := withHealth(heldStatus(), lookupOf(map[string]deviceHealth{"dev-0": later}), current, t1); !got.UnhealthyDevices[0].LastTransitionTime.Equal(ptrTime(t0)) {
		t.Errorf("time of a device unhealthy for the same reason: %v, want the object's %v", got.UnhealthyDevices[0].LastTransitionTime, t0)
	}
	removed := deviceHealth{state: deviceUnhealthy, reason: kdv1alpha1.DeviceReasonResourceRemoved}
	if got := withHealth(heldStatus(), lookupOf(map[string]deviceHealth{"dev-0": removed}), current, t1); !got.UnhealthyDevices[0].LastTransitionTime.Equal(ptrTime(t1)) {
		t.Errorf("time of a device unhealthy for another reason, the core not saying when: %v, want now %v", got.UnhealthyDevices[0].LastTransitionTime, t1)
	}
}

func TestHealthyConditionNamesAFewDevices(t *testing.T) {
	var unhealthy []kdv1alpha1.UnhealthyDevice
	for i := range 20 {
		unhealthy = append(unhealthy, kdv1alpha1.UnhealthyDevice{ResourceName: testResource, DeviceID: strings.Repeat("x", 200) + string(rune('a'+i)), Reason: "R"})
	}
	c := healthyCondition(40, unhealthy, t1)
	if !strings.HasPrefix(c.Message, "20 of 40 devices the pod holds are unhealthy: ") || len(c.Message) > maxHealthMessage {
		t.Errorf("message of 20 unhealthy devices with long IDs (%d bytes): %q", len(c.Message), c.Message)
	}
}

func TestHealthDiffers(t *testing.T) {
	reported := deviceHealth{state: deviceUnhealthy, reason: kdv1alpha1.DeviceReasonPluginReportedUnhealthy, message: "bad", since: t0}
	da := &kdv1alpha1.DeviceAllocation{Status: withHealth(heldStatus(), lookupOf(nil), nil, t0)}
	if healthDiffers(da, lookupOf(nil), t1) {
		t.Error("a DeviceAllocation that shows the health differs")
	}
	if !healthDiffers(da, lookupOf(map[string]deviceHealth{"dev-1": reported}), t1) {
		t.Error("a device turning unhealthy does not differ")
	}
	if healthDiffers(da, lookupOf(map[string]deviceHealth{"dev-1": {state: deviceUnknown}}), t1) {
		t.Error("a device of a disconnected plugin differs")
	}
	old := &kdv1alpha1.DeviceAllocation{Status: heldStatus()}
	if !healthDiffers(old, lookupOf(nil), t1) {
		t.Error("a DeviceAllocation an earlier agent wrote, without a Healthy condition, does not differ")
	}
	sickDA := &kdv1alpha1.DeviceAllocation{Status: withHealth(heldStatus(), lookupOf(map[string]deviceHealth{"dev-1": reported}), nil, t0)}
	if healthDiffers(sickDA, lookupOf(map[string]deviceHealth{"dev-1": reported}), t1.Add(time.Hour)) {
		t.Error("the same unhealthy device later differs")
	}
}

// Changed names the pods whose DeviceAllocation on the node lists a changed resource and does
// not show its devices' health, after reading the resources again; none other.
func TestHealthViewChanged(t *testing.T) {
	f := &fakeSnapshots{snaps: devicesOf(sick("dev-1", kdv1alpha1.DeviceReasonKubeletNotAllocatable))}
	v := NewHealthView(f.snapshot)
	da := func(node, pod string, st kdv1alpha1.DeviceAllocationStatus) *kdv1alpha1.DeviceAllocation {
		return &kdv1alpha1.DeviceAllocation{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: node + "." + pod},
			Spec: kdv1alpha1.DeviceAllocationSpec{NodeName: node, PodName: pod, PodUID: pod + "-uid"}, Status: st}
	}
	healthy := withHealth(heldStatus(), lookupOf(nil), nil, t0)
	released := *healthy.DeepCopy()
	meta.SetStatusCondition(&released.Conditions, metav1.Condition{Type: kdv1alpha1.DeviceAllocationReleased, Status: metav1.ConditionTrue, Reason: kdv1alpha1.ReasonPodDeleted})
	other := kdv1alpha1.DeviceAllocationStatus{Containers: []kdv1alpha1.ContainerAllocation{
		{Name: "app", Resources: []kdv1alpha1.ResourceAllocation{{ResourceName: "acme.io/other", DeviceIDs: []string{"dev-1"}}}}}}
	scheme, err := contract.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(scheme).
		WithIndex(&kdv1alpha1.DeviceAllocation{}, indexer.DeviceAllocationNodeName, func(o client.Object) []string {
			return []string{o.(*kdv1alpha1.DeviceAllocation).Spec.NodeName}
		}).
		WithObjects(
			da("n1", "stale", healthy),
			da("n1", "current", withHealth(heldStatus(), v.device, nil, t0)),
			da("n1", "released", released),
			da("n1", "other-resource", withHealth(other, lookupOf(nil), nil, t0)),
			da("n2", "other-node", healthy),
		).Build()

	got := v.Changed(t.Context(), c, "n1", []string{testResource}, t1)
	if want := []types.NamespacedName{{Namespace: "ns", Name: "stale"}}; !cmp.Equal(got, want) {
		t.Errorf("pods to reconcile: %v, want %v", got, want)
	}
	// dev-1 healthy again: the view reads the resource again, and the other pod is named.
	f.snaps = devicesOf()
	got = v.Changed(t.Context(), c, "n1", []string{testResource}, t1)
	if want := []types.NamespacedName{{Namespace: "ns", Name: "current"}}; !cmp.Equal(got, want) {
		t.Errorf("pods to reconcile after the device recovered: %v, want %v", got, want)
	}
	if got := v.Changed(t.Context(), c, "n1", []string{"acme.io/unheld"}, t1); len(got) != 0 {
		t.Errorf("pods to reconcile for a resource none holds: %v, want none", got)
	}
}
