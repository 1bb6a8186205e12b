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

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DeviceAllocationSpec names the pod whose devices the object records. Every field is immutable:
// the object's name is derived from the pod, so a different pod is a different object.
type DeviceAllocationSpec struct {
	// nodeName is the node the pod is bound to and whose agent allocated the devices. Immutable.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="nodeName is immutable"
	NodeName string `json:"nodeName"`

	// podName is the name of the pod, in the DeviceAllocation's namespace. Immutable.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="podName is immutable"
	PodName string `json:"podName"`

	// podUID is the UID of the pod. Immutable.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=36
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="podUID is immutable"
	PodUID string `json:"podUID"`
}

// ResourceAllocation is the devices of one resource a container holds.
type ResourceAllocation struct {
	// resourceName is the extended resource, for example example.com/gopher.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=317
	ResourceName string `json:"resourceName"`

	// deviceIDs are the allocated devices, sorted.
	// +required
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=1024
	// +kubebuilder:validation:items:MaxLength=253
	DeviceIDs []string `json:"deviceIDs"`

	// numaNodes are the NUMA nodes of the allocated devices, sorted; empty without topology.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	NUMANodes []int64 `json:"numaNodes,omitempty"`
}

// EnvVar is an environment variable the device plugin asked for.
type EnvVar struct {
	// name of the variable.
	// +required
	// +kubebuilder:validation:MaxLength=4096
	Name string `json:"name"`
	// value of the variable.
	// +optional
	// +kubebuilder:validation:MaxLength=32768
	Value string `json:"value,omitempty"`
}

// Mount is a host path the device plugin asked to mount into the container.
type Mount struct {
	// containerPath is where the path appears in the container.
	// +required
	// +kubebuilder:validation:MaxLength=4096
	ContainerPath string `json:"containerPath"`
	// hostPath is the path on the node.
	// +required
	// +kubebuilder:validation:MaxLength=4096
	HostPath string `json:"hostPath"`
	// readOnly mounts the path read-only.
	// +optional
	ReadOnly bool `json:"readOnly,omitempty"`
}

// DeviceSpec is a device node the device plugin asked to expose in the container.
type DeviceSpec struct {
	// containerPath is where the device node appears in the container.
	// +required
	// +kubebuilder:validation:MaxLength=4096
	ContainerPath string `json:"containerPath"`
	// hostPath is the device node on the node.
	// +required
	// +kubebuilder:validation:MaxLength=4096
	HostPath string `json:"hostPath"`
	// permissions is the cgroup access: any of r, w and m.
	// +optional
	// +kubebuilder:validation:MaxLength=3
	Permissions string `json:"permissions,omitempty"`
}

// Annotation is a container annotation the device plugin asked for.
type Annotation struct {
	// key of the annotation.
	// +required
	// +kubebuilder:validation:MaxLength=317
	Key string `json:"key"`
	// value of the annotation.
	// +optional
	// +kubebuilder:validation:MaxLength=32768
	Value string `json:"value,omitempty"`
}

// ContainerRuntimeOptions is what the container runtime must add to the container for its devices:
// the device plugins' Allocate responses, merged across resources as the kubelet merges them
// (first value wins for a repeated key or path), in a deterministic order.
type ContainerRuntimeOptions struct {
	// envs, sorted by name.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=1024
	Envs []EnvVar `json:"envs,omitempty"`
	// mounts, sorted by container path.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=1024
	Mounts []Mount `json:"mounts,omitempty"`
	// devices, sorted by container path.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=1024
	Devices []DeviceSpec `json:"devices,omitempty"`
	// annotations, sorted by key.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=1024
	Annotations []Annotation `json:"annotations,omitempty"`
	// cdiDevices are fully qualified CDI device names (vendor.com/class=name).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=1024
	// +kubebuilder:validation:items:MaxLength=4096
	CDIDevices []string `json:"cdiDevices,omitempty"`
}

// ContainerAllocation is the devices one container of the pod holds.
type ContainerAllocation struct {
	// name of the container (init, sidecar or regular).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`

	// resources are the container's devices per resource, sorted by resource name.
	// +optional
	// +listType=map
	// +listMapKey=resourceName
	// +kubebuilder:validation:MaxItems=32
	Resources []ResourceAllocation `json:"resources,omitempty"`

	// runtimeOptions is what the runtime must inject into the container for its devices.
	// +optional
	RuntimeOptions *ContainerRuntimeOptions `json:"runtimeOptions,omitempty"`
}

// DeviceAllocationStatus is the node agent's record of the pod's devices.
type DeviceAllocationStatus struct {
	// summary lists the pod's devices as resource=id,id;resource=id for printing, for example
	// example.com/gopher=gopher-0,gopher-2.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Summary string `json:"summary,omitempty"`

	// containers lists the containers holding devices, in the pod's order (init containers
	// first).
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=256
	Containers []ContainerAllocation `json:"containers,omitempty"`

	// unhealthyDevices lists the devices the pod holds that are not healthy, with the reason, sorted
	// by resource name and device ID; none when every device is healthy. The Healthy condition
	// sums it up. A device is listed when its plugin reports it unhealthy
	// (PluginReportedUnhealthy), when its plugin stopped listing it while the pod holds it
	// (NotReportedByPlugin), or when its resource is gone from the node because no plugin
	// registered within the grace period (ResourceRemoved). A plugin that disconnected within its
	// grace period, or that has not registered again since an agent restart, says nothing new about
	// its devices: they keep what the plugin last reported (the NodeDevice shows the plugin's
	// state). A cordoned device is not unhealthy.
	// +optional
	// +listType=map
	// +listMapKey=resourceName
	// +listMapKey=deviceID
	// +kubebuilder:validation:MaxItems=1024
	UnhealthyDevices []UnhealthyDevice `json:"unhealthyDevices,omitempty"`

	// conditions: Allocated, Healthy, Released, Conflict.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// UnhealthyDevice is a device the pod holds that is not healthy.
type UnhealthyDevice struct {
	// resourceName is the device's extended resource, for example example.com/gopher.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=317
	ResourceName string `json:"resourceName"`

	// deviceID is the device's ID, as its plugin lists it.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	DeviceID string `json:"deviceID"`

	// containers are the pod's containers holding the device, in the pod's order.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=63
	Containers []string `json:"containers,omitempty"`

	// reason is why the device is unhealthy: PluginReportedUnhealthy, NotReportedByPlugin or
	// ResourceRemoved; on a node the agent observes (the kubelet manages its devices),
	// KubeletNotAllocatable.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	Reason string `json:"reason"`

	// message explains the reason.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`

	// lastTransitionTime is when the device was first seen unhealthy for this reason.
	// +optional
	LastTransitionTime *metav1.Time `json:"lastTransitionTime,omitempty"`
}

// DeviceAllocation records which device plugin devices a pod's containers hold on its node. It lives
// in the pod's namespace, is written by the node agent, and is owned by the pod.
//
// It has no status subresource: it is a record the node agent writes whole, like a ResourceSlice
// (spec and status in one request), and the controller adds its Conflict condition to it. So
// metadata.generation counts every change, status included, and its conditions carry no
// observedGeneration.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Namespaced,shortName=da,categories=devices
// +kubebuilder:selectablefield:JSONPath=`.spec.nodeName`
// +kubebuilder:printcolumn:name="Pod",type=string,JSONPath=`.spec.podName`
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.spec.nodeName`
// +kubebuilder:printcolumn:name="Resources",type=string,JSONPath=`.status.summary`
// +kubebuilder:printcolumn:name="Allocated",type=string,JSONPath=`.status.conditions[?(@.type=="Allocated")].status`
// +kubebuilder:printcolumn:name="Healthy",type=string,JSONPath=`.status.conditions[?(@.type=="Healthy")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type DeviceAllocation struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec names the pod.
	// +required
	Spec DeviceAllocationSpec `json:"spec"`

	// status is written by the node agent (the Conflict condition by the controller), in the same
	// resource as spec: there is no status subresource.
	// +optional
	Status DeviceAllocationStatus `json:"status,omitempty"`
}

// DeviceAllocationList is a list of DeviceAllocations.
// +kubebuilder:object:root=true
type DeviceAllocationList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []DeviceAllocation `json:"items"`
}
