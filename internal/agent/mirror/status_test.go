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
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
	"github.com/kubedevice/kubedevice/internal/agent/kube"
	"github.com/kubedevice/kubedevice/internal/contract"
	"github.com/kubedevice/kubedevice/internal/nodeagent"
	"github.com/kubedevice/kubedevice/internal/testutil"
)

const testResource = "example.com/gopher"

var (
	t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	t1 = t0.Add(90*time.Second + 250*time.Millisecond)
)

func devices(n int) []nodeagent.DeviceSnapshot {
	out := make([]nodeagent.DeviceSnapshot, n)
	for i := range out {
		out[i] = healthy(fmt.Sprintf("dev-%03d", i))
	}
	return out
}

func healthy(id string) nodeagent.DeviceSnapshot {
	return nodeagent.DeviceSnapshot{ID: id, Health: nodeagent.Healthy, Reason: nodeagent.ReasonReportedHealthy, Message: "ok", LastTransitionTime: t0}
}

func unhealthy(id string) nodeagent.DeviceSnapshot {
	return nodeagent.DeviceSnapshot{ID: id, Health: nodeagent.Unhealthy, Reason: nodeagent.ReasonReportedUnhealthy, Message: "bad", LastTransitionTime: t1}
}

func registered(devs ...nodeagent.DeviceSnapshot) nodeagent.ResourceSnapshot {
	return nodeagent.ResourceSnapshot{
		ResourceName: testResource,
		Endpoints:    []string{"/var/lib/kubedevice/device-plugins/gopher.sock"},
		State:        nodeagent.PluginRegistered,
		StateSince:   t0,
		Devices:      devs,
	}
}

func TestPlanShards(t *testing.T) {
	name := func(i int) string { return kube.NodeDeviceName("n1", testResource, i) }
	deleting := testutil.MakeNodeDevice("gone").Obj()
	deleting.DeletionTimestamp = &metav1.Time{Time: t0}
	cases := map[string]struct {
		devices    int
		existing   []kdv1alpha1.NodeDevice
		wantKeep   []string
		wantSizes  []int
		wantRemove []string
	}{
		"no devices yet": {devices: 0, wantKeep: []string{name(0)}, wantSizes: []int{0}},
		"one shard":      {devices: 128, wantKeep: []string{name(0)}, wantSizes: []int{128}},
		"300 devices":    {devices: 300, wantKeep: []string{name(0), name(1), name(2)}, wantSizes: []int{128, 128, 44}},
		"shrunk, surplus shard deleted": {
			devices:    10,
			existing:   []kdv1alpha1.NodeDevice{*testutil.MakeNodeDevice(name(0)).Node("n1").Obj(), *testutil.MakeNodeDevice(name(1)).Node("n1").Shard(1).Obj()},
			wantKeep:   []string{name(0)},
			wantSizes:  []int{10},
			wantRemove: []string{name(1)},
		},
		"shrunk, surplus shard with cordons kept empty": {
			devices:   10,
			existing:  []kdv1alpha1.NodeDevice{*testutil.MakeNodeDevice(name(1)).Node("n1").Shard(1).Cordon("dev-200", "fan").Obj()},
			wantKeep:  []string{name(0), name(1)},
			wantSizes: []int{10, 0},
		},
		"object being deleted left alone": {
			devices:   1,
			existing:  []kdv1alpha1.NodeDevice{*deleting},
			wantKeep:  []string{name(0)},
			wantSizes: []int{1},
		},
	}
	for tn, tc := range cases {
		t.Run(tn, func(t *testing.T) {
			keep, remove := planShards("n1", registered(devices(tc.devices)...), tc.existing)
			var gotKeep []string
			var gotSizes []int
			for i, p := range keep {
				gotKeep = append(gotKeep, p.name)
				gotSizes = append(gotSizes, len(p.devices))
				if i < len(tc.wantKeep) && p.shard != nil && int(*p.shard) != i && p.current == nil {
					t.Errorf("shard %s numbered %d, want %d", p.name, *p.shard, i)
				}
			}
			var gotRemove []string
			for _, nd := range remove {
				gotRemove = append(gotRemove, nd.Name)
			}
			if diff := cmp.Diff(tc.wantKeep, gotKeep); diff != "" {
				t.Errorf("kept shards (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantSizes, gotSizes); diff != "" {
				t.Errorf("shard sizes (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantRemove, gotRemove); diff != "" {
				t.Errorf("removed shards (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPlanShardsKeepsDeviceOrder(t *testing.T) {
	keep, _ := planShards("n1", registered(devices(300)...), nil)
	if got := keep[1].devices[0].ID; got != "dev-128" {
		t.Errorf("shard 1 starts with %s, want dev-128", got)
	}
	if got := keep[2].devices[43].ID; got != "dev-299" {
		t.Errorf("shard 2 ends with %s, want dev-299", got)
	}
}

func TestCordonedIDs(t *testing.T) {
	objs := []kdv1alpha1.NodeDevice{
		*testutil.MakeNodeDevice("a").Cordon("dev-2", "").Cordon("dev-1", "x").Obj(),
		*testutil.MakeNodeDevice("b").Shard(1).Cordon("dev-2", "again").Cordon("dev-9", "").Obj(),
		*testutil.MakeNodeDevice("c").Shard(2).Obj(),
	}
	if diff := cmp.Diff([]string{"dev-1", "dev-2", "dev-9"}, CordonedIDs(objs)); diff != "" {
		t.Errorf("cordonedIDs (-want +got):\n%s", diff)
	}
}

func TestNodeDeviceStatusCounts(t *testing.T) {
	holder := &nodeagent.DeviceHolder{PodUID: "uid-1", Namespace: "ns", PodName: "p", Container: "app"}
	allocated := healthy("dev-a")
	allocated.Holder = holder
	cordoned := healthy("dev-c")
	cordoned.Cordoned = true
	awaiting := nodeagent.DeviceSnapshot{ID: "dev-w", Health: nodeagent.Unhealthy, Reason: nodeagent.ReasonAwaitingPlugin, LastTransitionTime: t0}
	awaitingHeld := awaiting
	awaitingHeld.ID, awaitingHeld.Holder = "dev-x", holder
	disconnected := nodeagent.DeviceSnapshot{ID: "dev-d", Health: nodeagent.Unhealthy, Reason: nodeagent.ReasonPluginDisconnected, LastTransitionTime: t1}

	type counts struct{ Capacity, Allocatable, Allocated, Unhealthy, Cordoned int32 }
	type cond struct {
		Status metav1.ConditionStatus
		Reason string
	}
	cases := map[string]struct {
		snap           nodeagent.ResourceSnapshot
		want           counts
		wantRegistered cond
		wantHealthy    cond
	}{
		"all healthy": {
			snap:           registered(devices(4)...),
			want:           counts{Capacity: 4, Allocatable: 4},
			wantRegistered: cond{metav1.ConditionTrue, kdv1alpha1.ReasonPluginRegistered},
			wantHealthy:    cond{metav1.ConditionTrue, kdv1alpha1.ReasonAllDevicesHealthy},
		},
		"allocated, cordoned and unhealthy": {
			snap:           registered(allocated, healthy("dev-b"), cordoned, unhealthy("dev-u")),
			want:           counts{Capacity: 4, Allocatable: 2, Allocated: 1, Unhealthy: 1, Cordoned: 1},
			wantRegistered: cond{metav1.ConditionTrue, kdv1alpha1.ReasonPluginRegistered},
			wantHealthy:    cond{metav1.ConditionFalse, kdv1alpha1.ReasonUnhealthyDevices},
		},
		"disconnected": {
			snap: nodeagent.ResourceSnapshot{ResourceName: testResource, State: nodeagent.PluginDisconnected, StateSince: t1,
				Devices: []nodeagent.DeviceSnapshot{disconnected}},
			want:           counts{Capacity: 1, Unhealthy: 1},
			wantRegistered: cond{metav1.ConditionFalse, kdv1alpha1.ReasonPluginDisconnected},
			wantHealthy:    cond{metav1.ConditionFalse, kdv1alpha1.ReasonPluginDisconnected},
		},
		"the plugin's list refused, none accepted": {
			snap: func() nodeagent.ResourceSnapshot {
				s := registered()
				s.Rejected = &nodeagent.ListRejection{Reason: "DuplicateDeviceID", Message: `device ID "\x00" is listed more than once`, At: t1}
				return s
			}(),
			want:           counts{},
			wantRegistered: cond{metav1.ConditionTrue, kdv1alpha1.ReasonPluginRegistered},
			wantHealthy:    cond{metav1.ConditionFalse, kdv1alpha1.ReasonDeviceListRejected},
		},
		"restored, awaiting the plugin": {
			snap: nodeagent.ResourceSnapshot{ResourceName: testResource, State: nodeagent.PluginDisconnected, StateSince: t1,
				Devices: []nodeagent.DeviceSnapshot{awaiting, awaitingHeld}},
			want:           counts{Capacity: 2, Allocated: 1, Unhealthy: 2},
			wantRegistered: cond{metav1.ConditionFalse, kdv1alpha1.ReasonAwaitingPluginRegistration},
			wantHealthy:    cond{metav1.ConditionFalse, kdv1alpha1.ReasonPluginDisconnected},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			st := nodeDeviceStatus(tc.snap, tc.snap.Devices, nil, nodeagent.CheckpointInfo{}, 3, t1)
			got := counts{st.Capacity, st.Allocatable, st.Allocated, st.Unhealthy, st.Cordoned}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("counts (-want +got):\n%s", diff)
			}
			for _, c := range []struct {
				typ  string
				want cond
			}{{kdv1alpha1.NodeDeviceRegistered, tc.wantRegistered}, {kdv1alpha1.NodeDeviceHealthy, tc.wantHealthy}} {
				var found *metav1.Condition
				for i := range st.Conditions {
					if st.Conditions[i].Type == c.typ {
						found = &st.Conditions[i]
					}
				}
				if found == nil {
					t.Fatalf("no %s condition in %+v", c.typ, st.Conditions)
				}
				if diff := cmp.Diff(c.want, cond{found.Status, found.Reason}); diff != "" {
					t.Errorf("%s condition (-want +got):\n%s", c.typ, diff)
				}
				if found.ObservedGeneration != 3 {
					t.Errorf("%s observedGeneration = %d, want 3", c.typ, found.ObservedGeneration)
				}
			}
			if st.ObservedGeneration != 3 {
				t.Errorf("observedGeneration = %d, want 3", st.ObservedGeneration)
			}
		})
	}
}

func TestNodeDeviceStatusDevices(t *testing.T) {
	held := healthy("dev-a")
	held.Holder = &nodeagent.DeviceHolder{PodUID: "uid-1", Namespace: "ns", PodName: "p", Container: "app"}
	held.NUMANodes = []int64{0, 1}
	held.Cordoned = true
	snap := registered(held)
	snap.Options = nodeagent.PluginOptions{PreStartRequired: true}
	info := nodeagent.CheckpointInfo{BootID: "boot-1", LastWrite: t1}

	st := nodeDeviceStatus(snap, snap.Devices, nil, info, 1, t1)
	want := []kdv1alpha1.DeviceStatus{{
		ID: "dev-a", Health: kdv1alpha1.DeviceHealthy, Reason: "Healthy", Message: "ok",
		LastTransitionTime: &metav1.Time{Time: t0}, NUMANodes: []int64{0, 1}, Cordoned: true,
		Holder: &kdv1alpha1.DeviceHolder{Namespace: "ns", PodName: "p", PodUID: "uid-1", ContainerName: "app"},
	}}
	if diff := cmp.Diff(want, st.Devices); diff != "" {
		t.Errorf("devices (-want +got):\n%s", diff)
	}
	wantPlugin := &kdv1alpha1.PluginStatus{
		Endpoint: snap.Endpoints[0], State: kdv1alpha1.PluginStateRegistered, Since: &metav1.Time{Time: t0}, PreStartRequired: true,
	}
	if diff := cmp.Diff(wantPlugin, st.Plugin); diff != "" {
		t.Errorf("plugin (-want +got):\n%s", diff)
	}
	wantCkpt := &kdv1alpha1.CheckpointStatus{BootID: "boot-1", LastWriteTime: &metav1.Time{Time: t1.Truncate(time.Second)}}
	if diff := cmp.Diff(wantCkpt, st.Checkpoint); diff != "" {
		t.Errorf("checkpoint (-want +got):\n%s", diff)
	}
}

// A restart of the agent gives every device and the plugin new timestamps in the core; the status
// keeps the devices' times the cluster already has while nothing they date changed, and moves the
// plugin's since: the plugin registered again, and the cluster is to see it.
func TestNodeDeviceStatusKeepsPublishedTimes(t *testing.T) {
	snap := registered(healthy("dev-a"), unhealthy("dev-b"))
	first := nodeDeviceStatus(snap, snap.Devices, nil, nodeagent.CheckpointInfo{BootID: "b", LastWrite: t0}, 1, t0)
	current := &kdv1alpha1.NodeDevice{ObjectMeta: metav1.ObjectMeta{Generation: 1}, Status: first}
	// The controller's condition is not the agent's to compare.
	current.Status.Conditions = append(current.Status.Conditions, metav1.Condition{
		Type: kdv1alpha1.NodeDeviceAgentReady, Status: metav1.ConditionTrue, Reason: kdv1alpha1.ReasonAgentLeaseValid, LastTransitionTime: metav1.Time{Time: t0},
	})

	later := t0.Add(time.Hour)
	restarted := registered(healthy("dev-a"), unhealthy("dev-b"))
	restarted.StateSince = later
	for i := range restarted.Devices {
		restarted.Devices[i].LastTransitionTime = later
	}
	again := nodeDeviceStatus(restarted, restarted.Devices, current, nodeagent.CheckpointInfo{BootID: "b", LastWrite: later}, 1, later)
	if got := again.Plugin.Since; got == nil || !got.Time.Equal(later) {
		t.Errorf("plugin since = %v, want the registration after the restart, %v", got, later)
	}
	again.Plugin.Since = current.Status.Plugin.Since
	if !nodeDeviceStatusUpToDate(current, again) {
		t.Errorf("status after a restart differs from the published one in more than the plugin's since:\n%s", cmp.Diff(current.Status, again))
	}

	// A real change moves the device's time, and the Healthy condition's.
	changed := registered(healthy("dev-a"), healthy("dev-b"))
	changed.Devices[1].LastTransitionTime = later
	st := nodeDeviceStatus(changed, changed.Devices, current, nodeagent.CheckpointInfo{}, 1, later)
	if nodeDeviceStatusUpToDate(current, st) {
		t.Fatal("a device turning healthy is not a change")
	}
	if got := st.Devices[1].LastTransitionTime.Time; !got.Equal(later) {
		t.Errorf("dev-b lastTransitionTime = %v, want %v", got, later)
	}
	if got := st.Devices[0].LastTransitionTime.Time; !got.Equal(t0) {
		t.Errorf("dev-a lastTransitionTime = %v, want the published %v", got, t0)
	}
	for _, c := range st.Conditions {
		if c.Type == kdv1alpha1.NodeDeviceHealthy && !c.LastTransitionTime.Time.Equal(later) {
			t.Errorf("Healthy lastTransitionTime = %v, want %v", c.LastTransitionTime, later)
		}
		if c.Type == kdv1alpha1.NodeDeviceRegistered && !c.LastTransitionTime.Time.Equal(t0) {
			t.Errorf("Registered lastTransitionTime = %v, want the published %v", c.LastTransitionTime, t0)
		}
	}
}

func TestNodeDeviceStatusUpToDate(t *testing.T) {
	snap := registered(devices(2)...)
	st := nodeDeviceStatus(snap, snap.Devices, nil, nodeagent.CheckpointInfo{}, 1, t0)
	current := &kdv1alpha1.NodeDevice{Status: st}
	if nodeDeviceStatusUpToDate(nil, st) {
		t.Error("a missing object is up to date")
	}
	if !nodeDeviceStatusUpToDate(current, *st.DeepCopy()) {
		t.Error("the same status is not up to date")
	}
	gen := st.DeepCopy()
	gen.ObservedGeneration = 2
	if nodeDeviceStatusUpToDate(current, *gen) {
		t.Error("a new observedGeneration (a cordon changed) is not a change")
	}
}

func TestNodeDeviceMetaUpToDate(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: types.UID("node-uid")}}
	good := &kdv1alpha1.NodeDevice{
		ObjectMeta: metav1.ObjectMeta{
			Labels:          map[string]string{kdv1alpha1.LabelNodeName: "n1", kdv1alpha1.LabelResourceName: kube.LabelValue(testResource), "team": "x"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: "n1", UID: "node-uid"}},
			Finalizers:      []string{"example.com/other", contract.NodeCapacityFinalizer},
		},
		Spec: kdv1alpha1.NodeDeviceSpec{NodeName: "n1", ResourceName: testResource, Shard: ptr.To[int32](0)},
	}
	if !nodeDeviceMetaUpToDate(good, node, testResource, ptr.To[int32](0)) {
		t.Error("an object with everything the agent applies (and a foreign label) is not up to date")
	}
	recreated := node.DeepCopy()
	recreated.UID = "new-uid"
	if nodeDeviceMetaUpToDate(good, recreated, testResource, ptr.To[int32](0)) {
		t.Error("an owner reference to a Node since replaced is up to date")
	}
	noLabel := good.DeepCopy()
	delete(noLabel.Labels, kdv1alpha1.LabelResourceName)
	if nodeDeviceMetaUpToDate(noLabel, node, testResource, ptr.To[int32](0)) {
		t.Error("an object without the resource label is up to date")
	}
	if nodeDeviceMetaUpToDate(good, node, testResource, nil) {
		t.Error("a different shard is up to date")
	}
	noFinalizer := good.DeepCopy()
	noFinalizer.Finalizers = []string{"example.com/other"}
	if nodeDeviceMetaUpToDate(noFinalizer, node, testResource, ptr.To[int32](0)) {
		t.Error("an object without the node-capacity finalizer (made by an earlier agent) is up to date")
	}
}

func TestWithAgentReady(t *testing.T) {
	seeded := withAgentReady(kdv1alpha1.NodeDeviceStatus{}, nil, "ns", "n1", 3, t0)
	want := contract.AgentReadyCondition("ns", "n1", 3)
	want.LastTransitionTime = metav1.NewTime(t0)
	if len(seeded.Conditions) != 1 || !equality.Semantic.DeepEqual(seeded.Conditions[0], want) {
		t.Fatalf("a new shard's AgentReady = %+v, want %+v", seeded.Conditions, want)
	}

	// The controller's valid-Lease condition is the same: kept, transition time and all, at the
	// generation the agent writes.
	current := &kdv1alpha1.NodeDevice{Status: kdv1alpha1.NodeDeviceStatus{Conditions: []metav1.Condition{seeded.Conditions[0]}}}
	later := withAgentReady(kdv1alpha1.NodeDeviceStatus{}, current, "ns", "n1", 4, t0.Add(time.Hour))
	if c := later.Conditions[0]; c.ObservedGeneration != 4 || !c.LastTransitionTime.Time.Equal(t0) || c.Status != metav1.ConditionTrue {
		t.Errorf("AgentReady kept = %+v, want True at generation 4 since %v", c, t0)
	}

	// The controller found the Lease expired: the agent carries its verdict unchanged.
	expired := metav1.Condition{Type: kdv1alpha1.NodeDeviceAgentReady, Status: metav1.ConditionFalse,
		Reason: kdv1alpha1.ReasonAgentLeaseExpired, Message: "expired", ObservedGeneration: 2, LastTransitionTime: metav1.NewTime(t0)}
	current.Status.Conditions = []metav1.Condition{expired}
	carried := withAgentReady(kdv1alpha1.NodeDeviceStatus{}, current, "ns", "n1", 4, t0.Add(time.Hour))
	if !equality.Semantic.DeepEqual(carried.Conditions, []metav1.Condition{expired}) {
		t.Errorf("AgentReady over the controller's False = %+v, want it unchanged", carried.Conditions)
	}
}

// A resource restored from the checkpoint has no plugin to ask yet: its NodeDevice keeps the
// endpoint and options the last plugin gave, and since the plugin disconnected, until one
// registers again.
func TestNodeDeviceStatusRestoredKeepsPlugin(t *testing.T) {
	current := &kdv1alpha1.NodeDevice{Status: kdv1alpha1.NodeDeviceStatus{Plugin: &kdv1alpha1.PluginStatus{
		Endpoint: "/var/lib/kubedevice/device-plugins/gopher.sock", State: kdv1alpha1.PluginStateRegistered,
		Since: &metav1.Time{Time: t0}, PreStartRequired: true, GetPreferredAllocationAvailable: true,
	}}}
	restored := nodeagent.ResourceSnapshot{ResourceName: testResource, State: nodeagent.PluginDisconnected, StateSince: t1,
		Devices: []nodeagent.DeviceSnapshot{{ID: "dev-w", Health: nodeagent.Unhealthy, Reason: nodeagent.ReasonAwaitingPlugin, LastTransitionTime: t1}}}
	st := nodeDeviceStatus(restored, restored.Devices, current, nodeagent.CheckpointInfo{}, 1, t1)
	want := &kdv1alpha1.PluginStatus{
		Endpoint: current.Status.Plugin.Endpoint, State: kdv1alpha1.PluginStateDisconnected,
		Since: &metav1.Time{Time: t1.Truncate(time.Second)}, PreStartRequired: true, GetPreferredAllocationAvailable: true,
	}
	if diff := cmp.Diff(want, st.Plugin); diff != "" {
		t.Errorf("plugin (-want +got):\n%s", diff)
	}

	// Written once as disconnected, a second restart keeps that since.
	current.Status = st
	later := nodeagent.ResourceSnapshot{ResourceName: testResource, State: nodeagent.PluginDisconnected, StateSince: t1.Add(time.Hour),
		Devices: restored.Devices}
	if got := nodeDeviceStatus(later, later.Devices, current, nodeagent.CheckpointInfo{}, 1, t1.Add(time.Hour)).Plugin; !cmp.Equal(want, got) {
		t.Errorf("plugin after a second restart (-want +got):\n%s", cmp.Diff(want, got))
	}
}

// A refused device list is said on the Healthy condition, with the offending value quoted: never
// "All 0 devices are healthy".
func TestHealthyConditionSaysTheListWasRefused(t *testing.T) {
	snap := registered()
	snap.Rejected = &nodeagent.ListRejection{Reason: "DuplicateDeviceID", Message: `device ID "\x00" is listed more than once`, At: t1}
	c := healthyCondition(snap, kdv1alpha1.NodeDeviceStatus{}, 1)
	want := `The agent refused the device plugin's latest device list (DuplicateDeviceID): device ID "\x00" is listed more than once. ` +
		`Listed are the 0 devices of the last list it accepted.`
	if c.Message != want {
		t.Errorf("message = %q, want %q", c.Message, want)
	}
}
