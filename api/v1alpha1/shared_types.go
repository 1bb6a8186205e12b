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

package v1alpha1

// Bounds shared by the API types. MaxDevicesPerShard follows the ResourceSlice bound.
const (
	// MaxDevicesPerShard is the largest number of devices one NodeDevice lists; larger pools are
	// split into numbered shards.
	MaxDevicesPerShard = 128

	// MaxDeviceIDLength bounds a device ID. The device plugin API suggests 63 characters but the
	// kubelet does not enforce it; the node agent accepts up to 253 bytes.
	MaxDeviceIDLength = 253
)

// Field owner and label keys shared by the agent, the controller and the command-line tool.
const (
	// LabelNodeName carries spec.nodeName on every kubedevice object, for label selectors.
	LabelNodeName = "kubedevice.io/node"

	// LabelResourceName carries a label-safe form of spec.resourceName on NodeDevices.
	LabelResourceName = "kubedevice.io/resource"

	// LabelPodUID carries spec.podUID on DeviceAllocations.
	LabelPodUID = "kubedevice.io/pod-uid"
)
