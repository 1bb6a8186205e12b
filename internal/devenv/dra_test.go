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

package devenv

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

var sliceColumns = []string{"Name", "Node", "Driver", "Pool", "Age"}

// goodDRADemo is what the DRA demo prints when all is well (copied from a run).
func goodDRADemo() DRAObserved {
	return DRAObserved{
		Slices: table(sliceColumns,
			[]any{"00000-kubedevice.io-demo-node-8p97r", "demo-node", "kubedevice.io", "example.com/gopher", "0s"}),
		SliceDevices: []string{"gopher-0", "gopher-1"},
		Pods: table(podColumns,
			[]any{"gopher-claim-pod", "0/1", "Pending", int64(0), "0s", "<none>", "demo-node", "<none>", "<none>"},
			[]any{"gopher-pod", "0/1", "Pending", int64(0), "0s", "<none>", "demo-node", "<none>", "<none>"}),
		Allocated: map[string][]string{"gopher-pod": {"gopher-0"}, "gopher-claim-pod": {"gopher-1"}},
	}
}

func TestCheckDRADemo(t *testing.T) {
	tests := map[string]struct {
		change func(*DRAObserved)
		want   []string
	}{
		"all is well": {change: func(*DRAObserved) {}},
		"no slice": {
			change: func(o *DRAObserved) { o.Slices.Rows = nil; o.SliceDevices = nil },
			want: []string{
				"kubectl get resourceslices: 0 rows of driver kubedevice.io's pool example.com/gopher on demo-node, want 1",
				`the ResourceSlices list devices "", want "gopher-0,gopher-1"`,
			},
		},
		// --plugin-dra: the author's resource has its own pool; the Gopher's is judged alone.
		"an author's resource through DRA too": {
			change: func(o *DRAObserved) {
				o.Slices.Rows = append(o.Slices.Rows, table(sliceColumns,
					[]any{"00000-kubedevice.io-demo-node-rgdvl", "demo-node", "kubedevice.io", "example.com/alpha", "0s"}).Rows...)
			},
		},
		"the plain-limits pod unscheduled": {
			change: func(o *DRAObserved) {
				o.Pods.Rows[1].Cells[6] = "<none>"
				delete(o.Allocated, "gopher-pod")
			},
			want: []string{
				`pod gopher-pod: NODE is "<none>", want "demo-node"`,
				`pod gopher-pod's claim is allocated "", want "gopher-0"`,
			},
		},
		"the claim got the other gopher": {
			change: func(o *DRAObserved) { o.Allocated["gopher-claim-pod"] = []string{"gopher-0"} },
			want:   []string{`pod gopher-claim-pod's claim is allocated "gopher-0", want "gopher-1"`},
		},
		"node capacity still published": {
			change: func(o *DRAObserved) { o.NodeCapacity = "2" },
			want:   []string{`node demo-node: status.capacity[example.com/gopher] is "2", want none: DRA serves it`},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			o := goodDRADemo()
			tc.change(&o)
			if diff := cmp.Diff(tc.want, CheckDRADemo(o)); diff != "" {
				t.Errorf("CheckDRADemo (-want +got):\n%s", diff)
			}
		})
	}
}
