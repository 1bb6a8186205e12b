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
	"encoding/json"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
	"github.com/kubedevice/kubedevice/internal/contract"
)

// The kinds the agent applies.
var (
	NodeDeviceGVK       = kdv1alpha1.GroupVersion.WithKind("NodeDevice")
	DeviceAllocationGVK = kdv1alpha1.GroupVersion.WithKind("DeviceAllocation")
)

// Apply server-side applies obj's metadata (name, namespace, labels, owner references, finalizers)
// and spec as the fields the agent owns, under contract.AgentFieldOwner, creating the object if
// need be. Fields the agent never applied (an administrator's cordons, another finalizer) are left
// alone. It returns the object's generation after the write.
func Apply(ctx context.Context, c client.Client, gvk schema.GroupVersionKind, obj client.Object) (int64, error) {
	body, err := applyBody(gvk, obj, "status", true)
	if err != nil {
		return 0, err
	}
	res, err := apply(ctx, c, gvk, obj, body)
	if err != nil {
		return 0, err
	}
	return res.Generation, nil
}

// ApplyWhole server-side applies obj whole, for a kind without a status subresource (a
// DeviceAllocation): its metadata (as Apply), spec and status, as every field the agent owns, in
// one request under contract.AgentFieldOwner, creating the object if need be. A field the agent
// applied before and leaves out now is removed; fields of other managers (the controller's
// Conflict condition) are left alone. Over an object an earlier agent wrote through a status
// subresource it costs two more writes, once (adoptStatusEntry).
func ApplyWhole(ctx context.Context, c client.Client, gvk schema.GroupVersionKind, obj client.Object) error {
	body, err := applyBody(gvk, obj, "", true)
	if err != nil {
		return err
	}
	res, err := apply(ctx, c, gvk, obj, body)
	if err != nil {
		return err
	}
	// An object an earlier agent wrote through the status subresource: once, take over the status
	// fields it applied there, and apply again so that what this write left out goes.
	adopted, err := adoptStatusEntry(ctx, c, gvk, res)
	if err != nil || !adopted {
		return err
	}
	_, err = apply(ctx, c, gvk, obj, body)
	return err
}

// apply sends body as a server-side apply of obj (of kind gvk) under contract.AgentFieldOwner and
// returns the object's metadata as the API server answered.
func apply(ctx context.Context, c client.Client, gvk schema.GroupVersionKind, obj client.Object, body []byte) (*metav1.PartialObjectMetadata, error) {
	res := metadataOf(gvk, obj)
	if err := c.Patch(ctx, res, client.RawPatch(types.ApplyPatchType, body), client.FieldOwner(contract.AgentFieldOwner), client.ForceOwnership); err != nil {
		return nil, fmt.Errorf("applying %s %s: %w", gvk.Kind, client.ObjectKeyFromObject(obj), err)
	}
	CountWrite(gvk.Kind, "apply")
	return res, nil
}

// ApplyStatus server-side applies obj's status as the whole status the agent owns, under
// contract.AgentFieldOwner. The object must exist: the status subresource never creates one.
func ApplyStatus(ctx context.Context, c client.Client, gvk schema.GroupVersionKind, obj client.Object) error {
	body, err := applyBody(gvk, obj, "spec", false)
	if err != nil {
		return err
	}
	if err := c.Status().Patch(ctx, metadataOf(gvk, obj), client.RawPatch(types.ApplyPatchType, body),
		client.FieldOwner(contract.AgentFieldOwner), client.ForceOwnership); err != nil {
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

// metadataOf is the object the API server's answer to an apply is read into: its metadata only
// (the client asks for PartialObjectMetadata), as the agent needs no more than the generation.
// Reading back the whole object, a NodeDevice of 128 devices into a map, was a third of what the
// agent allocated while a plugin registered.
func metadataOf(gvk schema.GroupVersionKind, obj client.Object) *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: obj.GetName(), Namespace: obj.GetNamespace()}}
	m.SetGroupVersionKind(gvk)
	return m
}

// applyMeta is the metadata the agent applies.
type applyMeta struct {
	Name            string                  `json:"name"`
	Namespace       string                  `json:"namespace,omitempty"`
	Labels          map[string]string       `json:"labels,omitempty"`
	OwnerReferences []metav1.OwnerReference `json:"ownerReferences,omitempty"`
	Finalizers      []string                `json:"finalizers,omitempty"`
}

// applyBody is the body of an apply request of kind gvk for obj: its top-level fields as JSON but
// drop (status for an apply of the object, spec for one of its status, nothing for a kind without
// a status subresource), and from its metadata the name and namespace, with the labels, owner
// references and finalizers when withRefs (not on the status subresource, which ignores them).
func applyBody(gvk schema.GroupVersionKind, obj client.Object, drop string, withRefs bool) ([]byte, error) {
	raw, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("converting %s %s: %w", gvk.Kind, client.ObjectKeyFromObject(obj), err)
	}
	fields := map[string]json.RawMessage{}
	if err := json.Unmarshal(raw, &fields); err != nil {
		return nil, fmt.Errorf("converting %s %s: %w", gvk.Kind, client.ObjectKeyFromObject(obj), err)
	}
	delete(fields, drop)
	apiVersion, kind := gvk.ToAPIVersionAndKind()
	m := applyMeta{Name: obj.GetName(), Namespace: obj.GetNamespace()}
	if withRefs {
		m.Labels, m.OwnerReferences, m.Finalizers = obj.GetLabels(), obj.GetOwnerReferences(), obj.GetFinalizers()
	}
	for k, v := range map[string]any{"apiVersion": apiVersion, "kind": kind, "metadata": m} {
		if fields[k], err = json.Marshal(v); err != nil {
			return nil, fmt.Errorf("converting %s %s: %w", gvk.Kind, client.ObjectKeyFromObject(obj), err)
		}
	}
	return json.Marshal(fields)
}
