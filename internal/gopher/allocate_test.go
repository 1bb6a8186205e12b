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
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestPreferred(t *testing.T) {
	for name, tc := range map[string]struct {
		available, mustInclude []string
		size                   int
		want                   []string
		wantErr                bool
	}{
		"lowest numbered first, naturally": {
			available: []string{"gopher-10", "gopher-2", "gopher-11", "gopher-3"},
			size:      2,
			want:      []string{"gopher-2", "gopher-3"},
		},
		"must include comes first, whatever its number": {
			available:   []string{"gopher-10", "gopher-2", "gopher-1", "gopher-3"},
			mustInclude: []string{"gopher-10"},
			size:        3,
			want:        []string{"gopher-1", "gopher-2", "gopher-10"},
		},
		"must include outside available still counts": {
			available:   []string{"gopher-4", "gopher-5"},
			mustInclude: []string{"gopher-9"},
			size:        2,
			want:        []string{"gopher-4", "gopher-9"},
		},
		"exactly must include": {
			available:   []string{"gopher-1", "gopher-2", "gopher-3"},
			mustInclude: []string{"gopher-3", "gopher-2"},
			size:        2,
			want:        []string{"gopher-2", "gopher-3"},
		},
		"duplicates count once": {
			available:   []string{"gopher-1", "gopher-1", "gopher-2", "gopher-3"},
			mustInclude: []string{"gopher-3", "gopher-3"},
			size:        3,
			want:        []string{"gopher-1", "gopher-2", "gopher-3"},
		},
		"all": {
			available: []string{"b", "a"},
			size:      2,
			want:      []string{"a", "b"},
		},
		"too few": {
			available: []string{"gopher-1"},
			size:      2,
			wantErr:   true,
		},
		"more must include than size": {
			available:   []string{"gopher-1", "gopher-2"},
			mustInclude: []string{"gopher-1", "gopher-2"},
			size:        1,
			wantErr:     true,
		},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := preferred(tc.available, tc.mustInclude, tc.size)
			if tc.wantErr {
				if !errors.Is(err, errImpossibleAllocation) {
					t.Errorf("preferred = %v, %v; want errImpossibleAllocation", got, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("preferred: %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("preferred (-want +got):\n%s", diff)
			}
		})
	}
}
