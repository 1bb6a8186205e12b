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

package controller

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/event"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
)

var testNow = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// agentLease returns the agent Lease of node n1, renewed at renewed (never when nil).
func agentLease(renewed *time.Time) *coordinationv1.Lease {
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "kd", Name: AgentLeaseName("n1")}}
	if renewed != nil {
		t := metav1.NewMicroTime(*renewed)
		l.Spec.RenewTime = &t
	}
	return l
}

func at(d time.Duration) *time.Time {
	t := testNow.Add(d)
	return &t
}

func TestAgentStateOf(t *testing.T) {
	const d = 40 * time.Second
	cases := map[string]struct {
		lease *coordinationv1.Lease
		want  agentState
	}{
		"no lease": {
			want: agentState{reason: kdv1alpha1.ReasonAgentLeaseMissing, message: "The node agent has no Lease kd/kubedevice-agent-n1."},
		},
		"never renewed": {
			lease: agentLease(nil),
			want:  agentState{reason: kdv1alpha1.ReasonAgentLeaseExpired, message: "The node agent's Lease kd/kubedevice-agent-n1 has never been renewed."},
		},
		"renewed just now": {
			lease: agentLease(at(0)),
			want: agentState{ready: true, reason: kdv1alpha1.ReasonAgentLeaseValid,
				message: "The node agent renews its Lease kd/kubedevice-agent-n1.", expiresIn: d + time.Millisecond},
		},
		"expires exactly now": {
			lease: agentLease(at(-d)),
			want: agentState{ready: true, reason: kdv1alpha1.ReasonAgentLeaseValid,
				message: "The node agent renews its Lease kd/kubedevice-agent-n1.", expiresIn: time.Millisecond},
		},
		"expired a microsecond ago": {
			lease: agentLease(at(-d - time.Microsecond)),
			want: agentState{reason: kdv1alpha1.ReasonAgentLeaseExpired,
				message: "The node agent's Lease kd/kubedevice-agent-n1 was last renewed at 2026-03-01T11:59:19Z, more than 40s ago."},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := agentStateOf(tc.lease, "kd", "n1", d, testNow)
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(agentState{})); diff != "" {
				t.Errorf("agentStateOf (-want +got):\n%s", diff)
			}
		})
	}
}

func TestLeasePredicate(t *testing.T) {
	l := leaseReader{namespace: "kd", duration: 40 * time.Second}
	p := l.predicate(clocktesting.NewFakePassiveClock(testNow))
	other := agentLease(at(0))
	other.Name = "some-other-lease"
	otherNS := agentLease(at(0))
	otherNS.Namespace = "elsewhere"
	cases := map[string]struct {
		old, new *coordinationv1.Lease
		want     bool
	}{
		"renewal of a valid lease":        {old: agentLease(at(-10 * time.Second)), new: agentLease(at(0)), want: false},
		"renewal of an expired lease":     {old: agentLease(at(-time.Minute)), new: agentLease(at(0)), want: true},
		"first renewal":                   {old: agentLease(nil), new: agentLease(at(0)), want: true},
		"an expired lease changing again": {old: agentLease(at(-2 * time.Minute)), new: agentLease(at(-time.Minute)), want: false},
		"another lease":                   {old: other, new: other, want: false},
		"an agent lease elsewhere":        {old: otherNS, new: otherNS, want: false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := p.Update(event.UpdateEvent{ObjectOld: tc.old, ObjectNew: tc.new}); got != tc.want {
				t.Errorf("Update = %v, want %v", got, tc.want)
			}
		})
	}
	if !p.Create(event.CreateEvent{Object: agentLease(nil)}) || !p.Delete(event.DeleteEvent{Object: agentLease(nil)}) {
		t.Error("creation and deletion of an agent lease must pass")
	}
	if p.Create(event.CreateEvent{Object: other}) {
		t.Error("creation of another lease must not pass")
	}
}

func TestNodeOfLease(t *testing.T) {
	l := leaseReader{namespace: "kd"}
	cases := map[string]struct {
		namespace, name string
		wantNode        string
		wantOK          bool
	}{
		"agent lease":      {namespace: "kd", name: "kubedevice-agent-node-1", wantNode: "node-1", wantOK: true},
		"prefix only":      {namespace: "kd", name: "kubedevice-agent-"},
		"other namespace":  {namespace: "default", name: "kubedevice-agent-node-1"},
		"leader election":  {namespace: "kd", name: "kubedevice-controller.kubedevice.io"},
		"similar, no dash": {namespace: "kd", name: "kubedevice-agentnode-1"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			node, ok := l.nodeOfLease(&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: tc.namespace, Name: tc.name}})
			if node != tc.wantNode || ok != tc.wantOK {
				t.Errorf("nodeOfLease = %q, %v; want %q, %v", node, ok, tc.wantNode, tc.wantOK)
			}
		})
	}
}
