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

package gopher

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestCompareNatural(t *testing.T) {
	in := []string{
		"gopher-10", "gopher-2", "gopher-1", "gopher-02", "gopher-b", "gopher-a", "gopher", "gopher-1a",
		"gopher-99999999999999999999999", "gopher-100000000000000000000000", "10", "9", "a", "",
	}
	want := []string{
		"", "9", "10", "a", "gopher", "gopher-1", "gopher-1a", "gopher-2", "gopher-02", "gopher-10",
		"gopher-99999999999999999999999", "gopher-100000000000000000000000", "gopher-a", "gopher-b",
	}
	got := slices.Clone(in)
	slices.SortFunc(got, CompareNatural)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("natural order (-want +got):\n%s", diff)
	}
	// A total order: antisymmetric, and 0 only for equal strings.
	for _, a := range in {
		for _, b := range in {
			if c, r := CompareNatural(a, b), CompareNatural(b, a); c != -r || (c == 0) != (a == b) {
				t.Errorf("CompareNatural(%q, %q) = %d, reversed %d", a, b, c, r)
			}
		}
	}
}
