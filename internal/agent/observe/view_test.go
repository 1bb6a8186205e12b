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

package observe

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
	"github.com/kubedevice/kubedevice/internal/nodeagent"
	"github.com/kubedevice/kubedevice/internal/nodeagent/checkpoint"
)

const gpu = "vendor.example/gpu"

func devices(res string, numa int64, ids ...string) *podresourcesapi.ContainerDevices {
	return &podresourcesapi.ContainerDevices{ResourceName: res, DeviceIds: ids,
		Topology: &podresourcesapi.TopologyInfo{Nodes: []*podresourcesapi.NUMANode{{ID: numa}}}}
}

func nodeWith(res string, capacity, allocatable int64) *corev1.Node {
	return &corev1.Node{Status: corev1.NodeStatus{
		Capacity:    corev1.ResourceList{corev1.ResourceName(res): *resource.NewQuantity(capacity, resource.DecimalSI)},
		Allocatable: corev1.ResourceList{corev1.ResourceName(res): *resource.NewQuantity(allocatable, resource.DecimalSI)},
	}}
}

func all(string) bool { return true }

// health returns the devices of the view's resource by ID: their health.
func health(v view, res string) map[string]nodeagent.Health {
	out := map[string]nodeagent.Health{}
	for _, d := range v.resources[res].Devices {
		out[d.ID] = d.Health
	}
	return out
}

func TestBuildNamesTheDevicesTheKubeletStopsOffering(t *testing.T) {
	t0 := time.Unix(1000, 0)
	mem := memory{}
	ckpt := &checkpoint.State{RegisteredDevices: map[string][]string{gpu: {"a", "b"}}}
	v := build(reading{allocatable: []*podresourcesapi.ContainerDevices{devices(gpu, 0, "a", "b")}, checkpoint: ckpt}, mem, all, t0)
	if diff := cmp.Diff(map[string]nodeagent.Health{"a": nodeagent.Healthy, "b": nodeagent.Healthy}, health(v, gpu)); diff != "" {
		t.Fatalf("healthy (-want +got):\n%s", diff)
	}

	// b turns unhealthy: the kubelet rewrites its checkpoint without it and lists it nowhere.
	ckpt = &checkpoint.State{RegisteredDevices: map[string][]string{gpu: {"a"}}}
	t1 := t0.Add(time.Second)
	v = build(reading{allocatable: []*podresourcesapi.ContainerDevices{devices(gpu, 0, "a")}, checkpoint: ckpt, node: nodeWith(gpu, 2, 2)}, mem, all, t1)
	if diff := cmp.Diff(map[string]nodeagent.Health{"a": nodeagent.Healthy, "b": nodeagent.Unhealthy}, health(v, gpu)); diff != "" {
		t.Fatalf("b unhealthy (-want +got):\n%s", diff)
	}
	b := v.resources[gpu].Devices[1]
	if b.Reason != kdv1alpha1.DeviceReasonKubeletNotAllocatable || !b.LastTransitionTime.Equal(t1) || !cmp.Equal(b.NUMANodes, []int64{0}) {
		t.Errorf("b = %+v, want reason %s, transition %v, NUMA [0] remembered", b, kdv1alpha1.DeviceReasonKubeletNotAllocatable, t1)
	}
	if s := v.resources[gpu]; s.Capacity != 2 || s.Allocatable != 1 {
		t.Errorf("capacity %d allocatable %d, want 2 and 1", s.Capacity, s.Allocatable)
	}

	// The Node, once current (allocatable 1 = the healthy devices), counts one device: b is gone.
	v = build(reading{allocatable: []*podresourcesapi.ContainerDevices{devices(gpu, 0, "a")}, checkpoint: ckpt, node: nodeWith(gpu, 1, 1)}, mem, all, t1)
	if diff := cmp.Diff(map[string]nodeagent.Health{"a": nodeagent.Healthy}, health(v, gpu)); diff != "" {
		t.Errorf("b dropped (-want +got):\n%s", diff)
	}

	// The resource leaves the checkpoint (its grace period ended): no snapshot, nothing remembered.
	v = build(reading{checkpoint: &checkpoint.State{RegisteredDevices: map[string][]string{}}}, mem, all, t1)
	if _, ok := v.resources[gpu]; ok || len(mem) != 0 {
		t.Errorf("resource still there: %v, memory %v", v.resources, mem)
	}
}

func TestBuildKeepsAStaleNodeFromDroppingDevices(t *testing.T) {
	mem := memory{}
	now := time.Unix(1000, 0)
	build(reading{allocatable: []*podresourcesapi.ContainerDevices{devices(gpu, 0, "a", "b")}}, mem, all, now)
	// b unhealthy, but the Node still says 2 allocatable (not updated yet) and 1 capacity: it is
	// not current, so nothing is dropped.
	v := build(reading{allocatable: []*podresourcesapi.ContainerDevices{devices(gpu, 0, "a")}, node: nodeWith(gpu, 1, 2)}, mem, all, now)
	if len(v.resources[gpu].Devices) != 2 {
		t.Errorf("devices %+v, want both while the Node is stale", v.resources[gpu].Devices)
	}
}

func TestBuildHoldersAndAllocations(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "uid-1"}, Spec: corev1.PodSpec{NodeName: "n"}}
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "c", AllocatedResourcesStatus: []corev1.ResourceStatus{{
		Name: gpu, Resources: []corev1.ResourceHealth{{ResourceID: "b", Health: corev1.ResourceHealthStatusUnhealthy}},
	}}}}
	r := reading{
		allocatable: []*podresourcesapi.ContainerDevices{devices(gpu, 0, "a"), devices("other.example/x", 0, "x")},
		listed: []*podresourcesapi.PodResources{{Namespace: "ns", Name: "p", Containers: []*podresourcesapi.ContainerResources{
			{Name: "c", Devices: []*podresourcesapi.ContainerDevices{devices(gpu, 1, "b"), devices("other.example/x", 0, "x")}},
		}}},
		pods: map[types.NamespacedName]*corev1.Pod{{Namespace: "ns", Name: "p"}: pod},
	}
	v := build(r, memory{}, func(res string) bool { return res == gpu }, time.Unix(1000, 0))
	if _, ok := v.resources["other.example/x"]; ok {
		t.Error("a resource outside the allow list is observed")
	}
	s := v.resources[gpu]
	if s.Allocated != 1 || s.Devices[1].Holder == nil || *s.Devices[1].Holder != (nodeagent.DeviceHolder{PodUID: "uid-1", Namespace: "ns", PodName: "p", Container: "c"}) {
		t.Errorf("b's holder: %+v", s.Devices[1])
	}
	if s.Devices[1].Health != nodeagent.Unhealthy || !cmp.Equal(s.Devices[1].NUMANodes, []int64{1}) {
		t.Errorf("b = %+v, want Unhealthy (held, not allocatable) on NUMA node 1", s.Devices[1])
	}
	want := nodeagent.PodAllocation{PodUID: "uid-1", Namespace: "ns", Name: "p", Containers: []nodeagent.ContainerAllocation{{
		Name: "c", Resources: []nodeagent.ResourceAllocation{{ResourceName: gpu, DeviceIDs: []string{"b"}, NUMANodes: []int64{1}}},
	}}}
	if diff := cmp.Diff(want, v.pods["uid-1"]); diff != "" {
		t.Errorf("pod allocation (-want +got):\n%s", diff)
	}
	if msg := s.Devices[1].Message; msg != msgUnhealthy+" The kubelet reports the device to the pod as: Unhealthy." {
		t.Errorf("message %q, want the kubelet's allocatedResourcesStatus in it", msg)
	}
}
