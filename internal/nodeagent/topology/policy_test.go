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
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/util/sets"
)

func TestParsePolicy(t *testing.T) {
	for _, p := range []string{"none", "best-effort", "restricted", "single-numa-node"} {
		got, err := ParsePolicy(p)
		if err != nil || string(got) != p {
			t.Errorf("ParsePolicy(%q) = %q, %v", p, got, err)
		}
	}
	for _, bad := range []string{"", "bestEffort", "Restricted", "single-numa"} {
		_, err := ParsePolicy(bad)
		if !errors.Is(err, ErrUnknownPolicy) {
			t.Errorf("ParsePolicy(%q) = %v, want ErrUnknownPolicy", bad, err)
			continue
		}
		for _, valid := range []string{`"none"`, `"best-effort"`, `"restricted"`, `"single-numa-node"`} {
			if !strings.Contains(err.Error(), valid) {
				t.Errorf("ParsePolicy(%q) error %q does not list %s", bad, err, valid)
			}
		}
	}
}

func TestParseScope(t *testing.T) {
	for _, s := range []string{"container", "pod"} {
		got, err := ParseScope(s)
		if err != nil || string(got) != s {
			t.Errorf("ParseScope(%q) = %q, %v", s, got, err)
		}
	}
	_, err := ParseScope("node")
	if !errors.Is(err, ErrUnknownPolicy) || !strings.Contains(err.Error(), `"container", "pod"`) {
		t.Errorf(`ParseScope("node") = %v, want ErrUnknownPolicy listing "container", "pod"`, err)
	}
}

type mergeResult struct {
	Hint  Hint
	Admit bool
}

func TestMerge(t *testing.T) {
	any2 := mergeResult{Hint: Hint{}, Admit: true} // what "none" returns
	cases := map[string]struct {
		machine   []int
		providers []map[string][]Hint
		want      map[Policy]mergeResult
	}{
		"no providers": {
			machine: twoNodes,
			want: map[Policy]mergeResult{
				PolicyNone:           any2,
				PolicyBestEffort:     {hint(t, true, 0, 1), true},
				PolicyRestricted:     {hint(t, true, 0, 1), true},
				PolicySingleNUMANode: {Hint{Preferred: true}, true},
			},
		},
		"provider with no hints, resource with nil hints: no preference": {
			machine:   twoNodes,
			providers: []map[string][]Hint{{}, {"gpu": nil}},
			want: map[Policy]mergeResult{
				PolicyNone:           any2,
				PolicyBestEffort:     {hint(t, true, 0, 1), true},
				PolicyRestricted:     {hint(t, true, 0, 1), true},
				PolicySingleNUMANode: {Hint{Preferred: true}, true},
			},
		},
		"resource that cannot be satisfied ([] hints)": {
			machine:   twoNodes,
			providers: []map[string][]Hint{{"gpu": {}}},
			want: map[Policy]mergeResult{
				PolicyNone:           any2,
				PolicyBestEffort:     {hint(t, false, 0, 1), true},
				PolicyRestricted:     {hint(t, false, 0, 1), false},
				PolicySingleNUMANode: {Hint{}, false},
			},
		},
		"two providers, same single-node preferred hint": {
			machine: twoNodes,
			providers: []map[string][]Hint{
				{"gpu": {hint(t, true, 1)}},
				{"cpu": {hint(t, true, 1)}},
			},
			want: map[Policy]mergeResult{
				PolicyNone:           any2,
				PolicyBestEffort:     {hint(t, true, 1), true},
				PolicyRestricted:     {hint(t, true, 1), true},
				PolicySingleNUMANode: {hint(t, true, 1), true},
			},
		},
		"narrowest common preferred hint wins": {
			machine: twoNodes,
			providers: []map[string][]Hint{
				{"gpu": {hint(t, true, 0), hint(t, true, 1), hint(t, false, 0, 1)}},
				{"cpu": {hint(t, true, 1), hint(t, false, 0, 1)}},
			},
			want: map[Policy]mergeResult{
				PolicyNone:           any2,
				PolicyBestEffort:     {hint(t, true, 1), true},
				PolicyRestricted:     {hint(t, true, 1), true},
				PolicySingleNUMANode: {hint(t, true, 1), true},
			},
		},
		"no common node": {
			machine: twoNodes,
			providers: []map[string][]Hint{
				{"gpu": {hint(t, true, 0)}},
				{"cpu": {hint(t, true, 1)}},
			},
			want: map[Policy]mergeResult{
				PolicyNone:           any2,
				PolicyBestEffort:     {hint(t, false, 0, 1), true},
				PolicyRestricted:     {hint(t, false, 0, 1), false},
				PolicySingleNUMANode: {Hint{}, false},
			},
		},
		// A wider preferred merge beats a narrower non-preferred one; but
		// single-numa-node keeps only single-node preferred hints and so
		// has nothing left for gpu.
		"wider preferred hint beats narrower non-preferred": {
			machine: twoNodes,
			providers: []map[string][]Hint{
				{"gpu": {hint(t, false, 0), hint(t, true, 0, 1)}},
				{"cpu": {hint(t, true, 0, 1)}},
			},
			want: map[Policy]mergeResult{
				PolicyNone:           any2,
				PolicyBestEffort:     {hint(t, true, 0, 1), true},
				PolicyRestricted:     {hint(t, true, 0, 1), true},
				PolicySingleNUMANode: {Hint{}, false},
			},
		},
		// The device's only hint spans both nodes (forced cross-NUMA): among
		// non-preferred merges the one as wide as the widest minimum ({0,1})
		// is chosen over the narrower {0}.
		"forced cross-NUMA device": {
			machine: twoNodes,
			providers: []map[string][]Hint{
				{"gpu": {hint(t, false, 0, 1)}},
				{"cpu": {hint(t, true, 0), hint(t, false, 0, 1)}},
			},
			want: map[Policy]mergeResult{
				PolicyNone:           any2,
				PolicyBestEffort:     {hint(t, false, 0, 1), true},
				PolicyRestricted:     {hint(t, false, 0, 1), false},
				PolicySingleNUMANode: {Hint{}, false},
			},
		},
		// Different preferred masks of one provider are not "equal": the
		// merge of {0,1} and {0} is {0}, but not preferred.
		"merged preferred only if all masks are equal": {
			machine: twoNodes,
			providers: []map[string][]Hint{
				{"gpu": {hint(t, true, 0, 1)}, "nic": {hint(t, true, 0)}},
			},
			want: map[Policy]mergeResult{
				PolicyNone:           any2,
				PolicyBestEffort:     {hint(t, false, 0), true},
				PolicyRestricted:     {hint(t, false, 0), false},
				PolicySingleNUMANode: {Hint{}, false},
			},
		},
		// On a one-node machine the only node is "any" for single-numa-node.
		"single node machine": {
			machine:   []int{0},
			providers: []map[string][]Hint{{"gpu": {hint(t, true, 0)}}},
			want: map[Policy]mergeResult{
				PolicyNone:           any2,
				PolicyBestEffort:     {hint(t, true, 0), true},
				PolicyRestricted:     {hint(t, true, 0), true},
				PolicySingleNUMANode: {Hint{Preferred: true}, true},
			},
		},
		"sparse machine nodes": {
			machine: []int{3, 7},
			providers: []map[string][]Hint{
				{"gpu": {hint(t, true, 7), hint(t, false, 3, 7)}},
				{"cpu": {hint(t, true, 3), hint(t, true, 7), hint(t, false, 3, 7)}},
			},
			want: map[Policy]mergeResult{
				PolicyNone:           any2,
				PolicyBestEffort:     {hint(t, true, 7), true},
				PolicyRestricted:     {hint(t, true, 7), true},
				PolicySingleNUMANode: {hint(t, true, 7), true},
			},
		},
	}
	for name, tc := range cases {
		for _, p := range Policies {
			t.Run(name+"/"+string(p), func(t *testing.T) {
				best, admit := p.Merge(tc.machine, tc.providers)
				if diff := cmp.Diff(tc.want[p], mergeResult{best, admit}); diff != "" {
					t.Errorf("%s.Merge() mismatch (-want +got):\n%s", p, diff)
				}
			})
		}
	}
}

func TestMergeUnknownPolicyRefuses(t *testing.T) {
	best, admit := Policy("bogus").Merge(twoNodes, nil)
	if admit || best != (Hint{}) {
		t.Errorf("Merge() with an unknown policy = %v, %t, want refusal", best, admit)
	}
}

func TestAdmit(t *testing.T) {
	crossNUMA := []map[string][]Hint{
		{"gpu": {hint(t, false, 0, 1)}},
		{"cpu": {hint(t, true, 0), hint(t, false, 0, 1)}},
	}
	aligned := []map[string][]Hint{{"gpu": {hint(t, true, 1)}}}

	for _, p := range []Policy{PolicyRestricted, PolicySingleNUMANode} {
		got, err := p.Admit(NUMAInfo{Nodes: twoNodes}, PolicyOptions{}, crossNUMA)
		if got != (Hint{}) {
			t.Errorf("%s.Admit() refused but returned hint %v", p, got)
		}
		if !errors.Is(err, ErrTopologyAffinity) {
			t.Fatalf("%s.Admit() = %v, want ErrTopologyAffinity", p, err)
		}
		var terr *AffinityError
		if !errors.As(err, &terr) {
			t.Fatalf("%s.Admit() = %T, want *TopologyAffinityError", p, err)
		}
		if got, want := err.Error(), "Resources cannot be allocated with Topology locality"; got != want {
			t.Errorf("error message = %q, want the kubelet's %q", got, want)
		}
		if got := terr.Reason(); got != "TopologyAffinityError" {
			t.Errorf("Reason() = %q, want TopologyAffinityError", got)
		}
		if terr.Policy != p {
			t.Errorf("error Policy = %q, want %q", terr.Policy, p)
		}
	}
	if terr := new(AffinityError); !errors.As(func() error {
		_, err := PolicyRestricted.Admit(NUMAInfo{Nodes: twoNodes}, PolicyOptions{}, crossNUMA)
		return err
	}(), &terr) || terr.Hint != hint(t, false, 0, 1) {
		t.Errorf("restricted refusal should carry the merged hint {0,1}, got %+v", terr)
	}

	for _, p := range []Policy{PolicyNone, PolicyBestEffort} {
		if _, err := p.Admit(NUMAInfo{Nodes: twoNodes}, PolicyOptions{}, crossNUMA); err != nil {
			t.Errorf("%s.Admit() = %v, want admitted", p, err)
		}
	}
	for _, p := range []Policy{PolicyBestEffort, PolicyRestricted, PolicySingleNUMANode} {
		got, err := p.Admit(NUMAInfo{Nodes: twoNodes}, PolicyOptions{}, aligned)
		if err != nil || got != hint(t, true, 1) {
			t.Errorf("%s.Admit(aligned) = %v, %v, want {1} preferred", p, got, err)
		}
	}
	if _, err := Policy("").Admit(NUMAInfo{Nodes: twoNodes}, PolicyOptions{}, aligned); !errors.Is(err, ErrUnknownPolicy) {
		t.Errorf(`Policy("").Admit() = %v, want ErrUnknownPolicy`, err)
	}
}

// TestFilteredDeviceHintsMergeWithOtherProviders is the kubelet's test of
// the same name: device hints from GenerateDeviceHints merged with CPU and
// memory hints under best-effort and restricted.
func TestFilteredDeviceHintsMergeWithOtherProviders(t *testing.T) {
	cases := map[string]struct {
		machine []int
		device  DeviceNodes
		other   []Hint
		want    BitMask
	}{
		"device on node 0": {
			machine: twoNodes,
			device:  DeviceNodes{"gpu0": {0}},
			other:   []Hint{hint(t, true, 0), hint(t, false, 0, 1)},
			want:    mask(t, 0),
		},
		"device on non-zero node only": {
			machine: twoNodes,
			device:  DeviceNodes{"gpu0": {1}},
			other:   []Hint{hint(t, true, 1), hint(t, false, 0, 1)},
			want:    mask(t, 1),
		},
		"high NUMA node IDs without node 0": {
			machine: []int{3, 7},
			device:  DeviceNodes{"gpu0": {7}},
			other:   []Hint{hint(t, true, 7), hint(t, false, 3, 7)},
			want:    mask(t, 7),
		},
	}
	for name, tc := range cases {
		for _, p := range []Policy{PolicyBestEffort, PolicyRestricted} {
			t.Run(name+"/"+string(p), func(t *testing.T) {
				deviceHints := GenerateDeviceHints(tc.machine, tc.device, sets.New("gpu0"), nil, 1)
				providers := []map[string][]Hint{
					{"gpu": deviceHints},
					{"cpu": tc.other},
					{"memory": tc.other},
				}
				got, err := p.Admit(NUMAInfo{Nodes: tc.machine}, PolicyOptions{}, providers)
				if err != nil {
					t.Fatalf("Admit() = %v, want admitted", err)
				}
				if diff := cmp.Diff(Hint{NUMANodeAffinity: tc.want, Preferred: true}, got); diff != "" {
					t.Errorf("Admit() mismatch (-want +got):\n%s", diff)
				}
			})
		}
	}
}

// kubeletMergeCase is one record of testdata/kubelet_merge_cases.json,
// produced by the kubelet's own topologymanager policies (see testdata/README.md).
type kubeletMergeCase struct {
	MachineNodes []int                           `json:"machineNodes"`
	Providers    []map[string]*[]kubeletMaskHint `json:"providers"`
	Results      map[Policy]struct {
		Nodes     []int `json:"nodes"`
		Preferred bool  `json:"preferred"`
		Admit     bool  `json:"admit"`
	} `json:"results"`
}

type kubeletMaskHint struct {
	Nodes     []int `json:"nodes"` // null: nil affinity
	Preferred bool  `json:"preferred"`
}

// TestMergeMatchesKubelet replays random provider hints through Merge and
// compares with what the kubelet v1.37.1 policies returned for them.
func TestMergeMatchesKubelet(t *testing.T) {
	blob, err := os.ReadFile("testdata/kubelet_merge_cases.json")
	if err != nil {
		t.Fatal(err)
	}
	var cases []kubeletMergeCase
	if err := json.Unmarshal(blob, &cases); err != nil {
		t.Fatal(err)
	}
	if len(cases) < 100 {
		t.Fatalf("only %d recorded cases", len(cases))
	}
	for i, tc := range cases {
		var providers []map[string][]Hint
		for _, jp := range tc.Providers {
			p := map[string][]Hint{}
			for r, jhints := range jp {
				if jhints == nil {
					p[r] = nil
					continue
				}
				p[r] = []Hint{}
				for _, h := range *jhints {
					p[r] = append(p[r], Hint{NUMANodeAffinity: mask(t, h.Nodes...), Preferred: h.Preferred})
				}
			}
			providers = append(providers, p)
		}
		for _, p := range Policies {
			want, ok := tc.Results[p]
			if !ok {
				t.Fatalf("case %d has no result for %s", i, p)
			}
			best, admit := p.Merge(tc.MachineNodes, providers)
			got := mergeResult{best, admit}
			exp := mergeResult{Hint{NUMANodeAffinity: mask(t, want.Nodes...), Preferred: want.Preferred}, want.Admit}
			if diff := cmp.Diff(exp, got); diff != "" {
				t.Errorf("case %d (%s): machine %v, providers %s: mismatch with the kubelet (-want +got):\n%s",
					i, p, tc.MachineNodes, fmt.Sprint(providers), diff)
			}
		}
	}
}
