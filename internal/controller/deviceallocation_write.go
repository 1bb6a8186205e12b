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
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
)

// writeConflict makes da's Conflict condition want, or removes it when want is nil, in one write
// to the DeviceAllocation itself (it has no status subresource; the agent writes the rest of it).
//
// A Conflict is applied server-side under the controller's field manager: conditions are a list
// keyed by type, so the agent's applies (Allocated, Released) and the controller's own each the
// entries they apply and leave the other's alone. The apply names da's UID, so it never lands on
// another object of the same name, nor creates one once da is gone (the API server refuses the
// UID of an object that does not exist).
//
// A Conflict that ended is removed with a JSON patch (the condition at its index, tested to be
// Conflict, of the object of da's UID) rather than by applying no conditions: an apply removes only
// what the same field manager applied before, and a DeviceAllocation written while the kind had a
// status subresource holds its Conflict under the controller's entry for that subresource, which
// an apply to the resource would leave in place. A removal counts no more writes than the apply.
func writeConflict(ctx context.Context, c client.Client, da *kdv1alpha1.DeviceAllocation, want *metav1.Condition) (bool, error) {
	key := client.ObjectKeyFromObject(da)
	if want != nil {
		err := applyConflict(ctx, c, da, *want)
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			// Gone, or another object of the same name (the UID differs): its own event brings
			// it back.
			ctrl.LoggerFrom(ctx).V(1).Info("DeviceAllocation gone or replaced before its Conflict condition was written", "err", err.Error())
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("applying the Conflict condition of DeviceAllocation %s: %w", klog.KRef(key.Namespace, key.Name), err)
		}
		return true, nil
	}
	err := removeConflict(ctx, c, da)
	if errors.Is(err, errNoConflict) {
		return false, nil
	}
	if apierrors.IsNotFound(err) || apierrors.IsInvalid(err) || apierrors.IsConflict(err) {
		// Gone, or changed since the cache showed it (a test of the patch failed: another UID,
		// or the conditions moved): its own event brings it back.
		ctrl.LoggerFrom(ctx).V(1).Info("DeviceAllocation changed before its Conflict condition was removed", "err", err.Error())
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("removing the Conflict condition of DeviceAllocation %s: %w", klog.KRef(key.Namespace, key.Name), err)
	}
	return true, nil
}

func applyConflict(ctx context.Context, c client.Client, da *kdv1alpha1.DeviceAllocation, cond metav1.Condition) error {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&cond)
	if err != nil {
		return fmt.Errorf("converting the Conflict condition: %w", err)
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(deviceAllocationGVK)
	u.SetNamespace(da.Namespace)
	u.SetName(da.Name)
	u.SetUID(da.UID)
	if err := unstructured.SetNestedSlice(u.Object, []any{m}, "status", "conditions"); err != nil {
		return fmt.Errorf("building the Conflict condition: %w", err)
	}
	return c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(FieldOwner), client.ForceOwnership)
}

// errNoConflict: the object as read has no Conflict condition to remove.
var errNoConflict = errors.New("no Conflict condition to remove")

func removeConflict(ctx context.Context, c client.Client, da *kdv1alpha1.DeviceAllocation) error {
	i := slices.IndexFunc(da.Status.Conditions, func(c metav1.Condition) bool { return c.Type == kdv1alpha1.DeviceAllocationConflict })
	if i < 0 {
		return errNoConflict
	}
	at := fmt.Sprintf("/status/conditions/%d", i)
	return removeListEntry(ctx, c, da.DeepCopy(), at, at+"/type", kdv1alpha1.DeviceAllocationConflict)
}
