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

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
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
	"github.com/kubedevice/kubedevice/internal/contract"
	"github.com/kubedevice/kubedevice/internal/indexer"
)

// EventReasonDeviceClassConflict is the reason of the Warning event on a resource's DRA-served
// NodeDevices when kubedevice cannot keep the resource's DeviceClass: another DeviceClass already
// serves the resource name, or holds the name kubedevice's would have.
const EventReasonDeviceClassConflict = "DeviceClassConflict"

// deviceClassReconciler keeps one DeviceClass per extended resource that some node serves
// through DRA (a NodeDevice with status.path DRA), and deletes it when no node does any more.
// Keyed by resource name (the request's Name). The controller owns DeviceClasses, not the
// agents: a DeviceClass is cluster-scoped and shared by every node serving the resource, so no
// node's agent may write it (an agent writes only its own node's objects), and it must outlive
// any one node.
type deviceClassReconciler struct {
	client   client.Client
	recorder recorder.EventRecorder
}

func (r *deviceClassReconciler) setupWithManager(mgr ctrl.Manager, opts crcontroller.Options) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("deviceclass").
		Watches(&kdv1alpha1.NodeDevice{},
			handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
				return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: o.(*kdv1alpha1.NodeDevice).Spec.ResourceName}}}
			}),
			builder.WithPredicates(nodeDevicePathChanged())).
		Watches(&resourcev1.DeviceClass{},
			handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
				return resourcesOfDeviceClass(o.(*resourcev1.DeviceClass))
			})).
		WithOptions(opts).
		Complete(r)
}

// Reconcile creates or restores the resource's DeviceClass while a node serves it through DRA,
// and deletes it once none does.
func (r *deviceClassReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	resourceName := req.Name
	logger := ctrl.LoggerFrom(ctx).WithValues("resource", resourceName)
	nds := &kdv1alpha1.NodeDeviceList{}
	if err := r.client.List(ctx, nds, client.MatchingFields{indexer.NodeDeviceResourceName: resourceName}); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing the NodeDevices of resource %q: %w", resourceName, err)
	}
	name := deviceClassName(resourceName)
	existing := &resourcev1.DeviceClass{}
	err := r.client.Get(ctx, client.ObjectKey{Name: name}, existing)
	switch {
	case apierrors.IsNotFound(err):
		existing = nil
	case err != nil:
		return ctrl.Result{}, fmt.Errorf("getting DeviceClass %q: %w", name, err)
	}

	if !servedThroughDRA(nds.Items) {
		if existing == nil || !managedFor(existing, resourceName) {
			return ctrl.Result{}, nil
		}
		err := r.client.Delete(ctx, existing, client.Preconditions{UID: &existing.UID})
		if client.IgnoreNotFound(err) != nil {
			return ctrl.Result{}, fmt.Errorf("deleting DeviceClass %q: %w", name, err)
		}
		logger.Info("Deleted the DeviceClass of a resource no node serves through DRA any more", "deviceClass", name)
		return ctrl.Result{}, nil
	}

	if conflict, err := r.conflict(ctx, resourceName, existing); err != nil || conflict != "" {
		if conflict != "" {
			logger.Info("Not keeping the resource's DeviceClass", "reason", conflict)
			r.warn(nds.Items, conflict)
		}
		return ctrl.Result{}, err
	}
	if existing != nil && upToDate(existing, resourceName) {
		return ctrl.Result{}, nil
	}
	if err := r.client.Apply(ctx, desiredDeviceClass(resourceName), client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
		return ctrl.Result{}, fmt.Errorf("applying DeviceClass %q: %w", name, err)
	}
	logger.Info("Applied the DeviceClass of a resource served through DRA", "deviceClass", name)
	return ctrl.Result{}, nil
}

// conflict says why kubedevice must not keep the resource's DeviceClass, or "" when it may: the
// class's name is held by a DeviceClass kubedevice does not keep for this resource, or another
// DeviceClass already declares the resource as its extendedResourceName (an administrator's own
// class wins; two would leave the scheduler to pick one).
func (r *deviceClassReconciler) conflict(ctx context.Context, resourceName string, existing *resourcev1.DeviceClass) (string, error) {
	if existing != nil && !managedFor(existing, resourceName) {
		return fmt.Sprintf("DeviceClass %s exists and is not kubedevice's class for %s", existing.Name, resourceName), nil
	}
	classes := &resourcev1.DeviceClassList{}
	if err := r.client.List(ctx, classes); err != nil {
		return "", fmt.Errorf("listing DeviceClasses: %w", err)
	}
	for i := range classes.Items {
		dc := &classes.Items[i]
		if ptr.Deref(dc.Spec.ExtendedResourceName, "") == resourceName && !managedFor(dc, resourceName) {
			return fmt.Sprintf("DeviceClass %s already serves extended resource %s", dc.Name, resourceName), nil
		}
	}
	return "", nil
}

// warn records the conflict as a Warning event on the resource's DRA-served NodeDevices, where
// `kubectl describe nodedevice` shows it.
func (r *deviceClassReconciler) warn(nds []kdv1alpha1.NodeDevice, message string) {
	for i := range nds {
		if nds[i].DeletionTimestamp.IsZero() && nds[i].Status.EffectivePath() == kdv1alpha1.DevicePathDRA {
			r.recorder.Eventf(&nds[i], nil, corev1.EventTypeWarning, EventReasonDeviceClassConflict, "KeepDeviceClass", "%s", message)
		}
	}
}

// upToDate reports whether dc already is the class desiredDeviceClass describes, so a steady
// state writes nothing.
func upToDate(dc *resourcev1.DeviceClass, resourceName string) bool {
	spec := dc.Spec
	return managedFor(dc, resourceName) && ptr.Deref(spec.ExtendedResourceName, "") == resourceName &&
		len(spec.Selectors) == 1 && spec.Selectors[0].CEL != nil &&
		spec.Selectors[0].CEL.Expression == deviceSelector(resourceName) && len(spec.Config) == 0
}

// resourcesOfDeviceClass maps a DeviceClass to the resources whose class it is or may conflict
// with: the resource kubedevice keeps it for, and the extended resource it declares.
func resourcesOfDeviceClass(dc *resourcev1.DeviceClass) []reconcile.Request {
	var reqs []reconcile.Request
	seen := map[string]bool{}
	for _, name := range []string{dc.Annotations[contract.DeviceClassResourceAnnotation], ptr.Deref(dc.Spec.ExtendedResourceName, "")} {
		if name != "" && !seen[name] {
			seen[name] = true
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Name: name}})
		}
	}
	return reqs
}

// nodeDevicePathChanged passes NodeDevice events that can change whether a node serves the
// resource through DRA: creation, deletion, the start of a deletion and a changed path.
func nodeDevicePathChanged() predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		oldND, okOld := e.ObjectOld.(*kdv1alpha1.NodeDevice)
		newND, okNew := e.ObjectNew.(*kdv1alpha1.NodeDevice)
		if !okOld || !okNew {
			return true
		}
		return oldND.Status.EffectivePath() != newND.Status.EffectivePath() ||
			oldND.DeletionTimestamp.IsZero() != newND.DeletionTimestamp.IsZero()
	}}
}
