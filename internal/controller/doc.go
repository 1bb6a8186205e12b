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

// Package controller holds the cluster reconcilers:
//
//   - node-capacity (per Node): publishes each kubedevice resource in the Node's status.capacity
//     and status.allocatable as the allocatable devices of its NodeDevices summed over shards, or
//     only the devices pods hold while the node's agent Lease is expired (nothing free, the
//     running pods still admissible by a restarting kubelet); keeps a resource at "0" once its NodeDevices
//     are gone (the kubedevice.io/node-capacity finalizer holds the last one until then); deletes
//     the NodeDevices of deleted Nodes. It never writes a resource whose key another field manager
//     owns with a count (the kubelet's device manager during the grace period of a plugin that was
//     registered with it, node_claims.go): it says so with the NodeCapacityPublished condition of
//     the resource's NodeDevices, an event on the Node and the kubedevice_node_capacity_held
//     gauge, and publishes once that manager has set the resource to 0 or removed it.
//   - nodedevice (per NodeDevice): puts that finalizer on where the agent has not (the agent puts it
//     on with the object), and keeps the AgentReady condition in line with the agent's Lease: the
//     agent seeds it True with a shard's first status, the controller (server-side apply, field
//     owner kubedevice-controller) writes False when the Lease expires and True when it is back,
//     and True on a shard whose agent wrote its status without it. The same judgement of each
//     node's Lease is the gauge kubedevice_node_agent_ready, collected from the cache at each
//     scrape (agent_metric.go).
//   - deviceallocation (per DeviceAllocation): deletes allocations whose pod and agent are both
//     gone, and marks live allocations holding the same device with a Conflict condition and a
//     Warning event.
//   - deviceclass (per resource name): keeps one DeviceClass per extended resource that some node
//     serves through DRA (a NodeDevice with status.path DRA) — selecting kubedevice's devices of
//     the resource, with extendedResourceName set so plain resources.limits requests are served —
//     and deletes it once no node does. An administrator's own DeviceClass for the resource wins.
//   - remediation (per NodeDevice of a resource --remediate names; off by default): evicts, through
//     the Eviction API (PodDisruptionBudgets hold), the pods holding a device that stayed unhealthy
//     past the resource's grace period, at most one eviction per node and one in the cluster per
//     interval (remediation.Limits), each with an event on the pod and the NodeDevice and the
//     kubedevice_remediation_evictions_total counter. It is the only writer of evictions: the node
//     agents have no right to evict.
//
// Node capacity is published only for the node-capacity path: a resource a node serves through
// DRA is withdrawn from that Node, and an observed one (the kubelet manages it) is never written.
//
// Lease expiry is judged by an injected clock, and the reconcilers come back at the expiry
// (RequeueAfter on that clock) instead of polling.
//
// The RBAC markers below are the controller's whole permission set; `make manifests` turns them
// into config/rbac/controller. Leader election needs a Role of its own in the controller's
// namespace (config/rbac/leader_election_role.yaml). RBAC grants nodes/status whole, so
// config/admission/controller_node_status.yaml holds the controller's node writes to extended
// resources in status.capacity and status.allocatable.
//
// +kubebuilder:rbac:groups=kubedevice.io,resources=nodedevices,verbs=get;list;watch;patch;delete
// +kubebuilder:rbac:groups=kubedevice.io,resources=nodedevices/status,verbs=patch
// +kubebuilder:rbac:groups=kubedevice.io,resources=deviceallocations,verbs=get;list;watch;patch;delete
// +kubebuilder:rbac:groups=resource.k8s.io,resources=deviceclasses,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=nodes/status,verbs=patch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=pods/eviction,verbs=create
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch,namespace=kubedevice-system
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create
package controller
