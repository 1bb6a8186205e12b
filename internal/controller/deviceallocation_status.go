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
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
	"github.com/kubedevice/kubedevice/internal/contract"
	"github.com/kubedevice/kubedevice/internal/indexer"
)

const (
	// maxConflictsInMessage bounds how many shared devices a Conflict message names.
	maxConflictsInMessage = 16
	// maxConditionMessage is below metav1.Condition's 32768-character bound on messages.
	maxConditionMessage = 32000
)

// deviceConflict is one device of an allocation that other live allocations also hold.
type deviceConflict struct {
	resourceName string
	deviceID     string
	// holders are the other allocations, as namespace/name, sorted.
	holders []string
}

// findConflicts returns the devices of da that another live allocation in peers also holds,
// sorted by resource and device ID. A released da conflicts with nothing, and peers may include
// da itself.
func findConflicts(da *kdv1alpha1.DeviceAllocation, peers []kdv1alpha1.DeviceAllocation) []deviceConflict {
	if !indexer.IsLive(da) {
		return nil
	}
	holders := map[string][]string{}
	for i := range peers {
		peer := &peers[i]
		if peer.UID == da.UID || !indexer.IsLive(peer) {
			continue
		}
		for _, key := range indexer.DeviceKeys(peer) {
			holders[key] = append(holders[key], peer.Namespace+"/"+peer.Name)
		}
	}
	var out []deviceConflict
	seen := map[string]bool{}
	for _, c := range da.Status.Containers {
		for _, r := range c.Resources {
			for _, id := range r.DeviceIDs {
				key := indexer.DeviceKey(da.Spec.NodeName, r.ResourceName, id)
				if seen[key] || len(holders[key]) == 0 {
					continue
				}
				seen[key] = true
				h := slices.Clone(holders[key])
				slices.Sort(h)
				out = append(out, deviceConflict{resourceName: r.ResourceName, deviceID: id, holders: slices.Compact(h)})
			}
		}
	}
	slices.SortFunc(out, func(a, b deviceConflict) int {
		if c := strings.Compare(a.resourceName, b.resourceName); c != 0 {
			return c
		}
		return strings.Compare(a.deviceID, b.deviceID)
	})
	return out
}

// conflictCondition returns the Conflict condition da should carry, or nil when it should carry
// none: True with DeviceHeldTwice while another live allocation holds one of its devices. The
// transition time is kept while the condition stays True.
func conflictCondition(da *kdv1alpha1.DeviceAllocation, conflicts []deviceConflict, now metav1.Time) *metav1.Condition {
	if len(conflicts) == 0 {
		return nil
	}
	parts := make([]string, 0, min(len(conflicts), maxConflictsInMessage)+1)
	for i, c := range conflicts {
		if i == maxConflictsInMessage {
			parts = append(parts, fmt.Sprintf("and %d more", len(conflicts)-i))
			break
		}
		parts = append(parts, fmt.Sprintf("%s %s is also held by %s", c.resourceName, c.deviceID, strings.Join(c.holders, ", ")))
	}
	message := fmt.Sprintf("Devices on node %s held by another live DeviceAllocation: %s.", da.Spec.NodeName, strings.Join(parts, "; "))
	if len(message) > maxConditionMessage {
		message = strings.ToValidUTF8(message[:maxConditionMessage-3], "") + "..."
	}
	c := contract.WithTransitionTime(metav1.Condition{
		Type:    kdv1alpha1.DeviceAllocationConflict,
		Status:  metav1.ConditionTrue,
		Reason:  kdv1alpha1.ReasonDeviceHeldTwice,
		Message: message,
	}, meta.FindStatusCondition(da.Status.Conditions, kdv1alpha1.DeviceAllocationConflict), now)
	return &c
}

// conflictStarted reports whether the change from got to want raises a conflict: the moment to
// warn once.
func conflictStarted(got, want *metav1.Condition) bool {
	return want != nil && want.Status == metav1.ConditionTrue && (got == nil || got.Status != metav1.ConditionTrue)
}

// conflictChanged reports whether the Conflict condition got (nil: none) must become want (nil:
// none). observedGeneration is not compared: the controller sets none (a DeviceAllocation has no
// status subresource, so its generation counts every write, the agent's included), and one a
// controller set while the kind had a status subresource is no reason to write.
func conflictChanged(got, want *metav1.Condition) bool {
	if got != nil && got.ObservedGeneration != 0 {
		g := *got
		g.ObservedGeneration = 0
		got = &g
	}
	return conditionChanged(got, want)
}
