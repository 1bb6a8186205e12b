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

package injection

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/kubedevice/kubedevice/internal/agent/injection/nri"
	"github.com/kubedevice/kubedevice/internal/agent/kube"
	"github.com/kubedevice/kubedevice/internal/nodeagent"
)

// EventReasonPreStartContainerFailed is the reason of the Warning event on a pod whose device
// plugin's PreStartContainer failed ahead of a start of one of its containers. Its message is the
// kubelet's, "device plugin PreStartContainer rpc failed with err: ...", after the container's
// name. The start waits (its creation is refused) and the call is retried with backoff.
const EventReasonPreStartContainerFailed = "PreStartContainerFailed"

// preStartAllocation is the trigger label of the PreStartContainer calls made at allocation, for
// the first start of the pod's containers.
const preStartAllocation = "allocation"

// Retry delays of a failed PreStartContainer call: doubling from the first to the last.
const (
	retryBaseDelay = time.Second
	retryMaxDelay  = 2 * time.Minute
)

// preStartReconcileTimeout bounds a pod's reconcile, and with it every plugin call and API call
// it makes: PreStartContainer has a 30 s deadline of its own, per resource.
const preStartReconcileTimeout = 2 * time.Minute

// preStartWorkers is the number of pods whose PreStartContainer calls run at once: a plugin that
// hangs (up to the call's 30 s deadline) holds one.
const preStartWorkers = 2

// preStartReconciler calls PreStartContainer ahead of container starts, for the containers whose
// device plugin requires it: the kubelet makes the call inside every container start, restarts
// included, and the agent's NRI hook cannot (see nri.Grants). Keyed by pod namespace/name, it
// runs for a pod when its container statuses change (a container that ended and will be
// restarted is prepared before the kubelet restarts it, so the restart is not refused) and when
// the NRI hook refused a creation for want of a grant; a failed call is retried with backoff.
// The first start of each container is prepared at allocation (PrepareFirstStarts).
type preStartReconciler struct {
	*Injection
	backoff workqueue.TypedRateLimiter[reconcile.Request]
}

func setupPreStart(mgr manager.Manager, x *Injection) error {
	r := &preStartReconciler{
		Injection: x,
		backoff:   workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](retryBaseDelay, retryMaxDelay),
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("pod-prestart").
		For(&corev1.Pod{}, builder.WithPredicates(
			predicate.NewPredicateFuncs(func(o client.Object) bool {
				pod, ok := o.(*corev1.Pod)
				return !ok || len(kube.RequestedResources(pod)) > 0
			}),
			predicate.Funcs{UpdateFunc: containerStatusesChanged},
		)).
		WatchesRawSource(source.Func(r.requests)).
		WithOptions(crcontroller.Options{
			MaxConcurrentReconciles: preStartWorkers,
			NeedLeaderElection:      ptr.To(false),
			ReconciliationTimeout:   preStartReconcileTimeout,
		}).
		Complete(r)
}

// requests hands the controller's queue the requests for PreStartContainer calls that do not
// come from the pod's watch: those of the NRI hook and of allocation (requestPreStart), and those
// of a plugin registering (watchRegistrations).
func (r *preStartReconciler) requests(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	r.preStartQueue.Store(&q)
	r.watchRegistrations(ctx, q)
	return nil
}

// requestPreStart asks for the pod's PreStartContainer calls: the NRI hook refused a creation
// for want of a grant, or the call at allocation failed. It never blocks; before the controller
// runs it does nothing (the kubelet retries the creation, which asks again).
func (x *Injection) requestPreStart(namespace, name string) {
	if q := x.preStartQueue.Load(); q != nil {
		(*q).Add(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: namespace, Name: name}})
	}
}

// Reconcile calls PreStartContainer for each container of the pod whose plugin requires it and
// that nri.Grants.Wants prepared: a creation asked for it, the last call failed, or the pod's
// status shows the container ended and to be restarted. A container that runs is never called
// for.
func (r *preStartReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	if err := r.opts.Gate.Wait(ctx); err != nil {
		return reconcile.Result{}, err
	}
	pod, err := r.pods.Get(ctx, req.Namespace, req.Name)
	if err != nil {
		return reconcile.Result{}, err
	}
	if pod == nil || kube.IsTerminal(pod) || !pod.DeletionTimestamp.IsZero() {
		// The kubelet starts no container of a pod that ends or is being deleted.
		r.backoff.Forget(req)
		return reconcile.Result{}, nil
	}
	alloc, held := r.opts.Core.PodAllocation(string(pod.UID))
	if !held {
		r.backoff.Forget(req)
		return reconcile.Result{}, nil
	}
	ctx = ctrl.LoggerInto(ctx, ctrl.LoggerFrom(ctx).WithValues("pod", klog.KObj(pod), "podUID", pod.UID))
	uid := kube.RuntimeUID(pod)
	failed := false
	for _, ca := range alloc.Containers {
		c := kube.ContainerNamed(pod, ca.Name)
		if c == nil || !r.grants.Required(resourceNames(ca)) {
			continue
		}
		ended := endedContainer(pod, c)
		cause := r.grants.Wants(uid, c.Name, ended)
		if cause == nri.CauseNone {
			continue
		}
		if !r.preStart(ctx, pod, c, string(cause), ended) {
			failed = true
		}
	}
	if failed {
		return reconcile.Result{RequeueAfter: r.backoff.When(req)}, nil
	}
	r.backoff.Forget(req)
	return reconcile.Result{}, nil
}

// preStart calls PreStartContainer for container's next start, prepared for the restart of the
// container ended (empty: a start that follows no ended container), and records a grant; a
// failure is recorded, counted and reported with a Warning event on the pod once per distinct
// error. It reports whether the call succeeded.
func (x *Injection) preStart(ctx context.Context, pod *corev1.Pod, c *corev1.Container, trigger, ended string) bool {
	logger := ctrl.LoggerFrom(ctx).WithValues("container", c.Name, "trigger", trigger)
	for _, res := range kube.ContainerResources(c) {
		if _, known := x.opts.Core.PreStartRequired(res); !known && x.grants.Required([]string{res}) {
			// Restored from the checkpoint, its plugin required PreStartContainer before the
			// agent restarted: the core would skip the call (no options yet, as the kubelet's),
			// so the start waits until the plugin is back.
			msg := fmt.Sprintf("waiting for the device plugin of %s to register again: it requires PreStartContainer", res)
			x.grants.Fail(pod.Namespace, pod.Name, kube.RuntimeUID(pod), c.Name, msg)
			logger.V(1).Info("PreStartContainer waits for the device plugin to register again", "resourceName", res)
			return false
		}
	}
	err := x.opts.Core.PreStartContainer(ctx, pod, c)
	if err == nil {
		preStartCalls.WithLabelValues(trigger, "success").Inc()
		x.grants.Grant(pod.Namespace, pod.Name, kube.RuntimeUID(pod), c.Name, ended)
		logger.V(1).Info("Called PreStartContainer ahead of a container start")
		return true
	}
	preStartCalls.WithLabelValues(trigger, "failure").Inc()
	msg := kube.Truncate(err.Error(), maxPendingReason)
	if x.grants.Fail(pod.Namespace, pod.Name, kube.RuntimeUID(pod), c.Name, msg) {
		note := fmt.Sprintf("container %q: %s", c.Name, msg)
		x.opts.Recorder.Eventf(pod, nil, corev1.EventTypeWarning, EventReasonPreStartContainerFailed, kube.EventAction("PreStartContainer", note), "%s", note)
	}
	logger.V(1).Info("PreStartContainer failed; the container's start waits, retrying", "err", msg)
	return false
}

// PrepareFirstStarts calls PreStartContainer for the first start of each container of a newly
// allocated pod whose plugin requires it, as the kubelet does before that start, and records the
// grants the NRI hook admits the containers by. A container that already has a record (the
// DeviceAllocation write failed after an earlier call) is left to the PreStartContainer
// controller: it may run. A failed call does not fail the allocation: the container's creation
// waits while the PreStartContainer controller retries it.
func (x *Injection) PrepareFirstStarts(ctx context.Context, pod *corev1.Pod, alloc nodeagent.PodAllocation) {
	uid := kube.RuntimeUID(pod)
	for _, ca := range alloc.Containers {
		resources := resourceNames(ca)
		for _, res := range resources {
			// The core says it first: the NodeDevice mirror records it a moment later.
			x.RefreshPreStart(res)
		}
		c := kube.ContainerNamed(pod, ca.Name)
		if c == nil || !x.grants.Required(resources) || x.grants.Has(uid, c.Name) {
			continue
		}
		if !x.preStart(ctx, pod, c, preStartAllocation, "") {
			x.requestPreStart(pod.Namespace, pod.Name)
		}
	}
}

// resourceNames returns the resources of a container's devices.
func resourceNames(c nodeagent.ContainerAllocation) []string {
	out := make([]string, len(c.Resources))
	for i, r := range c.Resources {
		out[i] = r.ResourceName
	}
	return out
}

// endedContainer identifies, from the pod's status, the container c that ended and that the
// kubelet will restart: its runtime ID (or, without one, its name and restart count). Empty when
// c runs, has not run yet, or will not be restarted.
func endedContainer(pod *corev1.Pod, c *corev1.Container) string {
	init := slices.ContainsFunc(pod.Spec.InitContainers, func(ic corev1.Container) bool { return ic.Name == c.Name })
	statuses := pod.Status.ContainerStatuses
	if init {
		statuses = pod.Status.InitContainerStatuses
	}
	i := slices.IndexFunc(statuses, func(s corev1.ContainerStatus) bool { return s.Name == c.Name })
	if i < 0 {
		return ""
	}
	st := &statuses[i]
	var t *corev1.ContainerStateTerminated
	switch {
	case st.State.Terminated != nil:
		t = st.State.Terminated
	case st.State.Waiting != nil:
		// Waiting to be restarted (CrashLoopBackOff, or a creation that failed) after it ended.
		t = st.LastTerminationState.Terminated
	}
	if t == nil || !restarts(pod, c, init, t.ExitCode) {
		return ""
	}
	if id := nri.RuntimeContainerID(t.ContainerID); id != "" {
		return id
	}
	return fmt.Sprintf("%s/%d", c.Name, st.RestartCount)
}

// restarts reports whether the kubelet restarts container c after it exited with exitCode: a
// sidecar (restartable init container) always; a regular init container after a failure unless
// the pod's restartPolicy is Never; a regular container by its own restartPolicy if it has one,
// else the pod's. The per-exit-code rules of container restart policies are not evaluated: a
// restart they decide is prepared when its creation asks.
func restarts(pod *corev1.Pod, c *corev1.Container, init bool, exitCode int32) bool {
	if init {
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			return true
		}
		return exitCode != 0 && pod.Spec.RestartPolicy != corev1.RestartPolicyNever
	}
	policy := pod.Spec.RestartPolicy
	if c.RestartPolicy != nil {
		policy = corev1.RestartPolicy(*c.RestartPolicy)
	}
	switch policy {
	case corev1.RestartPolicyAlways:
		return true
	case corev1.RestartPolicyOnFailure:
		return exitCode != 0
	default:
		return false
	}
}

// containerStatusesChanged passes the pod updates that may show a container ending or starting:
// a change of any container status's state, last state or restart count.
func containerStatusesChanged(e event.UpdateEvent) bool {
	oldPod, okOld := e.ObjectOld.(*corev1.Pod)
	newPod, okNew := e.ObjectNew.(*corev1.Pod)
	if !okOld || !okNew {
		return true
	}
	return !sameStarts(oldPod.Status.InitContainerStatuses, newPod.Status.InitContainerStatuses) ||
		!sameStarts(oldPod.Status.ContainerStatuses, newPod.Status.ContainerStatuses)
}

func sameStarts(a, b []corev1.ContainerStatus) bool {
	return slices.EqualFunc(a, b, func(x, y corev1.ContainerStatus) bool {
		return x.Name == y.Name && x.RestartCount == y.RestartCount &&
			equality.Semantic.DeepEqual(x.State, y.State) && equality.Semantic.DeepEqual(x.LastTerminationState, y.LastTerminationState)
	})
}
