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
	"cmp"
	"encoding/json"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Who writes a resource of a Node's status is in the Node's managed fields: each write records its
// field manager as the owner of the fields it changed, taking them from whoever owned them. The
// kubelet patches nodes/status under the field manager "kubelet" (its user agent's name); the
// controller under FieldOwner.

// resourceOwners are the field managers owning one resource's key in a Node's status.capacity and
// in its status.allocatable.
type resourceOwners struct {
	capacity, allocatable []string
}

// statusResourceFields is the part of a managed fields entry (FieldsV1) naming keys of
// status.capacity and status.allocatable: a tree of JSON objects whose keys are "f:<field>" ("."
// for the field itself), a map's keys being fields too.
type statusResourceFields struct {
	Status struct {
		Capacity    map[string]json.RawMessage `json:"f:capacity,omitempty"`
		Allocatable map[string]json.RawMessage `json:"f:allocatable,omitempty"`
	} `json:"f:status"`
}

// decodeStatusResources returns the keys of status.capacity and status.allocatable entry owns, or
// false when it owns none (or its fields cannot be read, which the API server never writes).
func decodeStatusResources(entry *metav1.ManagedFieldsEntry) (statusResourceFields, bool) {
	var f statusResourceFields
	if entry.FieldsV1 == nil || json.Unmarshal(entry.FieldsV1.GetRawBytes(), &f) != nil {
		return f, false
	}
	for _, m := range []map[string]json.RawMessage{f.Status.Capacity, f.Status.Allocatable} {
		for key := range m {
			if !strings.HasPrefix(key, "f:") {
				delete(m, key)
			}
		}
	}
	return f, len(f.Status.Capacity)+len(f.Status.Allocatable) > 0
}

// nodeResourceOwners returns, per resource of the Node's status.capacity and status.allocatable,
// the field managers owning its keys, whatever the operation and subresource of their writes.
func nodeResourceOwners(managed []metav1.ManagedFieldsEntry) map[corev1.ResourceName]resourceOwners {
	owners := map[corev1.ResourceName]resourceOwners{}
	for i := range managed {
		f, ok := decodeStatusResources(&managed[i])
		if !ok {
			continue
		}
		manager := managed[i].Manager
		for key := range f.Status.Capacity {
			name := corev1.ResourceName(strings.TrimPrefix(key, "f:"))
			o := owners[name]
			o.capacity = appendOnce(o.capacity, manager)
			owners[name] = o
		}
		for key := range f.Status.Allocatable {
			name := corev1.ResourceName(strings.TrimPrefix(key, "f:"))
			o := owners[name]
			o.allocatable = appendOnce(o.allocatable, manager)
			owners[name] = o
		}
	}
	return owners
}

func appendOnce(list []string, s string) []string {
	if slices.Contains(list, s) {
		return list
	}
	list = append(list, s)
	slices.Sort(list)
	return list
}

// stripNode is the controller's cache transform for Nodes: it drops the image list and reduces the
// managed fields to the keys of status.capacity and status.allocatable each manager owns, without
// the entries' times, so the cache holds who owns each resource (the node-capacity reconciler
// leaves a resource another manager owns alone) and little else: the kubelet's entry otherwise
// lists every condition, address and image of the Node, and its time changes with every heartbeat.
func stripNode(in any) (any, error) {
	node, ok := in.(*corev1.Node)
	if !ok {
		return in, nil
	}
	node.Status.Images = nil
	node.ManagedFields = trimManagedFields(node.ManagedFields)
	return node, nil
}

// trimManagedFields returns the entries of managed that own keys of status.capacity or
// status.allocatable, with only those keys and no time, sorted by manager, operation and
// subresource: the API server orders entries by time, which the kubelet's heartbeats change.
func trimManagedFields(managed []metav1.ManagedFieldsEntry) []metav1.ManagedFieldsEntry {
	var out []metav1.ManagedFieldsEntry
	for i := range managed {
		f, ok := decodeStatusResources(&managed[i])
		if !ok {
			continue
		}
		raw, err := json.Marshal(f)
		if err != nil {
			continue
		}
		e := managed[i]
		e.Time = nil
		e.FieldsV1 = metav1.NewFieldsV1(string(raw))
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b metav1.ManagedFieldsEntry) int {
		return cmp.Or(strings.Compare(a.Manager, b.Manager), strings.Compare(string(a.Operation), string(b.Operation)),
			strings.Compare(a.Subresource, b.Subresource))
	})
	return out
}
