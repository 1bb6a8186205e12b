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

package status

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
)

// nodeDevice is a builder of NodeDevices for the tests.
type nodeDevice struct{ nd kdv1alpha1.NodeDevice }

func makeNodeDevice(node, resource string) *nodeDevice {
	return &nodeDevice{nd: kdv1alpha1.NodeDevice{
		ObjectMeta: metav1.ObjectMeta{Name: node + "-" + resource},
		Spec:       kdv1alpha1.NodeDeviceSpec{NodeName: node, ResourceName: resource},
		Status: kdv1alpha1.NodeDeviceStatus{
			Plugin: &kdv1alpha1.PluginStatus{State: kdv1alpha1.PluginStateRegistered},
		},
	}}
}

func (b *nodeDevice) shard(n int32) *nodeDevice {
	b.nd.Spec.Shard = ptr.To(n)
	b.nd.Name += fmt.Sprintf("-%d", n)
	return b
}

func (b *nodeDevice) plugin(state kdv1alpha1.PluginState) *nodeDevice {
	b.nd.Status.Plugin.State = state
	return b
}

func (b *nodeDevice) agent(status metav1.ConditionStatus, reason string) *nodeDevice {
	b.nd.Status.Conditions = append(b.nd.Status.Conditions, metav1.Condition{
		Type: kdv1alpha1.NodeDeviceAgentReady, Status: status, Reason: reason,
	})
	return b
}

// device adds a device; holder is namespace/pod/container or empty.
func (b *nodeDevice) device(id string, health kdv1alpha1.DeviceHealth, holder ...string) *nodeDevice {
	d := kdv1alpha1.DeviceStatus{ID: id, Health: health, Reason: string(health)}
	if health == kdv1alpha1.DeviceUnhealthy {
		d.Reason = kdv1alpha1.DeviceReasonPluginReportedUnhealthy
		b.nd.Status.Unhealthy++
	}
	if len(holder) == 3 {
		d.Holder = &kdv1alpha1.DeviceHolder{Namespace: holder[0], PodName: holder[1], ContainerName: holder[2]}
		b.nd.Status.Allocated++
	}
	b.nd.Status.Capacity++
	if health == kdv1alpha1.DeviceHealthy {
		b.nd.Status.Allocatable++
	}
	b.nd.Status.Devices = append(b.nd.Status.Devices, d)
	return b
}

func (b *nodeDevice) cordoned(id string) *nodeDevice {
	for i := range b.nd.Status.Devices {
		if b.nd.Status.Devices[i].ID == id {
			b.nd.Status.Devices[i].Cordoned = true
			b.nd.Status.Cordoned++
			b.nd.Status.Allocatable--
		}
	}
	return b
}

func (b *nodeDevice) obj() kdv1alpha1.NodeDevice { return b.nd }

// allocation is a builder of DeviceAllocations for the tests.
type allocation struct{ da kdv1alpha1.DeviceAllocation }

func makeAllocation(namespace, pod, node string) *allocation {
	return &allocation{da: kdv1alpha1.DeviceAllocation{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: pod + "-abc"},
		Spec:       kdv1alpha1.DeviceAllocationSpec{NodeName: node, PodName: pod, PodUID: "uid-" + pod},
	}}
}

func (b *allocation) condition(typ string, status metav1.ConditionStatus, reason, message string) *allocation {
	b.da.Status.Conditions = append(b.da.Status.Conditions, metav1.Condition{Type: typ, Status: status, Reason: reason, Message: message})
	return b
}

func (b *allocation) allocated() *allocation {
	return b.condition(kdv1alpha1.DeviceAllocationAllocated, metav1.ConditionTrue, kdv1alpha1.ReasonAllocated, "")
}

func (b *allocation) container(name, resource string, ids ...string) *allocation {
	b.da.Status.Containers = append(b.da.Status.Containers, kdv1alpha1.ContainerAllocation{
		Name:      name,
		Resources: []kdv1alpha1.ResourceAllocation{{ResourceName: resource, DeviceIDs: ids}},
	})
	return b
}

func (b *allocation) obj() kdv1alpha1.DeviceAllocation { return b.da }

const gopher = "example.com/gopher"

func TestSummarize(t *testing.T) {
	healthy, unhealthy := kdv1alpha1.DeviceHealthy, kdv1alpha1.DeviceUnhealthy
	tests := map[string]struct {
		nodeDevices []kdv1alpha1.NodeDevice
		allocations []kdv1alpha1.DeviceAllocation
		want        []Node
	}{
		"nothing": {},
		"the demo": {
			nodeDevices: []kdv1alpha1.NodeDevice{
				makeNodeDevice("demo-node", gopher).agent(metav1.ConditionTrue, kdv1alpha1.ReasonAgentLeaseValid).
					device("gopher-0", healthy, "default", "gopher-pod", "gopher").obj(),
			},
			allocations: []kdv1alpha1.DeviceAllocation{
				makeAllocation("default", "gopher-pod", "demo-node").allocated().container("gopher", gopher, "gopher-0").obj(),
			},
			want: []Node{{
				Name: "demo-node", Agent: AgentReady, AgentReason: kdv1alpha1.ReasonAgentLeaseValid,
				Resources: []Resource{{Name: gopher, Shards: 1, Total: 1, Allocatable: 1, Allocated: 1, Plugin: "Registered"}},
				Devices:   []Device{{Resource: gopher, ID: "gopher-0", Health: "Healthy", Reason: "Healthy", Holder: "default/gopher-pod/gopher"}},
			}},
		},
		"shards are summed, devices listed shard by shard": {
			nodeDevices: []kdv1alpha1.NodeDevice{
				makeNodeDevice("n1", gopher).shard(1).device("gopher-128", unhealthy).obj(),
				makeNodeDevice("n1", gopher).device("gopher-0", healthy).device("gopher-1", healthy).cordoned("gopher-1").obj(),
			},
			want: []Node{{
				Name: "n1", Agent: AgentUnknown,
				Resources: []Resource{{Name: gopher, Shards: 2, Total: 3, Allocatable: 1, Unhealthy: 1, Cordoned: 1, Plugin: "Registered"}},
				Devices: []Device{
					{Resource: gopher, ID: "gopher-0", Health: "Healthy", Reason: "Healthy"},
					{Resource: gopher, ID: "gopher-1", Health: "Healthy", Reason: "Healthy", Cordoned: true},
					{Resource: gopher, ID: "gopher-128", Health: "Unhealthy", Reason: kdv1alpha1.DeviceReasonPluginReportedUnhealthy},
				},
			}},
		},
		"a shard without its plugin makes the resource Disconnected": {
			nodeDevices: []kdv1alpha1.NodeDevice{
				makeNodeDevice("n1", gopher).obj(),
				makeNodeDevice("n1", gopher).shard(1).plugin(kdv1alpha1.PluginStateDisconnected).obj(),
			},
			want: []Node{{
				Name: "n1", Agent: AgentUnknown,
				Resources: []Resource{{Name: gopher, Shards: 2, Plugin: "Disconnected"}},
			}},
		},
		"nodes and resources are sorted; an expired lease wins": {
			nodeDevices: []kdv1alpha1.NodeDevice{
				makeNodeDevice("n2", gopher).obj(),
				makeNodeDevice("n1", "vendor.com/npu").agent(metav1.ConditionTrue, kdv1alpha1.ReasonAgentLeaseValid).obj(),
				makeNodeDevice("n1", gopher).agent(metav1.ConditionFalse, kdv1alpha1.ReasonAgentLeaseExpired).obj(),
			},
			want: []Node{
				{
					Name: "n1", Agent: AgentNotReady, AgentReason: kdv1alpha1.ReasonAgentLeaseExpired,
					Resources: []Resource{{Name: gopher, Shards: 1, Plugin: "Registered"}, {Name: "vendor.com/npu", Shards: 1, Plugin: "Registered"}},
				},
				{Name: "n2", Agent: AgentUnknown, Resources: []Resource{{Name: gopher, Shards: 1, Plugin: "Registered"}}},
			},
		},
		"waiting pods; released allocations ignored": {
			nodeDevices: []kdv1alpha1.NodeDevice{makeNodeDevice("n1", gopher).device("gopher-0", healthy).obj()},
			allocations: []kdv1alpha1.DeviceAllocation{
				makeAllocation("default", "big", "n1").condition(kdv1alpha1.DeviceAllocationAllocated, metav1.ConditionFalse,
					kdv1alpha1.ReasonInsufficientDevices, "Requested number of devices unavailable for example.com/gopher. Requested: 2, Available: 1").obj(),
				makeAllocation("default", "done", "n1").allocated().container("c", gopher, "gopher-0").
					condition(kdv1alpha1.DeviceAllocationReleased, metav1.ConditionTrue, kdv1alpha1.ReasonPodTerminated, "").obj(),
				makeAllocation("default", "new", "n1").obj(),
			},
			want: []Node{{
				Name: "n1", Agent: AgentUnknown,
				Resources: []Resource{{Name: gopher, Shards: 1, Total: 1, Allocatable: 1, Plugin: "Registered"}},
				Devices:   []Device{{Resource: gopher, ID: "gopher-0", Health: "Healthy", Reason: "Healthy"}},
				Waiting: []Waiting{
					{Pod: "default/big", Reason: kdv1alpha1.ReasonInsufficientDevices,
						Message: "Requested number of devices unavailable for example.com/gopher. Requested: 2, Available: 1"},
					{Pod: "default/new"},
				},
			}},
		},
		"a device reused by a later container is no disagreement": {
			nodeDevices: []kdv1alpha1.NodeDevice{
				makeNodeDevice("n1", gopher).device("gopher-0", healthy, "default", "p", "app").obj(),
			},
			allocations: []kdv1alpha1.DeviceAllocation{
				makeAllocation("default", "p", "n1").allocated().container("init", gopher, "gopher-0").container("app", gopher, "gopher-0").obj(),
			},
			want: []Node{{
				Name: "n1", Agent: AgentUnknown,
				Resources: []Resource{{Name: gopher, Shards: 1, Total: 1, Allocatable: 1, Allocated: 1, Plugin: "Registered"}},
				Devices:   []Device{{Resource: gopher, ID: "gopher-0", Health: "Healthy", Reason: "Healthy", Holder: "default/p/app"}},
			}},
		},
		"a held device its plugin no longer reports": {
			nodeDevices: []kdv1alpha1.NodeDevice{makeNodeDevice("n1", gopher).device("gopher-1", healthy).obj()},
			allocations: []kdv1alpha1.DeviceAllocation{
				makeAllocation("default", "p", "n1").allocated().container("c", "vendor.com/npu", "npu-0").obj(),
				makeAllocation("default", "q", "n1").allocated().container("c", gopher, "gopher-0").obj(),
			},
			want: []Node{{
				Name: "n1", Agent: AgentUnknown,
				Resources: []Resource{{Name: gopher, Shards: 1, Total: 1, Allocatable: 1, Plugin: "Registered"}},
				Devices: []Device{
					{Resource: gopher, ID: "gopher-1", Health: "Healthy", Reason: "Healthy"},
					{Resource: gopher, ID: "gopher-0", Holder: "default/q/c", Unlisted: true},
					{Resource: "vendor.com/npu", ID: "npu-0", Holder: "default/p/c", Unlisted: true},
				},
			}},
		},
		"disagreements": {
			nodeDevices: []kdv1alpha1.NodeDevice{
				makeNodeDevice("n1", gopher).
					device("gopher-0", healthy).
					device("gopher-1", healthy, "default", "b", "c").
					device("gopher-2", healthy, "default", "orphan", "c").
					device("gopher-3", healthy, "default", "d", "c").obj(),
			},
			allocations: []kdv1alpha1.DeviceAllocation{
				makeAllocation("default", "a", "n1").allocated().container("c", gopher, "gopher-0", "gopher-1").obj(),
				makeAllocation("default", "d", "n1").allocated().container("c", gopher, "gopher-3").obj(),
				makeAllocation("team-a", "e", "n1").allocated().container("c", gopher, "gopher-3").obj(),
			},
			want: []Node{{
				Name: "n1", Agent: AgentUnknown,
				Resources: []Resource{{Name: gopher, Shards: 1, Total: 4, Allocatable: 4, Allocated: 3, Plugin: "Registered"}},
				Devices: []Device{
					{Resource: gopher, ID: "gopher-0", Health: "Healthy", Reason: "Healthy"},
					{Resource: gopher, ID: "gopher-1", Health: "Healthy", Reason: "Healthy", Holder: "default/b/c"},
					{Resource: gopher, ID: "gopher-2", Health: "Healthy", Reason: "Healthy", Holder: "default/orphan/c"},
					{Resource: gopher, ID: "gopher-3", Health: "Healthy", Reason: "Healthy", Holder: "default/d/c"},
				},
				Disagreements: []string{
					"example.com/gopher gopher-0: DeviceAllocation default/a-abc records it for default/a/c, the NodeDevice lists it free",
					"example.com/gopher gopher-1: DeviceAllocation default/a-abc records it for default/a/c, the NodeDevice for default/b/c",
					"example.com/gopher gopher-3: DeviceAllocations record it for both default/d and team-a/e",
					"example.com/gopher gopher-2: the NodeDevice lists it held by default/orphan/c, no DeviceAllocation records it",
				},
			}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := Summarize(tc.nodeDevices, tc.allocations)
			if diff := cmp.Diff(tc.want, got, cmpEmptyAsNil); diff != "" {
				t.Errorf("Summarize (-want +got):\n%s", diff)
			}
		})
	}
}

// cmpEmptyAsNil treats an empty slice as nil: Summarize makes no promise about which it returns.
var cmpEmptyAsNil = cmp.FilterValues(func(x, y any) bool {
	return isEmptySlice(x) && isEmptySlice(y)
}, cmp.Comparer(func(_, _ any) bool { return true }))

func isEmptySlice(v any) bool {
	switch s := v.(type) {
	case []Node:
		return len(s) == 0
	case []Resource:
		return len(s) == 0
	case []Device:
		return len(s) == 0
	case []Waiting:
		return len(s) == 0
	case []string:
		return len(s) == 0
	case []int64:
		return len(s) == 0
	}
	return false
}

func TestRender(t *testing.T) {
	nodes := []Node{
		{
			Name: "demo-node", Agent: AgentReady, AgentReason: kdv1alpha1.ReasonAgentLeaseValid,
			Resources: []Resource{{Name: gopher, Shards: 1, Total: 3, Allocatable: 1, Allocated: 1, Unhealthy: 1, Cordoned: 1, Plugin: "Registered"}},
			Devices: []Device{
				{Resource: gopher, ID: "gopher-0", Health: "Healthy", Holder: "default/gopher-pod/gopher", NUMANodes: []int64{0}},
				{Resource: gopher, ID: "gopher-1", Health: "Unhealthy", Reason: kdv1alpha1.DeviceReasonPluginReportedUnhealthy},
				{Resource: gopher, ID: "gopher-2", Health: "Healthy", Cordoned: true, NUMANodes: []int64{0, 1}},
				{Resource: gopher, ID: "gopher-9", Holder: "default/old/gopher", Unlisted: true},
			},
			Waiting:       []Waiting{{Pod: "default/gopher-pod3", Reason: kdv1alpha1.ReasonInsufficientDevices, Message: "Requested: 1, Available: 0"}},
			Disagreements: []string{"example.com/gopher gopher-0: the NodeDevice lists it held by default/x/c, no DeviceAllocation records it"},
		},
		{Name: "node-2", Agent: AgentUnknown},
	}
	want := `Node demo-node   agent Ready (AgentLeaseValid)

  RESOURCE             TOTAL   ALLOCATABLE   ALLOCATED   UNHEALTHY   CORDONED   PLUGIN
  example.com/gopher   3       1             1           1           1          Registered

  RESOURCE             DEVICE     HEALTH                                NUMA   HELD BY (NAMESPACE/POD/CONTAINER)
  example.com/gopher   gopher-0   Healthy                               0      default/gopher-pod/gopher
  example.com/gopher   gopher-1   Unhealthy (PluginReportedUnhealthy)   -      -
  example.com/gopher   gopher-2   Healthy, cordoned                     0,1    -
  example.com/gopher   gopher-9   not reported by its plugin            -      default/old/gopher

  WAITING FOR DEVICES   REASON                MESSAGE
  default/gopher-pod3   InsufficientDevices   Requested: 1, Available: 0

  The NodeDevices and DeviceAllocations disagree (a NodeDevice may lag by a second; if this lasts, it is a bug):
  - example.com/gopher gopher-0: the NodeDevice lists it held by default/x/c, no DeviceAllocation records it

Node node-2   agent Unknown
`
	var buf bytes.Buffer
	if err := Render(&buf, nodes); err != nil {
		t.Fatalf("Render: %v", err)
	}
	if diff := cmp.Diff(want, buf.String()); diff != "" {
		t.Errorf("Render (-want +got):\n%s", diff)
	}
}
