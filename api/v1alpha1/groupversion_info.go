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
