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

// NodeDevice condition types.
const (
	// NodeDeviceRegistered is True while at least one device plugin for the resource is connected
	// to the node agent. Reasons: ReasonPluginRegistered, ReasonPluginDisconnected,
	// ReasonAwaitingPluginRegistration.
	NodeDeviceRegistered = "Registered"

	// NodeDeviceHealthy is True when every device of the shard is healthy. Reasons:
	// ReasonAllDevicesHealthy, ReasonUnhealthyDevices, ReasonPluginDisconnected,
	// ReasonDeviceListRejected.
	NodeDeviceHealthy = "Healthy"

	// NodeDeviceAgentReady is True while the node agent renews its Lease. The agent writes it True
	// with a shard's first status (as the kubelet posts its node's Ready condition); the
	// controller judges the Lease and writes False once it expires or is missing, and True again
	// when it is renewed. Reasons: ReasonAgentLeaseValid, ReasonAgentLeaseExpired,
	// ReasonAgentLeaseMissing.
	NodeDeviceAgentReady = "AgentReady"

	// NodeDeviceRuntimeInjectionReady is True while the node agent is connected to the container
	// runtime as an NRI plugin, so that every container created on the node gets the envs,
	// mounts, device nodes and CDI devices of its allocation. It is the same on every NodeDevice
	// of a node. While it is False, containers are created without their devices, except those
	// of pods carrying the required-plugins annotation, which the runtime refuses to create.
	// Reasons: ReasonNRIConnected, ReasonNRISocketMissing, ReasonNRIDisconnected,
	// ReasonInjectionDisabled.
	NodeDeviceRuntimeInjectionReady = "RuntimeInjectionReady"

	// NodeDeviceNodeCapacityPublished says whether the controller publishes the resource in its
	// Node's status.capacity and status.allocatable. The controller writes it only when it holds
	// the resource back: False while another field manager of the Node's status (the kubelet's
	// device manager, for the 5-minute grace period of a device plugin that was registered with
	// the kubelet) owns the resource there, then True once the controller publishes it again. A
	// NodeDevice whose resource was never held back carries none, and it is removed when the
	// resource leaves the NodeCapacity path. Reasons: ReasonKubeletDeviceManagerOwnsResource,
	// ReasonAnotherManagerOwnsResource, ReasonResourceTakenBack, ReasonNodeCapacityPublished.
	NodeDeviceNodeCapacityPublished = "NodeCapacityPublished"
)

// NodeDevice condition reasons.
const (
	// ReasonPluginRegistered: a device plugin for the resource is connected and streaming devices.
	ReasonPluginRegistered = "PluginRegistered"
	// ReasonPluginDisconnected: the last device plugin disconnected; the resource is kept with zero
	// allocatable devices for the endpoint grace period, then removed.
	ReasonPluginDisconnected = "PluginDisconnected"
	// ReasonAwaitingPluginRegistration: the resource was restored from the checkpoint after an
	// agent restart and its plugin has not registered again yet.
	ReasonAwaitingPluginRegistration = "AwaitingPluginRegistration"
	// ReasonAllDevicesHealthy: every device reports Healthy.
	ReasonAllDevicesHealthy = "AllDevicesHealthy"
	// ReasonUnhealthyDevices: at least one device is unhealthy; the message counts them.
	ReasonUnhealthyDevices = "UnhealthyDevices"
	// ReasonDeviceListRejected: the node agent refused the plugin's latest ListAndWatch message as
	// a whole (the message says why, offending values quoted); the devices listed are those of the
	// last message it accepted, none if it accepted none.
	ReasonDeviceListRejected = "DeviceListRejected"
	// ReasonAgentLeaseValid: the node agent's Lease is being renewed.
	ReasonAgentLeaseValid = "AgentLeaseValid"
	// ReasonAgentLeaseExpired: the node agent's Lease expired; the node's kubedevice resources are
	// published as zero until the agent returns.
	ReasonAgentLeaseExpired = "AgentLeaseExpired"
	// ReasonAgentLeaseMissing: the node agent has no Lease.
	ReasonAgentLeaseMissing = "AgentLeaseMissing"
	// ReasonNRIConnected: the node agent is registered with the container runtime's NRI socket
	// and adjusts containers at creation.
	ReasonNRIConnected = "NRIConnected"
	// ReasonNRISocketMissing: there is no NRI socket at the configured path (the runtime has NRI
	// disabled, is not running, or the socket's directory is not mounted into the agent); the
	// agent keeps looking for it.
	ReasonNRISocketMissing = "NRISocketMissing"
	// ReasonNRIDisconnected: the socket exists but the agent is not registered with it: the
	// connection failed or closed (the runtime restarted, or disconnected the plugin after a
	// request timeout); the agent reconnects with backoff.
	ReasonNRIDisconnected = "NRIDisconnected"
	// ReasonInjectionDisabled: the agent runs with --runtime-injection=none and adjusts no
	// container; something else must give containers their devices.
	ReasonInjectionDisabled = "InjectionDisabled"
	// ReasonKubeletDeviceManagerOwnsResource: the kubelet (field manager "kubelet") owns the
	// resource's key in the Node's status.capacity or status.allocatable with a value above zero:
	// its device manager still has an entry for the resource, a plugin registered with it or one
	// that stopped less than 5 minutes ago (its grace period; a kubelet restart starts it again
	// from its checkpoint). The kubelet rewrites its value every node status update, so the
	// controller leaves the resource to it until the kubelet sets it to 0 at the end of the grace
	// period; pods asking for it stay Pending meanwhile.
	ReasonKubeletDeviceManagerOwnsResource = "KubeletDeviceManagerOwnsResource"
	// ReasonAnotherManagerOwnsResource: a field manager other than the kubelet and kubedevice (an
	// administrator's kubectl patch, another extender) owns the resource's key in the Node's
	// status.capacity or status.allocatable with a value above zero; the message names it. The
	// controller publishes the resource once that manager removes its value or sets it to 0.
	ReasonAnotherManagerOwnsResource = "ResourceOwnedByAnotherManager"
	// ReasonResourceTakenBack: after the controller published the resource, another field
	// manager set it to 0, as a kubelet does that restarted during the grace period of a plugin
	// it still knows from its checkpoint. The controller publishes it again once the kubelet's
	// grace period has run out since (the message says when); until then pods asking for it stay
	// Pending.
	ReasonResourceTakenBack = "ResourceTakenBack"
	// ReasonNodeCapacityPublished: the controller publishes the resource in the Node's capacity
	// again, after holding it back.
	ReasonNodeCapacityPublished = "Published"
)

// Device health reasons, as carried by DeviceStatus.Reason.
const (
	// DeviceReasonHealthy: the plugin reports the device Healthy.
	DeviceReasonHealthy = "Healthy"
	// DeviceReasonPluginReportedUnhealthy: the plugin reports the device with a health other than
	// Healthy.
	DeviceReasonPluginReportedUnhealthy = "PluginReportedUnhealthy"
	// DeviceReasonPluginDisconnected: the plugin's ListAndWatch stream ended; its devices are
	// unhealthy until it registers again.
	DeviceReasonPluginDisconnected = "PluginDisconnected"
	// DeviceReasonAwaitingPluginRegistration: the device was restored from the checkpoint and its
	// plugin has not registered again yet.
	DeviceReasonAwaitingPluginRegistration = "AwaitingPluginRegistration"
	// DeviceReasonKubeletNotAllocatable: on an observed node (status.path Observed), the kubelet
	// knows the device but does not list it as allocatable: its plugin reports it unhealthy, or
	// the plugin is gone. The kubelet does not say which, nor why. Also the reason of such a
	// device in the unhealthyDevices of the DeviceAllocation of a pod holding it.
	DeviceReasonKubeletNotAllocatable = "KubeletNotAllocatable"
	// DeviceReasonNotReported: a pod holds the device and its plugin no longer reports it (the
	// plugin dropped its ID). It is shown, unhealthy and held, until the pod frees it; it is
	// never allocated to another pod while held, even if the plugin reports it again.
	DeviceReasonNotReported = "NotReportedByPlugin"
	// DeviceReasonResourceRemoved: in a DeviceAllocation's unhealthyDevices, the device's resource
	// is gone from the node: its plugin did not register again within the grace period. The pod
	// keeps the device until it ends.
	DeviceReasonResourceRemoved = "ResourceRemoved"
)

// DeviceAllocation condition types.
const (
	// DeviceAllocationAllocated is True when every container of the pod holds the devices it
	// requested. Reasons: ReasonAllocated, ReasonInsufficientDevices, ReasonPluginUnavailable,
	// ReasonAllocateFailed, ReasonTopologyAffinityError.
	DeviceAllocationAllocated = "Allocated"

	// DeviceAllocationReleased is True once the pod has ended and its devices were freed.
	// Reasons: ReasonPodTerminated, ReasonPodDeleted.
	DeviceAllocationReleased = "Released"

	// DeviceAllocationHealthy is True while every device the pod holds is healthy, False while one
	// is not (status.unhealthyDevices names them, with the reasons); the node agent writes it with
	// the Allocated condition once the pod holds devices. Reasons: ReasonAllDevicesHealthy,
	// ReasonUnhealthyDevices.
	DeviceAllocationHealthy = "Healthy"

	// DeviceAllocationConflict is set by the controller when another live DeviceAllocation holds
	// one of this allocation's devices. Reason: ReasonDeviceHeldTwice.
	DeviceAllocationConflict = "Conflict"
)

// DeviceAllocation condition reasons.
const (
	// ReasonAllocated: the devices are allocated and checkpointed on the node.
	ReasonAllocated = "Allocated"
	// ReasonInsufficientDevices: fewer healthy, free devices exist than requested.
	ReasonInsufficientDevices = "InsufficientDevices"
	// ReasonPluginUnavailable: the resource's plugin is not registered (yet); the agent retries.
	ReasonPluginUnavailable = "PluginUnavailable"
	// ReasonAllocateFailed: the plugin's Allocate, GetPreferredAllocation or PreStartContainer
	// call failed.
	ReasonAllocateFailed = "AllocateFailed"
	// ReasonTopologyAffinityError: the topology policy refused the pod (no NUMA-aligned devices).
	ReasonTopologyAffinityError = "TopologyAffinityError"
	// ReasonPodTerminated: the pod reached Succeeded or Failed.
	ReasonPodTerminated = "PodTerminated"
	// ReasonPodDeleted: the pod no longer exists.
	ReasonPodDeleted = "PodDeleted"
	// ReasonDeviceHeldTwice: two live DeviceAllocations name the same device.
	ReasonDeviceHeldTwice = "DeviceHeldTwice"
)

// Event reasons of the node agent.
const (
	// EventReasonDeviceAllocationFailed: Warning on a pod whose devices could not be allocated;
	// the message is the device manager's, as the kubelet would report it.
	EventReasonDeviceAllocationFailed = "DeviceAllocationFailed"
	// EventReasonDeviceUnhealthy: Warning on a pod one of whose devices turned unhealthy (or
	// unhealthy for another reason); the message names the container, the device and the reason.
	// Not for the devices of DRA ResourceClaims: the kubelet shows their health in the pod's
	// status.containerStatuses[].allocatedResourcesStatus.
	EventReasonDeviceUnhealthy = "DeviceUnhealthy"
	// EventReasonDeviceHealthy: Normal on a pod one of whose devices is healthy again.
	EventReasonDeviceHealthy = "DeviceHealthy"
	// EventReasonCheckpointCorrupt: Warning on a Node whose agent found its checkpoint corrupt,
	// quarantined it and rebuilt its allocations from the node's DeviceAllocations.
	EventReasonCheckpointCorrupt = "CheckpointCorrupt"
)
