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
	"slices"

	ctrl "sigs.k8s.io/controller-runtime"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
	"github.com/kubedevice/kubedevice/internal/agent/kube"
	"github.com/kubedevice/kubedevice/internal/crashpoint"
	"github.com/kubedevice/kubedevice/internal/nodeagent"
)

// outcome is what the core answered for a pod: what the pod holds (nil: nothing) and why its
// devices were refused (nil: they were not).
type outcome struct {
	alloc *nodeagent.PodAllocation
	err   error
	// prepared is set when the attempt allocated the pod's devices and made the PreStartContainer
	// calls of their first starts (successful or not: a failed call is the PreStartContainer
	// controller's to retry).
	prepared bool
}

// allocate takes an active pod that asks for extended resources through its devices: allocated
// by the core, prepared for their first start, told to runtime injection, and mirrored into the
// pod's DeviceAllocation (a refusal reported with a Warning event once the DeviceAllocation says
// it). The DeviceAllocation's status is computed once; each object it is compared with only
// stamps it with its transition times.
func (r *reconciler) allocate(ctx context.Context, req reconcile.Request, pod *corev1.Pod, cached *kdv1alpha1.DeviceAllocation) (reconcile.Result, error) {
	if r.refuseDeleting(pod) {
		return reconcile.Result{}, nil
	}
	out, ok := r.attempts.take(ctx, pod)
	if !ok {
		// Allocating, or waiting for room on a resource: the pod is requeued when that ends.
		return reconcile.Result{}, nil
	}
	// Devices the pod holds through DRA claims are shown in its DeviceAllocation too, but never
	// injected nor prepared here: the kubelet gives them through CDI.
	claims := claimDevices(r.Core.ClaimNamed, pod)
	if out.err == nil && out.alloc == nil && claims == nil && cached == nil {
		// The pod holds nothing from a device plugin: nothing to record.
		r.Injection.Record(pod, nil, nil)
		return reconcile.Result{}, nil
	}

	want := desiredStatus(pod, withClaims(out.alloc, claims), out.err, r.Clock.Now())
	current, upToDate, err := kube.Fresh(ctx, r.apiReader, r.written, kube.DeviceAllocationGVK.Kind,
		client.ObjectKey{Namespace: pod.Namespace, Name: kube.DeviceAllocationName(pod.Spec.NodeName, pod.Name, string(pod.UID))}, cached,
		func(da *kdv1alpha1.DeviceAllocation) bool {
			return metaUpToDate(da, pod) && statusUpToDate(da, r.stamp(want, da))
		})
	if err != nil {
		return reconcile.Result{}, err
	}
	if !upToDate && out.err == nil && out.alloc != nil && !out.prepared && !preStartDone(current, want) {
		// Allocated, and neither prepared by the attempt nor recorded (an agent restart between
		// the allocation and its DeviceAllocation): prepare the first start of the containers
		// whose plugin requires PreStartContainer.
		r.PreStart.PrepareFirstStarts(ctx, pod, *out.alloc)
	}
	// The devices are allocated and prepared (or refused): containers may be created with them,
	// whether or not the API server takes the DeviceAllocation.
	r.Injection.Record(pod, out.alloc, out.err)
	if upToDate {
		return r.requeue(ctx, req, out.err), nil
	}
	refused := refusedAlready(current, pod)
	if out.err != nil && refused {
		// Another refusal of a pod already refused: written no more often than its pace allows.
		if wait := r.refusals.wait(req.NamespacedName, pod.UID); wait > 0 {
			res := r.requeue(ctx, req, out.err)
			if res.RequeueAfter == 0 || wait < res.RequeueAfter {
				res.RequeueAfter = wait
			}
			return res, nil
		}
	}
	if err := r.record(ctx, pod, current, want, out); err != nil {
		return reconcile.Result{}, err
	}
	if out.err != nil {
		r.refusals.wrote(req.NamespacedName, pod.UID, !refused)
	} else {
		r.refusals.forget(req.NamespacedName)
	}
	return r.requeue(ctx, req, out.err), nil
}

// refusedAlready reports whether current, pod's DeviceAllocation as last read, already says a
// refusal (Allocated=False) with the metadata the agent applies for pod.
func refusedAlready(current *kdv1alpha1.DeviceAllocation, pod *corev1.Pod) bool {
	if current == nil || !metaUpToDate(current, pod) {
		return false
	}
	return meta.IsStatusConditionFalse(current.Status.Conditions, kdv1alpha1.DeviceAllocationAllocated)
}

// refuseDeleting reports whether pod is being deleted and does not hold its devices: the kubelet
// admits no pod being deleted, so its containers are held and nothing is allocated, whether or
// not an earlier allocation was refused (a refused pod is retriggered when devices are freed).
// Its DeviceAllocation, if any, keeps saying why it was refused.
func (r *reconciler) refuseDeleting(pod *corev1.Pod) bool {
	if pod.DeletionTimestamp.IsZero() {
		return false
	}
	if _, held := r.Core.PodAllocation(string(pod.UID)); held {
		return false
	}
	if slices.ContainsFunc(kube.RequestedResources(pod), r.Injection.Serves) {
		r.Injection.Hold(pod, "the pod is being deleted; its devices were never allocated")
	} else {
		r.Injection.Record(pod, nil, nil)
	}
	return true
}

// record writes pod's DeviceAllocation, current (nil: none yet) not saying what want says: its
// metadata, spec and status (want with its devices' health, stamped for the object) in one apply;
// a change of a device's health and a refusal newly recorded are reported.
func (r *reconciler) record(ctx context.Context, pod *corev1.Pod, current *kdv1alpha1.DeviceAllocation,
	want kdv1alpha1.DeviceAllocationStatus, out outcome) error {
	st := r.stamp(want, current)
	r.written.Wrote(client.ObjectKey{Namespace: pod.Namespace, Name: kube.DeviceAllocationName(pod.Spec.NodeName, pod.Name, string(pod.UID))})
	da, err := kube.WriteDeviceAllocation(ctx, r.client, pod, st)
	if err != nil {
		return err
	}
	r.reportHealth(pod, current, st, out.alloc)
	if out.err == nil {
		crashpoint.Hit(crashpoint.DeviceAllocationWritten)
		ctrl.LoggerFrom(ctx).Info("Recorded the pod's devices", "deviceAllocation", da.Name, "summary", st.Summary, "allocated", true)
		return nil
	}
	ctrl.LoggerFrom(ctx).Info("Recorded the pod's devices", "deviceAllocation", da.Name, "summary", st.Summary, "allocated", false,
		"reason", nodeagent.AllocationReasonOf(out.err), "err", out.err.Error())
	if conditionChanged(current, st, kdv1alpha1.DeviceAllocationAllocated) {
		r.reportRefusal(pod, out.err)
	}
	return nil
}

// reportRefusal counts a refusal the DeviceAllocation now says and reports it with a Warning
// event on the pod, an event of its own for each distinct refusal.
func (r *reconciler) reportRefusal(pod *corev1.Pod, allocErr error) {
	allocationFailures.WithLabelValues(string(nodeagent.AllocationReasonOf(allocErr))).Inc()
	note := allocErr.Error()
	r.Recorder.Eventf(pod, nil, corev1.EventTypeWarning, kdv1alpha1.EventReasonDeviceAllocationFailed, kube.EventAction("AllocateDevices", note), "%s", note)
}

// requeue ends a reconcile of an active pod: a retryable refusal comes back with backoff;
// anything else is done (a refused pod is retriggered by any change of a resource it asks for).
func (r *reconciler) requeue(ctx context.Context, req reconcile.Request, allocErr error) reconcile.Result {
	logger := ctrl.LoggerFrom(ctx)
	if allocErr == nil {
		r.backoff.Forget(req)
		return reconcile.Result{}
	}
	if nodeagent.IsRetryable(allocErr) {
		wait := r.backoff.When(req)
		logger.V(1).Info("Allocation refused, retrying", "reason", nodeagent.AllocationReasonOf(allocErr), "after", wait, "err", allocErr.Error())
		return reconcile.Result{RequeueAfter: wait}
	}
	// Not retried on a timer: a change of any resource the pod asks for retriggers it.
	r.backoff.Forget(req)
	logger.V(1).Info("Allocation refused", "reason", nodeagent.AllocationReasonOf(allocErr), "err", allocErr.Error())
	return reconcile.Result{}
}

// metaUpToDate compares the metadata and spec the agent applies for a pod's DeviceAllocation
// (package kube, shared with the observe flow).
var metaUpToDate = kube.DeviceAllocationMetaUpToDate
