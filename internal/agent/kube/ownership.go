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
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"github.com/kubedevice/kubedevice/internal/contract"
)

// An object an earlier agent wrote while its kind had a status subresource (DeviceAllocations, up
// to this version) holds its status under a field manager entry of its own: the agent's apply
// through the status subresource, a manager distinct from the agent's apply of the resource. Once
// the agent applies the whole object to the resource, that entry keeps owning the status fields
// it owned, so a field the agent leaves out (the devices of a pod now refused, an
// observedGeneration) would stay, owned by nobody who writes any more, and the object would never
// say what the agent applied. adoptStatusEntry folds that entry into the agent's entry of the
// resource, so the agent's next apply removes what it leaves out; it is needed once per such
// object, the first time the agent writes it.

// statusEntry returns the index in managed of the agent's apply entry of the status subresource
// and of the resource, -1 when there is none.
func statusEntry(managed []metav1.ManagedFieldsEntry) (status, resource int) {
	status, resource = -1, -1
	for i, m := range managed {
		if m.Manager != contract.AgentFieldOwner || m.Operation != metav1.ManagedFieldsOperationApply {
			continue
		}
		switch m.Subresource {
		case "status":
			status = i
		case "":
			resource = i
		}
	}
	return status, resource
}

// adoptedManagedFields returns managed with the agent's status entry folded into its entry of the
// resource (their fields united), and whether there was one to fold.
func adoptedManagedFields(managed []metav1.ManagedFieldsEntry) ([]metav1.ManagedFieldsEntry, bool, error) {
	status, resource := statusEntry(managed)
	if status < 0 || resource < 0 {
		return managed, false, nil
	}
	var union, other fieldpath.Set
	if err := union.FromJSON(fieldsReader(managed[resource].FieldsV1)); err != nil {
		return nil, false, fmt.Errorf("decoding the agent's managed fields: %w", err)
	}
	if err := other.FromJSON(fieldsReader(managed[status].FieldsV1)); err != nil {
		return nil, false, fmt.Errorf("decoding the agent's managed fields of the status subresource: %w", err)
	}
	raw, err := union.Union(&other).ToJSON()
	if err != nil {
		return nil, false, fmt.Errorf("encoding the agent's managed fields: %w", err)
	}
	out := make([]metav1.ManagedFieldsEntry, 0, len(managed)-1)
	for i, m := range managed {
		switch i {
		case status:
			continue
		case resource:
			m.FieldsV1 = metav1.NewFieldsV1(string(raw))
		}
		out = append(out, m)
	}
	return out, true, nil
}

// adoptStatusEntry folds the agent's status entry of the object of kind gvk whose metadata an apply
// returned (res) into its entry of the resource, with a JSON patch of metadata.managedFields that
// applies only to the object at res's resource version. It reports whether it wrote.
func adoptStatusEntry(ctx context.Context, c client.Client, gvk schema.GroupVersionKind, res client.Object) (bool, error) {
	managed, adopted, err := adoptedManagedFields(res.GetManagedFields())
	if err != nil || !adopted {
		return false, err
	}
	patch, err := json.Marshal([]map[string]any{
		{"op": "test", "path": "/metadata/resourceVersion", "value": res.GetResourceVersion()},
		{"op": "replace", "path": "/metadata/managedFields", "value": managed},
	})
	if err != nil {
		return false, err
	}
	if err := c.Patch(ctx, metadataOf(gvk, res), client.RawPatch(types.JSONPatchType, patch), client.FieldOwner(contract.AgentFieldOwner)); err != nil {
		return false, fmt.Errorf("taking over the status fields an earlier agent applied to %s %s: %w", gvk.Kind, client.ObjectKeyFromObject(res), err)
	}
	CountWrite(gvk.Kind, "adoptStatus")
	return true, nil
}

func fieldsReader(f *metav1.FieldsV1) *bytes.Reader {
	raw := f.GetRawBytes()
	if len(raw) == 0 {
		return bytes.NewReader([]byte("{}"))
	}
	return bytes.NewReader(raw)
}
