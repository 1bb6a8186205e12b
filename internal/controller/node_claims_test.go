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
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
	"github.com/kubedevice/kubedevice/internal/contract"
)

// managedEntry is a managed fields entry of a nodes/status write by manager.
func managedEntry(manager, fields string) metav1.ManagedFieldsEntry {
	t := metav1.NewTime(testNow)
	return metav1.ManagedFieldsEntry{
		Manager: manager, Operation: metav1.ManagedFieldsOperationUpdate, Subresource: "status", APIVersion: "v1",
		Time: &t, FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(fields),
	}
}

// The kubelet's entry lists far more than resources; its shape is the API server's.
const kubeletFields = `{"f:status":{"f:allocatable":{"f:cpu":{},"f:example.com/gopher":{}},` +
	`"f:capacity":{".":{},"f:cpu":{},"f:example.com/gopher":{}},` +
	`"f:conditions":{"k:{\"type\":\"Ready\"}":{"f:lastHeartbeatTime":{}}},"f:images":{}}}`

func TestNodeResourceOwners(t *testing.T) {
	managed := []metav1.ManagedFieldsEntry{
		managedEntry("kubelet", kubeletFields),
		managedEntry(contract.ControllerFieldOwner, `{"f:status":{"f:capacity":{"f:example.com/gopher":{}}}}`),
		managedEntry("kubectl", `{"f:metadata":{"f:labels":{"f:a":{}}}}`),
		{Manager: "broken", FieldsV1: metav1.NewFieldsV1(`{`)},
		{Manager: "none"},
	}
	want := map[corev1.ResourceName]resourceOwners{
		"cpu": {capacity: []string{"kubelet"}, allocatable: []string{"kubelet"}},
		"example.com/gopher": {
			capacity:    []string{"kubedevice-controller", "kubelet"},
			allocatable: []string{"kubelet"},
		},
	}
	if diff := cmp.Diff(want, nodeResourceOwners(managed), cmp.AllowUnexported(resourceOwners{})); diff != "" {
		t.Errorf("nodeResourceOwners (-want +got):\n%s", diff)
	}
}

func TestStripNodeKeepsResourceOwners(t *testing.T) {
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n1", ManagedFields: []metav1.ManagedFieldsEntry{
			managedEntry("kubelet", kubeletFields),
			managedEntry("kubectl", `{"f:metadata":{"f:labels":{"f:a":{}}}}`),
			managedEntry(contract.ControllerFieldOwner, `{"f:status":{"f:capacity":{"f:example.com/gopher":{}}}}`),
		}},
		Status: corev1.NodeStatus{Images: []corev1.ContainerImage{{Names: []string{"busybox"}}}},
	}
	out, err := stripNode(node)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*corev1.Node)
	want := managedEntry("kubelet", `{"f:status":{"f:capacity":{"f:cpu":{},"f:example.com/gopher":{}},`+
		`"f:allocatable":{"f:cpu":{},"f:example.com/gopher":{}}}}`)
	want.Time = nil
	ours := managedEntry(contract.ControllerFieldOwner, `{"f:status":{"f:capacity":{"f:example.com/gopher":{}}}}`)
	ours.Time = nil
	// Sorted by manager: the API server's order (by time) changes with the kubelet's heartbeats.
	if diff := cmp.Diff([]metav1.ManagedFieldsEntry{ours, want}, got.ManagedFields); diff != "" {
		t.Errorf("managed fields (-want +got):\n%s", diff)
	}
	if got.Status.Images != nil {
		t.Errorf("images kept: %v", got.Status.Images)
	}
	if diff := cmp.Diff(nodeResourceOwners(node.ManagedFields), nodeResourceOwners(got.ManagedFields),
		cmp.AllowUnexported(resourceOwners{})); diff != "" {
		t.Errorf("owners changed by the transform (-before +after):\n%s", diff)
	}
}

// owned says who owns the keys of a resource: capacity's owners, then allocatable's.
func owned(capacity, allocatable string) resourceOwners {
	o := resourceOwners{}
	if capacity != "" {
		o.capacity = []string{capacity}
	}
	if allocatable != "" {
		o.allocatable = []string{allocatable}
	}
	return o
}

// capacityOf is a node status publishing gopher at capacity c and allocatable a.
func capacityOf(c, a string) corev1.NodeStatus {
	return corev1.NodeStatus{
		Capacity:    corev1.ResourceList{gopher: resource.MustParse(c)},
		Allocatable: corev1.ResourceList{gopher: resource.MustParse(a)},
	}
}

// step is one reconcile's view of the gopher resource and the hold it must make, "" for none.
type step struct {
	status corev1.NodeStatus
	owners resourceOwners
	at     time.Duration
	// published is what the controller's patch left owning the resource, when it patched.
	published *resourceOwners
	want      string
	manager   string
}

func TestJudge(t *testing.T) {
	names := []corev1.ResourceName{gopher}
	ours := owned(FieldOwner, FieldOwner)
	kubelet := owned("kubelet", "kubelet")
	cases := map[string][]step{
		"nobody's resource is published": {{status: corev1.NodeStatus{}}},
		"the controller's own values are no claim": {
			{status: capacityOf("2", "2"), owners: ours},
			{status: capacityOf("3", "3"), owners: ours},
		},
		"nor are the cleanup's": {{status: capacityOf("2", "2"), owners: owned(contract.CleanupFieldOwner, "")}},
		"the kubelet during its grace period, then at its end": {
			{status: capacityOf("2", "2"), owners: kubelet, want: kdv1alpha1.ReasonKubeletDeviceManagerOwnsResource, manager: "kubelet"},
			{status: capacityOf("2", "0"), owners: kubelet, want: kdv1alpha1.ReasonKubeletDeviceManagerOwnsResource, manager: "kubelet"},
			{status: capacityOf("0", "0"), owners: kubelet, published: &ours},
			{status: capacityOf("2", "2"), owners: ours},
		},
		"the kubelet's capacity, allocatable ours after the flapping of an earlier controller": {
			{status: capacityOf("2", "2"), owners: owned("kubelet", FieldOwner), want: kdv1alpha1.ReasonKubeletDeviceManagerOwnsResource, manager: "kubelet"},
		},
		"a kubelet whose grace period ended long ago": {
			{status: capacityOf("0", "0"), owners: kubelet, published: &ours},
		},
		"another manager's count, until it is removed": {
			{status: capacityOf("5", "5"), owners: owned("", "kubectl-patch"), want: kdv1alpha1.ReasonAnotherManagerOwnsResource, manager: "kubectl-patch"},
			{status: corev1.NodeStatus{}},
		},
		"the kubelet taking a published resource back, held for its grace period": {
			{status: capacityOf("0", "0"), owners: kubelet, published: &ours},
			{status: capacityOf("0", "0"), owners: kubelet, at: time.Second, want: kdv1alpha1.ReasonResourceTakenBack, manager: "kubelet"},
			{status: corev1.NodeStatus{}, at: 2 * time.Second, want: kdv1alpha1.ReasonResourceTakenBack, manager: "kubelet"},
			{status: capacityOf("0", "0"), owners: kubelet, at: takeBackHold, want: kdv1alpha1.ReasonResourceTakenBack, manager: "kubelet"},
			{status: capacityOf("0", "0"), owners: kubelet, at: takeBackHold + time.Second, published: &ours},
			{status: capacityOf("2", "2"), owners: ours, at: takeBackHold + 2*time.Second},
		},
		"a resource ours in the last reconcile, the kubelet's 0 now": {
			{status: capacityOf("2", "2"), owners: ours},
			{status: capacityOf("0", "0"), owners: kubelet, want: kdv1alpha1.ReasonResourceTakenBack, manager: "kubelet"},
		},
	}
	for name, steps := range cases {
		t.Run(name, func(t *testing.T) {
			c := newNodeClaims()
			for i, s := range steps {
				holds := c.judge(s.status, map[corev1.ResourceName]resourceOwners{gopher: s.owners}, names, testNow.Add(s.at))
				h, held := holds[gopher]
				if got := h.reason; got != s.want || held != (s.want != "") || h.manager != s.manager {
					t.Fatalf("step %d: hold %+v (held %t), want reason %q by %q", i, h, held, s.want, s.manager)
				}
				if s.published != nil {
					c.published(map[corev1.ResourceName]resourceOwners{gopher: *s.published}, names)
				}
			}
		})
	}
}

func TestJudgeTakenBackUntil(t *testing.T) {
	c := newNodeClaims()
	names := []corev1.ResourceName{gopher}
	c.published(map[corev1.ResourceName]resourceOwners{gopher: owned(FieldOwner, FieldOwner)}, names)
	holds := c.judge(capacityOf("0", "0"), map[corev1.ResourceName]resourceOwners{gopher: owned("kubelet", "kubelet")}, names, testNow)
	if got, want := holds[gopher].until, testNow.Add(takeBackHold); !got.Equal(want) {
		t.Errorf("until = %s, want %s", got, want)
	}
	if got := requeueAfter(agentState{ready: true, expiresIn: time.Hour}, holds, testNow).RequeueAfter; got != takeBackHold+time.Millisecond {
		t.Errorf("requeue after %s, want the hold's end", got)
	}

	c.keepOnly(map[corev1.ResourceName]bool{})
	if holds := c.judge(capacityOf("0", "0"), map[corev1.ResourceName]resourceOwners{gopher: owned("kubelet", "kubelet")}, names, testNow); len(holds) > 0 {
		t.Errorf("a forgotten resource is still held: %v", holds)
	}
}

func TestPlanWithoutHolds(t *testing.T) {
	plan := capacityPlan{
		publish:  map[corev1.ResourceName]int64{gopher: 2, "example.com/other": 1},
		withdraw: []corev1.ResourceName{"example.com/dra", "example.com/dra2"},
	}
	if diff := cmp.Diff([]corev1.ResourceName{"example.com/dra", "example.com/dra2", gopher, "example.com/other"}, plan.names(),
		cmpopts.SortSlices(func(a, b corev1.ResourceName) bool { return a < b })); diff != "" {
		t.Errorf("names (-want +got):\n%s", diff)
	}
	got := plan.without(map[corev1.ResourceName]resourceHold{gopher: {}, "example.com/dra": {}})
	want := capacityPlan{publish: map[corev1.ResourceName]int64{"example.com/other": 1}, withdraw: []corev1.ResourceName{"example.com/dra2"}}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(capacityPlan{})); diff != "" {
		t.Errorf("without (-want +got):\n%s", diff)
	}
}

func TestCapacityCondition(t *testing.T) {
	now := metav1.NewTime(testNow)
	then := metav1.NewTime(testNow.Add(-time.Hour))
	held := map[corev1.ResourceName]resourceHold{gopher: {reason: kdv1alpha1.ReasonKubeletDeviceManagerOwnsResource, manager: "kubelet", capacity: "2", allocatable: "0"}}
	heldCond := &metav1.Condition{Type: kdv1alpha1.NodeDeviceNodeCapacityPublished, Status: metav1.ConditionFalse,
		Reason: kdv1alpha1.ReasonKubeletDeviceManagerOwnsResource, LastTransitionTime: then}
	cases := map[string]struct {
		nd         kdv1alpha1.NodeDevice
		holds      map[corev1.ResourceName]resourceHold
		got        *metav1.Condition
		wantStatus metav1.ConditionStatus
		wantReason string
		wantTime   metav1.Time
	}{
		"held":                               {nd: nd("a", gopher, 2, false), holds: held, wantStatus: metav1.ConditionFalse, wantReason: kdv1alpha1.ReasonKubeletDeviceManagerOwnsResource, wantTime: now},
		"still held keeps its time":          {nd: nd("a", gopher, 2, false), holds: held, got: heldCond, wantStatus: metav1.ConditionFalse, wantReason: kdv1alpha1.ReasonKubeletDeviceManagerOwnsResource, wantTime: then},
		"never held: none":                   {nd: nd("a", gopher, 2, false)},
		"published after a hold":             {nd: nd("a", gopher, 2, false), got: heldCond, wantStatus: metav1.ConditionTrue, wantReason: kdv1alpha1.ReasonNodeCapacityPublished, wantTime: now},
		"observed after a hold: removed":     {nd: withPath(nd("a", gopher, 2, false), kdv1alpha1.DevicePathObserved), got: heldCond},
		"served through DRA after a hold":    {nd: withPath(nd("a", gopher, 2, false), kdv1alpha1.DevicePathDRA), got: heldCond},
		"a DRA resource held from withdrawn": {nd: withPath(nd("a", gopher, 2, false), kdv1alpha1.DevicePathDRA), holds: held, wantStatus: metav1.ConditionFalse, wantReason: kdv1alpha1.ReasonKubeletDeviceManagerOwnsResource, wantTime: now},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c := capacityCondition("n1", &tc.nd, tc.holds, tc.got, now)
			if tc.wantStatus == "" {
				if c != nil {
					t.Fatalf("condition %+v, want none", c)
				}
				return
			}
			if c == nil || c.Status != tc.wantStatus || c.Reason != tc.wantReason || !c.LastTransitionTime.Equal(&tc.wantTime) || c.Message == "" {
				t.Fatalf("condition %+v, want %s/%s since %s with a message", c, tc.wantStatus, tc.wantReason, tc.wantTime)
			}
		})
	}
}

// heldSeries counts the series of kubedevice_node_capacity_held of node.
func heldSeries(t *testing.T, node string) int {
	t.Helper()
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range families {
		if f.GetName() != "kubedevice_node_capacity_held" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "node" && l.GetValue() == node {
					n++
				}
			}
		}
	}
	return n
}

func TestRecordHolds(t *testing.T) {
	const nodeName = "record-holds-n1"
	rec := events.NewFakeRecorder(10)
	r := &nodeReconciler{recorder: rec, claims: map[string]*nodeClaims{}}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName}}
	shard := nd("a", gopher, 2, false)
	kubelet := map[corev1.ResourceName]resourceHold{gopher: {reason: kdv1alpha1.ReasonKubeletDeviceManagerOwnsResource, manager: "kubelet"}}
	judged := map[corev1.ResourceName]bool{gopher: true}
	steps := []struct {
		name   string
		nds    []kdv1alpha1.NodeDevice
		holds  map[corev1.ResourceName]resourceHold
		judged map[corev1.ResourceName]bool
		event  string
		series int
	}{
		{"a hold starts", []kdv1alpha1.NodeDevice{shard}, kubelet, judged, "Warning " + kdv1alpha1.ReasonKubeletDeviceManagerOwnsResource, 1},
		{"it goes on", []kdv1alpha1.NodeDevice{shard}, kubelet, judged, "", 1},
		{"not judged while a new shard settles: kept", []kdv1alpha1.NodeDevice{shard}, nil, nil, "", 1},
		{"it ends", []kdv1alpha1.NodeDevice{shard}, nil, judged, "Normal " + kdv1alpha1.ReasonNodeCapacityPublished, 0},
		{"a hold again", []kdv1alpha1.NodeDevice{shard}, kubelet, judged, "Warning " + kdv1alpha1.ReasonKubeletDeviceManagerOwnsResource, 1},
		{"the resource observed now: dropped without a word", []kdv1alpha1.NodeDevice{withPath(shard, kdv1alpha1.DevicePathObserved)}, nil, nil, "", 0},
	}
	for _, s := range steps {
		r.recordHolds(node, s.nds, s.holds, s.judged)
		got := ""
		select {
		case e := <-rec.Events:
			got = e
		default:
		}
		if s.event == "" && got != "" || s.event != "" && !strings.HasPrefix(got, s.event) {
			t.Errorf("%s: event %q, want %q", s.name, got, s.event)
		}
		if n := heldSeries(t, nodeName); n != s.series {
			t.Errorf("%s: %d series of the held gauge, want %d", s.name, n, s.series)
		}
	}
	r.forgetClaims(nodeName)
}
