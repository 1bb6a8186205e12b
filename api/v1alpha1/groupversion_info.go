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

// Package v1alpha1 contains the kubedevice.io/v1alpha1 API: NodeDevice, the devices of one device
// plugin resource on one node, and DeviceAllocation, the devices a pod's containers hold.
//
// Both kinds are mirrors of the node agent's checkpoint: the checkpoint is the truth on the node,
// these objects are how the cluster sees it.
//
// +kubebuilder:object:generate=true
// +groupName=kubedevice.io
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of the objects in this package.
	GroupVersion = schema.GroupVersion{Group: "kubedevice.io", Version: "v1alpha1"}

	schemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the types of this package to a scheme.
	AddToScheme = schemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&NodeDevice{}, &NodeDeviceList{},
		&DeviceAllocation{}, &DeviceAllocationList{},
	)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
