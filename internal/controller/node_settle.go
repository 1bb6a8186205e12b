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
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
)

// An agent registering a plugin of many devices creates its NodeDevice shards one after another.
// Publishing the node's capacity as each one counts patched the Node once per shard (66–87
// patches for 10 000 devices, the capacity climbing by 128), and a Node is one of the most watched
// objects of a cluster. A node with such a burst of creations under way is therefore not patched
// until the burst has settled; then one patch publishes the sum.

// creationBurst is when the first and the last NodeDevice of a burst of creations on a node were
// seen, and the timer that queues the node once the burst has settled.
type creationBurst struct {
	first, last time.Time
	timer       *time.Timer
}

const (
	// shardSettle is how long a node's capacity waits after a NodeDevice of the node was
	// created: an agent creates the shards of a registration one after another, tens of
	// milliseconds apart (two writes each), so a second without a creation ends the burst.
	shardSettle = time.Second
	// shardMaxHold bounds that wait from the first creation of a burst, so creations that never
	// pause cannot keep a node's capacity from being published.
	shardMaxHold = 10 * time.Second
)

// The settling runs on the real clock, not Options.Clock: it is a pause of a fraction of a second
// between an agent's writes, which tests stepping a fake clock past Lease expiries do not drive.

// nodeDeviceHandler queues the node of a NodeDevice on its events, and records a NodeDevice's
// creation as part of a burst on its node: one the watch shows, or one the initial list shows that
// was created within the last shardSettle (a controller starting while an agent registers).
func (r *nodeReconciler) nodeDeviceHandler() handler.EventHandler {
	return handler.Funcs{
		CreateFunc: func(_ context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			node := e.Object.(*kdv1alpha1.NodeDevice).Spec.NodeName
			if !e.IsInInitialList || justCreated(e.Object.GetCreationTimestamp().Time) {
				r.created(node, q)
			}
			q.Add(nodeRequest(node))
		},
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			q.Add(nodeRequest(e.ObjectNew.(*kdv1alpha1.NodeDevice).Spec.NodeName))
		},
		DeleteFunc: func(_ context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			q.Add(nodeRequest(e.Object.(*kdv1alpha1.NodeDevice).Spec.NodeName))
		},
		GenericFunc: func(_ context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			q.Add(nodeRequest(e.Object.(*kdv1alpha1.NodeDevice).Spec.NodeName))
		},
	}
}

func nodeRequest(node string) reconcile.Request {
	return reconcile.Request{NamespacedName: types.NamespacedName{Name: node}}
}

// justCreated reports whether an object created at created (whole seconds, the API server's
// clock) may have been created within the last shardSettle.
func justCreated(created time.Time) bool {
	return time.Since(created) < shardSettle+time.Second
}

// created records that a NodeDevice of node was created now, starting a burst (and its timer) if
// none is under way.
func (r *nodeReconciler) created(node string, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	r.settlingMu.Lock()
	defer r.settlingMu.Unlock()
	now := time.Now()
	b, ok := r.burst[node]
	if !ok {
		b.first = now
		b.timer = time.AfterFunc(shardSettle, func() { r.settle(node, q) })
	}
	b.last = now
	r.burst[node] = b
}

// settle ends node's burst and queues the node once shardSettle has passed since its last
// creation, or shardMaxHold since its first; until then it waits again.
func (r *nodeReconciler) settle(node string, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	r.settlingMu.Lock()
	b, ok := r.burst[node]
	if !ok {
		r.settlingMu.Unlock()
		return
	}
	now := time.Now()
	if wait := min(b.last.Add(shardSettle).Sub(now), b.first.Add(shardMaxHold).Sub(now)); wait > 0 {
		b.timer = time.AfterFunc(wait, func() { r.settle(node, q) })
		r.burst[node] = b
		r.settlingMu.Unlock()
		return
	}
	delete(r.burst, node)
	r.settlingMu.Unlock()
	q.Add(nodeRequest(node))
}

// settling reports whether a burst of NodeDevice creations is under way on node.
func (r *nodeReconciler) settling(node string) bool {
	r.settlingMu.Lock()
	defer r.settlingMu.Unlock()
	_, ok := r.burst[node]
	return ok
}

// forgetBurst drops node's burst, the node being gone.
func (r *nodeReconciler) forgetBurst(node string) {
	r.settlingMu.Lock()
	defer r.settlingMu.Unlock()
	if b, ok := r.burst[node]; ok {
		b.timer.Stop()
		delete(r.burst, node)
	}
}
