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

package observe

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
	"github.com/kubedevice/kubedevice/internal/agent/kube"
	"github.com/kubedevice/kubedevice/internal/indexer"
	"github.com/kubedevice/kubedevice/internal/nodeagent"
)

// allocationReconcileTimeout bounds a pod's reconcile, and with it every call it makes.
const allocationReconcileTimeout = 30 * time.Second

// allocations mirrors the kubelet's allocations into DeviceAllocations: one per active pod whose
// containers hold observed devices, written as the allocation flow writes its own (package kube
// computes the status the same way, the devices' health included; only the Allocated condition's
// message says who allocated), released and deleted when the pod ends or goes. Keyed by pod
// namespace/name.
type allocations struct {
	observer  *Observer
	client    client.Client
	apiReader client.Reader
	pods      kube.Pods
	// health is the health of the observed devices, as the Observer last announced it.
	health *kube.HealthView
}

func setupAllocations(mgr ctrl.Manager, o *Observer) error {
	r := &allocations{
		observer:  o,
		client:    mgr.GetClient(),
		apiReader: mgr.GetAPIReader(),
		pods:      kube.Pods{Client: mgr.GetClient(), NodeName: o.opts.NodeName},
		health:    kube.NewHealthView(o.Snapshot),
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("observed-pod-devices").
		For(&corev1.Pod{}, builder.WithPredicates(predicate.Funcs{UpdateFunc: kube.PodPhaseOrDeletionChanged})).
		Watches(&kdv1alpha1.DeviceAllocation{}, handler.EnqueueRequestsFromMapFunc(kube.PodOfDeviceAllocation)).
		WatchesRawSource(source.Func(r.watchObserver)).
		WithOptions(crcontroller.Options{
			MaxConcurrentReconciles: 2,
			NeedLeaderElection:      ptr.To(false),
			ReconciliationTimeout:   allocationReconcileTimeout,
		}).
		Complete(r)
}

// Reconcile releases the DeviceAllocations of the pods named req but the active one, and makes
// the active pod's say what the kubelet says it holds.
func (r *allocations) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	if err := r.observer.opts.Gate.Wait(ctx); err != nil {
		return reconcile.Result{}, err
	}
	pod, err := r.pods.Get(ctx, req.Namespace, req.Name)
	if err != nil {
		return reconcile.Result{}, err
	}
	active := pod != nil && !kube.IsTerminal(pod)
	das := &kdv1alpha1.DeviceAllocationList{}
	if err := r.client.List(ctx, das, client.InNamespace(req.Namespace), client.MatchingFields{indexer.DeviceAllocationPodName: req.Name}); err != nil {
		return reconcile.Result{}, fmt.Errorf("listing the DeviceAllocations of pod %s: %w", req.NamespacedName, err)
	}
	now := r.observer.opts.Clock.Now()
	var cached *kdv1alpha1.DeviceAllocation
	for i := range das.Items {
		da := &das.Items[i]
		if da.Spec.NodeName != r.observer.opts.NodeName {
			continue
		}
		if active && da.Spec.PodUID == string(pod.UID) {
			cached = da
			continue
		}
		reason, message := kdv1alpha1.ReasonPodDeleted, fmt.Sprintf("Pod %s no longer exists; the kubelet freed its devices.", klog.KRef(da.Namespace, da.Spec.PodName))
		if pod != nil && da.Spec.PodUID == string(pod.UID) {
			reason, message = kdv1alpha1.ReasonPodTerminated, fmt.Sprintf("Pod %s is %s; the kubelet frees its devices.", klog.KObj(pod), pod.Status.Phase)
		}
		if err := kube.ReleaseDeviceAllocation(ctx, r.client, r.apiReader, nil, da, reason, message, now); err != nil {
			return reconcile.Result{}, err
		}
	}
	if !active {
		return reconcile.Result{}, nil
	}
	alloc, ok := r.observer.PodAllocation(string(pod.UID))
	if !ok && slices.ContainsFunc(kube.RequestedResources(pod), r.observer.opts.allow) && pod.Status.Phase == corev1.PodRunning {
		// Not in the last reading: ask the kubelet for this pod now rather than at the next.
		if alloc, ok, err = r.observer.getPod(ctx, pod); err != nil {
			ctrl.LoggerFrom(ctx).V(1).Info("The kubelet does not list the pod's devices yet", "err", err.Error())
			ok = false
		}
	}
	if !ok {
		// The kubelet lists nothing the agent observes for the pod; a DeviceAllocation written
		// before stays until the pod ends, as the kubelet keeps a pod's devices until then.
		return reconcile.Result{}, nil
	}
	return reconcile.Result{}, r.record(ctx, pod, cached, alloc, now)
}

// record writes pod's DeviceAllocation when it does not say alloc, and the health of its devices,
// yet: metadata, spec and status in one apply.
func (r *allocations) record(ctx context.Context, pod *corev1.Pod, cached *kdv1alpha1.DeviceAllocation, alloc nodeagent.PodAllocation, now time.Time) error {
	want := observedStatus(pod, &alloc, now)
	name := kube.DeviceAllocationName(pod.Spec.NodeName, pod.Name, string(pod.UID))
	current, upToDate, err := kube.Fresh(ctx, r.apiReader, nil, kube.DeviceAllocationGVK.Kind, client.ObjectKey{Namespace: pod.Namespace, Name: name}, cached,
		func(da *kdv1alpha1.DeviceAllocation) bool {
			return kube.DeviceAllocationMetaUpToDate(da, pod) &&
				kube.DeviceAllocationStatusUpToDate(da, r.stamp(want, da, now))
		})
	if err != nil || upToDate {
		return err
	}
	st := r.stamp(want, current, now)
	if _, err := kube.WriteDeviceAllocation(ctx, r.client, pod, st); err != nil {
		return err
	}
	ctrl.LoggerFrom(ctx).Info("Recorded the pod's observed devices", "deviceAllocation", name, "summary", st.Summary)
	return nil
}

// stamp returns want, with the health of the devices it lists, stamped for the object current
// (nil: none yet): what the pod's DeviceAllocation must say.
func (r *allocations) stamp(want kdv1alpha1.DeviceAllocationStatus, current *kdv1alpha1.DeviceAllocation, now time.Time) kdv1alpha1.DeviceAllocationStatus {
	return kube.StampDeviceAllocation(r.health.WithHealth(want, current, now), current)
}

// observedStatus is the status of the DeviceAllocation of a pod holding alloc, as the kubelet
// allocated it.
func observedStatus(pod *corev1.Pod, alloc *nodeagent.PodAllocation, now time.Time) kdv1alpha1.DeviceAllocationStatus {
	st := kdv1alpha1.DeviceAllocationStatus{Containers: kube.DeviceAllocationContainers(pod, alloc)}
	st.Summary = kube.DeviceAllocationSummary(st.Containers)
	st.Conditions = []metav1.Condition{{
		Type:               kdv1alpha1.DeviceAllocationAllocated,
		Status:             metav1.ConditionTrue,
		Reason:             kdv1alpha1.ReasonAllocated,
		Message:            fmt.Sprintf("The kubelet allocated the pod's %d devices on node %s (observed).", kube.DeviceCount(st.Containers), pod.Spec.NodeName),
		LastTransitionTime: metav1.NewTime(now.Truncate(time.Second)),
	}}
	return st
}

// watchObserver queues, until ctx ends, the pods whose observed devices changed, and, whenever
// the Observer announces that resources changed, the pods whose DeviceAllocation does not show the
// health of the devices they hold any more (kube.HealthView.Changed): a device no pod holds, or
// a reading that changed nothing, queues none.
func (r *allocations) watchObserver(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	sub := r.observer.Subscribe()
	go func() {
		defer sub.Close()
		for {
			select {
			case <-ctx.Done():
				return
			case key := <-r.observer.podChanges:
				q.Add(reconcile.Request{NamespacedName: key})
			case <-sub.Ready():
				if err := r.observer.opts.Gate.Wait(ctx); err != nil {
					return
				}
				for _, key := range r.health.Changed(ctx, r.client, r.observer.opts.NodeName, sub.Changed(), r.observer.opts.Clock.Now()) {
					q.Add(reconcile.Request{NamespacedName: key})
				}
			}
		}
	}()
	return nil
}
