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

package nodeagent

import (
	"cmp"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/kubedevice/kubedevice/internal/nodeagent/poddevices"
)

// PodAllocations returns every pod's committed allocations (in-flight ones
// are not shown), sorted by namespace, name and UID. The result is a copy.
func (m *Manager) PodAllocations() []PodAllocation {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.podAllocationsLocked("")
}

// PodAllocation returns the committed allocations of one pod; false if it
// holds no device.
func (m *Manager) PodAllocation(podUID string) (PodAllocation, bool) {
	if podUID == "" {
		return PodAllocation{}, false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.pods.HasPod(podUID) {
		return PodAllocation{}, false
	}
	out := m.podAllocationsLocked(podUID)
	if len(out) == 0 {
		return PodAllocation{}, false
	}
	return out[0], true
}

// GetDevices returns the devices committed to the pod's container, one value
// per (device, NUMA node) as the PodResources API lists them, sorted by
// resource, device ID and NUMA node (the kubelet's GetDevices, which lists
// them in map order); nil when the container holds none. Allocations in
// flight are not shown.
func (m *Manager) GetDevices(podUID, container string) []poddevices.ContainerDevice {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.pods.GetContainerDevices(podUID, container)
}

// PodsHolding returns the UIDs, sorted, of the pods named namespace/name that
// hold committed devices: more than one when a pod was replaced by another of
// the same name before the first one's devices were freed. It costs a walk
// of the pods' names, not PodAllocations' copies and merges.
func (m *Manager) PodsHolding(namespace, name string) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var uids []string
	for uid, ref := range m.podRefs {
		if ref.Namespace == namespace && ref.Name == name && !IsClaimKey(uid) && m.pods.HasPod(uid) {
			uids = append(uids, uid)
		}
	}
	slices.Sort(uids)
	return uids
}

// podAllocationsLocked builds the allocations of every pod, or only of pod
// uid when it is not empty.
func (m *Manager) podAllocationsLocked(uid string) []PodAllocation {
	var out []PodAllocation
	// Entries are sorted by pod UID, container and resource.
	var entries []poddevices.Entry
	if uid == "" {
		entries = m.pods.Entries()
	} else {
		entries = m.pods.PodEntries(uid)
	}
	for _, e := range entries {
		if IsClaimKey(e.PodUID) {
			continue // a ResourceClaim (claims.go), not a pod
		}
		if len(out) == 0 || out[len(out)-1].PodUID != e.PodUID {
			out = append(out, PodAllocation{PodUID: e.PodUID, Namespace: e.PodNamespace, Name: e.PodName})
		}
		pa := &out[len(out)-1]
		if len(pa.Containers) == 0 || pa.Containers[len(pa.Containers)-1].Name != e.ContainerName {
			opts, _ := m.pods.RunContainerOptions(e.PodUID, e.ContainerName)
			pa.Containers = append(pa.Containers, ContainerAllocation{Name: e.ContainerName, RuntimeOptions: opts})
		}
		ca := &pa.Containers[len(pa.Containers)-1]
		ca.Resources = append(ca.Resources, resourceAllocation(e))
	}
	slices.SortFunc(out, func(a, b PodAllocation) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name), cmp.Compare(a.PodUID, b.PodUID))
	})
	return out
}

// resourceAllocation converts one committed allocation.
func resourceAllocation(e poddevices.Entry) ResourceAllocation {
	ids := sets.New[string]()
	var nodes []int64
	for node, list := range e.DeviceIDs {
		ids.Insert(list...)
		if node != poddevices.NodeWithoutTopology && len(list) > 0 {
			nodes = append(nodes, node)
		}
	}
	slices.Sort(nodes)
	return ResourceAllocation{ResourceName: e.ResourceName, DeviceIDs: sets.List(ids), NUMANodes: nodes}
}

// SetCordons replaces the cordoned devices of resource with ids (none: no
// cordon). A cordoned device is never allocated and is not counted as
// allocatable (GetAllocatableDevices, snapshots); a device
// already allocated stays with its container. Cordons may name devices or
// resources the manager does not know (yet); they apply when they appear.
// Cordons are not checkpointed: set them before Start.
func (m *Manager) SetCordons(resource string, ids []string) {
	next := sets.New(ids...)
	next.Delete("")
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cordons[resource].Equal(next) {
		return
	}
	if next.Len() == 0 {
		delete(m.cordons, resource)
	} else {
		m.cordons[resource] = next
	}
	if m.resources[resource] != nil {
		m.notifyLocked(resource)
	}
	m.logger.V(2).Info("Cordoned devices changed", "resourceName", resource, "cordoned", sets.List(next))
}

// allocatableCountLocked is the number of healthy devices of r that are not
// cordoned.
func (m *Manager) allocatableCountLocked(r *resourceState) int {
	cordoned := m.cordons[r.name]
	if cordoned.Len() == 0 {
		return r.healthy.Len()
	}
	n := 0
	for id := range r.healthy {
		if !cordoned.Has(id) {
			n++
		}
	}
	return n
}

// holderLocked returns the container that holds device id of resource, or
// nil.
func (m *Manager) holderLocked(resource, id string) *DeviceHolder {
	uid, container, ok := m.pods.PodAndContainerForDevice(resource, id)
	if !ok {
		return nil
	}
	ref := m.podRefs[uid]
	if IsClaimKey(uid) {
		return &DeviceHolder{Namespace: ref.Namespace, Claim: &ClaimRef{UID: strings.TrimPrefix(uid, ClaimKeyPrefix), Namespace: ref.Namespace, Name: ref.Name}}
	}
	return &DeviceHolder{PodUID: uid, Namespace: ref.Namespace, PodName: ref.Name, Container: container}
}
