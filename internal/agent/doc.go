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

// Package agent wires the node-agent core (internal/nodeagent) to Kubernetes: it starts the core,
// renews the agent's Lease, and wires the agent's flows, each a package of its own with its
// dependencies passed in explicitly:
//
//   - allocation: pods in, devices allocated by the core, a DeviceAllocation per pod out;
//   - mirror: the core's resource snapshots in, NodeDevices out, with the administrators' cordons
//     pushed back into the core;
//   - injection: what containers get when the runtime creates them (the NRI plugin, package
//     injection/nri) and the PreStartContainer calls that admit them;
//
// and package kube, what every flow says to the API server the same way (object names,
// server-side apply under the agent's field owner, the cache-then-API-server decision, the
// node's pods, the start-up gate). A flow imports kube and the core's types, never another flow:
// where one tells another something (allocation tells injection what a pod holds; the mirror
// tells it which resources are served and tells the core the cordons), it does so through a small
// interface it declares, and Setup hands it the implementation. The flows import nothing of this
// package; a new flow (a DRA kubelet plugin) goes next to them the same way.
//
// # Start-up
//
// Before anything is allocated, freed or mirrored, a runnable (startup.go) restores the core's
// checkpoint (the truth on the node). First, with --dra-node-selector, it reads the agent's Node
// from the cache (again with backoff while it cannot) and chooses from its labels, once, whether
// the node serves --dra-resources through DRA (drapath.go): the core's ServedByDRA follows that
// choice, and the DRA flow, or else the removal of the node's old ResourceSlices, starts once it
// is made. A corrupt checkpoint is reported (Warning event
// CheckpointCorrupt on the Node, kubedevice_agent_checkpoint_rebuilds_total) and the allocations
// are rebuilt from the node's DeviceAllocations (RestoreAllocations). The cordons of the node's
// NodeDevices are handed to the core, runtime injection is told which resources' plugins required
// PreStartContainer, the devices of pods that ended while the agent was away are freed against
// the synced pod cache, and the core starts serving plugins. Then the gate (kube.Gate) opens, the
// flows start, and the readiness check (ReadyCheck) passes while plugins can register. The
// PodResources API (internal/nodeagent/podresources) is served from then on, unless its socket
// path is empty.
//
// # Lease
//
// The agent renews the Lease kubedevice-agent-<node> in its namespace every 10 s: its only
// periodic write. The controller judges the agent alive from it.
//
// This package owns start-up, the Lease, Options and the wiring, the command line's included:
// Options.AddFlags registers the agent's flags and, through each flow's Options, the flows'. It allocates nothing and writes
// no NodeDevice or DeviceAllocation itself: the flows do.
//
// The RBAC markers below are the agent's whole permission set; `make manifests` turns them into
// config/rbac/agent. A ValidatingAdmissionPolicy further limits the agent's writes to objects
// whose spec.nodeName is its own node. Server-side apply needs create as well as patch when it
// creates an object.
//
// +kubebuilder:rbac:groups=kubedevice.io,resources=nodedevices,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=kubedevice.io,resources=nodedevices/status,verbs=patch
// +kubebuilder:rbac:groups=kubedevice.io,resources=deviceallocations,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;create;update,namespace=kubedevice-system
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create
package agent
