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
	"slices"
	"strings"
)

// Policy is a topology manager policy: how strictly the NUMA affinities of
// a container's (or pod's) resources must line up.
type Policy string

const (
	// PolicyNone does no alignment: every pod is admitted, without affinity.
	PolicyNone Policy = "none"
	// PolicyBestEffort merges the hints and admits every pod, aligned if
	// possible.
	PolicyBestEffort Policy = "best-effort"
	// PolicyRestricted admits a pod only if the merged hint is preferred.
	PolicyRestricted Policy = "restricted"
	// PolicySingleNUMANode admits a pod only if all its resources fit on one
	// NUMA node (or have no preference).
	PolicySingleNUMANode Policy = "single-numa-node"
)

// Policies lists the valid policies.
var Policies = []Policy{PolicyNone, PolicyBestEffort, PolicyRestricted, PolicySingleNUMANode}

// ErrUnknownPolicy is wrapped by the errors for a policy or scope name that
// is not valid.
var ErrUnknownPolicy = errors.New("unknown topology manager setting")

// ParsePolicy returns the policy named s.
func ParsePolicy(s string) (Policy, error) {
	if p := Policy(s); slices.Contains(Policies, p) {
		return p, nil
	}
	return "", fmt.Errorf("parsing topology policy %q: %w: valid values are %s", s, ErrUnknownPolicy, joinQuoted(Policies))
}

// Scope is the granularity of alignment: each container on its own, or the
// whole pod together.
type Scope string

const (
	// ScopeContainer aligns each container's resources separately.
	ScopeContainer Scope = "container"
	// ScopePod aligns all of a pod's resources to one common affinity.
	ScopePod Scope = "pod"
)

// Scopes lists the valid scopes.
var Scopes = []Scope{ScopeContainer, ScopePod}

// ParseScope returns the scope named s.
func ParseScope(s string) (Scope, error) {
	if sc := Scope(s); slices.Contains(Scopes, sc) {
		return sc, nil
	}
	return "", fmt.Errorf("parsing topology scope %q: %w: valid values are %s", s, ErrUnknownPolicy, joinQuoted(Scopes))
}

func joinQuoted[T ~string](values []T) string {
	q := make([]string, len(values))
	for i, v := range values {
		q[i] = fmt.Sprintf("%q", v)
	}
	return strings.Join(q, ", ")
}

// ReasonTopologyAffinity is the kubelet's admission failure reason for a pod
// refused by the topology policy.
const ReasonTopologyAffinity = "TopologyAffinityError"

// ErrTopologyAffinity matches every *AffinityError with errors.Is.
// Its message is the kubelet's, verbatim.
var ErrTopologyAffinity = errors.New("Resources cannot be allocated with Topology locality")

// AffinityError reports that the policy refuses the merged hint. Its
// message is the kubelet's TopologyAffinityError message, verbatim.
type AffinityError struct {
	// Policy is the policy that refused.
	Policy Policy
	// Hint is the best merged hint, which the policy did not accept.
	Hint Hint
}

// Error implements error.
func (e *AffinityError) Error() string { return ErrTopologyAffinity.Error() }

// Reason returns ReasonTopologyAffinity, for admission results and events.
func (e *AffinityError) Reason() string { return ReasonTopologyAffinity }

// Is reports whether target is ErrTopologyAffinity.
func (e *AffinityError) Is(target error) bool { return target == ErrTopologyAffinity }

// Admit merges the providers' hints with MergeWithOptions and returns the
// best hint, or an *AffinityError if the policy refuses it (errors.Is
// ErrTopologyAffinity), or an error wrapping ErrUnknownPolicy.
func (p Policy) Admit(numa NUMAInfo, opts PolicyOptions, providersHints []map[string][]Hint) (Hint, error) {
	if !slices.Contains(Policies, p) {
		return Hint{}, fmt.Errorf("admitting with topology policy %q: %w", p, ErrUnknownPolicy)
	}
	best, admit := p.MergeWithOptions(numa, opts, providersHints)
	if !admit {
		return Hint{}, &AffinityError{Policy: p, Hint: best}
	}
	return best, nil
}

// Merge merges the hints of several providers (each a map from resource to
// its hints; in the agent typically one map holding every device resource of
// the container or pod) into the best common hint, and reports whether the
// policy admits it, as the kubelet's topologymanager policies do:
//   - a provider with no hints, or a resource with nil hints, has no
//     preference; a resource with [] hints cannot be satisfied;
//   - single-numa-node first keeps only preferred single-node hints (and
//     "no preference" ones);
//   - every combination of one hint per resource is merged by intersecting
//     the affinities (starting from all machineNodes); the merged hint is
//     preferred if all its hints are preferred and name the same nodes;
//   - the best merged hint is preferred over not preferred, then the
//     narrowest; among not-preferred ones, the one closest to (not above)
//     the largest minimum node count any resource needs;
//   - none admits without affinity; best-effort always admits; restricted
//     and single-numa-node admit only a preferred hint, and
//     single-numa-node reports an affinity equal to all machine nodes as
//     "any".
//
// machineNodes must hold at least one node. An unknown Policy refuses.
// Merge uses the default policy options; see MergeWithOptions.
func (p Policy) Merge(machineNodes []int, providersHints []map[string][]Hint) (Hint, bool) {
	return p.MergeWithOptions(NUMAInfo{Nodes: machineNodes}, PolicyOptions{}, providersHints)
}

// MergeWithOptions is Merge on the machine numa under the policy options
// opts: with PreferClosestNUMA, best-effort and restricted pick among
// equally wide hints the one with the shortest average NUMA distance
// (NUMAInfo.Closest) instead of the lowest; single-numa-node ignores it,
// as in the kubelet's NewHintMerger.
func (p Policy) MergeWithOptions(numa NUMAInfo, opts PolicyOptions, providersHints []map[string][]Hint) (Hint, bool) {
	defaultAffinity := numa.DefaultAffinityMask()
	better := numa.Narrowest
	if opts.PreferClosestNUMA && p != PolicySingleNUMANode {
		better = numa.Closest
	}
	switch p {
	case PolicyNone:
		return Hint{}, true
	case PolicyBestEffort:
		best := mergeHints(defaultAffinity, better, filterProvidersHints(providersHints))
		return best, true
	case PolicyRestricted:
		best := mergeHints(defaultAffinity, better, filterProvidersHints(providersHints))
		return best, best.Preferred
	case PolicySingleNUMANode:
		best := mergeHints(defaultAffinity, better, filterSingleNUMAHints(filterProvidersHints(providersHints)))
		if best.NUMANodeAffinity == defaultAffinity {
			best.NUMANodeAffinity = 0
		}
		return best, best.Preferred
	default:
		return Hint{}, false
	}
}

// filterProvidersHints flattens the providers' hints into one list of
// candidate hints per resource. Resources are taken in name order, so the
// result does not depend on map order.
func filterProvidersHints(providersHints []map[string][]Hint) [][]Hint {
	var all [][]Hint
	for _, hints := range providersHints {
		if len(hints) == 0 {
			all = append(all, []Hint{{Preferred: true}})
			continue
		}
		resources := make([]string, 0, len(hints))
		for r := range hints {
			resources = append(resources, r)
		}
		slices.Sort(resources)
		for _, r := range resources {
			switch {
			case hints[r] == nil:
				all = append(all, []Hint{{Preferred: true}})
			case len(hints[r]) == 0:
				all = append(all, []Hint{{Preferred: false}})
			default:
				all = append(all, hints[r])
			}
		}
	}
	return all
}

// filterSingleNUMAHints keeps the preferred hints that name exactly one node
// or have no preference.
func filterSingleNUMAHints(all [][]Hint) [][]Hint {
	out := make([][]Hint, 0, len(all))
	for _, hints := range all {
		var kept []Hint
		for _, h := range hints {
			if h.Preferred && h.NUMANodeAffinity.Count() <= 1 {
				kept = append(kept, h)
			}
		}
		out = append(out, kept)
	}
	return out
}

// mergePermutation intersects one hint per resource.
func mergePermutation(defaultAffinity BitMask, permutation []Hint) Hint {
	preferred := true
	merged := defaultAffinity
	var first BitMask
	haveFirst := false
	for _, h := range permutation {
		if !h.NUMANodeAffinity.IsEmpty() {
			if !haveFirst {
				first, haveFirst = h.NUMANodeAffinity, true
			}
			if h.NUMANodeAffinity != first {
				preferred = false
			}
			merged &= h.NUMANodeAffinity
		}
		if !h.Preferred {
			preferred = false
		}
	}
	return Hint{NUMANodeAffinity: merged, Preferred: preferred}
}

// narrowestAffinityCount returns the node count of the narrowest hint with
// an affinity, or 0 if there is none.
func narrowestAffinityCount(hints []Hint) int {
	var narrowest BitMask
	for _, h := range hints {
		if h.NUMANodeAffinity.IsEmpty() {
			continue
		}
		if narrowest.IsEmpty() || h.NUMANodeAffinity.IsNarrowerThan(narrowest) {
			narrowest = h.NUMANodeAffinity
		}
	}
	return narrowest.Count()
}

// mergeHints returns the best merge over all combinations of one hint per
// resource (the kubelet's HintMerger.Merge); better picks the fitter of two
// different affinities (NUMAInfo.Narrowest or, with
// prefer-closest-numa-nodes, NUMAInfo.Closest). If no combination leaves a
// NUMA node, it is all machine nodes, not preferred.
func mergeHints(defaultAffinity BitMask, better func(m1, m2 BitMask) BitMask, all [][]Hint) Hint {
	// The number of nodes that the resource needing the most nodes needs at
	// least: the target width among not-preferred merges.
	bestNonPreferredCount := 0
	for _, hints := range all {
		bestNonPreferredCount = max(bestNonPreferredCount, narrowestAffinityCount(hints))
	}

	best, found := Hint{NUMANodeAffinity: defaultAffinity}, false
	permutation := make([]Hint, len(all))
	var iterate func(i int)
	iterate = func(i int) {
		if i == len(all) {
			merged := mergePermutation(defaultAffinity, permutation)
			if merged.NUMANodeAffinity.IsEmpty() {
				return // the hints have no node in common
			}
			if !found || replaces(bestNonPreferredCount, better, best, merged) {
				best, found = merged, true
			}
			return
		}
		for _, h := range all[i] {
			permutation[i] = h
			iterate(i + 1)
		}
	}
	iterate(0)
	return best
}

// fitter reports whether better picks candidate's affinity over current's
// (equal affinities keep current), as the kubelet's
// compareNumaAffinityMasks.
func fitter(better func(m1, m2 BitMask) BitMask, current, candidate Hint) bool {
	return candidate.NUMANodeAffinity != current.NUMANodeAffinity &&
		better(current.NUMANodeAffinity, candidate.NUMANodeAffinity) != current.NUMANodeAffinity
}

// replaces reports whether candidate is a better merged hint than current,
// as the kubelet's HintMerger.compare.
func replaces(bestNonPreferredCount int, better func(m1, m2 BitMask) BitMask, current, candidate Hint) bool {
	narrower := func(current, candidate Hint) bool { return fitter(better, current, candidate) }
	switch {
	case current.Preferred != candidate.Preferred:
		return candidate.Preferred
	case current.Preferred:
		return narrower(current, candidate)
	}

	// Both not preferred: get as close as possible to, but not above,
	// bestNonPreferredCount nodes.
	cur, cand := current.NUMANodeAffinity.Count(), candidate.NUMANodeAffinity.Count()
	switch {
	case cur > bestNonPreferredCount:
		return narrower(current, candidate)
	case cur == bestNonPreferredCount:
		return cand == bestNonPreferredCount && narrower(current, candidate)
	case cand > bestNonPreferredCount:
		return false
	case cand == bestNonPreferredCount:
		return true
	case cand != cur:
		return cand > cur
	default:
		return narrower(current, candidate)
	}
}
