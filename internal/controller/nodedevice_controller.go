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
	"reflect"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
	"github.com/kubedevice/kubedevice/internal/indexer"
)

var nodeDeviceGVK = kdv1alpha1.GroupVersion.WithKind("NodeDevice")

// nodeDeviceReconciler keeps the node-capacity finalizer on NodeDevices and their AgentReady
// condition, applied under the controller's field owner, in line with the agent's Lease. Keyed by
// NodeDevice name.
type nodeDeviceReconciler struct {
	client   client.Client
	clock    clock.PassiveClock
	recorder recorder.EventRecorder
	leases   leaseReader

	// applied remembers the AgentReady conditions written lately, by NodeDevice name, so a
	// reconcile running on an event that came before its own write reached the cache (the
	// agent's status write, the finalizer's) does not write the same condition again: 81–126
	// condition writes for 79 shards were measured before.
	appliedMu sync.Mutex
	applied   map[string]appliedCondition
	// pruned is when applied was last swept of forgotten entries.
	pruned time.Time
}

// appliedCondition is an AgentReady condition written to the NodeDevice of uid, and when.
type appliedCondition struct {
	uid  types.UID
	cond metav1.Condition
	at   time.Time
}

// appliedMemory is how long a written condition is trusted over a cache that does not show it
// yet: far longer than the cache takes to see a write, short enough that a condition someone
// removed is put back by the next reconcile after it. Real time, as the cache's delay is.
const appliedMemory = 5 * time.Second

func (r *nodeDeviceReconciler) setupWithManager(mgr ctrl.Manager, opts crcontroller.Options) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("nodedevice").
		For(&kdv1alpha1.NodeDevice{}).
		Watches(&coordinationv1.Lease{},
			handler.EnqueueRequestsFromMapFunc(r.nodeDevicesOfLease),
			builder.WithPredicates(r.leases.predicate(r.clock))).
		WithOptions(opts).
		Complete(r)
}

// Reconcile puts the finalizer on the NodeDevice and sets its AgentReady condition.
func (r *nodeDeviceReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	nd := &kdv1alpha1.NodeDevice{}
	if err := r.client.Get(ctx, req.NamespacedName, nd); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !nd.DeletionTimestamp.IsZero() {
		// The node-capacity controller lets it go once its resource is zero on the node.
		return ctrl.Result{}, nil
	}
	if err := r.ensureFinalizer(ctx, nd); err != nil {
		return ctrl.Result{}, err
	}

	now := r.clock.Now()
	agent, err := r.leases.agentState(ctx, nd.Spec.NodeName, now)
	if err != nil {
		return ctrl.Result{}, err
	}
	got := meta.FindStatusCondition(nd.Status.Conditions, kdv1alpha1.NodeDeviceAgentReady)
	want := agentReadyCondition(nd, agent, metav1.NewTime(now))
	if conditionChanged(got, &want) && !r.appliedLately(nd, want) && !awaitsAgentStatus(nd, got, want) {
		if err := applyConditions(ctx, r.client, nodeDeviceGVK, client.ObjectKeyFromObject(nd), want); err != nil {
			return ctrl.Result{}, err
		}
		r.rememberApplied(nd, want)
		ctrl.LoggerFrom(ctx).Info("Set AgentReady", "status", want.Status, "reason", want.Reason)
		if agentLost(got, want) {
			r.recorder.Eventf(nd, nil, corev1.EventTypeWarning, want.Reason, "MarkAgentNotReady", "%s", want.Message)
		}
	}

	if agent.ready {
		return ctrl.Result{RequeueAfter: agent.expiresIn}, nil
	}
	return ctrl.Result{}, nil
}

// awaitsAgentStatus reports whether writing want can wait for the agent's first status write of
// nd: the agent seeds the AgentReady condition of a valid Lease with it (contract.AgentReadyCondition),
// so writing True before that would only cost another write of the object. An object whose status
// has been written and that lacks the condition (an agent that does not seed it) gets it from the
// controller, as does any False.
func awaitsAgentStatus(nd *kdv1alpha1.NodeDevice, got *metav1.Condition, want metav1.Condition) bool {
	return got == nil && want.Status == metav1.ConditionTrue && statusUnwritten(&nd.Status)
}

// statusUnwritten reports whether st is a NodeDevice's status as created, before any status
// write: the agent's first one always lists conditions (Registered, Healthy) and a path.
func statusUnwritten(st *kdv1alpha1.NodeDeviceStatus) bool {
	return reflect.ValueOf(*st).IsZero()
}

// appliedLately reports whether want was written to nd (the same object) in the last
// appliedMemory, which the cache has not shown yet; an entry the cache has caught up with, or
// that is too old, is forgotten.
func (r *nodeDeviceReconciler) appliedLately(nd *kdv1alpha1.NodeDevice, want metav1.Condition) bool {
	r.appliedMu.Lock()
	defer r.appliedMu.Unlock()
	a, ok := r.applied[nd.Name]
	if !ok {
		return false
	}
	if a.uid != nd.UID || time.Since(a.at) >= appliedMemory || conditionChanged(&a.cond, &want) {
		delete(r.applied, nd.Name)
		return false
	}
	return true
}

// rememberApplied records that want was written to nd now; once per appliedMemory it sweeps out
// the entries too old to matter.
func (r *nodeDeviceReconciler) rememberApplied(nd *kdv1alpha1.NodeDevice, want metav1.Condition) {
	r.appliedMu.Lock()
	defer r.appliedMu.Unlock()
	if r.applied == nil {
		r.applied = map[string]appliedCondition{}
	}
	now := time.Now()
	if now.Sub(r.pruned) >= appliedMemory {
		for name, a := range r.applied {
			if now.Sub(a.at) >= appliedMemory {
				delete(r.applied, name)
			}
		}
		r.pruned = now
	}
	r.applied[nd.Name] = appliedCondition{uid: nd.UID, cond: want, at: now}
}

// ensureFinalizer adds the node-capacity finalizer, if nd lacks it.
func (r *nodeDeviceReconciler) ensureFinalizer(ctx context.Context, nd *kdv1alpha1.NodeDevice) error {
	if controllerutil.ContainsFinalizer(nd, NodeCapacityFinalizer) {
		return nil
	}
	return applyFinalizer(ctx, r.client, nd)
}

// nodeDevicesOfLease maps an agent Lease to the NodeDevices of its node.
func (r *nodeDeviceReconciler) nodeDevicesOfLease(ctx context.Context, lease client.Object) []reconcile.Request {
	node, ok := r.leases.nodeOfLease(lease)
	if !ok {
		return nil
	}
	nds := &kdv1alpha1.NodeDeviceList{}
	if err := r.client.List(ctx, nds, client.MatchingFields{indexer.NodeDeviceNodeName: node}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing the NodeDevices of an agent Lease's node", "node", node)
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(nds.Items))
	for i := range nds.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&nds.Items[i])})
	}
	return reqs
}
