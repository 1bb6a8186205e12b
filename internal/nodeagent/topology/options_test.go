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
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Ported from the kubelet's TestNewTopologyManagerOptions
// (topologymanager/policy_options_test.go); its alpha and beta cases test
// feature gates over options that do not exist, and are replaced by the
// unknown-option and minimum-value cases.
func TestNewPolicyOptions(t *testing.T) {
	cases := map[string]struct {
		options map[string]string
		want    PolicyOptions
		wantErr string
	}{
		"return TopologyManagerOptions with PreferClosestNUMA set to true": {
			options: map[string]string{OptionPreferClosestNUMANodes: "true", OptionMaxAllowableNUMANodes: "8"},
			want:    PolicyOptions{PreferClosestNUMA: true, MaxAllowableNUMANodes: 8},
		},
		"return TopologyManagerOptions with MaxAllowableNUMANodes set to 12": {
			options: map[string]string{OptionMaxAllowableNUMANodes: "12"},
			want:    PolicyOptions{MaxAllowableNUMANodes: 12},
		},
		"return empty TopologyManagerOptions": {
			want: PolicyOptions{MaxAllowableNUMANodes: 8},
		},
		"fail to parse options with error PreferClosestNUMANodes": {
			options: map[string]string{OptionPreferClosestNUMANodes: "not a boolean"},
			wantErr: "bad value for option",
		},
		"fail to parse options with error MaxAllowableNUMANodes": {
			options: map[string]string{OptionMaxAllowableNUMANodes: "can't parse to int"},
			wantErr: "unable to convert policy option to integer",
		},
		"max-allowable-numa-nodes below the default": {
			options: map[string]string{OptionMaxAllowableNUMANodes: "7"},
			wantErr: `the minimum value of "max-allowable-numa-nodes" should not be less than 8`,
		},
		"prefer-closest-numa-nodes false, as strconv.ParseBool spells it": {
			options: map[string]string{OptionPreferClosestNUMANodes: "F"},
			want:    PolicyOptions{MaxAllowableNUMANodes: 8},
		},
		"unknown option": {
			options: map[string]string{"fancy-option": "true"},
			wantErr: `unknown Topology Manager Policy option: "fancy-option"`,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := NewPolicyOptions(tc.options)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("NewPolicyOptions() error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("NewPolicyOptions() error = %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("NewPolicyOptions() mismatch (-want +got):\n%s", diff)
			}
		})
	}
	if _, err := NewPolicyOptions(map[string]string{"x": "1"}); !errors.Is(err, ErrUnknownPolicyOption) {
		t.Errorf("NewPolicyOptions(unknown) = %v, want ErrUnknownPolicyOption", err)
	}
}

func TestParsePolicyOptions(t *testing.T) {
	cases := map[string]struct {
		values  []string
		want    PolicyOptions
		wantErr string
	}{
		"no flag":          {want: PolicyOptions{MaxAllowableNUMANodes: 8}},
		"empty value":      {values: []string{""}, want: PolicyOptions{MaxAllowableNUMANodes: 8}},
		"comma-separated":  {values: []string{"prefer-closest-numa-nodes=true,max-allowable-numa-nodes=16"}, want: PolicyOptions{PreferClosestNUMA: true, MaxAllowableNUMANodes: 16}},
		"repeated":         {values: []string{"prefer-closest-numa-nodes=true", "max-allowable-numa-nodes=9"}, want: PolicyOptions{PreferClosestNUMA: true, MaxAllowableNUMANodes: 9}},
		"spaces trimmed":   {values: []string{" prefer-closest-numa-nodes = true ,"}, want: PolicyOptions{PreferClosestNUMA: true, MaxAllowableNUMANodes: 8}},
		"last value wins":  {values: []string{"max-allowable-numa-nodes=16", "max-allowable-numa-nodes=10"}, want: PolicyOptions{MaxAllowableNUMANodes: 10}},
		"missing value":    {values: []string{"prefer-closest-numa-nodes"}, wantErr: "bad value for option"},
		"blank pair":       {values: []string{"prefer-closest-numa-nodes=true, "}, wantErr: `unknown Topology Manager Policy option: ""`},
		"bad value":        {values: []string{"max-allowable-numa-nodes=4"}, wantErr: "should not be less than 8"},
		"unknown key":      {values: []string{"prefer-closest=true"}, wantErr: "unknown Topology Manager Policy option"},
		"bad second value": {values: []string{"prefer-closest-numa-nodes=true,max-allowable-numa-nodes=x"}, wantErr: "unable to convert"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := ParsePolicyOptions(tc.values)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParsePolicyOptions(%q) error = %v, want one containing %q", tc.values, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParsePolicyOptions(%q) error = %v", tc.values, err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ParsePolicyOptions(%q) mismatch (-want +got):\n%s", tc.values, diff)
			}
		})
	}
}

// The kubelet's NewManager: a policy other than none refuses more NUMA
// nodes than max-allowable-numa-nodes (default 8).
func TestCheckMachine(t *testing.T) {
	nodes := func(n int) []int {
		out := make([]int, n)
		for i := range out {
			out[i] = i
		}
		return out
	}
	cases := map[string]struct {
		policy  Policy
		opts    PolicyOptions
		nodes   int
		wantErr bool
	}{
		"8 nodes, default max":             {policy: PolicyBestEffort, nodes: 8},
		"9 nodes, default max":             {policy: PolicyBestEffort, nodes: 9, wantErr: true},
		"9 nodes, zero options":            {policy: PolicySingleNUMANode, opts: PolicyOptions{}, nodes: 9, wantErr: true},
		"9 nodes, max raised to 9":         {policy: PolicyRestricted, opts: PolicyOptions{MaxAllowableNUMANodes: 9}, nodes: 9},
		"17 nodes, max 16":                 {policy: PolicyRestricted, opts: PolicyOptions{MaxAllowableNUMANodes: 16}, nodes: 17, wantErr: true},
		"64 nodes, policy none is allowed": {policy: PolicyNone, nodes: 64},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := CheckMachine(tc.policy, tc.opts, nodes(tc.nodes))
			if got := errors.Is(err, ErrTooManyNUMANodes); got != tc.wantErr {
				t.Errorf("CheckMachine() = %v, want ErrTooManyNUMANodes: %t", err, tc.wantErr)
			}
		})
	}
}

// Ported from the kubelet's TestCalculateAvgDistanceFor (numa_info_test.go).
func TestCalculateAverageFor(t *testing.T) {
	four := NUMADistances{
		0: {10, 11, 12, 12},
		1: {11, 10, 12, 12},
		2: {12, 12, 10, 11},
		3: {12, 12, 11, 10},
	}
	two := NUMADistances{0: {10, 11}, 1: {11, 10}}
	cases := map[string]struct {
		bm       []int
		distance NUMADistances
		want     float64
	}{
		"1 NUMA node":                   {bm: []int{0}, distance: NUMADistances{0: {10}}, want: 10},
		"2 NUMA node, 1 set in bitmask": {bm: []int{0}, distance: two, want: 10},
		"2 NUMA node, 2 set in bitmask": {bm: []int{0, 1}, distance: two, want: 10.5},
		"4 NUMA node, 2 set in bitmask": {bm: []int{0, 2}, distance: four, want: 11},
		"4 NUMA node, 3 set in bitmask": {bm: []int{0, 2, 3}, distance: four, want: 11.11111111111111},
		"0 NUMA node, 0 set in bitmask": {bm: []int{}, distance: NUMADistances{}, want: 0},
		"distance unknown counts as 0":  {bm: []int{0, 1}, distance: NUMADistances{0: {10}}, want: 2.5},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := tc.distance.CalculateAverageFor(mask(t, tc.bm...)); got != tc.want {
				t.Errorf("CalculateAverageFor(%v) = %g, want %g", tc.bm, got, tc.want)
			}
		})
	}
}

// Ported from the kubelet's TestClosest (numa_info_test.go), which calls
// Closest(candidate, current).
func TestClosest(t *testing.T) {
	four := NUMADistances{
		0: {10, 11, 12, 12},
		1: {11, 10, 12, 12},
		2: {12, 12, 10, 11},
		3: {12, 12, 11, 10},
	}
	cases := map[string]struct {
		current, candidate []int
		distances          NUMADistances
		wantCandidate      bool
	}{
		"current and candidate length is not the same, current narrower": {
			current: []int{0}, candidate: []int{0, 2},
		},
		"current and candidate length is the same, distance is the same, current more lower bits set": {
			current: []int{0, 1}, candidate: []int{0, 2},
			distances: NUMADistances{0: {10, 10, 10}, 1: {10, 10, 10}, 2: {10, 10, 10}},
		},
		"current and candidate length is the same, distance is the same, candidate more lower bits set": {
			current: []int{0, 3}, candidate: []int{0, 2}, wantCandidate: true,
			distances: NUMADistances{0: {10, 10, 10, 10}, 1: {10, 10, 10, 10}, 2: {10, 10, 10, 10}, 3: {10, 10, 10, 10}},
		},
		"current and candidate length is the same, candidate average distance is smaller": {
			current: []int{0, 3}, candidate: []int{0, 1}, distances: four, wantCandidate: true,
		},
		"current and candidate length is the same, current average distance is smaller": {
			current: []int{2, 3}, candidate: []int{0, 3}, distances: four,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			current, candidate := mask(t, tc.current...), mask(t, tc.candidate...)
			want := current
			if tc.wantCandidate {
				want = candidate
			}
			info := NUMAInfo{Distances: tc.distances}
			if got := info.Closest(candidate, current); got != want {
				t.Errorf("Closest(%v, %v) = %v, want %v", candidate, current, got, want)
			}
		})
	}
}

// eightNodes is the kubelet's commonNUMAInfoEightNodes (policy_test.go):
// two groups of four nodes, 30 apart.
var eightNodes = NUMAInfo{
	Nodes: []int{0, 1, 2, 3, 4, 5, 6, 7},
	Distances: NUMADistances{
		0: {10, 11, 12, 12, 30, 30, 30, 30},
		1: {11, 10, 12, 12, 30, 30, 30, 30},
		2: {12, 12, 10, 11, 30, 30, 30, 30},
		3: {12, 12, 11, 10, 30, 30, 30, 30},
		4: {30, 30, 30, 30, 10, 11, 12, 12},
		5: {30, 30, 30, 30, 11, 10, 12, 12},
		6: {30, 30, 30, 30, 12, 12, 10, 11},
		7: {30, 30, 30, 30, 12, 12, 13, 10},
	},
}

// Ported from the kubelet's mergeTestCasesClosestNUMA (policy_test.go), run
// by TestPolicyBestEffortMergeClosestNUMA and
// TestPolicyRestrictedMergeClosestNUMA on the eight-node machine. Each
// case also gives the result without the option, so that the option is
// shown to matter where it should.
func TestMergeClosestNUMA(t *testing.T) {
	cases := map[string]struct {
		providers    []map[string][]Hint
		want         Hint
		wantNarrowed Hint // without prefer-closest-numa-nodes
	}{
		"Two providers, 2 hints each, same mask (some with different bits), same preferred": {
			providers: []map[string][]Hint{
				{"resource1": {hint(t, true, 0, 4), hint(t, true, 0, 2)}},
				{"resource2": {hint(t, true, 0, 4), hint(t, true, 0, 2)}},
			},
			want:         hint(t, true, 0, 2),
			wantNarrowed: hint(t, true, 0, 2),
		},
		"Two providers, 2 hints each, different mask": {
			providers: []map[string][]Hint{
				{"resource1": {hint(t, true, 4), hint(t, true, 0, 2)}},
				{"resource2": {hint(t, true, 4), hint(t, true, 0, 2)}},
			},
			want:         hint(t, true, 4),
			wantNarrowed: hint(t, true, 4),
		},
		"bestNonPreferredAffinityCount (5)": {
			providers: []map[string][]Hint{
				{"resource1": {hint(t, false, 0, 1, 2, 3), hint(t, false, 0, 1)}},
				{"resource2": {hint(t, false, 1, 2), hint(t, false, 2, 3)}},
			},
			want:         hint(t, false, 2, 3),
			wantNarrowed: hint(t, false, 1, 2),
		},
		"bestNonPreferredAffinityCount (6)": {
			providers: []map[string][]Hint{
				{"resource1": {hint(t, false, 0, 1, 2, 3), hint(t, false, 0, 1)}},
				{"resource2": {hint(t, false, 1, 2, 3), hint(t, false, 1, 2), hint(t, false, 1, 3), hint(t, false, 2, 3)}},
			},
			want:         hint(t, false, 2, 3),
			wantNarrowed: hint(t, false, 1, 2),
		},
		// Not in the kubelet's table: preferred hints of equal width across
		// the two groups lose to a pair within one group.
		"preferred pairs: the closer one wins over the lower one": {
			providers: []map[string][]Hint{
				{"gpu": {hint(t, true, 0, 4), hint(t, true, 5, 6)}},
			},
			want:         hint(t, true, 5, 6),
			wantNarrowed: hint(t, true, 0, 4),
		},
	}
	closest := PolicyOptions{PreferClosestNUMA: true}
	for name, tc := range cases {
		for _, p := range []Policy{PolicyBestEffort, PolicyRestricted} {
			t.Run(name+"/"+string(p), func(t *testing.T) {
				got, _ := p.MergeWithOptions(eightNodes, closest, tc.providers)
				if diff := cmp.Diff(tc.want, got); diff != "" {
					t.Errorf("%s with prefer-closest-numa-nodes mismatch (-want +got):\n%s", p, diff)
				}
				got, _ = p.MergeWithOptions(eightNodes, PolicyOptions{}, tc.providers)
				if diff := cmp.Diff(tc.wantNarrowed, got); diff != "" {
					t.Errorf("%s without options mismatch (-want +got):\n%s", p, diff)
				}
			})
		}
	}
}

// single-numa-node ignores prefer-closest-numa-nodes (the kubelet's
// NewHintMerger), and so does none. The distances here make node 1 "closer"
// than node 0, so that applying the option would change the result.
func TestMergeClosestNUMAIgnoredBySingleNUMANodeAndNone(t *testing.T) {
	skewed := NUMAInfo{Nodes: []int{0, 1}, Distances: NUMADistances{0: {20, 30}, 1: {30, 10}}}
	providers := []map[string][]Hint{{"gpu": {hint(t, true, 0), hint(t, true, 1)}}}
	closest := PolicyOptions{PreferClosestNUMA: true}
	for p, want := range map[Policy]mergeResult{
		PolicySingleNUMANode: {hint(t, true, 0), true},
		PolicyNone:           {Hint{}, true},
		PolicyBestEffort:     {hint(t, true, 1), true},
		PolicyRestricted:     {hint(t, true, 1), true},
	} {
		got, admit := p.MergeWithOptions(skewed, closest, providers)
		if diff := cmp.Diff(want, mergeResult{got, admit}); diff != "" {
			t.Errorf("%s with prefer-closest-numa-nodes mismatch (-want +got):\n%s", p, diff)
		}
	}
}

func writeSysfsNode(t *testing.T, root string, id int, distance string) {
	t.Helper()
	dir := filepath.Join(root, nodeDir, "node"+strconv.Itoa(id))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if distance == "" {
		return
	}
	if err := os.WriteFile(filepath.Join(dir, "distance"), []byte(distance+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// The kubelet's TestNUMAInfo (numa_info_test.go) builds NUMAInfo from
// cadvisor, which reads node<N>/distance; here the same is read from a
// fake sysfs.
func TestReadNUMAInfo(t *testing.T) {
	cases := map[string]struct {
		nodes         map[int]string // node ID -> distance file ("" none)
		noSysfs       bool
		withDistances bool
		want          NUMAInfo
		wantErr       bool
	}{
		"without prefer-closest-numa-nodes, distances are not read": {
			nodes: map[int]string{0: "", 1: ""},
			want:  NUMAInfo{Nodes: []int{0, 1}},
		},
		"two nodes": {
			nodes:         map[int]string{0: "10 11", 1: "11 10"},
			withDistances: true,
			want:          NUMAInfo{Nodes: []int{0, 1}, Distances: NUMADistances{0: {10, 11}, 1: {11, 10}}},
		},
		"four nodes": {
			nodes:         map[int]string{0: "10 11 12 12", 1: "11 10 12 12", 2: "12 12 10 11", 3: "12 12 11 10"},
			withDistances: true,
			want: NUMAInfo{Nodes: []int{0, 1, 2, 3}, Distances: NUMADistances{
				0: {10, 11, 12, 12}, 1: {11, 10, 12, 12}, 2: {12, 12, 10, 11}, 3: {12, 12, 11, 10},
			}},
		},
		"sparse node IDs: the kernel lists distances by online node": {
			nodes:         map[int]string{0: "10 21", 2: "21 10"},
			withDistances: true,
			want:          NUMAInfo{Nodes: []int{0, 2}, Distances: NUMADistances{0: {10, 0, 21}, 2: {21, 0, 10}}},
		},
		"no sysfs NUMA: node 0 at the local distance": {
			noSysfs:       true,
			withDistances: true,
			want:          NUMAInfo{Nodes: []int{0}, Distances: NUMADistances{0: {10}}},
		},
		"missing distance file": {
			nodes:         map[int]string{0: "10 11", 1: ""},
			withDistances: true,
			wantErr:       true,
		},
		"distance row of the wrong length": {
			nodes:         map[int]string{0: "10 11", 1: "11"},
			withDistances: true,
			wantErr:       true,
		},
		"distance not a number": {
			nodes:         map[int]string{0: "10 x", 1: "11 10"},
			withDistances: true,
			wantErr:       true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			if !tc.noSysfs {
				for id, d := range tc.nodes {
					writeSysfsNode(t, root, id, d)
				}
			}
			got, err := ReadNUMAInfo(root, tc.withDistances)
			if tc.wantErr {
				if !errors.Is(err, errNoDistances) {
					t.Fatalf("ReadNUMAInfo() error = %v, want errNoDistances", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ReadNUMAInfo() error = %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ReadNUMAInfo() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}
