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

package allocation

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
	"sigs.k8s.io/controller-runtime/pkg/source"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
	"github.com/kubedevice/kubedevice/internal/agent/kube"
	"github.com/kubedevice/kubedevice/internal/indexer"
	"github.com/kubedevice/kubedevice/internal/nodeagent"
)

// Retry delays of an allocation the core refused as retryable (its plugin has not registered
// yet): doubling from the first to the last. The plugin's registration retriggers the pod at once
// anyway.
const (
	retryBaseDelay = time.Second
	retryMaxDelay  = 2 * time.Minute
)

// podWorkers is the number of pods reconciled at once. A worker never waits on a plugin's
// Allocate: the core's allocations run as attempts beside the workers (attempts.go), at most
// attemptsPerResource per resource, so a plugin that hangs (up to its 30 s deadline) delays only
// the pods of its own resource. The core serializes the allocations of one pod and lets different
// pods' run concurrently.
const podWorkers = 4

// podReconcileTimeout bounds a pod's reconcile, and an allocation attempt, and with them every
// plugin call and API call they make: Allocate and PreStartContainer have 30 s deadlines of their
// own, per resource.
const podReconcileTimeout = 2 * time.Minute

// Core is what the allocation flow uses of the device manager core, *nodeagent.Manager.
type Core interface {
	// AllocatePod allocates the devices of pod's containers, init containers first; an error
	// says why it refused them (nodeagent.AllocationReasonOf, nodeagent.IsRetryable).
	AllocatePod(ctx context.Context, pod *corev1.Pod) error
	// PodAllocation is what the pod of UID podUID holds; false when it holds nothing.
	PodAllocation(podUID string) (nodeagent.PodAllocation, bool)
	// PodsHolding lists the UIDs of the pods named namespace/name that hold devices.
	PodsHolding(namespace, name string) []string
	// UpdateAllocatedDevices frees the devices of every pod not in activePods.
	UpdateAllocatedDevices(ctx context.Context, activePods []*corev1.Pod) error
	// Subscribe tells which resources changed (a plugin registered, devices freed, healthy or
	// uncordoned again).
	Subscribe() *nodeagent.Subscription
	// ClaimNamed is what the ResourceClaim namespace/name the DRA flow prepared holds; false when
	// nothing: the pod's DeviceAllocation shows devices of both paths.
	ClaimNamed(namespace, name string) (nodeagent.ClaimAllocation, bool)
	// Snapshot is the state of a resource's devices (false: the core does not know it), read for
	// the health of the devices the pods hold when the resource changed.
	Snapshot(name string) (nodeagent.ResourceSnapshot, bool)
}

// Injection is what the allocation flow tells runtime injection of each pod, so that the NRI
// hook can answer the runtime from memory when the pod's containers are created.
type Injection interface {
	// Forget drops what is known of the pods named key, except active (nil: all of them).
	Forget(key types.NamespacedName, active *corev1.Pod)
	// Record says what pod's containers get: nothing (alloc nil), alloc's devices, or a refusal
	// while err says why the devices are not ready.
	Record(pod *corev1.Pod, alloc *nodeagent.PodAllocation, err error)
	// Hold refuses pod's containers, for reason.
	Hold(pod *corev1.Pod, reason string)
	// Serves reports whether the core serves resource.
	Serves(resource string) bool
}

// PreStart prepares the first start of the containers of a newly allocated pod.
type PreStart interface {
	// PrepareFirstStarts calls PreStartContainer for the first start of each container of pod
	// whose plugin requires it; a failed call is retried by the PreStartContainer controller.
	PrepareFirstStarts(ctx context.Context, pod *corev1.Pod, alloc nodeagent.PodAllocation)
}

// Options are the allocation flow's dependencies, all required.
type Options struct {
	// NodeName is the agent's node: only its pods are allocated.
	NodeName string
	// Core allocates and frees.
	Core Core
	// Injection and PreStart are told what each pod holds; runtime injection implements both.
	Injection Injection
	PreStart  PreStart
	// Gate holds every reconcile until the agent has started.
	Gate *kube.Gate
	// Recorder reports refusals with Warning events on the pods.
	Recorder recorder.EventRecorder
	// Clock stamps the conditions.
	Clock clock.Clock
}

// reconciler allocates the devices of the pods bound to the node, frees them when the pods end,
// and mirrors each pod's devices into its DeviceAllocation. Keyed by pod namespace/name, so a
// pod, the pod recreated under the same name, and their DeviceAllocations are reconciled
// together.
type reconciler struct {
	Options
	client    client.Client
	apiReader client.Reader
	pods      kube.Pods
	backoff   workqueue.TypedRateLimiter[reconcile.Request]
	// refusals paces the rewrites of refused pods' DeviceAllocations.
	refusals *refusalPacer
	// attempts runs the core's allocations, off the workers.
	attempts *attempts
	// written lets kube.Fresh skip reading a DeviceAllocation the agent has not written lately.
	written *kube.Written
	// health is the health of the devices the pods hold, as the core last announced it.
	health *kube.HealthView
}

// Setup adds the pod controller to mgr, whose cache must hold the node's pods and
// DeviceAllocations and the indexes of package indexer.
func Setup(mgr ctrl.Manager, opts Options) error {
	r := &reconciler{
		Options:   opts,
		client:    mgr.GetClient(),
		apiReader: mgr.GetAPIReader(),
		pods:      kube.Pods{Client: mgr.GetClient(), NodeName: opts.NodeName},
		backoff:   workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](retryBaseDelay, retryMaxDelay),
		refusals:  newRefusalPacer(opts.Clock),
		attempts:  newAttempts(opts.Core, attemptsPerResource),
		written:   kube.NewWritten(opts.Clock),
		health:    kube.NewHealthView(opts.Core.Snapshot),
	}
	r.attempts.prepare = opts.PreStart.PrepareFirstStarts
	if err := mgr.Add(manager.RunnableFunc(r.attempts.drain)); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("pod-devices").
		For(&corev1.Pod{}, builder.WithPredicates(predicate.Funcs{UpdateFunc: kube.PodPhaseOrDeletionChanged})).
		Watches(&kdv1alpha1.DeviceAllocation{}, handler.EnqueueRequestsFromMapFunc(kube.PodOfDeviceAllocation)).
		WatchesRawSource(source.Func(r.retriggerWaiting)).
		WatchesRawSource(source.Func(r.attempts.start)).
		WithOptions(crcontroller.Options{
			MaxConcurrentReconciles: podWorkers,
			NeedLeaderElection:      ptr.To(false),
			ReconciliationTimeout:   podReconcileTimeout,
		}).
		Complete(r)
}

// Reconcile frees what the core still holds for an ended or replaced pod and releases its
// DeviceAllocations, or allocates the devices of an active pod and mirrors them.
func (r *reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	if err := r.Gate.Wait(ctx); err != nil {
		return reconcile.Result{}, err
	}
	pod, err := r.pods.Get(ctx, req.Namespace, req.Name)
	if err != nil {
		return reconcile.Result{}, err
	}
	active := pod != nil && !kube.IsTerminal(pod)
	if active {
		r.Injection.Forget(req.NamespacedName, pod)
	} else {
		r.Injection.Forget(req.NamespacedName, nil)
	}
	if r.holdsStale(req.NamespacedName, pod, active) {
		if err := r.free(ctx); err != nil {
			return reconcile.Result{}, err
		}
	}
	if !active {
		r.refusals.forget(req.NamespacedName)
		r.attempts.forget(req.NamespacedName)
	}
	current, err := r.releaseOthers(ctx, req.NamespacedName, pod, active)
	if err != nil || !active {
		return reconcile.Result{}, err
	}
	if len(kube.RequestedResources(pod)) == 0 && !usesClaims(pod) {
		r.Injection.Record(pod, nil, nil)
		return reconcile.Result{}, nil
	}
	ctx = ctrl.LoggerInto(ctx, ctrl.LoggerFrom(ctx).WithValues("pod", klog.KObj(pod), "podUID", pod.UID))
	return r.allocate(ctx, req, pod, current)
}

// holdsStale reports whether the core holds devices for a pod of this name that is not the
// active pod: one that ended, disappeared, or was replaced by a pod of the same name.
func (r *reconciler) holdsStale(key types.NamespacedName, pod *corev1.Pod, active bool) bool {
	for _, uid := range r.Core.PodsHolding(key.Namespace, key.Name) {
		if !active || uid != string(pod.UID) {
			return true
		}
	}
	return false
}

// free hands the core the node's active pods, so it frees the devices of every other pod.
func (r *reconciler) free(ctx context.Context) error {
	active, err := r.pods.Active(ctx)
	if err != nil {
		return err
	}
	if err := r.Core.UpdateAllocatedDevices(ctx, active); err != nil {
		return fmt.Errorf("freeing the devices of ended pods: %w", err)
	}
	return nil
}

// releaseOthers releases the DeviceAllocations of the pods named key but the active pod (pod,
// when active), and returns the active pod's, as cached; nil when it has none.
func (r *reconciler) releaseOthers(ctx context.Context, key types.NamespacedName, pod *corev1.Pod, active bool) (*kdv1alpha1.DeviceAllocation, error) {
	das, err := r.allocationsOf(ctx, key)
	if err != nil {
		return nil, err
	}
	var current *kdv1alpha1.DeviceAllocation
	for i := range das {
		da := &das[i]
		if active && da.Spec.PodUID == string(pod.UID) {
			current = da
			continue
		}
		reason, message := kdv1alpha1.ReasonPodDeleted, fmt.Sprintf("Pod %s no longer exists; its devices were freed.", klog.KRef(da.Namespace, da.Spec.PodName))
		if pod != nil && da.Spec.PodUID == string(pod.UID) {
			reason, message = kdv1alpha1.ReasonPodTerminated, fmt.Sprintf("Pod %s is %s; its devices were freed.", klog.KObj(pod), pod.Status.Phase)
		}
		if err := r.release(ctx, da, reason, message); err != nil {
			return nil, err
		}
	}
	return current, nil
}

// allocationsOf returns the cached DeviceAllocations of the node for pods named key.
func (r *reconciler) allocationsOf(ctx context.Context, key types.NamespacedName) ([]kdv1alpha1.DeviceAllocation, error) {
	list := &kdv1alpha1.DeviceAllocationList{}
	if err := r.client.List(ctx, list, client.InNamespace(key.Namespace), client.MatchingFields{indexer.DeviceAllocationPodName: key.Name}); err != nil {
		return nil, fmt.Errorf("listing the DeviceAllocations of pod %s: %w", key, err)
	}
	out := list.Items[:0]
	for _, da := range list.Items {
		if da.Spec.NodeName == r.NodeName {
			out = append(out, da)
		}
	}
	return out, nil
}

// release marks da Released and deletes it (kube.ReleaseDeviceAllocation).
func (r *reconciler) release(ctx context.Context, cached *kdv1alpha1.DeviceAllocation, reason, message string) error {
	return kube.ReleaseDeviceAllocation(ctx, r.client, r.apiReader, r.written, cached, reason, message, r.Clock.Now())
}

// retriggerWaiting requeues, whenever resources change in the core (a plugin registers, devices
// become healthy, are freed or uncordoned), the active pods asking for one of them that do not
// hold their devices yet, and the pods whose DeviceAllocation does not show the health of the
// devices they hold any more (kube.HealthView.Changed).
func (r *reconciler) retriggerWaiting(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	sub := r.Core.Subscribe()
	go func() {
		defer sub.Close()
		for {
			select {
			case <-ctx.Done():
				return
			case <-sub.Ready():
			}
			changed := sub.Changed()
			if err := r.Gate.Wait(ctx); err != nil {
				return
			}
			for _, key := range r.waiting(ctx, changed) {
				// An attempt made before the change may have been refused for what changed.
				r.attempts.changed(key)
				q.Add(reconcile.Request{NamespacedName: key})
			}
			for _, key := range r.health.Changed(ctx, r.client, r.NodeName, changed, r.Clock.Now()) {
				q.Add(reconcile.Request{NamespacedName: key})
			}
		}
	}()
	return nil
}

// waiting returns the active pods that ask for one of resources and whose DeviceAllocation does
// not say Allocated.
func (r *reconciler) waiting(ctx context.Context, resources []string) []types.NamespacedName {
	pods, err := r.pods.Active(ctx)
	if err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing the pods waiting for devices")
		return nil
	}
	var keys []types.NamespacedName
	for _, pod := range pods {
		if !slices.ContainsFunc(kube.RequestedResources(pod), func(res string) bool { return slices.Contains(resources, res) }) {
			continue
		}
		da := &kdv1alpha1.DeviceAllocation{}
		err := r.client.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: kube.DeviceAllocationName(pod.Spec.NodeName, pod.Name, string(pod.UID))}, da)
		if err == nil && meta.IsStatusConditionTrue(da.Status.Conditions, kdv1alpha1.DeviceAllocationAllocated) {
			continue
		}
		keys = append(keys, client.ObjectKeyFromObject(pod))
	}
	return keys
}
