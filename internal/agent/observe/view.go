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
	"cmp"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
	"github.com/kubedevice/kubedevice/internal/agent/kube"
	"github.com/kubedevice/kubedevice/internal/nodeagent"
	"github.com/kubedevice/kubedevice/internal/nodeagent/checkpoint"
	"github.com/kubedevice/kubedevice/internal/nodeagent/poddevices"
)

// Messages of the devices' health as observed.
const (
	msgHealthy   = "The kubelet lists the device as allocatable: its device plugin reports it Healthy."
	msgUnhealthy = "The kubelet does not list the device as allocatable: its device plugin reports it unhealthy, or the plugin is gone (the kubelet says neither which nor why)."
)

// reading is one read of what the kubelet reports, and of the cluster's view of the node.
type reading struct {
	// allocatable is GetAllocatableResources' devices: the kubelet's healthy devices.
	allocatable []*podresourcesapi.ContainerDevices
	// listed is List's pods: the active pods' containers and their devices.
	listed []*podresourcesapi.PodResources
	// checkpoint is the kubelet's device manager checkpoint: the resources its device manager
	// knows (RegisteredDevices' keys, with the devices healthy when it was last written), and the
	// allocations with their NUMA nodes and the plugins' Allocate responses. nil when there is
	// none.
	checkpoint *checkpoint.State
	// node is the Node (nil when not cached yet); pods are the node's cached pods by name.
	node *corev1.Node
	pods map[types.NamespacedName]*corev1.Pod
}

// deviceMemory is what the observer remembers of a device between readings: the kubelet names a
// device that is no longer allocatable nowhere but in its pods' allocations.
type deviceMemory struct {
	numa   []int64
	health nodeagent.Health
	// since is when the observed health last changed; lastHealthy when it was last seen healthy.
	since       time.Time
	lastHealthy time.Time
}

// resourceMemory is what the observer remembers of a resource.
type resourceMemory struct {
	since   time.Time
	devices map[string]*deviceMemory
}

// memory is what the observer remembers, per resource.
type memory map[string]*resourceMemory

// view is what the kubelet's device manager says, as the agent mirrors it.
type view struct {
	// resources by name, each as the NodeDevice mirror reads a resource of the core.
	resources map[string]nodeagent.ResourceSnapshot
	// pods are the active pods holding observed devices, by UID.
	pods map[string]nodeagent.PodAllocation
}

// build computes the view of r, and updates mem: a device the kubelet lists as allocatable is
// Healthy; one it named before (or names as held by a pod, or in its checkpoint) and no longer
// lists as allocatable is Unhealthy, until the Node's capacity says the kubelet no longer counts
// it. allow says which resources are observed.
func build(r reading, mem memory, allow func(string) bool, now time.Time) view {
	if r.checkpoint == nil {
		r.checkpoint = &checkpoint.State{}
	}
	m := &merge{r: r, allow: allow, resources: map[string]bool{}, healthy: map[string]map[string][]int64{},
		held: map[string]map[string]holding{}, pods: map[string]nodeagent.PodAllocation{}}
	m.mergeAllocatable()
	for res := range r.checkpoint.RegisteredDevices {
		m.add(res)
	}
	m.mergeHolders()
	podHealth := allocatedResourcesStatus(r.pods)

	v := view{resources: map[string]nodeagent.ResourceSnapshot{}, pods: m.pods}
	for res := range mem {
		if !m.resources[res] {
			delete(mem, res)
		}
	}
	for res := range m.resources {
		rm := mem[res]
		if rm == nil {
			rm = &resourceMemory{since: now, devices: map[string]*deviceMemory{}}
			mem[res] = rm
		}
		m.rememberNamed(res, rm, now)
		forgetUncounted(r.node, res, rm, len(m.healthy[res]), m.held[res])
		v.resources[res] = m.snapshot(res, rm, podHealth)
	}
	return v
}

// holding is the container holding a device, and the device's NUMA nodes as List reports them.
type holding struct {
	holder nodeagent.DeviceHolder
	numa   []int64
}

// merge is a reading being merged into a view: the resources observed, and per resource the
// devices the kubelet lists as allocatable (with their NUMA nodes) and those its pods hold; the
// active pods holding observed devices, by UID.
type merge struct {
	r         reading
	allow     func(string) bool
	resources map[string]bool
	healthy   map[string]map[string][]int64
	held      map[string]map[string]holding
	pods      map[string]nodeagent.PodAllocation
}

// add observes res if allowed, and says whether it is.
func (m *merge) add(res string) bool {
	if !m.allow(res) {
		return false
	}
	m.resources[res] = true
	return true
}

// mergeAllocatable takes GetAllocatableResources' devices: the healthy ones.
func (m *merge) mergeAllocatable() {
	for _, cd := range m.r.allocatable {
		res := cd.GetResourceName()
		if !m.add(res) {
			continue
		}
		if m.healthy[res] == nil {
			m.healthy[res] = map[string][]int64{}
		}
		for _, id := range cd.GetDeviceIds() {
			m.healthy[res][id] = mergeNUMA(m.healthy[res][id], cd.GetTopology())
		}
	}
}

// mergeHolders takes List's pods: each device's holder, and the active pods' allocations.
func (m *merge) mergeHolders() {
	opts := runOptions(m.r.checkpoint)
	for _, p := range m.r.listed {
		pod := m.r.pods[types.NamespacedName{Namespace: p.GetNamespace(), Name: p.GetName()}]
		var uid string
		if pod != nil {
			uid = string(pod.UID)
		}
		for _, c := range p.GetContainers() {
			m.hold(nodeagent.DeviceHolder{PodUID: uid, Namespace: p.GetNamespace(), PodName: p.GetName(), Container: c.GetName()}, c)
		}
		pa := podAllocation(uid, p.GetNamespace(), p.GetName(), p.GetContainers(), m.allow, opts)
		if len(pa.Containers) > 0 && uid != "" && pod != nil && !kube.IsTerminal(pod) {
			m.pods[uid] = pa
		}
	}
}

// hold records holder as holding c's devices, when c holds an observed device; of a pod's
// containers holding the same device, the first by name is its holder.
func (m *merge) hold(holder nodeagent.DeviceHolder, c *podresourcesapi.ContainerResources) {
	if len(containerAllocation(c, m.allow).Resources) == 0 {
		return
	}
	for _, cd := range c.GetDevices() {
		res := cd.GetResourceName()
		if !m.add(res) {
			continue
		}
		if m.held[res] == nil {
			m.held[res] = map[string]holding{}
		}
		for _, id := range cd.GetDeviceIds() {
			h, ok := m.held[res][id]
			if !ok || holder.Container < h.holder.Container {
				h.holder = holder
			}
			h.numa = mergeNUMA(h.numa, cd.GetTopology())
			m.held[res][id] = h
		}
	}
}

// rememberNamed remembers every device of res the kubelet names (in its checkpoint, as held, as
// allocatable, each later source's NUMA nodes over the earlier's), Healthy when allocatable,
// Unhealthy otherwise.
func (m *merge) rememberNamed(res string, rm *resourceMemory, now time.Time) {
	for _, id := range m.r.checkpoint.RegisteredDevices[res] {
		rm.see(id, nil, now)
	}
	for _, e := range m.r.checkpoint.Entries {
		if e.ResourceName != res {
			continue
		}
		for numa, ids := range e.DeviceIDs {
			for _, id := range ids {
				rm.see(id, numaOf(numa), now)
			}
		}
	}
	for id, h := range m.held[res] {
		rm.see(id, h.numa, now)
	}
	for id, numa := range m.healthy[res] {
		rm.see(id, numa, now)
	}
	for id, d := range rm.devices {
		h := nodeagent.Unhealthy
		if _, ok := m.healthy[res][id]; ok {
			h, d.lastHealthy = nodeagent.Healthy, now
		}
		if d.health != h {
			d.health, d.since = h, now
		}
	}
}

// see remembers device id, with its NUMA nodes when numa is not nil.
func (rm *resourceMemory) see(id string, numa []int64, now time.Time) {
	d := rm.devices[id]
	if d == nil {
		d = &deviceMemory{since: now}
		rm.devices[id] = d
	}
	if numa != nil {
		d.numa = numa
	}
}

// snapshot is res's snapshot of the remembered devices, with their holders and the health the
// kubelet reports to the pods holding them.
func (m *merge) snapshot(res string, rm *resourceMemory, podHealth map[deviceKey]string) nodeagent.ResourceSnapshot {
	snap := nodeagent.ResourceSnapshot{ResourceName: res, State: nodeagent.PluginRegistered, StateSince: rm.since}
	for id, d := range rm.devices {
		ds := nodeagent.DeviceSnapshot{ID: id, Health: d.health, Reason: nodeagent.ReasonReportedHealthy, Message: msgHealthy,
			LastTransitionTime: d.since, NUMANodes: slices.Clone(d.numa)}
		if d.health != nodeagent.Healthy {
			ds.Reason, ds.Message = kdv1alpha1.DeviceReasonKubeletNotAllocatable, msgUnhealthy
		} else {
			snap.Allocatable++
		}
		if h, ok := m.held[res][id]; ok {
			ds.Holder = &h.holder
			snap.Allocated++
			if msg := podHealth[deviceKey{h.holder.Namespace, h.holder.PodName, h.holder.Container, res, id}]; msg != "" {
				ds.Message += " The kubelet reports the device to the pod as: " + msg
			}
		}
		snap.Devices = append(snap.Devices, ds)
	}
	snap.Capacity = len(snap.Devices)
	slices.SortFunc(snap.Devices, func(a, b nodeagent.DeviceSnapshot) int { return strings.Compare(a.ID, b.ID) })
	return snap
}

// forgetUncounted drops the unhealthy devices the kubelet no longer counts: when the Node is
// current (its allocatable count is the healthy devices observed) and its capacity is lower than
// the devices remembered, the unhealthy devices no pod holds are dropped, those seen healthy
// longest ago first, down to the capacity. A device a plugin stops listing leaves the kubelet's
// count without being named anywhere; this is the only way the agent learns it is gone.
func forgetUncounted[H any](node *corev1.Node, res string, rm *resourceMemory, healthy int, held map[string]H) {
	if node == nil {
		return
	}
	capQ, okCap := node.Status.Capacity[corev1.ResourceName(res)]
	allocQ, okAlloc := node.Status.Allocatable[corev1.ResourceName(res)]
	if !okCap || !okAlloc || allocQ.Value() != int64(healthy) {
		return
	}
	surplus := len(rm.devices) - int(capQ.Value())
	if surplus <= 0 {
		return
	}
	var candidates []string
	for id, d := range rm.devices {
		if _, isHeld := held[id]; !isHeld && d.health != nodeagent.Healthy {
			candidates = append(candidates, id)
		}
	}
	slices.SortFunc(candidates, func(a, b string) int {
		return cmp.Or(rm.devices[a].lastHealthy.Compare(rm.devices[b].lastHealthy), strings.Compare(a, b))
	})
	for _, id := range candidates[:min(surplus, len(candidates))] {
		delete(rm.devices, id)
	}
}

// podAllocation is what a pod's listed containers hold of the observed devices, each with the
// runtime options of its Allocate responses when the pod's UID is known.
func podAllocation(uid, namespace, name string, containers []*podresourcesapi.ContainerResources, allow func(string) bool, opts *poddevices.Store) nodeagent.PodAllocation {
	pa := nodeagent.PodAllocation{PodUID: uid, Namespace: namespace, Name: name}
	for _, c := range containers {
		ca := containerAllocation(c, allow)
		if len(ca.Resources) == 0 {
			continue
		}
		if uid != "" {
			ca.RuntimeOptions, _ = opts.RunContainerOptions(uid, c.GetName())
		}
		pa.Containers = append(pa.Containers, ca)
	}
	slices.SortFunc(pa.Containers, func(a, b nodeagent.ContainerAllocation) int { return strings.Compare(a.Name, b.Name) })
	return pa
}

// containerAllocation is one listed container's observed devices.
func containerAllocation(c *podresourcesapi.ContainerResources, allow func(string) bool) nodeagent.ContainerAllocation {
	byRes := map[string]*nodeagent.ResourceAllocation{}
	for _, cd := range c.GetDevices() {
		res := cd.GetResourceName()
		if !allow(res) || len(cd.GetDeviceIds()) == 0 {
			continue
		}
		ra := byRes[res]
		if ra == nil {
			ra = &nodeagent.ResourceAllocation{ResourceName: res}
			byRes[res] = ra
		}
		ra.DeviceIDs = append(ra.DeviceIDs, cd.GetDeviceIds()...)
		ra.NUMANodes = mergeNUMA(ra.NUMANodes, cd.GetTopology())
	}
	ca := nodeagent.ContainerAllocation{Name: c.GetName()}
	for _, ra := range byRes {
		slices.Sort(ra.DeviceIDs)
		ra.DeviceIDs = slices.Compact(ra.DeviceIDs)
		ca.Resources = append(ca.Resources, *ra)
	}
	slices.SortFunc(ca.Resources, func(a, b nodeagent.ResourceAllocation) int { return strings.Compare(a.ResourceName, b.ResourceName) })
	return ca
}

// runOptions holds the checkpoint's allocations (none when st is nil), to merge each container's
// Allocate responses as the kubelet does. Entries it cannot take (an undecodable response) are
// left out: the DeviceAllocation then lists the devices without the runtime options.
func runOptions(st *checkpoint.State) *poddevices.Store {
	s := poddevices.New()
	if st != nil {
		_, _ = s.FromEntries(st.Entries)
	}
	return s
}

// mergeNUMA adds the NUMA nodes of t to nodes, sorted, without duplicates; nil without topology.
func mergeNUMA(nodes []int64, t *podresourcesapi.TopologyInfo) []int64 {
	for _, n := range t.GetNodes() {
		nodes = append(nodes, n.GetID())
	}
	if len(nodes) == 0 {
		return nil
	}
	slices.Sort(nodes)
	return slices.Compact(nodes)
}

// numaOf is a checkpoint entry's NUMA node as a list; the kubelet records -1 for devices
// without topology.
func numaOf(n int64) []int64 {
	if n < 0 {
		return nil
	}
	return []int64{n}
}

type deviceKey struct{ namespace, pod, container, resource, id string }

// allocatedResourcesStatus returns the health the kubelet reports for the devices the pods'
// containers hold (status.containerStatuses[].allocatedResourcesStatus), as a message, for those
// it reports other than Healthy.
func allocatedResourcesStatus(pods map[types.NamespacedName]*corev1.Pod) map[deviceKey]string {
	out := map[deviceKey]string{}
	for key, pod := range pods {
		for _, statuses := range [][]corev1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses} {
			for _, cs := range statuses {
				for _, rs := range cs.AllocatedResourcesStatus {
					for _, rh := range rs.Resources {
						if rh.Health == corev1.ResourceHealthStatusHealthy || rh.Health == "" {
							continue
						}
						msg := string(rh.Health)
						if rh.Message != nil && *rh.Message != "" {
							msg += " (" + *rh.Message + ")"
						}
						out[deviceKey{key.Namespace, key.Name, cs.Name, string(rs.Name), string(rh.ResourceID)}] = msg + "."
					}
				}
			}
		}
	}
	return out
}
