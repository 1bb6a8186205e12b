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
	"cmp"
	"slices"

	"k8s.io/apimachinery/pkg/util/sets"
)

// noTopologyNode is the pseudo NUMA node of devices without topology.
const noTopologyNode = -1

// FilterByAffinity splits the available devices of a resource by the NUMA
// affinity chosen for the container, as the kubelet's filterByAffinity:
//   - aligned: devices with a NUMA node in affinity;
//   - notAligned: devices with NUMA nodes, none in affinity;
//   - withoutTopology: devices with no NUMA node, or unknown to devices.
//
// If no device of the resource has topology, or affinity is empty (no
// preference), every available device is in withoutTopology.
//
// Each list is ordered like the kubelet's buckets: the nodes are sorted
// with those in affinity first, then the other real nodes, then the
// no-topology pseudo node -1, each group by ascending number of available
// devices (ties by node ID); every device goes to the first sorted node it
// is attached to, and within a node devices are in ID order. The kubelet
// returns sets; the order here is a deterministic tie-break for callers
// that take devices from the front.
func FilterByAffinity(devices DeviceNodes, available sets.Set[string], affinity BitMask) (aligned, notAligned, withoutTopology []string) {
	if !devices.HasTopology() || affinity.IsEmpty() {
		return nil, nil, sets.List(available)
	}

	perNode := make(map[int][]string)
	for _, id := range sets.List(available) {
		nodes := devices[id]
		if len(nodes) == 0 {
			perNode[noTopologyNode] = append(perNode[noTopologyNode], id)
			continue
		}
		for _, n := range slices.Compact(slices.Sorted(slices.Values(nodes))) {
			perNode[n] = append(perNode[n], id)
		}
	}

	nodes := make([]int, 0, len(perNode))
	for n := range perNode {
		nodes = append(nodes, n)
	}
	group := func(n int) int {
		switch {
		case affinity.IsSet(n):
			return 0
		case n == noTopologyNode:
			return 2
		default:
			return 1
		}
	}
	slices.SortFunc(nodes, func(a, b int) int {
		return cmp.Or(
			cmp.Compare(group(a), group(b)),
			cmp.Compare(len(perNode[a]), len(perNode[b])),
			cmp.Compare(a, b),
		)
	})

	placed := make(sets.Set[string], available.Len())
	for _, n := range nodes {
		for _, id := range perNode[n] {
			if placed.Has(id) {
				continue
			}
			placed.Insert(id)
			switch group(n) {
			case 0:
				aligned = append(aligned, id)
			case 1:
				notAligned = append(notAligned, id)
			default:
				withoutTopology = append(withoutTopology, id)
			}
		}
	}
	return aligned, notAligned, withoutTopology
}
