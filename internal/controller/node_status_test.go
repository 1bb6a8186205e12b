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
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
)

const gopher = "example.com/gopher"

// nd returns a NodeDevice of node n1 with allocatable devices, terminating when deleting is set.
func nd(name, resourceName string, allocatable int32, deleting bool, finalizers ...string) kdv1alpha1.NodeDevice {
	o := kdv1alpha1.NodeDevice{
		ObjectMeta: metav1.ObjectMeta{Name: name, Finalizers: finalizers},
		Spec:       kdv1alpha1.NodeDeviceSpec{NodeName: "n1", ResourceName: resourceName},
		Status:     kdv1alpha1.NodeDeviceStatus{ObservedGeneration: 1, Allocatable: allocatable},
	}
	if deleting {
		t := metav1.NewTime(testNow)
		o.DeletionTimestamp = &t
	}
	return o
}

// withPath returns o with its status path set.
func withPath(o kdv1alpha1.NodeDevice, path kdv1alpha1.DevicePath) kdv1alpha1.NodeDevice {
	o.Status.Path = path
	return o
}

func nodeStatus(kv ...string) corev1.NodeStatus {
	s := corev1.NodeStatus{Capacity: corev1.ResourceList{}, Allocatable: corev1.ResourceList{}}
	for i := 0; i+1 < len(kv); i += 2 {
		s.Capacity[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
		s.Allocatable[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return s
}

func TestDesiredCapacity(t *testing.T) {
	cases := map[string]struct {
		status     corev1.NodeStatus
		nds        []kdv1alpha1.NodeDevice
		agentReady bool
		want       map[corev1.ResourceName]int64
		withdraw   []corev1.ResourceName
	}{
		"one NodeDevice": {
			nds: []kdv1alpha1.NodeDevice{nd("a", gopher, 4, false, NodeCapacityFinalizer)}, agentReady: true,
			want: map[corev1.ResourceName]int64{gopher: 4},
		},
		"devices pods hold count when nothing is allocatable (plugin not back), per shard": {
			nds: func() []kdv1alpha1.NodeDevice {
				awaiting := nd("a-0", gopher, 0, false, NodeCapacityFinalizer)
				awaiting.Status.Capacity, awaiting.Status.Allocated = 128, 3
				partly := nd("a-1", gopher, 1, false, NodeCapacityFinalizer)
				partly.Status.Capacity, partly.Status.Allocated = 4, 2
				healthy := nd("b", "example.com/other", 4, false, NodeCapacityFinalizer)
				healthy.Status.Capacity, healthy.Status.Allocated = 4, 2
				return []kdv1alpha1.NodeDevice{awaiting, partly, healthy}
			}(),
			agentReady: true,
			want:       map[corev1.ResourceName]int64{gopher: 5, "example.com/other": 4},
		},
		"only the devices pods hold while the agent is not ready, per shard, so a restarting kubelet admits its running pods again": {
			nds: func() []kdv1alpha1.NodeDevice {
				held := nd("a-0", gopher, 4, false, NodeCapacityFinalizer)
				held.Status.Capacity, held.Status.Allocated = 4, 3
				other := nd("a-1", gopher, 2, false, NodeCapacityFinalizer)
				other.Status.Capacity, other.Status.Allocated = 2, 1
				free := nd("b", "example.com/other", 4, false, NodeCapacityFinalizer)
				free.Status.Capacity = 4
				return []kdv1alpha1.NodeDevice{held, other, free}
			}(),
			want: map[corev1.ResourceName]int64{gopher: 4, "example.com/other": 0},
		},
		"shards are summed, resources kept apart": {
			nds: []kdv1alpha1.NodeDevice{
				nd("a-0", gopher, 128, false, NodeCapacityFinalizer), nd("a-1", gopher, 3, false, NodeCapacityFinalizer),
				nd("b", "example.com/other", 1, false, NodeCapacityFinalizer),
			},
			agentReady: true,
			want:       map[corev1.ResourceName]int64{gopher: 131, "example.com/other": 1},
		},
		"a shard whose status the agent has not written holds its resource back": {
			nds: func() []kdv1alpha1.NodeDevice {
				created := nd("b", "example.com/other", 0, false, NodeCapacityFinalizer)
				created.Status = kdv1alpha1.NodeDeviceStatus{}
				return []kdv1alpha1.NodeDevice{nd("a", gopher, 4, false, NodeCapacityFinalizer), created}
			}(),
			agentReady: true,
			want:       map[corev1.ResourceName]int64{gopher: 4},
		},
		"agent away: every resource at zero": {
			nds: []kdv1alpha1.NodeDevice{
				nd("a-0", gopher, 4, false, NodeCapacityFinalizer), nd("b", "example.com/other", 1, false, NodeCapacityFinalizer),
			},
			want: map[corev1.ResourceName]int64{gopher: 0, "example.com/other": 0},
		},
		"a terminating shard no longer counts": {
			nds: []kdv1alpha1.NodeDevice{
				nd("a-0", gopher, 4, false, NodeCapacityFinalizer), nd("a-1", gopher, 2, true, NodeCapacityFinalizer),
			},
			agentReady: true,
			want:       map[corev1.ResourceName]int64{gopher: 4},
		},
		"a shard without the finalizer holds its resource back until it counts": {
			nds: []kdv1alpha1.NodeDevice{
				nd("a-0", gopher, 4, false, NodeCapacityFinalizer), nd("a-1", gopher, 2, false), nd("b", "example.com/other", 1, false),
				nd("c", "example.com/third", 3, false, NodeCapacityFinalizer),
			},
			agentReady: true,
			want:       map[corev1.ResourceName]int64{"example.com/third": 3},
		},
		"a terminating shard and a new one without the finalizer: the published count is kept, not zeroed": {
			status:     nodeStatus(gopher, "4"),
			nds:        []kdv1alpha1.NodeDevice{nd("a-0", gopher, 4, true, NodeCapacityFinalizer), nd("a-1", gopher, 4, false)},
			agentReady: true,
			want:       map[corev1.ResourceName]int64{},
		},
		"the last NodeDevice terminating: zero while the node publishes the resource": {
			status: nodeStatus(gopher, "4"),
			nds:    []kdv1alpha1.NodeDevice{nd("a", gopher, 4, true)}, agentReady: true,
			want: map[corev1.ResourceName]int64{gopher: 0},
		},
		"the last NodeDevice terminating, resource never published: not added": {
			status: nodeStatus("cpu", "4"),
			nds:    []kdv1alpha1.NodeDevice{nd("a", gopher, 4, true)}, agentReady: true,
			want: map[corev1.ResourceName]int64{},
		},
		"a resource served through DRA is withdrawn from the node, others kept": {
			status: nodeStatus(gopher, "4", "example.com/other", "1"),
			nds: []kdv1alpha1.NodeDevice{
				withPath(nd("a-0", gopher, 4, false, NodeCapacityFinalizer), kdv1alpha1.DevicePathDRA),
				withPath(nd("a-1", gopher, 4, false, NodeCapacityFinalizer), kdv1alpha1.DevicePathDRA),
				nd("b", "example.com/other", 2, false, NodeCapacityFinalizer),
			},
			agentReady: true,
			want:       map[corev1.ResourceName]int64{"example.com/other": 2},
			withdraw:   []corev1.ResourceName{gopher},
		},
		"a resource served through DRA that the node does not publish: nothing to do": {
			status:     nodeStatus("cpu", "4"),
			nds:        []kdv1alpha1.NodeDevice{withPath(nd("a", gopher, 4, false, NodeCapacityFinalizer), kdv1alpha1.DevicePathDRA)},
			agentReady: true,
			want:       map[corev1.ResourceName]int64{},
		},
		"a DRA resource is withdrawn even when the agent is not ready": {
			status: nodeStatus(gopher, "4"),
			nds:    []kdv1alpha1.NodeDevice{withPath(nd("a", gopher, 4, false, NodeCapacityFinalizer), kdv1alpha1.DevicePathDRA)},
			want:   map[corev1.ResourceName]int64{}, withdraw: []corev1.ResourceName{gopher},
		},
		"shards disagreeing on the path (a switch under way): the node keeps what it publishes": {
			status: nodeStatus(gopher, "8"),
			nds: []kdv1alpha1.NodeDevice{
				withPath(nd("a-0", gopher, 4, false, NodeCapacityFinalizer), kdv1alpha1.DevicePathDRA),
				nd("a-1", gopher, 4, false, NodeCapacityFinalizer),
			},
			agentReady: true,
			want:       map[corev1.ResourceName]int64{},
		},
		"an observed resource is never written, not even zeroed when its shard goes": {
			status: nodeStatus(gopher, "4"),
			nds: []kdv1alpha1.NodeDevice{
				withPath(nd("a-0", gopher, 4, false), kdv1alpha1.DevicePathObserved),
				withPath(nd("a-1", gopher, 0, true), kdv1alpha1.DevicePathObserved),
			},
			agentReady: true,
			want:       map[corev1.ResourceName]int64{},
		},
		"an observed resource's last shard terminating: the kubelet's count is not zeroed": {
			status:     nodeStatus(gopher, "4"),
			nds:        []kdv1alpha1.NodeDevice{withPath(nd("a", gopher, 4, true, NodeCapacityFinalizer), kdv1alpha1.DevicePathObserved)},
			agentReady: true,
			want:       map[corev1.ResourceName]int64{},
		},
		"a DRA resource whose last shard is terminating and that the node still publishes is zeroed": {
			status:     nodeStatus(gopher, "4"),
			nds:        []kdv1alpha1.NodeDevice{withPath(nd("a", gopher, 4, true, NodeCapacityFinalizer), kdv1alpha1.DevicePathDRA)},
			agentReady: true,
			want:       map[corev1.ResourceName]int64{gopher: 0},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := desiredCapacity(tc.status, tc.nds, tc.agentReady)
			if diff := cmp.Diff(tc.want, got.publish); diff != "" {
				t.Errorf("desiredCapacity publishes (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.withdraw, got.withdraw); diff != "" {
				t.Errorf("desiredCapacity withdraws (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCapacityPatch(t *testing.T) {
	cases := map[string]struct {
		status   corev1.NodeStatus
		desired  map[corev1.ResourceName]int64
		withdraw []corev1.ResourceName
		want     string
	}{
		"nothing desired": {status: nodeStatus("cpu", "4"), desired: map[corev1.ResourceName]int64{}},
		"already published": {
			status:  nodeStatus("cpu", "4", gopher, "4"),
			desired: map[corev1.ResourceName]int64{gopher: 4},
		},
		"already published in another notation": {
			status:  nodeStatus(gopher, "4000m"),
			desired: map[corev1.ResourceName]int64{gopher: 4},
		},
		"new resource; cpu and other resources not named": {
			status:  nodeStatus("cpu", "4", "example.org/other", "2"),
			desired: map[corev1.ResourceName]int64{gopher: 4},
			want:    `{"status":{"allocatable":{"example.com/gopher":"4"},"capacity":{"example.com/gopher":"4"}}}`,
		},
		"zero is published as 0": {
			status:  nodeStatus(gopher, "4"),
			desired: map[corev1.ResourceName]int64{gopher: 0},
			want:    `{"status":{"allocatable":{"example.com/gopher":"0"},"capacity":{"example.com/gopher":"0"}}}`,
		},
		"only the map that differs": {
			status: corev1.NodeStatus{
				Capacity:    corev1.ResourceList{gopher: resource.MustParse("4")},
				Allocatable: corev1.ResourceList{gopher: resource.MustParse("3")},
			},
			desired: map[corev1.ResourceName]int64{gopher: 4},
			want:    `{"status":{"allocatable":{"example.com/gopher":"4"}}}`,
		},
		"a withdrawn resource is removed from both maps": {
			status:   nodeStatus(gopher, "4", "example.com/other", "1"),
			withdraw: []corev1.ResourceName{gopher},
			want:     `{"status":{"allocatable":{"example.com/gopher":null},"capacity":{"example.com/gopher":null}}}`,
		},
		"a withdrawn resource only where it is named": {
			status: corev1.NodeStatus{
				Capacity:    corev1.ResourceList{gopher: resource.MustParse("4")},
				Allocatable: corev1.ResourceList{},
			},
			withdraw: []corev1.ResourceName{gopher},
			want:     `{"status":{"capacity":{"example.com/gopher":null}}}`,
		},
		"a withdrawn resource the node does not name: no patch": {
			status:   nodeStatus("cpu", "4"),
			withdraw: []corev1.ResourceName{gopher},
		},
		"only the resources that differ": {
			status:  nodeStatus(gopher, "4", "example.com/other", "1"),
			desired: map[corev1.ResourceName]int64{gopher: 4, "example.com/other": 2},
			want:    `{"status":{"allocatable":{"example.com/other":"2"},"capacity":{"example.com/other":"2"}}}`,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := capacityPatch(tc.status, capacityPlan{publish: tc.desired, withdraw: tc.withdraw})
			if err != nil {
				t.Fatalf("capacityPatch: %v", err)
			}
			if diff := cmp.Diff(tc.want, string(got)); diff != "" {
				t.Errorf("capacityPatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestReleasable(t *testing.T) {
	names := func(nds []*kdv1alpha1.NodeDevice) []string {
		var out []string
		for _, nd := range nds {
			out = append(out, nd.Name)
		}
		return out
	}
	cases := map[string]struct {
		status corev1.NodeStatus
		nds    []kdv1alpha1.NodeDevice
		want   []string
	}{
		"the last NodeDevice, node still publishes it": {
			status: nodeStatus(gopher, "4"),
			nds:    []kdv1alpha1.NodeDevice{nd("a", gopher, 4, true, NodeCapacityFinalizer)},
		},
		"the last NodeDevice, node publishes zero": {
			status: nodeStatus(gopher, "0"),
			nds:    []kdv1alpha1.NodeDevice{nd("a", gopher, 4, true, NodeCapacityFinalizer)},
			want:   []string{"a"},
		},
		"the last NodeDevice, node never published it": {
			status: nodeStatus("cpu", "4"),
			nds:    []kdv1alpha1.NodeDevice{nd("a", gopher, 4, true, NodeCapacityFinalizer)},
			want:   []string{"a"},
		},
		"another shard is live": {
			status: nodeStatus(gopher, "6"),
			nds: []kdv1alpha1.NodeDevice{
				nd("a-0", gopher, 4, false, NodeCapacityFinalizer), nd("a-1", gopher, 2, true, NodeCapacityFinalizer),
			},
			want: []string{"a-1"},
		},
		"another shard is live but does not hold the finalizer yet": {
			status: nodeStatus(gopher, "4"),
			nds:    []kdv1alpha1.NodeDevice{nd("a-0", gopher, 4, true, NodeCapacityFinalizer), nd("a-1", gopher, 4, false)},
		},
		"a shard of another resource does not count": {
			status: nodeStatus(gopher, "4", "example.com/other", "1"),
			nds: []kdv1alpha1.NodeDevice{
				nd("a", gopher, 4, true, NodeCapacityFinalizer), nd("b", "example.com/other", 1, false, NodeCapacityFinalizer),
			},
		},
		"an observed shard, the node publishing the kubelet's count: released at once": {
			status: nodeStatus(gopher, "4"),
			nds:    []kdv1alpha1.NodeDevice{withPath(nd("a", gopher, 4, true, NodeCapacityFinalizer), kdv1alpha1.DevicePathObserved)},
			want:   []string{"a"},
		},
		"not terminating, or without our finalizer": {
			status: nodeStatus(gopher, "0"),
			nds:    []kdv1alpha1.NodeDevice{nd("a", gopher, 4, false, NodeCapacityFinalizer), nd("b", gopher, 0, true, "other/finalizer")},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, names(releasable(tc.status, tc.nds, nil))); diff != "" {
				t.Errorf("releasable (-want +got):\n%s", diff)
			}
		})
	}
}
