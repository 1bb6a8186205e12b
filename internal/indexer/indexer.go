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

package indexer

import (
	"context"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
)

// Field index keys. Each is registered by Setup for one kind and queried with
// client.MatchingFields.
const (
	// NodeDeviceNodeName indexes NodeDevices by spec.nodeName.
	NodeDeviceNodeName = "spec.nodeName"
	// NodeDeviceResourceName indexes NodeDevices by spec.resourceName.
	NodeDeviceResourceName = "spec.resourceName"

	// DeviceAllocationNodeName indexes DeviceAllocations by spec.nodeName.
	DeviceAllocationNodeName = "spec.nodeName"

	// DeviceAllocationPodName indexes DeviceAllocations by spec.podName (query it within the
	// pod's namespace).
	DeviceAllocationPodName = "spec.podName"

	// DeviceAllocationLiveDevice indexes live DeviceAllocations (not Released) by every device
	// they hold, as DeviceKey(node, resource, deviceID).
	DeviceAllocationLiveDevice = "status.liveDevice"
)

// Setup registers every index with fi. Call it once per manager, before the manager starts.
func Setup(ctx context.Context, fi client.FieldIndexer) error {
	indexes := []struct {
		obj client.Object
		key string
		fn  client.IndexerFunc
	}{
		{&kdv1alpha1.NodeDevice{}, NodeDeviceNodeName, func(o client.Object) []string {
			return []string{o.(*kdv1alpha1.NodeDevice).Spec.NodeName}
		}},
		{&kdv1alpha1.NodeDevice{}, NodeDeviceResourceName, func(o client.Object) []string {
			return []string{o.(*kdv1alpha1.NodeDevice).Spec.ResourceName}
		}},
		{&kdv1alpha1.DeviceAllocation{}, DeviceAllocationNodeName, func(o client.Object) []string {
			return []string{o.(*kdv1alpha1.DeviceAllocation).Spec.NodeName}
		}},
		{&kdv1alpha1.DeviceAllocation{}, DeviceAllocationPodName, func(o client.Object) []string {
			return []string{o.(*kdv1alpha1.DeviceAllocation).Spec.PodName}
		}},
		{&kdv1alpha1.DeviceAllocation{}, DeviceAllocationLiveDevice, func(o client.Object) []string {
			return LiveDeviceKeys(o.(*kdv1alpha1.DeviceAllocation))
		}},
	}
	for _, idx := range indexes {
		if err := fi.IndexField(ctx, idx.obj, idx.key, idx.fn); err != nil {
			return fmt.Errorf("indexing %T by %s: %w", idx.obj, idx.key, err)
		}
	}
	return nil
}

// DeviceKey names one device of one resource on one node. The parts are joined with NUL, which
// none of them holds, so the key is unambiguous whatever the device ID contains.
func DeviceKey(nodeName, resourceName, deviceID string) string {
	return nodeName + "\x00" + resourceName + "\x00" + deviceID
}

// IsLive reports whether the allocation still holds its devices: it is not Released.
func IsLive(da *kdv1alpha1.DeviceAllocation) bool {
	return !meta.IsStatusConditionTrue(da.Status.Conditions, kdv1alpha1.DeviceAllocationReleased)
}

// DeviceKeys returns the keys of every device the allocation names, sorted and without
// duplicates (a regular init container's devices are reused by later containers of the pod).
func DeviceKeys(da *kdv1alpha1.DeviceAllocation) []string {
	var keys []string
	for _, c := range da.Status.Containers {
		for _, r := range c.Resources {
			for _, id := range r.DeviceIDs {
				keys = append(keys, DeviceKey(da.Spec.NodeName, r.ResourceName, id))
			}
		}
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}

// LiveDeviceKeys returns DeviceKeys for a live allocation and nothing for a released one.
func LiveDeviceKeys(da *kdv1alpha1.DeviceAllocation) []string {
	if !IsLive(da) {
		return nil
	}
	return DeviceKeys(da)
}
