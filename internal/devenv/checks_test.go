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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// table builds a server-side table from column names and rows of cells.
func table(columns []string, rows ...[]any) *metav1.Table {
	t := &metav1.Table{}
	for _, c := range columns {
		t.ColumnDefinitions = append(t.ColumnDefinitions, metav1.TableColumnDefinition{Name: c, Type: "string"})
	}
	for _, r := range rows {
		t.Rows = append(t.Rows, metav1.TableRow{Cells: r})
	}
	return t
}

var (
	nodeDeviceColumns = []string{"Name", "Node", "Resource", "Capacity", "Allocatable", "Allocated", "Unhealthy", "Plugin", "Age"}
	allocationColumns = []string{"Name", "Pod", "Node", "Resources", "Allocated", "Age"}
	podColumns        = []string{"Name", "Ready", "Status", "Restarts", "Age", "IP", "Node", "Nominated Node", "Readiness Gates"}
	eventColumns      = []string{"Last Seen", "Type", "Reason", "Object", "Subobject", "Source", "Message", "First Seen", "Count", "Name"}
)

const insufficientEvent = "0/1 nodes are available: 1 Insufficient example.com/gopher. preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod."

// goodDemo is what the demo prints when all is well (copied from a run).
func goodDemo() Observed {
	return Observed{
		NodeDevices: table(nodeDeviceColumns,
			[]any{"demo-node.example-com-gopher-fc66492a18", "demo-node", "example.com/gopher", int64(1), int64(1), int64(1), int64(0), "Registered", "1s"}),
		Allocations: table(allocationColumns,
			[]any{"gopher-pod-1da3f52233", "gopher-pod", "demo-node", "example.com/gopher=gopher-0", "True", "0s"}),
		Pods: table(podColumns,
			[]any{"gopher-pod", "0/1", "Pending", int64(0), "0s", "<none>", "demo-node", "<none>", "<none>"},
			[]any{"gopher-pod2", "0/1", "Pending", int64(0), "0s", "<none>", "<none>", "<none>", "<none>"}),
		Events: table(eventColumns,
			[]any{"0s", "Warning", "FailedScheduling", "pod/gopher-pod2", "", "default-scheduler", insufficientEvent, "0s", int64(1), "gopher-pod2.18a"}),
		NodeCapacity:    "1",
		NodeAllocatable: "1",
	}
}

func TestCheckDemo(t *testing.T) {
	tests := map[string]struct {
		change func(*Observed)
		want   []string
	}{
		"all is well": {
			change: func(*Observed) {},
		},
		"nothing allocated on the NodeDevice": {
			change: func(o *Observed) { o.NodeDevices.Rows[0].Cells[5] = int64(0) },
			want:   []string{`NodeDevice demo-node.example-com-gopher-fc66492a18: ALLOCATED is "0", want "1"`},
		},
		"plugin disconnected and device unhealthy": {
			change: func(o *Observed) {
				o.NodeDevices.Rows[0].Cells[4] = int64(0)
				o.NodeDevices.Rows[0].Cells[6] = int64(1)
				o.NodeDevices.Rows[0].Cells[7] = "Disconnected"
			},
			want: []string{
				`NodeDevice demo-node.example-com-gopher-fc66492a18: ALLOCATABLE is "0", want "1"`,
				`NodeDevice demo-node.example-com-gopher-fc66492a18: UNHEALTHY is "1", want "0"`,
				`NodeDevice demo-node.example-com-gopher-fc66492a18: PLUGIN is "Disconnected", want "Registered"`,
			},
		},
		"no NodeDevice": {
			change: func(o *Observed) { o.NodeDevices.Rows = nil },
			want:   []string{"kubectl get nodedevices: 0 rows of example.com/gopher on demo-node, want 1"},
		},
		"two shards": {
			change: func(o *Observed) {
				o.NodeDevices.Rows = append(o.NodeDevices.Rows, *o.NodeDevices.Rows[0].DeepCopy())
			},
			want: []string{"kubectl get nodedevices: 2 rows of example.com/gopher on demo-node, want 1"},
		},
		"another gopher allocated": {
			change: func(o *Observed) { o.Allocations.Rows[0].Cells[3] = "example.com/gopher=gopher-1" },
			want: []string{
				`DeviceAllocation gopher-pod-1da3f52233: RESOURCES is "example.com/gopher=gopher-1", want "example.com/gopher=gopher-0"`,
			},
		},
		"allocation refused": {
			change: func(o *Observed) {
				o.Allocations.Rows[0].Cells[3] = nil
				o.Allocations.Rows[0].Cells[4] = "False"
			},
			want: []string{
				`DeviceAllocation gopher-pod-1da3f52233: RESOURCES is "", want "example.com/gopher=gopher-0"`,
				`DeviceAllocation gopher-pod-1da3f52233: ALLOCATED is "False", want "True"`,
			},
		},
		"the pending pod holds a device": {
			change: func(o *Observed) {
				o.Allocations.Rows = append(o.Allocations.Rows, metav1.TableRow{
					Cells: []any{"gopher-pod2-5e4", "gopher-pod2", "demo-node", "example.com/gopher=gopher-0", "True", "0s"},
				})
			},
			want: []string{"kubectl get deviceallocations -A: 1 rows of gopher-pod2, want none: it must hold nothing"},
		},
		"no DeviceAllocation": {
			change: func(o *Observed) { o.Allocations.Rows = nil },
			want:   []string{"kubectl get deviceallocations -A: 0 rows of gopher-pod, want 1"},
		},
		"first pod unbound": {
			change: func(o *Observed) { o.Pods.Rows[0].Cells[6] = "<none>" },
			want:   []string{`pod gopher-pod: NODE is "<none>", want "demo-node"`},
		},
		"second pod bound": {
			change: func(o *Observed) { o.Pods.Rows[1].Cells[6] = "demo-node" },
			want:   []string{`pod gopher-pod2: NODE is "demo-node", want "<none>"`},
		},
		"second pod missing": {
			change: func(o *Observed) { o.Pods.Rows = o.Pods.Rows[:1] },
			want:   []string{"kubectl get pods -o wide: 0 rows of gopher-pod2, want 1"},
		},
		"node capacity not published": {
			change: func(o *Observed) { o.NodeCapacity, o.NodeAllocatable = "", "0" },
			want: []string{
				`node demo-node: status.capacity[example.com/gopher] is "", want "1"`,
				`node demo-node: status.allocatable[example.com/gopher] is "0", want "1"`,
			},
		},
		"scheduler failed for another reason": {
			change: func(o *Observed) {
				o.Events.Rows[0].Cells[6] = "0/1 nodes are available: 1 node(s) had untolerated taint(s)."
			},
			want: []string{`kubectl get events: no FailedScheduling event of pod/gopher-pod2 says "Insufficient example.com/gopher", ` +
				`they say "0/1 nodes are available: 1 node(s) had untolerated taint(s)."`},
		},
		"no event": {
			change: func(o *Observed) { o.Events.Rows = nil },
			want:   []string{"kubectl get events: no FailedScheduling event of pod/gopher-pod2"},
		},
		"tables not printed": {
			change: func(o *Observed) { *o = Observed{NodeCapacity: "1", NodeAllocatable: "1"} },
			want: []string{
				"kubectl get nodedevices: not printed",
				"kubectl get deviceallocations -A: not printed",
				"kubectl get pods -o wide: not printed",
				"kubectl get events: not printed",
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			o := goodDemo()
			tc.change(&o)
			if diff := cmp.Diff(tc.want, CheckDemo(o)); diff != "" {
				t.Errorf("CheckDemo (-want +got):\n%s", diff)
			}
		})
	}
}
