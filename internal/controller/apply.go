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
	"encoding/json"
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// applyConditions server-side applies conds as the whole set of status conditions the controller
// owns on the object gvk/key, under FieldOwner. Conditions are a map keyed by type, so the agent's
// conditions, applied under its own field owner, are left alone; a condition the controller owned
// and conds no longer lists is removed. The object is never created: the status subresource
// refuses to.
func applyConditions(ctx context.Context, c client.Client, gvk schema.GroupVersionKind, key client.ObjectKey, conds ...metav1.Condition) error {
	return applyConditionsAs(ctx, c, FieldOwner, gvk, key, conds...)
}

// applyConditionsAs is applyConditions under the field manager owner: the whole set of conditions
// owner owns on the object.
func applyConditionsAs(ctx context.Context, c client.Client, owner string, gvk schema.GroupVersionKind, key client.ObjectKey, conds ...metav1.Condition) error {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	u.SetNamespace(key.Namespace)
	u.SetName(key.Name)
	if len(conds) > 0 {
		list := make([]any, 0, len(conds))
		for i := range conds {
			m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&conds[i])
			if err != nil {
				return fmt.Errorf("converting condition %s of %s %s: %w", conds[i].Type, gvk.Kind, klog.KRef(key.Namespace, key.Name), err)
			}
			list = append(list, m)
		}
		if err := unstructured.SetNestedSlice(u.Object, list, "status", "conditions"); err != nil {
			return fmt.Errorf("building the conditions of %s %s: %w", gvk.Kind, klog.KRef(key.Namespace, key.Name), err)
		}
	}
	err := c.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(owner), client.ForceOwnership)
	if client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("applying the conditions of %s %s: %w", gvk.Kind, klog.KRef(key.Namespace, key.Name), err)
	}
	return nil
}

// conditionChanged reports whether want differs from got (nil when absent) in anything but the
// transition time.
func conditionChanged(got *metav1.Condition, want *metav1.Condition) bool {
	if got == nil || want == nil {
		return (got == nil) != (want == nil)
	}
	return got.Status != want.Status || got.Reason != want.Reason || got.Message != want.Message ||
		got.ObservedGeneration != want.ObservedGeneration
}

// applyFinalizer server-side applies the node-capacity finalizer onto the NodeDevice nd under
// FieldOwner. Finalizers are a set, so other writers' finalizers are left alone whatever the
// object's resourceVersion. The body carries nd's UID: the API server refuses it rather than
// create an object that is gone, or touch one recreated under the same name, and either refusal,
// like NotFound, means there is nothing left to do for nd.
func applyFinalizer(ctx context.Context, c client.Client, nd client.Object) error {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(nodeDeviceGVK)
	u.SetName(nd.GetName())
	u.SetUID(nd.GetUID())
	u.SetFinalizers([]string{NodeCapacityFinalizer})
	err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(FieldOwner), client.ForceOwnership)
	if err == nil || apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return fmt.Errorf("adding the finalizer of NodeDevice %q: %w", nd.GetName(), err)
}

// dropFinalizer removes the node-capacity finalizer from the NodeDevice nd (removeListEntry). An
// apply could not: the agent puts the finalizer on with the object (under its own field manager),
// and an apply only gives up the applier's own claim on a field that another manager still holds.
// A failed test (the cache was behind) is an error, and the reconcile runs again on what the API
// server has; NotFound means it is done.
func dropFinalizer(ctx context.Context, c client.Client, nd client.Object) error {
	i := slices.Index(nd.GetFinalizers(), NodeCapacityFinalizer)
	if i < 0 {
		return nil
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(nodeDeviceGVK)
	u.SetName(nd.GetName())
	u.SetUID(nd.GetUID())
	at := fmt.Sprintf("/metadata/finalizers/%d", i)
	if err := removeListEntry(ctx, c, u, at, at, NodeCapacityFinalizer); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("removing the finalizer of NodeDevice %q: %w", nd.GetName(), err)
	}
	return nil
}

// removeListEntry removes the list entry at the JSON pointer at from obj, as the controller's
// FieldOwner, with a JSON patch that first tests obj's UID and that the value at test is want: an
// object of the same name made since, or an entry moved since obj was read, fails the patch
// (Invalid) instead of losing another entry. obj receives the API server's answer.
func removeListEntry(ctx context.Context, c client.Client, obj client.Object, at, test string, want any) error {
	patch, err := json.Marshal([]map[string]any{
		{"op": "test", "path": "/metadata/uid", "value": string(obj.GetUID())},
		{"op": "test", "path": test, "value": want},
		{"op": "remove", "path": at},
	})
	if err != nil {
		return err
	}
	return c.Patch(ctx, obj, client.RawPatch(types.JSONPatchType, patch), client.FieldOwner(FieldOwner))
}
