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
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
	"github.com/kubedevice/kubedevice/internal/indexer"
)

// nodeReconciler publishes each node's kubedevice resources in the Node's status.capacity and
// status.allocatable, from its NodeDevices and its agent's Lease, leaves alone those another field
// manager claims (node_claims.go), and deletes the NodeDevices of Nodes that are gone. Keyed by
// Node name.
type nodeReconciler struct {
	client    client.Client
	apiReader client.Reader
	clock     clock.PassiveClock
	leases    leaseReader
	recorder  recorder.EventRecorder

	// written remembers, per node, the status of our last patch until the cache has seen it, so a
	// reconcile that runs before the watch event arrives does not patch the same values again.
	writtenMu sync.Mutex
	written   map[string]writtenNode

	// burst holds, per node, the burst of NodeDevice creations under way there (an agent
	// registering a plugin creates its shards one after another), so the node is patched once
	// the burst has settled rather than once per shard (node_settle.go).
	settlingMu sync.Mutex
	burst      map[string]creationBurst

	// claims remembers, per node, whose its resources were and which are held (node_claims.go).
	claimsMu sync.Mutex
	claims   map[string]*nodeClaims
}

// writtenNode is a Node status we patched, who owned its resources after the patch, and the
// resourceVersion the Node had before.
type writtenNode struct {
	before string
	view   nodeView
}

// nodeView is what the reconciler reads of a Node: its status, and the field managers owning the
// keys of its status.capacity and status.allocatable.
type nodeView struct {
	status corev1.NodeStatus
	owners map[corev1.ResourceName]resourceOwners
}

func (r *nodeReconciler) setupWithManager(mgr ctrl.Manager, opts crcontroller.Options) error {
	r.written = map[string]writtenNode{}
	r.burst = map[string]creationBurst{}
	r.claims = map[string]*nodeClaims{}
	return ctrl.NewControllerManagedBy(mgr).
		Named("node-capacity").
		For(&corev1.Node{}, builder.WithPredicates(nodeCapacityChanged())).
		Watches(&kdv1alpha1.NodeDevice{}, r.nodeDeviceHandler(), builder.WithPredicates(nodeDeviceCountChanged())).
		Watches(&coordinationv1.Lease{},
			handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
				node, _ := r.leases.nodeOfLease(o)
				return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: node}}}
			}),
			builder.WithPredicates(r.leases.predicate(r.clock))).
		WithOptions(opts).
		Complete(r)
}

// Reconcile publishes the node's kubedevice resources that no other field manager claims, says
// which are held back, and lets terminating NodeDevices go once their resource is zero on the
// node (or another manager's).
func (r *nodeReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	node, err := r.getNode(ctx, req.Name)
	if err != nil {
		return ctrl.Result{}, err
	}
	if node == nil {
		r.forget(req.Name)
		r.forgetBurst(req.Name)
		r.forgetClaims(req.Name)
		return ctrl.Result{}, r.deleteNodeDevices(ctx, req.Name)
	}

	nds := &kdv1alpha1.NodeDeviceList{}
	if err := r.client.List(ctx, nds, client.MatchingFields{indexer.NodeDeviceNodeName: node.Name}); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing the NodeDevices of node %q: %w", node.Name, err)
	}
	if len(nds.Items) == 0 {
		r.forgetClaims(node.Name)
		return ctrl.Result{}, nil
	}
	now := r.clock.Now()
	agent, err := r.leases.agentState(ctx, node.Name, now)
	if err != nil {
		return ctrl.Result{}, err
	}
	view, err := r.currentView(ctx, node, nds.Items)
	if err != nil {
		return ctrl.Result{}, err
	}

	plan := desiredCapacity(view.status, nds.Items, agent.ready)
	claims := r.claimsOf(node.Name)
	holds := claims.judge(view.status, view.owners, plan.names(), now)
	claims.keepOnly(writtenResources(nds.Items))
	status, err := r.publish(ctx, node, view.status, plan.without(holds), claims)
	if err != nil || status == nil {
		return ctrl.Result{}, err
	}
	if err := r.reportHolds(ctx, node, nds.Items, holds, plan.names()); err != nil {
		return ctrl.Result{}, err
	}

	for _, nd := range releasable(*status, nds.Items, holds) {
		if err := removeFinalizer(ctx, r.client, nd); err != nil {
			return ctrl.Result{}, err
		}
		ctrl.LoggerFrom(ctx).V(1).Info("Released a deleted NodeDevice", "nodeDevice", nd.Name, "resource", nd.Spec.ResourceName)
	}
	return requeueAfter(agent, holds, now), nil
}

// publish patches the node's status with what plan publishes and withdraws, unless that is what
// status shows or a burst of NodeDevice creations is settling, and returns the status the node
// then has; nil when the node is gone. It records in claims which resources the controller owns
// after its patch.
func (r *nodeReconciler) publish(ctx context.Context, node *corev1.Node, status corev1.NodeStatus, plan capacityPlan, claims *nodeClaims) (*corev1.NodeStatus, error) {
	logger := ctrl.LoggerFrom(ctx)
	patch, err := capacityPatch(status, plan)
	if err != nil || patch == nil {
		return &status, err
	}
	if r.settling(node.Name) {
		// The burst's timer queues the node once it has settled.
		logger.V(1).Info("Waiting for the node's new NodeDevices to settle before publishing")
		return &status, nil
	}
	before := node.ResourceVersion
	err = r.client.Status().Patch(ctx, node, client.RawPatch(types.MergePatchType, patch), client.FieldOwner(FieldOwner))
	if apierrors.IsNotFound(err) {
		// Deleted meanwhile: its deletion event brings us back to delete its NodeDevices.
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("patching the capacity of node %q: %w", node.Name, err)
	}
	nodeCapacityPatches.Inc()
	view := nodeView{status: node.Status, owners: nodeResourceOwners(node.ManagedFields)}
	claims.published(view.owners, plan.names())
	r.remember(node.Name, before, view)
	logger.Info("Published node capacity", "patch", string(patch))
	return &view.status, nil
}

// requeueAfter comes back when the agent's Lease expires or a hold of a resource taken back ends,
// whichever is first.
func requeueAfter(agent agentState, holds map[corev1.ResourceName]resourceHold, now time.Time) ctrl.Result {
	var after time.Duration
	if agent.ready {
		after = agent.expiresIn
	}
	for _, h := range holds {
		if h.until.IsZero() {
			continue
		}
		if d := h.until.Sub(now) + time.Millisecond; after == 0 || d < after {
			after = d
		}
	}
	return ctrl.Result{RequeueAfter: after}
}

// getNode returns the Node, or nil when it does not exist. A Node the cache does not hold is
// looked up on the API server before it is taken for deleted: the cache may not have seen a new
// Node yet, and deleting its NodeDevices cannot be undone.
func (r *nodeReconciler) getNode(ctx context.Context, name string) (*corev1.Node, error) {
	node := &corev1.Node{}
	err := r.client.Get(ctx, client.ObjectKey{Name: name}, node)
	if apierrors.IsNotFound(err) {
		err = r.apiReader.Get(ctx, client.ObjectKey{Name: name}, node)
	}
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("getting node %q: %w", name, err)
	}
	return node, nil
}

// currentView returns the node status to diff against, and who owns its resources. When a
// terminating NodeDevice is the last of its resource, its finalizer will go once the node shows
// the resource at zero, so the node is read from the API server: the cache might not have seen our
// last patch yet. Otherwise the cached node is used, or our last patch (and the owners it left)
// while the cache has not caught up with it.
func (r *nodeReconciler) currentView(ctx context.Context, node *corev1.Node, nds []kdv1alpha1.NodeDevice) (nodeView, error) {
	for i := range nds {
		nd := &nds[i]
		if nd.DeletionTimestamp.IsZero() || !controllerutil.ContainsFinalizer(nd, NodeCapacityFinalizer) || !needsZeroing(nd, nds) {
			continue
		}
		if err := r.apiReader.Get(ctx, client.ObjectKeyFromObject(node), node); err != nil {
			return nodeView{}, fmt.Errorf("getting node %q: %w", node.Name, err)
		}
		r.forget(node.Name)
		return nodeView{status: node.Status, owners: nodeResourceOwners(node.ManagedFields)}, nil
	}
	r.writtenMu.Lock()
	defer r.writtenMu.Unlock()
	if w, ok := r.written[node.Name]; ok {
		if w.before == node.ResourceVersion {
			return w.view, nil
		}
		delete(r.written, node.Name)
	}
	return nodeView{status: node.Status, owners: nodeResourceOwners(node.ManagedFields)}, nil
}

func (r *nodeReconciler) remember(node, before string, view nodeView) {
	r.writtenMu.Lock()
	defer r.writtenMu.Unlock()
	r.written[node] = writtenNode{before: before, view: nodeView{status: *view.status.DeepCopy(), owners: view.owners}}
}

func (r *nodeReconciler) forget(node string) {
	r.writtenMu.Lock()
	defer r.writtenMu.Unlock()
	delete(r.written, node)
}

// deleteNodeDevices deletes the NodeDevices of a Node that no longer exists. There is no capacity
// left to zero, so their finalizers go first. In a real cluster the Node owner reference the agent
// sets lets the garbage collector do the same; this does not depend on it.
func (r *nodeReconciler) deleteNodeDevices(ctx context.Context, nodeName string) error {
	nds := &kdv1alpha1.NodeDeviceList{}
	if err := r.client.List(ctx, nds, client.MatchingFields{indexer.NodeDeviceNodeName: nodeName}); err != nil {
		return fmt.Errorf("listing the NodeDevices of deleted node %q: %w", nodeName, err)
	}
	logger := ctrl.LoggerFrom(ctx)
	for i := range nds.Items {
		nd := &nds.Items[i]
		if err := removeFinalizer(ctx, r.client, nd); err != nil {
			return err
		}
		if !nd.DeletionTimestamp.IsZero() {
			continue
		}
		err := r.client.Delete(ctx, nd, client.Preconditions{UID: &nd.UID})
		if client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting NodeDevice %q of deleted node %q: %w", nd.Name, nodeName, err)
		}
		logger.Info("Deleted the NodeDevice of a deleted Node", "nodeDevice", nd.Name)
	}
	return nil
}

// removeFinalizer removes the node-capacity finalizer from nd, if it holds it.
func removeFinalizer(ctx context.Context, c client.Client, nd *kdv1alpha1.NodeDevice) error {
	if !controllerutil.ContainsFinalizer(nd, NodeCapacityFinalizer) {
		return nil
	}
	return dropFinalizer(ctx, c, nd)
}

// nodeCapacityChanged passes Node events except updates that leave status.capacity and
// status.allocatable, and who owns their keys, as they were: the kubelet's heartbeats and
// condition updates are not ours. The cache keeps only the managed fields of those keys, without
// times (stripNode), so comparing them whole compares their owners.
func nodeCapacityChanged() predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		oldNode, okOld := e.ObjectOld.(*corev1.Node)
		newNode, okNew := e.ObjectNew.(*corev1.Node)
		if !okOld || !okNew {
			return true
		}
		return !equality.Semantic.DeepEqual(oldNode.Status.Capacity, newNode.Status.Capacity) ||
			!equality.Semantic.DeepEqual(oldNode.Status.Allocatable, newNode.Status.Allocatable) ||
			!equality.Semantic.DeepEqual(oldNode.ManagedFields, newNode.ManagedFields)
	}}
}

// nodeDeviceCountChanged passes NodeDevice events that can change what the node publishes:
// creation, deletion, the start of a deletion, the node-capacity finalizer going on (from then on
// the NodeDevice counts), a changed allocatable or allocated count, and a changed path.
func nodeDeviceCountChanged() predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		oldND, okOld := e.ObjectOld.(*kdv1alpha1.NodeDevice)
		newND, okNew := e.ObjectNew.(*kdv1alpha1.NodeDevice)
		if !okOld || !okNew {
			return true
		}
		return oldND.Status.Allocatable != newND.Status.Allocatable || oldND.Status.Allocated != newND.Status.Allocated ||
			reported(oldND) != reported(newND) ||
			oldND.Status.EffectivePath() != newND.Status.EffectivePath() ||
			oldND.DeletionTimestamp.IsZero() != newND.DeletionTimestamp.IsZero() ||
			controllerutil.ContainsFinalizer(oldND, NodeCapacityFinalizer) != controllerutil.ContainsFinalizer(newND, NodeCapacityFinalizer)
	}}
}
