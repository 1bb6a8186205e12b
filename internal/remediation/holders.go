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

package remediation

import (
	"cmp"
	"slices"

	"k8s.io/apimachinery/pkg/types"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
	"github.com/kubedevice/kubedevice/internal/indexer"
)

// Holder is a pod holding some of the devices asked about.
type Holder struct {
	// Namespace and Name name the pod; UID is the pod's (empty when only a ResourceClaim's
	// reservedFor named it without one).
	Namespace, Name string
	UID             types.UID
	// Devices are the IDs, of those asked about, that the pod holds, sorted.
	Devices []string
}

// Key is namespace/name.
func (h Holder) Key() string { return h.Namespace + "/" + h.Name }

// HoldersIn returns the pods whose live DeviceAllocations among das hold any of the devices ids of
// resource on node, sorted by namespace/name. A pod's DeviceAllocation lists the devices of both
// paths: those the agent allocated (node capacity) and those of the ResourceClaims it prepared
// (DRA), so one lookup finds the holders of either.
func HoldersIn(das []kdv1alpha1.DeviceAllocation, node, resource string, ids []string) []Holder {
	want := map[string]string{}
	for _, id := range ids {
		want[indexer.DeviceKey(node, resource, id)] = id
	}
	var out []Holder
	for i := range das {
		da := &das[i]
		var held []string
		for _, key := range indexer.LiveDeviceKeys(da) {
			if id, ok := want[key]; ok {
				held = append(held, id)
			}
		}
		if len(held) == 0 {
			continue
		}
		slices.Sort(held)
		out = addHolder(out, Holder{Namespace: da.Namespace, Name: da.Spec.PodName, UID: types.UID(da.Spec.PodUID), Devices: held})
	}
	slices.SortFunc(out, func(a, b Holder) int { return cmp.Compare(a.Key(), b.Key()) })
	return out
}

// addHolder adds h to hs, merging it into the entry of the same pod.
func addHolder(hs []Holder, h Holder) []Holder {
	i := slices.IndexFunc(hs, func(o Holder) bool { return o.Key() == h.Key() })
	if i < 0 {
		return append(hs, h)
	}
	if hs[i].UID == "" {
		hs[i].UID = h.UID
	}
	hs[i].Devices = slices.Compact(slices.Sorted(slices.Values(append(hs[i].Devices, h.Devices...))))
	return hs
}
