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
	"fmt"
	"math/bits"
	"strconv"
	"strings"
)

// MaxNUMANodes is the number of NUMA nodes a BitMask can hold (IDs 0..63).
const MaxNUMANodes = 64

// BitMask is a set of NUMA node IDs. The zero value is the empty set; in a
// Hint it means "no NUMA preference".
type BitMask uint64

// NewBitMask returns the mask of the given NUMA node IDs. It fails on an ID
// outside 0..63.
func NewBitMask(nodes ...int) (BitMask, error) {
	var m BitMask
	for _, n := range nodes {
		if n < 0 || n >= MaxNUMANodes {
			return 0, fmt.Errorf("creating NUMA bit mask: node %d is outside 0-%d", n, MaxNUMANodes-1)
		}
		m |= 1 << uint(n)
	}
	return m, nil
}

// maskOf returns the mask of the IDs in nodes that fit in a BitMask,
// ignoring the others (a node that cannot be in a mask never matches one).
func maskOf(nodes []int) BitMask {
	var m BitMask
	for _, n := range nodes {
		if n >= 0 && n < MaxNUMANodes {
			m |= 1 << uint(n)
		}
	}
	return m
}

// And returns the intersection of m and others.
func (m BitMask) And(others ...BitMask) BitMask {
	for _, o := range others {
		m &= o
	}
	return m
}

// Or returns the union of m and others.
func (m BitMask) Or(others ...BitMask) BitMask {
	for _, o := range others {
		m |= o
	}
	return m
}

// Count returns the number of NUMA nodes in m.
func (m BitMask) Count() int { return bits.OnesCount64(uint64(m)) }

// IsEmpty reports whether m holds no NUMA node.
func (m BitMask) IsEmpty() bool { return m == 0 }

// IsSet reports whether NUMA node n is in m. IDs outside 0..63 never are.
func (m BitMask) IsSet(n int) bool {
	return n >= 0 && n < MaxNUMANodes && m&(1<<uint(n)) != 0
}

// AnySet reports whether any of nodes is in m.
func (m BitMask) AnySet(nodes []int) bool { return m&maskOf(nodes) != 0 }

// IsEqual reports whether m and o hold the same NUMA nodes.
func (m BitMask) IsEqual(o BitMask) bool { return m == o }

// IsSubsetOf reports whether every NUMA node of m is in o.
func (m BitMask) IsSubsetOf(o BitMask) bool { return m&^o == 0 }

// IsLessThan compares m and o as numbers: the mask with more lower-numbered
// nodes is less.
func (m BitMask) IsLessThan(o BitMask) bool { return m < o }

// IsNarrowerThan reports whether m holds fewer NUMA nodes than o or, with
// as many, is less than o (prefers lower-numbered nodes), as the kubelet's
// bitmask.IsNarrowerThan.
func (m BitMask) IsNarrowerThan(o BitMask) bool {
	if m.Count() == o.Count() {
		return m.IsLessThan(o)
	}
	return m.Count() < o.Count()
}

// Bits returns the NUMA node IDs in m, ascending.
func (m BitMask) Bits() []int {
	var out []int
	for v := uint64(m); v != 0; v &= v - 1 {
		out = append(out, bits.TrailingZeros64(v))
	}
	return out
}

// String renders m as a set of node IDs, e.g. "{0,1}"; "{}" when empty.
func (m BitMask) String() string {
	var b strings.Builder
	b.WriteByte('{')
	for i, n := range m.Bits() {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(n))
	}
	b.WriteByte('}')
	return b.String()
}

// IterateBitMasks calls fn with every non-empty subset of nodes, smallest
// subsets first and, within a size, in the order of nodes (lexicographic
// combinations), like the kubelet's bitmask.IterateBitMasks. IDs outside
// 0..63 are skipped. There are 2^len(nodes)-1 subsets: keep nodes short.
func IterateBitMasks(nodes []int, fn func(BitMask)) {
	valid := make([]int, 0, len(nodes))
	for _, n := range nodes {
		if n >= 0 && n < MaxNUMANodes {
			valid = append(valid, n)
		}
	}
	var iterate func(rest []int, accum BitMask, left int)
	iterate = func(rest []int, accum BitMask, left int) {
		if left == 0 {
			fn(accum)
			return
		}
		for i := 0; i+left <= len(rest); i++ {
			iterate(rest[i+1:], accum|1<<uint(rest[i]), left-1)
		}
	}
	for size := 1; size <= len(valid); size++ {
		iterate(valid, 0, size)
	}
}
