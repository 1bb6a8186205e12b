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

package topology

import (
	"slices"

	"k8s.io/apimachinery/pkg/util/sets"
)

// Hint is a NUMA affinity a resource can be allocated with.
type Hint struct {
	// NUMANodeAffinity is the set of NUMA nodes the allocation would use.
	// Empty means any NUMA node (no preference).
	NUMANodeAffinity BitMask
	// Preferred is true when the affinity is as narrow as the request
	// allows on this machine.
	Preferred bool
}

// String renders h for logs, e.g. "{0,1} preferred".
func (h Hint) String() string {
	aff := h.NUMANodeAffinity.String()
	if h.NUMANodeAffinity.IsEmpty() {
		aff = "any"
	}
	if h.Preferred {
		return aff + " preferred"
	}
	return aff + " not preferred"
}

// LessThan orders hints as the kubelet's TopologyHint.LessThan: preferred
// before not preferred, then narrower affinity first.
func (h Hint) LessThan(o Hint) bool {
	if h.Preferred != o.Preferred {
		return h.Preferred
	}
	return h.NUMANodeAffinity.IsNarrowerThan(o.NUMANodeAffinity)
}

// DeviceNodes maps every device ID of one resource to the NUMA nodes the
// device is attached to (from the plugin's TopologyInfo). A device with no
// node (nil or empty) has no topology.
type DeviceNodes map[string][]int

// HasTopology reports whether any device reports a NUMA node. If none does,
// the resource has no topology preference (its hints are nil).
func (d DeviceNodes) HasTopology() bool {
	for _, nodes := range d {
		if len(nodes) > 0 {
			return true
		}
	}
	return false
}

// NUMANodes returns, ascending, the NUMA nodes that host at least one
// device and are among machineNodes. IDs the machine does not have are
// dropped (the kubelet logs and ignores them).
func (d DeviceNodes) NUMANodes(machineNodes []int) []int {
	known := maskOf(machineNodes)
	var hosting BitMask
	for _, nodes := range d {
		hosting |= maskOf(nodes)
	}
	return hosting.And(known).Bits()
}

// HintInput is what ResourceHints needs to know about one resource, for one
// container (container scope) or for a whole pod (pod scope).
type HintInput struct {
	// MachineNodes are the machine's NUMA nodes (ReadNUMANodes).
	MachineNodes []int
	// Devices are all devices of the resource with their NUMA nodes,
	// allocated and unhealthy ones included.
	Devices DeviceNodes
	// Available are the healthy devices not allocated to anyone.
	Available sets.Set[string]
	// Reusable are devices of the pod's finished init containers that this
	// container may take again. Nil for pod scope, as in the kubelet.
	Reusable sets.Set[string]
	// Allocated are the devices already allocated to this container (pod
	// scope: to the pod), e.g. when hints are asked again after a restart.
	Allocated sets.Set[string]
	// Request is the number of devices requested.
	Request int
}

// ResourceHints returns the topology hints of one resource as the kubelet's
// GetTopologyHints (container scope) and GetPodTopologyHints (pod scope) do:
//   - nil (no preference) if no device of the resource has topology;
//   - if devices are already allocated: the hints regenerated from them, or
//     [] (cannot be satisfied) if their number differs from the request;
//   - [] if fewer than Request devices are available and reusable;
//   - otherwise GenerateDeviceHints.
func ResourceHints(in HintInput) []Hint {
	if !in.Devices.HasTopology() {
		return nil
	}
	if in.Allocated.Len() > 0 {
		return RegenerateHints(in.MachineNodes, in.Devices, in.Allocated, in.Request)
	}
	if in.Available.Union(in.Reusable).Len() < in.Request {
		return []Hint{}
	}
	return GenerateDeviceHints(in.MachineNodes, in.Devices, in.Available, in.Reusable, in.Request)
}

// RegenerateHints returns the hints of devices that are already allocated:
// [] if their number differs from request (the request changed), otherwise
// the hints generated as if exactly those devices were available.
func RegenerateHints(machineNodes []int, devices DeviceNodes, allocated sets.Set[string], request int) []Hint {
	if allocated.Len() != request {
		return []Hint{}
	}
	return GenerateDeviceHints(machineNodes, devices, allocated, nil, request)
}

// GenerateDeviceHints returns a hint for every set of NUMA nodes on which
// request devices can be had, as the kubelet's generateDeviceTopologyHints
// (including kubernetes#138244):
//   - the candidate nodes are the machine nodes hosting devices of the
//     resource (DeviceNodes.NUMANodes), or all machine nodes if none does;
//   - a mask qualifies if every reusable device with topology has a node in
//     it, and the reusable devices plus the available devices with a node
//     in it number at least request;
//   - a hint is preferred if its mask has as few nodes as the smallest
//     mask that holds request devices of the resource counting all of them,
//     allocated or not. When the devices that would fit on fewer nodes are
//     taken, the remaining hints are therefore not preferred.
//
// The result is never nil: [] means no set of nodes satisfies the request.
// A reusable device unknown to devices, or with no NUMA node, is not
// required to be in the mask (the kubelet requires a device whose topology
// is present but empty to be in every mask, which rejects them all).
func GenerateDeviceHints(machineNodes []int, devices DeviceNodes, available, reusable sets.Set[string], request int) []Hint {
	numaNodes := devices.NUMANodes(machineNodes)
	if len(numaNodes) == 0 {
		numaNodes = machineNodes
	}
	minAffinitySize := len(numaNodes)
	all, availableCounts, reusableMasks := deviceMasks(devices, available, reusable)

	hints := []Hint{}
	IterateBitMasks(numaNodes, func(mask BitMask) {
		devicesInMask := 0
		for _, c := range all {
			if c.mask&mask != 0 {
				devicesInMask += c.n
			}
		}
		if devicesInMask >= request && mask.Count() < minAffinitySize {
			minAffinitySize = mask.Count()
		}

		numMatching := 0
		for _, m := range reusableMasks {
			if m&mask == 0 {
				return
			}
			numMatching++
		}
		for _, c := range availableCounts {
			if c.mask&mask != 0 {
				numMatching += c.n
			}
		}
		if numMatching < request {
			return
		}
		hints = append(hints, Hint{NUMANodeAffinity: mask})
	})

	for i := range hints {
		hints[i].Preferred = hints[i].NUMANodeAffinity.Count() == minAffinitySize
	}
	return hints
}

// deviceMasks counts the devices (all of them, and the available ones) by
// their NUMA mask: devices attached to the same nodes behave alike, so each
// candidate mask costs O(distinct masks), not O(devices). It returns the
// masks of the reusable devices with topology too: those without neither
// constrain the mask nor count towards the request. One whose nodes all lie
// outside 0..63 has a zero mask and so, as in the kubelet, rejects every
// mask.
func deviceMasks(devices DeviceNodes, available, reusable sets.Set[string]) (all, availableCounts []maskCount, reusableMasks []BitMask) {
	allMasks := make([]BitMask, 0, len(devices))
	for _, nodes := range devices {
		allMasks = append(allMasks, maskOf(nodes))
	}
	availableMasks := make([]BitMask, 0, available.Len())
	for id := range available {
		availableMasks = append(availableMasks, maskOf(devices[id]))
	}
	for id := range reusable {
		if len(devices[id]) > 0 {
			reusableMasks = append(reusableMasks, maskOf(devices[id]))
		}
	}
	return countByMask(allMasks), countByMask(availableMasks), reusableMasks
}

// maskCount is the number of devices attached to exactly the nodes of mask.
type maskCount struct {
	mask BitMask
	n    int
}

// countByMask groups masks and counts them. Zero masks (no topology, or no
// node a mask can hold) never intersect a candidate and are dropped.
func countByMask(masks []BitMask) []maskCount {
	index := map[BitMask]int{}
	var out []maskCount
	for _, m := range masks {
		if m == 0 {
			continue
		}
		if i, ok := index[m]; ok {
			out[i].n++
			continue
		}
		index[m] = len(out)
		out = append(out, maskCount{mask: m, n: 1})
	}
	return out
}

// SortHints sorts hints with Hint.LessThan (preferred first, then
// narrowest), for stable logs and comparisons.
func SortHints(hints []Hint) {
	slices.SortStableFunc(hints, func(a, b Hint) int {
		switch {
		case a.LessThan(b):
			return -1
		case b.LessThan(a):
			return 1
		}
		return 0
	})
}
