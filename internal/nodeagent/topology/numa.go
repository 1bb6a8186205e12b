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
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// nodeDir is where Linux lists NUMA nodes, relative to the root.
const nodeDir = "sys/devices/system/node"

// ReadNUMANodes returns the machine's NUMA node IDs, ascending, from the
// node<N> directories of <root>/sys/devices/system/node. root "" means "/".
// A machine without that directory, or without any node<N> in it, has a
// single node 0. A node ID above 63 is an error: BitMask cannot hold it.
func ReadNUMANodes(root string) ([]int, error) {
	if root == "" {
		root = "/"
	}
	dir := filepath.Join(root, nodeDir)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return []int{0}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading NUMA nodes from %s: %w", dir, err)
	}
	var nodes []int
	for _, e := range entries {
		id, ok := parseNodeName(e.Name())
		if !ok {
			continue
		}
		// sysfs entries are directories; follow a symlink to check.
		fi, err := os.Stat(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("reading NUMA nodes from %s: %w", dir, err)
		}
		if !fi.IsDir() {
			continue
		}
		if id >= MaxNUMANodes {
			return nil, fmt.Errorf("reading NUMA nodes from %s: node %d is above the supported maximum %d", dir, id, MaxNUMANodes-1)
		}
		nodes = append(nodes, id)
	}
	if len(nodes) == 0 {
		return []int{0}, nil
	}
	slices.Sort(nodes)
	return nodes, nil
}

// parseNodeName parses "node<N>" with N a decimal number without sign.
func parseNodeName(name string) (int, bool) {
	digits, ok := strings.CutPrefix(name, "node")
	if !ok || digits == "" || strings.TrimLeft(digits, "0123456789") != "" {
		return 0, false
	}
	id, err := strconv.Atoi(digits)
	if err != nil {
		return 0, false
	}
	return id, true
}

// NUMADistances holds, per NUMA node ID, the distance to every node ID, as
// the kubelet's NUMADistances (from cadvisor, from sysfs).
type NUMADistances map[int][]uint64

// NUMAInfo is the machine's NUMA nodes and, when prefer-closest-numa-nodes
// is set, their distances (the kubelet's NUMAInfo).
type NUMAInfo struct {
	// Nodes are the node IDs, ascending.
	Nodes []int
	// Distances is nil unless distances were read.
	Distances NUMADistances
}

// errNoDistances is wrapped when prefer-closest-numa-nodes is set and a
// node's distances cannot be read.
var errNoDistances = errors.New("NUMA node distances are not available")

// ReadNUMAInfo reads the NUMA nodes (ReadNUMANodes) and, when
// withDistances, each node's <root>/sys/devices/system/node/node<N>/distance,
// as the kubelet's NewNUMAInfo requires when prefer-closest-numa-nodes is
// set (it refuses to start without them). The kernel lists the distances
// in the order of the online nodes, so row position i is node Nodes[i];
// cadvisor indexes the row by position too, which is the same for the
// usual contiguous IDs. A machine without sysfs NUMA nodes has the single
// node 0 at the local distance 10.
func ReadNUMAInfo(root string, withDistances bool) (NUMAInfo, error) {
	nodes, err := ReadNUMANodes(root)
	if err != nil {
		return NUMAInfo{}, err
	}
	info := NUMAInfo{Nodes: nodes}
	if !withDistances {
		return info, nil
	}
	if root == "" {
		root = "/"
	}
	dir := filepath.Join(root, nodeDir)
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		info.Distances = NUMADistances{0: {10}}
		return info, nil
	}
	size := nodes[len(nodes)-1] + 1
	info.Distances = make(NUMADistances, len(nodes))
	for _, id := range nodes {
		path := filepath.Join(dir, fmt.Sprintf("node%d", id), "distance")
		raw, err := os.ReadFile(path)
		if err != nil {
			return NUMAInfo{}, fmt.Errorf("reading NUMA distances from %s: %w: %w", path, errNoDistances, err)
		}
		fields := strings.Fields(string(raw))
		if len(fields) != len(nodes) {
			return NUMAInfo{}, fmt.Errorf("reading NUMA distances from %s: %w: %d values for %d nodes", path, errNoDistances, len(fields), len(nodes))
		}
		row := make([]uint64, size)
		for i, f := range fields {
			d, err := strconv.ParseUint(f, 10, 64)
			if err != nil {
				return NUMAInfo{}, fmt.Errorf("reading NUMA distances from %s: %w: %w", path, errNoDistances, err)
			}
			row[nodes[i]] = d
		}
		info.Distances[id] = row
	}
	return info, nil
}

// DefaultAffinityMask is the mask of all the machine's nodes.
func (n NUMAInfo) DefaultAffinityMask() BitMask { return maskOf(n.Nodes) }

// CalculateAverageFor returns the average distance between every ordered
// pair of nodes of bm, self-pairs included, as the kubelet's
// NUMADistances.CalculateAverageFor; 0 for an empty mask. A pair without a
// known distance counts as 0, where the kubelet would panic.
func (d NUMADistances) CalculateAverageFor(bm BitMask) float64 {
	if bm.Count() == 0 {
		return 0
	}
	var count, sum float64
	for _, n1 := range bm.Bits() {
		for _, n2 := range bm.Bits() {
			if row := d[n1]; n2 < len(row) {
				sum += float64(row[n2])
			}
			count++
		}
	}
	return sum / count
}

// Narrowest returns the narrower of m1 and m2 (fewer nodes, then lower
// IDs), as the kubelet's NUMAInfo.Narrowest.
func (n NUMAInfo) Narrowest(m1, m2 BitMask) BitMask {
	if m1.IsNarrowerThan(m2) {
		return m1
	}
	return m2
}

// Closest returns, as the kubelet's NUMAInfo.Closest, the narrower mask if
// their widths differ, else the one with the shorter average distance,
// else the lower one.
func (n NUMAInfo) Closest(m1, m2 BitMask) BitMask {
	if m1.Count() != m2.Count() {
		return n.Narrowest(m1, m2)
	}
	d1 := n.Distances.CalculateAverageFor(m1)
	d2 := n.Distances.CalculateAverageFor(m2)
	if d1 == d2 {
		if m1.IsLessThan(m2) {
			return m1
		}
		return m2
	}
	if d1 < d2 {
		return m1
	}
	return m2
}
