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

// Package dra is the agent's DRA flow: the agent is the DRA driver kubedevice.io for every
// resource served through DRA on its node (--dra-resources), whatever unmodified device plugin
// serves it.
//
// It is built on k8s.io/dynamic-resource-allocation: kubeletplugin registers the driver with the
// kubelet's plugin watcher and serves the DRA gRPC service (NodePrepareResources,
// NodeUnprepareResources) and the resource health service; ResourceSlices are published through
// resourceslice's controller, which creates, updates and deletes them. This package supplies the
// kubeletplugin.DRAPlugin (driver.go) and what is published (slices.go):
//
//   - one pool per resource, named after it (PoolName), devices named by DeviceName (a DNS label
//     deterministically derived from the plugin's ID, hash-suffixed when the ID had to change),
//     with the attributes kubedevice.io/resourceName, kubedevice.io/deviceID (the plugin's ID as
//     it is) and resource.kubernetes.io/numaNode, cut into slices of MaxDevicesPerSlice (64, the
//     limit of slices with taints);
//   - NoSchedule taints for an unhealthy device (value: the reason), a cordoned one, one whose
//     plugin is disconnected, and one a pod still holds through the device plugin path;
//   - the devices' health sent to the kubelet's health service (WatchHealthStatus), which shows
//     it in the pod status of the claims' holders (allocatedResourcesStatus): Healthy, Unhealthy
//     with the reason, or Unknown while the plugin is disconnected or not registered again since
//     an agent restart;
//   - republished on every change the core announces (Subscribe), all pools at once: the library
//     writes only what differs;
//   - through the library's resourceslice controller, started with the agent rather than at the
//     first publish (publisher.go): it takes a second to sync its informer, which a plugin's first
//     registration used to wait for. While it syncs at an agent's start, the slices an earlier
//     run left get the taints of the restored state at once (stale.go), so a killed agent's
//     devices are not offered untainted for that second while their plugins are away.
//
// Prepare turns each allocation result of the driver into a plugin device ID (through the
// published names, or through the claim's record in the core after a restart) and calls the
// core's PrepareClaim, which allocates exactly those devices — one Allocate per request and
// resource, PreStartContainer where the plugin requires it, the checkpoint fsync'd — or refuses
// them. The claim's CDI spec (cdi.go; kind kubedevice.io/device, one file per claim,
// <CDIDir>/kubedevice.io-device_<claim UID>.json) carries each response's envs, device nodes and
// mounts; the CDI devices the plugin returned itself are passed on; annotations have no CDI
// equivalent and are dropped with a log line. Unprepare removes the spec and frees the devices.
// Both are idempotent, and survive an agent restart: the core's checkpoint holds the claims. Each
// claim's preparation is counted by result in kubedevice_agent_dra_prepare_total (metrics.go).
//
// The flow uses the core only through its Core interface, and imports no other flow nor
// internal/agent.
//
// +kubebuilder:rbac:groups=resource.k8s.io,resources=resourceslices,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=resource.k8s.io,resources=resourceclaims,verbs=get;list;watch
package dra
