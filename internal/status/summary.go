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
	"cmp"
	"fmt"
	"slices"
	"strings"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
)

// Agent states of a node, from the AgentReady condition the controller writes on its NodeDevices.
const (
	AgentReady    = "Ready"
	AgentNotReady = "NotReady"
	AgentUnknown  = "Unknown"
)

// Plugin state of a resource none of whose NodeDevices reports a plugin.
const pluginNone = "None"

// Node is the summary of one node's devices.
type Node struct {
	// Name of the node.
	Name string
	// Agent is AgentReady, AgentNotReady or AgentUnknown; AgentReason is the condition's reason.
	Agent       string
	AgentReason string
	// Resources, sorted by name.
	Resources []Resource
	// Devices of every resource, by resource name, then in the NodeDevices' order (shard by
	// shard).
	Devices []Device
	// Waiting lists the pods whose DeviceAllocation is not (yet) Allocated, sorted.
	Waiting []Waiting
	// Disagreements lists where the NodeDevices and the DeviceAllocations disagree about who
	// holds a device. The agent writes both, NodeDevices at most once a second, so one may
	// briefly lag; a disagreement that lasts is a bug.
	Disagreements []string
}

// Resource is one device plugin resource of a node, summed over its NodeDevice shards.
type Resource struct {
	Name        string
	Shards      int
	Total       int32
	Allocatable int32
	Allocated   int32
	Unhealthy   int32
	Cordoned    int32
	// Plugin is Registered when every shard reports its plugin registered, else the state of
	// the first shard that does not (Disconnected), else None.
	Plugin string
}

// Device is one device and who holds it.
type Device struct {
	Resource string
	ID       string
	// Health is Healthy or Unhealthy; Reason is the agent's reason for it.
	Health    string
	Reason    string
	Cordoned  bool
	NUMANodes []int64
	// Holder is namespace/pod/container; empty when the device is free.
	Holder string
	// Claim: the holder is a DRA ResourceClaim (namespace/resourceclaim/name), which no
	// DeviceAllocation records.
	Claim bool
	// Unlisted marks a device that a DeviceAllocation holds but no NodeDevice lists: its plugin
	// stopped reporting it while a container held it. Health and Reason are empty.
	Unlisted bool
}

// Waiting is a pod on the node that holds no devices yet.
type Waiting struct {
	// Pod is namespace/name.
	Pod     string
	Reason  string
	Message string
}

// Summarize groups NodeDevices and DeviceAllocations by node. DeviceAllocations of released
// pods are ignored.
func Summarize(nodeDevices []kdv1alpha1.NodeDevice, allocations []kdv1alpha1.DeviceAllocation) []Node {
	byNode := map[string]*nodeBuilder{}
	get := func(name string) *nodeBuilder {
		b, ok := byNode[name]
		if !ok {
			b = &nodeBuilder{node: Node{Name: name, Agent: AgentUnknown}, resources: map[string][]*kdv1alpha1.NodeDevice{}}
			byNode[name] = b
		}
		return b
	}
	for i := range nodeDevices {
		nd := &nodeDevices[i]
		b := get(nd.Spec.NodeName)
		b.resources[nd.Spec.ResourceName] = append(b.resources[nd.Spec.ResourceName], nd)
	}
	for i := range allocations {
		da := &allocations[i]
		if isReleased(da) {
			continue
		}
		b := get(da.Spec.NodeName)
		b.allocations = append(b.allocations, da)
	}
	nodes := make([]Node, 0, len(byNode))
	for _, b := range byNode {
		nodes = append(nodes, b.build())
	}
	slices.SortFunc(nodes, func(a, b Node) int { return cmp.Compare(a.Name, b.Name) })
	return nodes
}

type nodeBuilder struct {
	node        Node
	resources   map[string][]*kdv1alpha1.NodeDevice
	allocations []*kdv1alpha1.DeviceAllocation
}

func (b *nodeBuilder) build() Node {
	n := b.node
	names := make([]string, 0, len(b.resources))
	for name := range b.resources {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		shards := b.resources[name]
		slices.SortFunc(shards, func(x, y *kdv1alpha1.NodeDevice) int { return cmp.Compare(shardOf(x), shardOf(y)) })
		n.Resources = append(n.Resources, summarizeResource(name, shards))
		for _, nd := range shards {
			for _, d := range nd.Status.Devices {
				n.Devices = append(n.Devices, device(name, d))
			}
			n.Agent, n.AgentReason = worseAgent(n.Agent, n.AgentReason, nd)
		}
	}
	var unlisted []Device
	n.Waiting, unlisted, n.Disagreements = b.compareAllocations(n.Devices)
	n.Devices = append(n.Devices, unlisted...)
	slices.SortStableFunc(n.Devices, func(x, y Device) int { return cmp.Compare(x.Resource, y.Resource) })
	return n
}

func shardOf(nd *kdv1alpha1.NodeDevice) int32 {
	if nd.Spec.Shard == nil {
		return 0
	}
	return *nd.Spec.Shard
}

func summarizeResource(name string, shards []*kdv1alpha1.NodeDevice) Resource {
	r := Resource{Name: name, Shards: len(shards), Plugin: pluginNone}
	registered := 0
	for _, nd := range shards {
		st := nd.Status
		r.Total += st.Capacity
		r.Allocatable += st.Allocatable
		r.Allocated += st.Allocated
		r.Unhealthy += st.Unhealthy
		r.Cordoned += st.Cordoned
		if st.Plugin == nil {
			continue
		}
		if st.Plugin.State == kdv1alpha1.PluginStateRegistered {
			registered++
		} else if r.Plugin == pluginNone {
			r.Plugin = string(st.Plugin.State)
		}
	}
	if registered == len(shards) {
		r.Plugin = string(kdv1alpha1.PluginStateRegistered)
	}
	return r
}

func device(resource string, d kdv1alpha1.DeviceStatus) Device {
	dev := Device{
		Resource:  resource,
		ID:        d.ID,
		Health:    string(d.Health),
		Reason:    d.Reason,
		Cordoned:  d.Cordoned,
		NUMANodes: d.NUMANodes,
	}
	if h := d.Holder; h != nil {
		dev.Holder = h.Namespace + "/" + h.PodName + "/" + h.ContainerName
		if h.ClaimName != "" {
			dev.Holder = h.Namespace + "/resourceclaim/" + h.ClaimName
			dev.Claim = true
		}
	}
	return dev
}

// worseAgent keeps the worst agent state seen on the node's NodeDevices: NotReady over Ready over
// Unknown.
func worseAgent(state, reason string, nd *kdv1alpha1.NodeDevice) (string, string) {
	cond := apimeta.FindStatusCondition(nd.Status.Conditions, kdv1alpha1.NodeDeviceAgentReady)
	if cond == nil {
		return state, reason
	}
	switch {
	case cond.Status != metav1.ConditionTrue:
		if state != AgentNotReady {
			return AgentNotReady, cond.Reason
		}
	case state == AgentUnknown:
		return AgentReady, cond.Reason
	}
	return state, reason
}

func isReleased(da *kdv1alpha1.DeviceAllocation) bool {
	return apimeta.IsStatusConditionTrue(da.Status.Conditions, kdv1alpha1.DeviceAllocationReleased)
}

// compareAllocations lists the pods waiting for devices, the devices the DeviceAllocations hold
// that no NodeDevice lists, and where the DeviceAllocations disagree with the NodeDevices' holders.
func (b *nodeBuilder) compareAllocations(devices []Device) (waiting []Waiting, unlisted []Device, disagreements []string) {
	type key struct{ resource, id string }
	holders := map[key]string{} // every listed device, to its holder; "" when it is free
	for _, d := range devices {
		if _, ok := holders[key{d.Resource, d.ID}]; !ok || d.Holder != "" {
			holders[key{d.Resource, d.ID}] = d.Holder
		}
	}
	// recorded maps a device to the pod whose DeviceAllocation records it. One pod may record a
	// device for several containers: later containers reuse the devices of init containers.
	recorded := map[key]string{}
	slices.SortFunc(b.allocations, func(x, y *kdv1alpha1.DeviceAllocation) int {
		return cmp.Or(cmp.Compare(x.Namespace, y.Namespace), cmp.Compare(x.Spec.PodName, y.Spec.PodName), cmp.Compare(x.Name, y.Name))
	})
	for _, da := range b.allocations {
		pod := da.Namespace + "/" + da.Spec.PodName
		if w, ok := waitingOf(da, pod); ok {
			waiting = append(waiting, w)
			continue
		}
		for _, ctr := range da.Status.Containers {
			for _, r := range ctr.Resources {
				for _, id := range r.DeviceIDs {
					k := key{r.ResourceName, id}
					prev, seen := recorded[k]
					if seen && prev == pod {
						continue
					}
					recorded[k] = pod
					holder := pod + "/" + ctr.Name
					switch nd, listed := holders[k]; {
					case seen:
						disagreements = append(disagreements, fmt.Sprintf("%s %s: DeviceAllocations record it for both %s and %s",
							r.ResourceName, id, prev, pod))
					case !listed:
						unlisted = append(unlisted, Device{Resource: r.ResourceName, ID: id, Holder: holder, Unlisted: true})
					case nd == "":
						disagreements = append(disagreements, fmt.Sprintf("%s %s: DeviceAllocation %s/%s records it for %s, the NodeDevice lists it free",
							r.ResourceName, id, da.Namespace, da.Name, holder))
					case podOf(nd) != pod:
						disagreements = append(disagreements, fmt.Sprintf("%s %s: DeviceAllocation %s/%s records it for %s, the NodeDevice for %s",
							r.ResourceName, id, da.Namespace, da.Name, holder, nd))
					}
				}
			}
		}
	}
	for _, d := range devices {
		k := key{d.Resource, d.ID}
		if _, ok := recorded[k]; d.Holder != "" && !d.Claim && !ok {
			disagreements = append(disagreements, fmt.Sprintf("%s %s: the NodeDevice lists it held by %s, no DeviceAllocation records it",
				d.Resource, d.ID, d.Holder))
		}
	}
	return waiting, unlisted, disagreements
}

// waitingOf says whether the DeviceAllocation of pod is not Allocated yet, and why.
func waitingOf(da *kdv1alpha1.DeviceAllocation, pod string) (Waiting, bool) {
	cond := apimeta.FindStatusCondition(da.Status.Conditions, kdv1alpha1.DeviceAllocationAllocated)
	if cond != nil && cond.Status == metav1.ConditionTrue {
		return Waiting{}, false
	}
	w := Waiting{Pod: pod}
	if cond != nil {
		w.Reason, w.Message = cond.Reason, cond.Message
	}
	return w, true
}

// podOf returns the namespace/pod of a namespace/pod/container holder.
func podOf(holder string) string {
	if i := strings.LastIndex(holder, "/"); i >= 0 {
		return holder[:i]
	}
	return holder
}

// numaString formats NUMA nodes as 0,1; "-" for none.
func numaString(nodes []int64) string {
	if len(nodes) == 0 {
		return "-"
	}
	s := make([]string, len(nodes))
	for i, n := range nodes {
		s[i] = fmt.Sprint(n)
	}
	return strings.Join(s, ",")
}
