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
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubedevice/kubedevice/internal/contract"
)

// The demo scenario.
const (
	// NodeName is the demo's node. It has no kubelet: kubedevice dev keeps it Ready.
	NodeName = "demo-node"
	// ResourceName is the Gopher plugin's resource.
	ResourceName = "example.com/gopher"
	// GopherID is the one gopher the demo's plugin serves.
	GopherID = "gopher-0"
	// PodName is the pod that gets the gopher.
	PodName = "gopher-pod"
	// PendingPodName is the pod that finds none left.
	PendingPodName = "gopher-pod2"
	// PodNamespace holds both pods.
	PodNamespace = "default"
	// AgentNamespace holds the agent's Lease.
	AgentNamespace = contract.Namespace
)

// insufficientMessage is what the scheduler says of a pod that asks for more gophers than any node
// has left.
const insufficientMessage = "Insufficient " + ResourceName

// failedScheduling is the reason of the scheduler's event on a pod it cannot place.
const failedScheduling = "FailedScheduling"

// Observed is what the demo printed, as the checks of --exit-after-demo read it.
type Observed struct {
	// NodeDevices is `kubectl get nodedevices`.
	NodeDevices *metav1.Table
	// Allocations is `kubectl get deviceallocations -A`.
	Allocations *metav1.Table
	// Pods is `kubectl get pods -o wide` in the pods' namespace.
	Pods *metav1.Table
	// NodeCapacity and NodeAllocatable are the demo node's status.capacity and
	// status.allocatable of the resource; empty when absent.
	NodeCapacity    string
	NodeAllocatable string
	// Events is `kubectl get events --field-selector involvedObject.name=gopher-pod2`.
	Events *metav1.Table
}

// CheckDemo returns what is wrong with the demo's outcome, empty when it is what it should be:
// gopher-pod bound to demo-node and holding gopher-0; gopher-pod2 Pending, unbound, holding
// nothing, with the scheduler's Insufficient example.com/gopher; the NodeDevice counting 1
// device, 1 allocatable, 1 allocated; the Node's capacity and allocatable of the resource 1.
func CheckDemo(o Observed) []string {
	var problems []string
	problems = append(problems, checkNodeDevices(o.NodeDevices)...)
	problems = append(problems, checkAllocations(o.Allocations)...)
	problems = append(problems, checkPods(o.Pods)...)
	if o.NodeCapacity != "1" {
		problems = append(problems, fmt.Sprintf("node %s: status.capacity[%s] is %q, want \"1\"", NodeName, ResourceName, o.NodeCapacity))
	}
	if o.NodeAllocatable != "1" {
		problems = append(problems, fmt.Sprintf("node %s: status.allocatable[%s] is %q, want \"1\"", NodeName, ResourceName, o.NodeAllocatable))
	}
	problems = append(problems, checkEvents(o.Events)...)
	return problems
}

func checkEvents(t *metav1.Table) []string {
	if t == nil {
		return []string{"kubectl get events: not printed"}
	}
	rows := matching(Rows(t), map[string]string{"REASON": failedScheduling, "OBJECT": "pod/" + PendingPodName})
	var messages []string
	for _, r := range rows {
		if strings.Contains(r["MESSAGE"], insufficientMessage) {
			return nil
		}
		messages = append(messages, fmt.Sprintf("%q", r["MESSAGE"]))
	}
	if len(messages) == 0 {
		return []string{fmt.Sprintf("kubectl get events: no %s event of pod/%s", failedScheduling, PendingPodName)}
	}
	return []string{fmt.Sprintf("kubectl get events: no %s event of pod/%s says %q, they say %s",
		failedScheduling, PendingPodName, insufficientMessage, strings.Join(messages, ", "))}
}

func checkNodeDevices(t *metav1.Table) []string {
	if t == nil {
		return []string{"kubectl get nodedevices: not printed"}
	}
	rows := matching(Rows(t), map[string]string{"NODE": NodeName, "RESOURCE": ResourceName})
	if len(rows) != 1 {
		return []string{fmt.Sprintf("kubectl get nodedevices: %d rows of %s on %s, want 1", len(rows), ResourceName, NodeName)}
	}
	what := fmt.Sprintf("NodeDevice %s", rows[0]["NAME"])
	return expectCells(what, rows[0], []cellWant{
		{"CAPACITY", "1"}, {"ALLOCATABLE", "1"}, {"ALLOCATED", "1"}, {"UNHEALTHY", "0"}, {"PLUGIN", "Registered"},
	})
}

func checkAllocations(t *metav1.Table) []string {
	if t == nil {
		return []string{"kubectl get deviceallocations -A: not printed"}
	}
	all := Rows(t)
	var problems []string
	if n := len(matching(all, map[string]string{"POD": PendingPodName})); n != 0 {
		problems = append(problems, fmt.Sprintf("kubectl get deviceallocations -A: %d rows of %s, want none: it must hold nothing", n, PendingPodName))
	}
	rows := matching(all, map[string]string{"POD": PodName})
	if len(rows) != 1 {
		return append(problems, fmt.Sprintf("kubectl get deviceallocations -A: %d rows of %s, want 1", len(rows), PodName))
	}
	what := fmt.Sprintf("DeviceAllocation %s", rows[0]["NAME"])
	return append(problems, expectCells(what, rows[0], []cellWant{
		{"NODE", NodeName}, {"RESOURCES", ResourceName + "=" + GopherID}, {"ALLOCATED", "True"},
	})...)
}

func checkPods(t *metav1.Table) []string {
	if t == nil {
		return []string{"kubectl get pods -o wide: not printed"}
	}
	all := Rows(t)
	var problems []string
	if rows := matching(all, map[string]string{"NAME": PodName}); len(rows) != 1 {
		problems = append(problems, fmt.Sprintf("kubectl get pods -o wide: %d rows of %s, want 1", len(rows), PodName))
	} else {
		problems = append(problems, expectCells("pod "+PodName, rows[0], []cellWant{{"NODE", NodeName}})...)
	}
	if rows := matching(all, map[string]string{"NAME": PendingPodName}); len(rows) != 1 {
		problems = append(problems, fmt.Sprintf("kubectl get pods -o wide: %d rows of %s, want 1", len(rows), PendingPodName))
	} else {
		problems = append(problems, expectCells("pod "+PendingPodName, rows[0], []cellWant{{"STATUS", "Pending"}, {"NODE", "<none>"}})...)
	}
	return problems
}

type cellWant struct {
	column, value string
}

func expectCells(what string, row map[string]string, wants []cellWant) []string {
	var problems []string
	for _, w := range wants {
		got, ok := row[w.column]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("%s: no %s column", what, w.column))
		case got != w.value:
			problems = append(problems, fmt.Sprintf("%s: %s is %q, want %q", what, w.column, got, w.value))
		}
	}
	return problems
}

// matching returns the rows whose cells have the given values.
func matching(rows []map[string]string, cells map[string]string) []map[string]string {
	var out []map[string]string
	for _, r := range rows {
		ok := true
		for col, v := range cells {
			if r[col] != v {
				ok = false
				break
			}
		}
		if ok {
			out = append(out, r)
		}
	}
	return out
}
