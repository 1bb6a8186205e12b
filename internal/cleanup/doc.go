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

// Package cleanup removes what kubedevice leaves in a cluster once its agents and controller are
// gone: the extended resources the controller published in the Nodes' status.capacity and
// status.allocatable, the NodeDevices (held by the controller's kubedevice.io/node-capacity
// finalizer, which nothing would remove any more), the DeviceAllocations, and for DRA the
// DeviceClasses the controller kept and the ResourceSlices of the kubedevice.io driver. It is `kubedevice
// cleanup`, which the Helm chart runs as a post-delete hook.
//
// Run first waits until no controller runs: a controller that still holds its leader election
// Lease would publish the capacity again. Then it reads which resources kubedevice published on
// each Node (the keys the controller's field manager owns under status, and the resources of the
// node's NodeDevices), removes them from the Node, and only then deletes the DeviceAllocations and
// the NodeDevices, so a run that is interrupted still finds every resource the next time. Every
// step is idempotent, and a missing or terminating CRD is not an error.
//
// The NodeDevices and DeviceAllocations are mirrors: an agent installed again rebuilds them from
// the checkpoint it keeps on its node. Only the cordons administrators wrote into the
// NodeDevices' spec exist nowhere else; Run logs those it deletes.
//
// The RBAC markers below are what Run needs, and all it needs; `make manifests` turns them into
// config/rbac/cleanup, which the chart's post-delete hook grants (test/install checks they agree).
// The Role is for the controller's leader election Lease, in the controller's namespace.
//
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list
// +kubebuilder:rbac:groups="",resources=nodes/status,verbs=patch
// +kubebuilder:rbac:groups=kubedevice.io,resources=nodedevices,verbs=get;list;patch;delete
// +kubebuilder:rbac:groups=kubedevice.io,resources=deviceallocations,verbs=list;delete
// +kubebuilder:rbac:groups=resource.k8s.io,resources=deviceclasses,verbs=list;delete
// +kubebuilder:rbac:groups=resource.k8s.io,resources=resourceslices,verbs=list;delete
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get,resourceNames=kubedevice-controller.kubedevice.io,namespace=kubedevice-system
package cleanup
