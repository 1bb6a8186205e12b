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
	"testing"

	"github.com/google/go-cmp/cmp"
)

// mask builds a BitMask in tests; IDs must be valid.
func mask(t testing.TB, nodes ...int) BitMask {
	t.Helper()
	m, err := NewBitMask(nodes...)
	if err != nil {
		t.Fatalf("NewBitMask(%v) = %v", nodes, err)
	}
	return m
}

func TestNewBitMask(t *testing.T) {
	cases := map[string]struct {
		nodes   []int
		want    BitMask
		wantErr bool
	}{
		"empty":           {nodes: nil, want: 0},
		"node 0":          {nodes: []int{0}, want: 1},
		"nodes 0 and 2":   {nodes: []int{2, 0}, want: 0b101},
		"duplicates":      {nodes: []int{1, 1}, want: 0b10},
		"highest node 63": {nodes: []int{63}, want: 1 << 63},
		"negative":        {nodes: []int{0, -1}, wantErr: true},
		"node 64":         {nodes: []int{64}, wantErr: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := NewBitMask(tc.nodes...)
			if (err != nil) != tc.wantErr {
				t.Fatalf("NewBitMask(%v) error = %v, want error %t", tc.nodes, err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("NewBitMask(%v) = %b, want %b", tc.nodes, got, tc.want)
			}
		})
	}
}

func TestBitMaskOperations(t *testing.T) {
	m01, m12, m0, none := mask(t, 0, 1), mask(t, 1, 2), mask(t, 0), BitMask(0)

	if got, want := m01.And(m12), mask(t, 1); got != want {
		t.Errorf("{0,1}.And({1,2}) = %v, want %v", got, want)
	}
	if got, want := m01.And(), m01; got != want {
		t.Errorf("{0,1}.And() = %v, want %v", got, want)
	}
	if got, want := m0.Or(m12, mask(t, 5)), mask(t, 0, 1, 2, 5); got != want {
		t.Errorf("{0}.Or({1,2},{5}) = %v, want %v", got, want)
	}
	if got := mask(t, 0, 3, 63).Count(); got != 3 {
		t.Errorf("Count() = %d, want 3", got)
	}
	if !none.IsEmpty() || m0.IsEmpty() {
		t.Errorf("IsEmpty() wrong: {} %t, {0} %t", none.IsEmpty(), m0.IsEmpty())
	}
	for _, tc := range []struct {
		node int
		want bool
	}{{0, true}, {1, true}, {2, false}, {-1, false}, {64, false}} {
		if got := m01.IsSet(tc.node); got != tc.want {
			t.Errorf("{0,1}.IsSet(%d) = %t, want %t", tc.node, got, tc.want)
		}
	}
	if !m01.AnySet([]int{7, 1}) || m01.AnySet([]int{2, 3}) || m01.AnySet(nil) || m01.AnySet([]int{-1, 99}) {
		t.Errorf("AnySet() wrong")
	}
	if !m01.IsEqual(mask(t, 1, 0)) || m01.IsEqual(m12) {
		t.Errorf("IsEqual() wrong")
	}
	if !m0.IsSubsetOf(m01) || m01.IsSubsetOf(m0) || m12.IsSubsetOf(m01) || !none.IsSubsetOf(m0) || !m01.IsSubsetOf(m01) {
		t.Errorf("IsSubsetOf() wrong")
	}
	if diff := cmp.Diff([]int{0, 5, 63}, mask(t, 63, 5, 0).Bits()); diff != "" {
		t.Errorf("Bits() mismatch (-want +got):\n%s", diff)
	}
	if got := none.Bits(); got != nil {
		t.Errorf("Bits() of empty = %v, want nil", got)
	}
	for m, want := range map[BitMask]string{none: "{}", m0: "{0}", mask(t, 1, 10, 2): "{1,2,10}"} {
		if got := m.String(); got != want {
			t.Errorf("String() = %q, want %q", got, want)
		}
	}
}

func TestIsNarrowerThan(t *testing.T) {
	cases := map[string]struct {
		a, b []int
		want bool
	}{
		"fewer nodes":                   {a: []int{1}, b: []int{0, 1}, want: true},
		"more nodes":                    {a: []int{0, 1}, b: []int{7}, want: false},
		"same count, lower nodes":       {a: []int{0}, b: []int{1}, want: true},
		"same count, higher nodes":      {a: []int{1}, b: []int{0}, want: false},
		"same count, lower numerically": {a: []int{1, 2}, b: []int{0, 3}, want: true},
		"equal":                         {a: []int{0, 1}, b: []int{0, 1}, want: false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := mask(t, tc.a...).IsNarrowerThan(mask(t, tc.b...)); got != tc.want {
				t.Errorf("%v.IsNarrowerThan(%v) = %t, want %t", tc.a, tc.b, got, tc.want)
			}
		})
	}
}

func TestIterateBitMasks(t *testing.T) {
	cases := map[string]struct {
		nodes []int
		want  [][]int
	}{
		"none": {nodes: nil, want: nil},
		"one":  {nodes: []int{4}, want: [][]int{{4}}},
		"three, kubelet order": {
			nodes: []int{0, 1, 2},
			want:  [][]int{{0}, {1}, {2}, {0, 1}, {0, 2}, {1, 2}, {0, 1, 2}},
		},
		"sparse IDs":          {nodes: []int{3, 7}, want: [][]int{{3}, {7}, {3, 7}}},
		"invalid IDs skipped": {nodes: []int{-1, 1, 64}, want: [][]int{{1}}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var got [][]int
			IterateBitMasks(tc.nodes, func(m BitMask) { got = append(got, m.Bits()) })
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("IterateBitMasks(%v) mismatch (-want +got):\n%s", tc.nodes, diff)
			}
		})
	}

	seen := map[BitMask]bool{}
	IterateBitMasks([]int{0, 1, 2, 3, 4, 5, 6, 7}, func(m BitMask) { seen[m] = true })
	if len(seen) != 255 {
		t.Errorf("IterateBitMasks over 8 nodes gave %d distinct masks, want 255", len(seen))
	}
}
