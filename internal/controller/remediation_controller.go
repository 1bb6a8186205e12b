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
	"errors"
	"flag"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
	"github.com/kubedevice/kubedevice/internal/indexer"
	"github.com/kubedevice/kubedevice/internal/remediation"
)

const (
	// DefaultRemediationNodeInterval spaces the remediation policy's evictions on one node.
	DefaultRemediationNodeInterval = 5 * time.Minute
	// DefaultRemediationClusterInterval spaces them in the whole cluster.
	DefaultRemediationClusterInterval = 30 * time.Second

	// remediationBlockedRetry is when an eviction a PodDisruptionBudget refused is asked again.
	remediationBlockedRetry = 30 * time.Second

	// EventReasonEvictedUnhealthyDevice: the remediation policy evicted a pod holding a device that
	// stayed unhealthy past the resource's grace period (on the pod and on the NodeDevice).
	EventReasonEvictedUnhealthyDevice = "EvictedForUnhealthyDevice"
	// EventReasonRemediationBlocked: the Eviction API refused that eviction (a
	// PodDisruptionBudget); it is asked again later.
	EventReasonRemediationBlocked = "RemediationEvictionBlocked"
)

// RemediationOptions configure the remediation policy for pods on unhealthy devices. It is off
// unless Policy names a resource.
type RemediationOptions struct {
	// Policy is each remediated resource's grace period.
	Policy remediation.Policy
	// NodeInterval and ClusterInterval space the evictions on one node and in the cluster; zero
	// means the defaults.
	NodeInterval, ClusterInterval time.Duration
}

// AddFlags registers the policy's flags on fs, bound to o.
func (o *RemediationOptions) AddFlags(fs *flag.FlagSet) {
	fs.Var(&o.Policy, "remediate",
		"Evict the pods holding a device of RESOURCE that stayed unhealthy for GRACE (RESOURCE=GRACE, e.g. example.com/gopher=5m; repeatable, one per resource), "+
			"through the Eviction API, so PodDisruptionBudgets hold. Off for every resource it does not name.")
	fs.DurationVar(&o.NodeInterval, "remediation-node-interval", DefaultRemediationNodeInterval,
		"At most one --remediate eviction per node in this interval.")
	fs.DurationVar(&o.ClusterInterval, "remediation-cluster-interval", DefaultRemediationClusterInterval,
		"At most one --remediate eviction in the whole cluster in this interval, so a plugin flapping on every node cannot evict a fleet.")
}

var errRemediationInterval = errors.New("the remediation intervals must not be negative")

func (o RemediationOptions) complete() (RemediationOptions, error) {
	if o.NodeInterval < 0 || o.ClusterInterval < 0 {
		return o, fmt.Errorf("%w: node %s, cluster %s", errRemediationInterval, o.NodeInterval, o.ClusterInterval)
	}
	if o.NodeInterval == 0 {
		o.NodeInterval = DefaultRemediationNodeInterval
	}
	if o.ClusterInterval == 0 {
		o.ClusterInterval = DefaultRemediationClusterInterval
	}
	return o, nil
}

// remediationReconciler evicts, per NodeDevice of a remediated resource, the holders of each device
// unhealthy for longer than the resource's grace period (from the device's lastTransitionTime, by
// the controller's clock), at the pace of limits. A device healthy again, or a NodeDevice whose
// agent is not ready (its status may be stale), evicts nothing.
type remediationReconciler struct {
	client    client.Client
	apiReader client.Reader
	clock     clock.Clock
	recorder  recorder.EventRecorder
	policy    remediation.Policy
	limits    *remediation.Limits
}

// setupRemediation adds the remediation controller to mgr when the policy names a resource.
func setupRemediation(mgr ctrl.Manager, opts Options, ctrlOpts crcontroller.Options, rec recorder.EventRecorder) error {
	if len(opts.Remediation.Policy) == 0 {
		return nil
	}
	r := &remediationReconciler{
		client:    mgr.GetClient(),
		apiReader: mgr.GetAPIReader(),
		clock:     opts.Clock,
		recorder:  rec,
		policy:    opts.Remediation.Policy,
		limits:    remediation.NewLimits(opts.Remediation.NodeInterval, opts.Remediation.ClusterInterval),
	}
	if err := r.setupWithManager(mgr, ctrlOpts); err != nil {
		return fmt.Errorf("setting up the remediation controller: %w", err)
	}
	return nil
}

func (r *remediationReconciler) setupWithManager(mgr ctrl.Manager, opts crcontroller.Options) error {
	remediated := predicate.NewPredicateFuncs(func(o client.Object) bool {
		nd, ok := o.(*kdv1alpha1.NodeDevice)
		if !ok {
			return false
		}
		_, on := r.policy[nd.Spec.ResourceName]
		return on
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("remediation").
		For(&kdv1alpha1.NodeDevice{}, builder.WithPredicates(remediated)).
		WithOptions(opts).
		Complete(r)
}

// Reconcile evicts the holders of the NodeDevice's devices unhealthy past the grace period, and
// comes back when the next one's grace period ends or the limits allow the next eviction.
func (r *remediationReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	nd := &kdv1alpha1.NodeDevice{}
	if err := r.client.Get(ctx, req.NamespacedName, nd); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	grace, on := r.policy[nd.Spec.ResourceName]
	if !on || !nd.DeletionTimestamp.IsZero() || meta.IsStatusConditionFalse(nd.Status.Conditions, kdv1alpha1.NodeDeviceAgentReady) {
		return ctrl.Result{}, nil
	}
	var next time.Duration
	for i := range nd.Status.Devices {
		d := &nd.Status.Devices[i]
		if d.Health != kdv1alpha1.DeviceUnhealthy || d.LastTransitionTime == nil {
			continue
		}
		wait := d.LastTransitionTime.Add(grace).Sub(r.clock.Now())
		if wait <= 0 {
			var err error
			if wait, err = r.remediate(ctx, nd, d, grace); err != nil {
				return ctrl.Result{}, err
			}
		}
		if wait > 0 && (next == 0 || wait < next) {
			next = wait
		}
	}
	return ctrl.Result{RequeueAfter: next}, nil
}

// remediate evicts the holders of device d; it returns how long until it should try again (zero:
// nothing left to do).
func (r *remediationReconciler) remediate(ctx context.Context, nd *kdv1alpha1.NodeDevice, d *kdv1alpha1.DeviceStatus, grace time.Duration) (time.Duration, error) {
	das := &kdv1alpha1.DeviceAllocationList{}
	key := indexer.DeviceKey(nd.Spec.NodeName, nd.Spec.ResourceName, d.ID)
	if err := r.client.List(ctx, das, client.MatchingFields{indexer.DeviceAllocationLiveDevice: key}); err != nil {
		return 0, err
	}
	var next time.Duration
	for _, h := range remediation.HoldersIn(das.Items, nd.Spec.NodeName, nd.Spec.ResourceName, []string{d.ID}) {
		wait, err := r.evict(ctx, nd, d, h, grace)
		if err != nil {
			return 0, err
		}
		if wait > 0 && (next == 0 || wait < next) {
			next = wait
		}
	}
	return next, nil
}

// evict evicts the holder h of device d if it still runs and the limits allow, and reports it.
func (r *remediationReconciler) evict(ctx context.Context, nd *kdv1alpha1.NodeDevice, d *kdv1alpha1.DeviceStatus, h remediation.Holder, grace time.Duration) (time.Duration, error) {
	pod := &corev1.Pod{}
	if err := r.apiReader.Get(ctx, client.ObjectKey{Namespace: h.Namespace, Name: h.Name}, pod); err != nil {
		return 0, client.IgnoreNotFound(err)
	}
	if pod.UID != h.UID || !pod.DeletionTimestamp.IsZero() || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return 0, nil
	}
	now := r.clock.Now()
	wait, giveBack := r.limits.Reserve(nd.Spec.NodeName, now)
	if wait > 0 {
		return wait, nil
	}
	eviction := &policyv1.Eviction{
		ObjectMeta:    metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace},
		DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &pod.UID}},
	}
	err := r.client.SubResource("eviction").Create(ctx, pod, eviction)
	if err != nil {
		giveBack(now)
	}
	return r.report(ctx, nd, d, pod, grace, err)
}

// report counts and tells what came of an eviction: the metric, and events on the pod and the
// NodeDevice.
func (r *remediationReconciler) report(ctx context.Context, nd *kdv1alpha1.NodeDevice, d *kdv1alpha1.DeviceStatus, pod *corev1.Pod, grace time.Duration, err error) (time.Duration, error) {
	logger := ctrl.LoggerFrom(ctx).WithValues("pod", client.ObjectKeyFromObject(pod), "device", d.ID)
	why := fmt.Sprintf("device %s of %s on node %s has been unhealthy since %s (%s), longer than the remediation grace period %s",
		d.ID, nd.Spec.ResourceName, nd.Spec.NodeName, d.LastTransitionTime.UTC().Format(time.RFC3339), d.Reason, grace)
	count := func(result string) {
		remediationEvictions.WithLabelValues(nd.Spec.NodeName, nd.Spec.ResourceName, result).Inc()
	}
	switch {
	case err == nil:
		count("evicted")
		logger.Info("Evicted a pod holding an unhealthy device", "why", why)
		r.recorder.Eventf(pod, nd, corev1.EventTypeWarning, EventReasonEvictedUnhealthyDevice, "Evict", "Evicted: %s", why)
		r.recorder.Eventf(nd, pod, corev1.EventTypeWarning, EventReasonEvictedUnhealthyDevice, "Evict", "Evicted pod %s/%s: %s", pod.Namespace, pod.Name, why)
		return 0, nil
	case apierrors.IsTooManyRequests(err):
		count("blocked")
		logger.Info("An eviction for an unhealthy device was refused; asking again later", "err", err.Error(), "retryIn", remediationBlockedRetry)
		r.recorder.Eventf(pod, nd, corev1.EventTypeWarning, EventReasonRemediationBlocked, "Evict", "Eviction refused (%v), asked again in %s: %s", err, remediationBlockedRetry, why)
		return remediationBlockedRetry, nil
	case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		return 0, nil // gone, or another pod of the same name now
	default:
		count("error")
		return 0, fmt.Errorf("evicting pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
}
