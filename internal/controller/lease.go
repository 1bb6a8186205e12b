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
	"context"
	"fmt"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
	"github.com/kubedevice/kubedevice/internal/contract"
)

// agentState is whether a node's agent is alive, judged from its Lease.
type agentState struct {
	// ready is true while the Lease is valid.
	ready bool
	// reason is ReasonAgentLeaseValid, ReasonAgentLeaseExpired or ReasonAgentLeaseMissing.
	reason string
	// message explains the reason. It does not change while the state does not, so it can go in a
	// condition without a write per renewal.
	message string
	// expiresIn is how long the Lease stays valid; zero unless ready.
	expiresIn time.Duration
}

// AgentLeaseName returns the name of the Lease the agent of node renews (contract.AgentLeaseName).
func AgentLeaseName(node string) string {
	return contract.AgentLeaseName(node)
}

// agentStateOf judges the agent from its Lease (nil when there is none): valid until renewTime +
// duration, by the controller's clock. The Lease's own leaseDurationSeconds is not used, so one
// flag decides for every agent.
func agentStateOf(lease *coordinationv1.Lease, namespace, node string, duration time.Duration, now time.Time) agentState {
	name := namespace + "/" + AgentLeaseName(node)
	if lease == nil {
		return agentState{
			reason:  kdv1alpha1.ReasonAgentLeaseMissing,
			message: fmt.Sprintf("The node agent has no Lease %s.", name),
		}
	}
	if lease.Spec.RenewTime == nil {
		return agentState{
			reason:  kdv1alpha1.ReasonAgentLeaseExpired,
			message: fmt.Sprintf("The node agent's Lease %s has never been renewed.", name),
		}
	}
	renewed := lease.Spec.RenewTime.Time
	expiry := renewed.Add(duration)
	if now.After(expiry) {
		return agentState{
			reason: kdv1alpha1.ReasonAgentLeaseExpired,
			message: fmt.Sprintf("The node agent's Lease %s was last renewed at %s, more than %s ago.",
				name, renewed.UTC().Format(time.RFC3339), duration),
		}
	}
	valid := contract.AgentReadyCondition(namespace, node, 0)
	return agentState{
		ready:   true,
		reason:  valid.Reason,
		message: valid.Message,
		// Come back just after the expiry instant, when now.After(expiry) holds.
		expiresIn: expiry.Sub(now) + time.Millisecond,
	}
}

// leaseReader reads agent Leases from the cache and judges them.
type leaseReader struct {
	client    client.Reader
	namespace string
	duration  time.Duration
}

// agentState returns the state of node's agent at now.
func (l leaseReader) agentState(ctx context.Context, node string, now time.Time) (agentState, error) {
	lease := &coordinationv1.Lease{}
	err := l.client.Get(ctx, client.ObjectKey{Namespace: l.namespace, Name: AgentLeaseName(node)}, lease)
	if apierrors.IsNotFound(err) {
		lease = nil
	} else if err != nil {
		return agentState{}, fmt.Errorf("getting the agent Lease of node %q: %w", node, err)
	}
	return agentStateOf(lease, l.namespace, node, l.duration, now), nil
}

// nodeOfLease returns the node whose agent renews lease, or false for any other Lease.
func (l leaseReader) nodeOfLease(lease client.Object) (string, bool) {
	if lease.GetNamespace() != l.namespace || !strings.HasPrefix(lease.GetName(), contract.AgentLeasePrefix) {
		return "", false
	}
	node := strings.TrimPrefix(lease.GetName(), contract.AgentLeasePrefix)
	return node, node != ""
}

// predicate passes agent Lease events that can change an agent's state: creation, deletion, and
// updates after which the Lease is valid when it was not before, or the other way round. Routine
// renewals of a valid Lease are dropped; the reconcilers come back at the expiry by themselves.
func (l leaseReader) predicate(clk clock.PassiveClock) predicate.Predicate {
	isAgentLease := func(o client.Object) bool {
		_, ok := l.nodeOfLease(o)
		return ok
	}
	return predicate.Funcs{
		CreateFunc:  func(e event.CreateEvent) bool { return isAgentLease(e.Object) },
		DeleteFunc:  func(e event.DeleteEvent) bool { return isAgentLease(e.Object) },
		GenericFunc: func(e event.GenericEvent) bool { return isAgentLease(e.Object) },
		UpdateFunc: func(e event.UpdateEvent) bool {
			node, ok := l.nodeOfLease(e.ObjectNew)
			if !ok {
				return false
			}
			oldLease, okOld := e.ObjectOld.(*coordinationv1.Lease)
			newLease, okNew := e.ObjectNew.(*coordinationv1.Lease)
			if !okOld || !okNew {
				return true
			}
			now := clk.Now()
			return agentStateOf(oldLease, l.namespace, node, l.duration, now).ready !=
				agentStateOf(newLease, l.namespace, node, l.duration, now).ready
		},
	}
}
