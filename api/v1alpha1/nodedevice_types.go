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

// NodeDeviceSpec names the node and device plugin resource the object describes, and carries the
// administrator's cordons.
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.shard) || (has(self.shard) && self.shard == oldSelf.shard)",message="shard is immutable"
type NodeDeviceSpec struct {
	// nodeName is the node whose devices this object lists. Immutable.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="nodeName is immutable"
	NodeName string `json:"nodeName"`

	// resourceName is the extended resource the device plugin registered, for example
	// example.com/gopher. Immutable.
	// +required
	// +kubebuilder:validation:MinLength=3
	// +kubebuilder:validation:MaxLength=317
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="resourceName is immutable"
	// +kubebuilder:validation:XValidation:rule="!self.contains('kubernetes.io/')",message="resourceName must not be in the kubernetes.io namespace"
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('requests.')",message="resourceName must not start with requests."
	// +kubebuilder:validation:XValidation:rule="self.split('/')[0].size() <= 244",message="resourceName prefix must be at most 244 characters"
	ResourceName string `json:"resourceName"`

	// shard numbers this object among the NodeDevices of the same node and resource when the
	// resource has more than 128 devices. Immutable once set.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1023
	Shard *int32 `json:"shard,omitempty"`

	// cordons lists devices an administrator has taken out of service: a cordoned device stays
	// visible but is never allocated and not counted as allocatable. The node agent honours the
	// cordons of every shard of the resource, so a cordon keeps working when a device moves to
	// another shard. None can be added while status.path is Observed (the kubelet allocates the
	// devices; nothing could enforce a cordon).
	// +optional
	// +listType=map
	// +listMapKey=deviceID
	// +kubebuilder:validation:MaxItems=128
	Cordons []DeviceCordon `json:"cordons,omitempty"`
}

// DeviceCordon takes one device out of service.
type DeviceCordon struct {
	// deviceID is the ID of the cordoned device, as the device plugin reports it.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	DeviceID string `json:"deviceID"`

	// reason says why the device is cordoned, for other administrators.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Reason string `json:"reason,omitempty"`
}

// PluginState is whether a device plugin is connected for a resource.
// +kubebuilder:validation:Enum=Registered;Disconnected
type PluginState string

const (
	// PluginStateRegistered: a plugin is connected and streaming devices.
	PluginStateRegistered PluginState = "Registered"
	// PluginStateDisconnected: no plugin is connected; the devices are kept, unhealthy, for the
	// endpoint grace period.
	PluginStateDisconnected PluginState = "Disconnected"
)

// DeviceHealth is a device's health as its plugin reports it.
// +kubebuilder:validation:Enum=Healthy;Unhealthy
type DeviceHealth string

const (
	// DeviceHealthy is the device plugin API's "Healthy".
	DeviceHealthy DeviceHealth = "Healthy"
	// DeviceUnhealthy is any other reported health, or a device whose plugin is gone.
	DeviceUnhealthy DeviceHealth = "Unhealthy"
)

// DevicePath is how pods get a resource's devices on a node.
// +kubebuilder:validation:Enum=NodeCapacity;DRA;Observed
type DevicePath string

const (
	// DevicePathNodeCapacity is the device plugin path: the controller publishes the resource as
	// node capacity, the agent allocates devices to the pods bound to the node and the container
	// runtime injects them. A NodeDevice without a path is read as this one.
	DevicePathNodeCapacity DevicePath = "NodeCapacity"

	// DevicePathDRA: the agent is the resource's DRA driver. Its devices are published in
	// ResourceSlices, the scheduler allocates them to ResourceClaims (a pod's plain
	// extended-resource request too, through the DeviceClass's extendedResourceName) and the
	// kubelet prepares them through the agent. The node publishes no capacity for the resource.
	DevicePathDRA DevicePath = "DRA"

	// DevicePathObserved: the kubelet manages the resource's device plugin itself; the agent only
	// mirrors what the kubelet reports. kubedevice never writes the resource's node capacity.
	DevicePathObserved DevicePath = "Observed"
)

// EffectivePath is the path of a NodeDevice status: its path, or DevicePathNodeCapacity when the
// status names none (objects written before the field existed).
func (s *NodeDeviceStatus) EffectivePath() DevicePath {
	if s.Path == "" {
		return DevicePathNodeCapacity
	}
	return s.Path
}

// PluginStatus describes the device plugin serving the resource.
type PluginStatus struct {
	// endpoint is the plugin's socket path on the node.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Endpoint string `json:"endpoint,omitempty"`

	// state says whether a plugin is connected.
	// +required
	State PluginState `json:"state"`

	// since is when the plugin entered the state.
	// +optional
	Since *metav1.Time `json:"since,omitempty"`

	// preStartRequired is the plugin's DevicePluginOptions.PreStartRequired.
	// +optional
	PreStartRequired bool `json:"preStartRequired,omitempty"`

	// getPreferredAllocationAvailable is the plugin's
	// DevicePluginOptions.GetPreferredAllocationAvailable.
	// +optional
	GetPreferredAllocationAvailable bool `json:"getPreferredAllocationAvailable,omitempty"`
}

// DeviceHolder is the container a device is allocated to.
type DeviceHolder struct {
	// namespace of the pod.
	// +required
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace"`

	// podName is the name of the pod.
	// +required
	// +kubebuilder:validation:MaxLength=253
	PodName string `json:"podName"`

	// podUID is the UID of the pod.
	// +optional
	// +kubebuilder:validation:MaxLength=36
	PodUID string `json:"podUID,omitempty"`

	// containerName is the container holding the device.
	// +required
	// +kubebuilder:validation:MaxLength=63
	ContainerName string `json:"containerName"`

	// claimName is the DRA ResourceClaim, in namespace, the device is prepared for when the
	// resource is served through DRA; podName and containerName are empty then (the claim's
	// status.reservedFor names its pods).
	// +optional
	// +kubebuilder:validation:MaxLength=253
	ClaimName string `json:"claimName,omitempty"`
}

// DeviceStatus is one device of the resource.
type DeviceStatus struct {
	// id is the device ID the plugin reports.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	ID string `json:"id"`

	// health is the device's health.
	// +required
	Health DeviceHealth `json:"health"`

	// reason is a CamelCase word explaining the health (Healthy, PluginReportedUnhealthy,
	// PluginDisconnected, AwaitingPluginRegistration, NotReportedByPlugin).
	// +optional
	// +kubebuilder:validation:MaxLength=128
	Reason string `json:"reason,omitempty"`

	// message is a human-readable explanation of the health.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`

	// lastTransitionTime is when the health last changed.
	// +optional
	LastTransitionTime *metav1.Time `json:"lastTransitionTime,omitempty"`

	// numaNodes are the NUMA nodes the device is attached to; empty when the plugin reports no
	// topology.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	NUMANodes []int64 `json:"numaNodes,omitempty"`

	// cordoned is true when spec.cordons names the device.
	// +optional
	Cordoned bool `json:"cordoned,omitempty"`

	// holder is the container the device is allocated to; absent when the device is free.
	// +optional
	Holder *DeviceHolder `json:"holder,omitempty"`
}

// CheckpointStatus says where the agent's view of the resource comes from.
type CheckpointStatus struct {
	// bootID is the node boot ID recorded in the agent's checkpoint.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	BootID string `json:"bootID,omitempty"`

	// lastWriteTime is when the agent last wrote its checkpoint.
	// +optional
	LastWriteTime *metav1.Time `json:"lastWriteTime,omitempty"`
}

// NodeDeviceStatus is the node agent's view of the resource on its node. The counts cover the
// devices listed in this shard.
type NodeDeviceStatus struct {
	// observedGeneration is the metadata.generation (spec.cordons) the status reflects.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// path is how pods get the resource's devices on the node: NodeCapacity (the device plugin
	// path: node capacity, allocation at bind time, injection by the runtime), DRA (ResourceSlices
	// and ResourceClaims; no node capacity) or Observed (the kubelet manages the plugin; the agent
	// only mirrors it). Empty means NodeCapacity. A resource is served by one path on a node.
	// +optional
	Path DevicePath `json:"path,omitempty"`

	// plugin describes the device plugin serving the resource.
	// +optional
	Plugin *PluginStatus `json:"plugin,omitempty"`

	// capacity is the number of devices listed, healthy or not.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Capacity int32 `json:"capacity"`

	// allocatable is the number of healthy, uncordoned devices while a plugin is connected; zero
	// while none is.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Allocatable int32 `json:"allocatable"`

	// allocated is the number of devices held by containers.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Allocated int32 `json:"allocated"`

	// unhealthy is the number of unhealthy devices.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Unhealthy int32 `json:"unhealthy"`

	// cordoned is the number of cordoned devices.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Cordoned int32 `json:"cordoned"`

	// devices lists the devices of this shard, sorted by ID.
	// +optional
	// +listType=map
	// +listMapKey=id
	// +kubebuilder:validation:MaxItems=128
	Devices []DeviceStatus `json:"devices,omitempty"`

	// checkpoint is the provenance of the agent's state.
	// +optional
	Checkpoint *CheckpointStatus `json:"checkpoint,omitempty"`

	// conditions: Registered, Healthy, AgentReady, RuntimeInjectionReady, and NodeCapacityPublished
	// on a resource the controller has held back from the Node's capacity.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// NodeDevice lists the devices of one device plugin resource on one node (or one shard of at most
// 128 of them), their health, and who holds them. It is written by the node agent of that node.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=nd,categories=devices
// +kubebuilder:validation:XValidation:rule="!has(self.status) || !has(self.status.path) || self.status.path != 'Observed' || !has(self.spec.cordons) || self.spec.cordons.all(c, has(oldSelf.spec.cordons) && oldSelf.spec.cordons.exists(o, o.deviceID == c.deviceID))",message="spec.cordons cannot be added to an Observed NodeDevice: the kubelet manages the resource's device plugin and nothing on the node could keep a cordoned device from being allocated (cordons can be removed)"
// +kubebuilder:selectablefield:JSONPath=`.spec.nodeName`
// +kubebuilder:selectablefield:JSONPath=`.spec.resourceName`
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.spec.nodeName`
// +kubebuilder:printcolumn:name="Resource",type=string,JSONPath=`.spec.resourceName`
// +kubebuilder:printcolumn:name="Path",type=string,JSONPath=`.status.path`
// +kubebuilder:printcolumn:name="Capacity",type=integer,JSONPath=`.status.capacity`
// +kubebuilder:printcolumn:name="Allocatable",type=integer,JSONPath=`.status.allocatable`
// +kubebuilder:printcolumn:name="Allocated",type=integer,JSONPath=`.status.allocated`
// +kubebuilder:printcolumn:name="Unhealthy",type=integer,JSONPath=`.status.unhealthy`
// +kubebuilder:printcolumn:name="Plugin",type=string,JSONPath=`.status.plugin.state`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type NodeDevice struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec names the node and resource.
	// +required
	Spec NodeDeviceSpec `json:"spec"`

	// status is written by the node agent.
	// +optional
	Status NodeDeviceStatus `json:"status,omitempty"`
}

// NodeDeviceList is a list of NodeDevices.
// +kubebuilder:object:root=true
type NodeDeviceList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []NodeDevice `json:"items"`
}
