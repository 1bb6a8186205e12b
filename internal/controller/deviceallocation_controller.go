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
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
	"github.com/kubedevice/kubedevice/internal/indexer"
)

var deviceAllocationGVK = kdv1alpha1.GroupVersion.WithKind("DeviceAllocation")

// deviceAllocationReconciler audits DeviceAllocations: it deletes those whose pod and agent are
// both gone, and marks with a Conflict condition (and a Warning event) live allocations that hold
// the same device. Keyed by DeviceAllocation namespace/name.
type deviceAllocationReconciler struct {
	client    client.Client
	apiReader client.Reader
	clock     clock.PassiveClock
	recorder  recorder.EventRecorder
	leases    leaseReader
}

func (r *deviceAllocationReconciler) setupWithManager(mgr ctrl.Manager, opts crcontroller.Options) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("deviceallocation").
		For(&kdv1alpha1.DeviceAllocation{}).
		// The allocations sharing a device with one that changed must look again: its conflict
		// may have started or ended.
		Watches(&kdv1alpha1.DeviceAllocation{}, handler.EnqueueRequestsFromMapFunc(r.peersOf)).
		// Only whether the pod exists matters, so pods are cached as metadata, and only their
		// creation and deletion are events.
		WatchesMetadata(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(r.allocationsOfPod),
			builder.WithPredicates(predicate.Funcs{UpdateFunc: func(event.UpdateEvent) bool { return false }})).
		Watches(&coordinationv1.Lease{}, handler.EnqueueRequestsFromMapFunc(r.allocationsOfLease),
			builder.WithPredicates(r.leases.predicate(r.clock))).
		WithOptions(opts).
		Complete(r)
}

// Reconcile deletes an orphaned DeviceAllocation or sets its Conflict condition.
func (r *deviceAllocationReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	da := &kdv1alpha1.DeviceAllocation{}
	if err := r.client.Get(ctx, req.NamespacedName, da); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !da.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	now := r.clock.Now()

	podExists, err := r.podExists(ctx, da)
	if err != nil {
		return ctrl.Result{}, err
	}
	var requeueAfter time.Duration
	var done bool
	if podExists {
		done, err = r.deleteSuperseded(ctx, da)
	} else {
		requeueAfter, done, err = r.deleteOrphaned(ctx, da, now)
	}
	if done || err != nil {
		return ctrl.Result{}, err
	}
	if err := r.setConflict(ctx, da, now); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: requeueAfter}, nil
}

// deleteOrphaned deletes da, whose pod is gone, when the agent of its node is gone too, and
// reports whether it is done with da. Otherwise the agent releases it; if the agent goes first,
// da is looked at again then: it returns when the agent's Lease expires.
func (r *deviceAllocationReconciler) deleteOrphaned(ctx context.Context, da *kdv1alpha1.DeviceAllocation, now time.Time) (time.Duration, bool, error) {
	logger := ctrl.LoggerFrom(ctx)
	agent, err := r.leases.agentState(ctx, da.Spec.NodeName, now)
	if err != nil || agent.ready {
		return agent.expiresIn, false, err
	}
	// Nobody is left to release it: the pod is gone and so is the agent of its node.
	// The preconditions keep a changed or recreated allocation; its own event brings it back.
	err = r.client.Delete(ctx, da, client.Preconditions{UID: &da.UID, ResourceVersion: &da.ResourceVersion})
	if apierrors.IsConflict(err) {
		logger.V(1).Info("DeviceAllocation changed before its deletion; looking again on its event")
		return 0, true, nil
	}
	if client.IgnoreNotFound(err) != nil {
		return 0, true, fmt.Errorf("deleting orphaned DeviceAllocation %s: %w", client.ObjectKeyFromObject(da), err)
	}
	logger.Info("Deleted a DeviceAllocation whose pod and agent are gone", "pod", da.Spec.PodName, "agent", agent.reason)
	return 0, true, nil
}

// deleteSuperseded deletes da when the agent rewrote it under its new name, and reports whether
// it did.
func (r *deviceAllocationReconciler) deleteSuperseded(ctx context.Context, da *kdv1alpha1.DeviceAllocation) (bool, error) {
	superseded, err := r.superseded(ctx, da)
	if err != nil || !superseded {
		return false, err
	}
	err = r.client.Delete(ctx, da, client.Preconditions{UID: &da.UID, ResourceVersion: &da.ResourceVersion})
	if client.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err) {
		return true, fmt.Errorf("deleting superseded DeviceAllocation %s: %w", client.ObjectKeyFromObject(da), err)
	}
	ctrl.LoggerFrom(ctx).Info("Deleted a DeviceAllocation named before names started with their node, which the agent rewrote under its new name", "pod", da.Spec.PodName)
	return true, nil
}

// setConflict sets or clears da's Conflict condition as the live allocations sharing its devices
// say, with a Warning event when a conflict starts.
func (r *deviceAllocationReconciler) setConflict(ctx context.Context, da *kdv1alpha1.DeviceAllocation, now time.Time) error {
	peers, err := r.sharing(ctx, da, indexer.LiveDeviceKeys(da)) // da included
	if err != nil {
		return err
	}
	got := meta.FindStatusCondition(da.Status.Conditions, kdv1alpha1.DeviceAllocationConflict)
	want := conflictCondition(da, findConflicts(da, peers), metav1.NewTime(now))
	if !conflictChanged(got, want) {
		return nil
	}
	wrote, err := writeConflict(ctx, r.client, da, want)
	if err != nil {
		return err
	}
	if wrote {
		ctrl.LoggerFrom(ctx).Info("Set the Conflict condition", "conflict", want != nil)
	}
	if wrote && conflictStarted(got, want) {
		r.recorder.Eventf(da, firstOther(da, peers), corev1.EventTypeWarning, kdv1alpha1.ReasonDeviceHeldTwice,
			"DetectConflict", "%s", want.Message)
	}
	return nil
}

// podExists reports whether the allocation's pod (same name and UID) exists. A pod the cache does
// not hold is looked up on the API server before it is taken for gone: the cache may not have
// seen a new pod yet.
func (r *deviceAllocationReconciler) podExists(ctx context.Context, da *kdv1alpha1.DeviceAllocation) (bool, error) {
	key := client.ObjectKey{Namespace: da.Namespace, Name: da.Spec.PodName}
	for _, reader := range []client.Reader{r.client, r.apiReader} {
		pod := &metav1.PartialObjectMetadata{}
		pod.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Pod"))
		err := reader.Get(ctx, key, pod)
		switch {
		case err == nil && string(pod.UID) == da.Spec.PodUID:
			return true, nil
		case err != nil && !apierrors.IsNotFound(err):
			return false, fmt.Errorf("getting pod %s of DeviceAllocation %s: %w", key, da.Name, err)
		}
	}
	return false, nil
}

// sharing returns the live allocations holding at least one of the devices of keys (da's), each
// once; on an error, those listed before it.
func (r *deviceAllocationReconciler) sharing(ctx context.Context, da *kdv1alpha1.DeviceAllocation, keys []string) ([]kdv1alpha1.DeviceAllocation, error) {
	var peers []kdv1alpha1.DeviceAllocation
	seen := map[types.UID]bool{}
	for _, key := range keys {
		list := &kdv1alpha1.DeviceAllocationList{}
		if err := r.client.List(ctx, list, client.MatchingFields{indexer.DeviceAllocationLiveDevice: key}); err != nil {
			return peers, fmt.Errorf("listing the DeviceAllocations sharing a device with %s/%s: %w", da.Namespace, da.Name, err)
		}
		for i := range list.Items {
			if !seen[list.Items[i].UID] {
				seen[list.Items[i].UID] = true
				peers = append(peers, list.Items[i])
			}
		}
	}
	return peers, nil
}

// firstOther returns the first allocation in peers other than da, as the event's related object,
// or a nil interface.
func firstOther(da *kdv1alpha1.DeviceAllocation, peers []kdv1alpha1.DeviceAllocation) runtime.Object {
	for i := range peers {
		if peers[i].UID != da.UID {
			return &peers[i]
		}
	}
	return nil
}

// peersOf maps an allocation to the other live allocations holding any of its devices, whether it
// is itself live or not (it may just have been released or deleted).
func (r *deviceAllocationReconciler) peersOf(ctx context.Context, o client.Object) []reconcile.Request {
	da := o.(*kdv1alpha1.DeviceAllocation)
	peers, err := r.sharing(ctx, da, indexer.DeviceKeys(da))
	if err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing the DeviceAllocations sharing a device", "deviceAllocation", client.ObjectKeyFromObject(da))
	}
	var reqs []reconcile.Request
	for i := range peers {
		if peers[i].UID != da.UID {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&peers[i])})
		}
	}
	return reqs
}

// allocationsOfPod maps a pod to the allocations naming it.
func (r *deviceAllocationReconciler) allocationsOfPod(ctx context.Context, pod client.Object) []reconcile.Request {
	return r.list(ctx, client.InNamespace(pod.GetNamespace()), client.MatchingFields{indexer.DeviceAllocationPodName: pod.GetName()})
}

// allocationsOfLease maps an agent Lease to the allocations on its node.
func (r *deviceAllocationReconciler) allocationsOfLease(ctx context.Context, lease client.Object) []reconcile.Request {
	node, ok := r.leases.nodeOfLease(lease)
	if !ok {
		return nil
	}
	return r.list(ctx, client.MatchingFields{indexer.DeviceAllocationNodeName: node})
}

func (r *deviceAllocationReconciler) list(ctx context.Context, opts ...client.ListOption) []reconcile.Request {
	list := &kdv1alpha1.DeviceAllocationList{}
	if err := r.client.List(ctx, list, opts...); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing DeviceAllocations to reconcile")
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for i := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
	}
	return reqs
}

// superseded reports whether da is named the way agents named allocations before names started
// with their node (<node>.<...>, which the admission policy holds agents to), and its agent has
// since written the same pod's allocation under a new name: after an upgrade the agent writes
// only the new one, and the two would show as holding the same devices for the pod's lifetime.
func (r *deviceAllocationReconciler) superseded(ctx context.Context, da *kdv1alpha1.DeviceAllocation) (bool, error) {
	if hasNodeScopedName(da) {
		return false, nil
	}
	list := &kdv1alpha1.DeviceAllocationList{}
	if err := r.client.List(ctx, list, client.InNamespace(da.Namespace), client.MatchingFields{indexer.DeviceAllocationPodName: da.Spec.PodName}); err != nil {
		return false, fmt.Errorf("listing the DeviceAllocations of pod %s/%s: %w", da.Namespace, da.Spec.PodName, err)
	}
	for i := range list.Items {
		other := &list.Items[i]
		if other.UID != da.UID && other.Spec.PodUID == da.Spec.PodUID && other.Spec.NodeName == da.Spec.NodeName &&
			other.DeletionTimestamp.IsZero() && hasNodeScopedName(other) {
			return true, nil
		}
	}
	return false, nil
}

// hasNodeScopedName reports whether da's name is <its node>.<a name without dots>.
func hasNodeScopedName(da *kdv1alpha1.DeviceAllocation) bool {
	node := da.Spec.NodeName
	return node != "" && strings.HasPrefix(da.Name, node+".") && strings.LastIndex(da.Name, ".") == len(node)
}
