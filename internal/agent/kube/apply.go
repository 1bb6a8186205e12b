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

package kube

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
	"github.com/kubedevice/kubedevice/internal/contract"
)

// The kinds the agent applies.
var (
	NodeDeviceGVK       = kdv1alpha1.GroupVersion.WithKind("NodeDevice")
	DeviceAllocationGVK = kdv1alpha1.GroupVersion.WithKind("DeviceAllocation")
)

// Apply server-side applies obj's metadata (name, namespace, labels, owner references) and spec
// as the fields the agent owns, under contract.AgentFieldOwner, creating the object if need be.
// Fields the agent never applied (an administrator's cordons, the controller's finalizer) are left
// alone. It returns the object's generation after the write.
func Apply(ctx context.Context, c client.Client, gvk schema.GroupVersionKind, obj client.Object) (int64, error) {
	u, err := toApply(gvk, obj)
	if err != nil {
		return 0, err
	}
	unstructured.RemoveNestedField(u.Object, "status")
	if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(contract.AgentFieldOwner), client.ForceOwnership); err != nil {
		return 0, fmt.Errorf("applying %s %s: %w", gvk.Kind, client.ObjectKeyFromObject(obj), err)
	}
	CountWrite(gvk.Kind, "apply")
	return u.GetGeneration(), nil
}

// ApplyWhole server-side applies obj whole, for a kind without a status subresource (a
// DeviceAllocation): its metadata (name, namespace, labels, owner references), spec and status,
// as every field the agent owns, in one request under contract.AgentFieldOwner, creating the
// object if need be. A field the agent applied before and leaves out now is removed; fields of
// other managers (the controller's Conflict condition) are left alone. Over an object an earlier
// agent wrote through a status subresource it costs two more writes, once (adoptStatusEntry).
func ApplyWhole(ctx context.Context, c client.Client, gvk schema.GroupVersionKind, obj client.Object) error {
	u, err := toApply(gvk, obj)
	if err != nil {
		return err
	}
	body := u.DeepCopy()
	if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(contract.AgentFieldOwner), client.ForceOwnership); err != nil {
		return fmt.Errorf("applying %s %s: %w", gvk.Kind, client.ObjectKeyFromObject(obj), err)
	}
	CountWrite(gvk.Kind, "apply")
	// An object an earlier agent wrote through the status subresource: once, take over the status
	// fields it applied there, and apply again so that what this write left out goes.
	adopted, err := adoptStatusEntry(ctx, c, u)
	if err != nil || !adopted {
		return err
	}
	if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(body), client.FieldOwner(contract.AgentFieldOwner), client.ForceOwnership); err != nil {
		return fmt.Errorf("applying %s %s: %w", gvk.Kind, client.ObjectKeyFromObject(obj), err)
	}
	CountWrite(gvk.Kind, "apply")
	return nil
}

// ApplyStatus server-side applies obj's status as the whole status the agent owns, under
// contract.AgentFieldOwner. The object must exist: the status subresource never creates one.
func ApplyStatus(ctx context.Context, c client.Client, gvk schema.GroupVersionKind, obj client.Object) error {
	u, err := toApply(gvk, obj)
	if err != nil {
		return err
	}
	unstructured.RemoveNestedField(u.Object, "spec")
	unstructured.RemoveNestedField(u.Object, "metadata", "labels")
	unstructured.RemoveNestedField(u.Object, "metadata", "ownerReferences")
	if err := c.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(contract.AgentFieldOwner), client.ForceOwnership); err != nil {
		return fmt.Errorf("applying the status of %s %s: %w", gvk.Kind, client.ObjectKeyFromObject(obj), err)
	}
	CountWrite(gvk.Kind, "applyStatus")
	return nil
}

// Delete deletes obj if it is still the object the agent read (same UID); an object already gone
// is not an error.
func Delete(ctx context.Context, c client.Client, kind string, obj client.Object) error {
	uid := obj.GetUID()
	if err := c.Delete(ctx, obj, client.Preconditions{UID: &uid}); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("deleting %s %s: %w", kind, client.ObjectKeyFromObject(obj), err)
	}
	CountWrite(kind, "delete")
	return nil
}

// toApply converts obj to an apply configuration of kind gvk, keeping from its metadata only what
// the agent applies.
func toApply(gvk schema.GroupVersionKind, obj client.Object) (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, fmt.Errorf("converting %s %s: %w", gvk.Kind, client.ObjectKeyFromObject(obj), err)
	}
	u := &unstructured.Unstructured{Object: m}
	meta := map[string]any{"name": obj.GetName()}
	if ns := obj.GetNamespace(); ns != "" {
		meta["namespace"] = ns
	}
	for _, f := range []string{"labels", "ownerReferences", "finalizers"} {
		if v, ok := m["metadata"].(map[string]any)[f]; ok {
			meta[f] = v
		}
	}
	u.Object["metadata"] = meta
	u.SetGroupVersionKind(gvk)
	return u, nil
}
