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

// Package nodeagent is the device manager core of the node agent: the
// kubelet's pkg/kubelet/cm/devicemanager outside the kubelet. It is a plain Go
// library that knows nothing of the Kubernetes API.
//
// # Plugins and endpoints
//
// Manager runs a registration.Server (kubelet.sock and the plugins_registry
// watcher) and implements its Handler. Each connected plugin is an endpoint
// (endpoint.go), kept per resource and keyed by socket path, so a resource can
// have several endpoints during a rolling update (kubernetes #135437). The
// newest registration is the primary endpoint and serves Allocate,
// GetPreferredAllocation and PreStartContainer. Every accepted ListAndWatch
// message, from any endpoint of the resource, replaces its whole device set.
// Callbacks carry a client identity (registration.ClientID), so the late
// stream end or message of a replaced connection never touches a newer one. A
// registration on a socket path that already has an endpoint takes it over.
//
// When a resource's last endpoint goes away, its devices become unhealthy
// (ReasonPluginDisconnected) and the resource stays, with nothing
// allocatable, for Config.EndpointGracePeriod (5 min); then a timer removes
// it, writes the checkpoint and announces it to subscribers.
//
// # Device state
//
// All device state is behind Manager.mu, in one resourceState per resource
// (devices.go): every device with health, reason, message, last transition
// time and NUMA nodes; the healthy and unhealthy ID sets; the endpoints and
// the primary one; the plugin state (Registered / Disconnected, since when).
// Timestamps come from Config.Clock. A ListAndWatch message with empty,
// duplicate, too long (> 253 bytes) or invalid UTF-8 IDs, or more than
// 32,768 devices (MaxDevicesPerResource), is rejected whole (the previous set
// is kept), logged, counted in kubedevice_device_plugin_invalid_updates_total
// and shown in the resource's snapshot (Rejected) until a message is accepted.
// IDs with control characters, NUL included, are accepted, as the kubelet
// accepts them, and carried as the plugin's exact bytes.
//
// Readers: GetAllocatableDevices (healthy devices with topology, for the
// PodResources API), Snapshot/Snapshots (read-only copies for the NodeDevice
// mirror, devices sorted by ID, with capacity and allocatable counted as the
// kubelet's GetCapacity counts them) and Subscribe (which resources changed, coalesced, never
// blocking the manager).
//
// # Allocation
//
// Allocate(pod, container) and AllocatePod(pod) follow the kubelet's
// Allocate, GetTopologyHints and devicesToAllocate step by step, init
// containers first, one container at a time through one pipeline, in
// allocate.go in this order:
//
//	requests  containerRequests: its limits that are device plugin resources
//	hints     admitTopologyLocked: the policy's NUMA affinity (topology_hints.go)
//	pick      devicesToAllocateLocked, per resource: the same number as held
//	          ("changed request"); the health checks in the kubelet's order;
//	          pickLocked: the devices of the pod's earlier regular init
//	          containers (sidecars and app containers keep theirs; reusableLocked
//	          recomputes the pool from the committed state), the aligned
//	          devices, the plugin's GetPreferredAllocation
//	          with the kubelet's arguments (available = aligned ∪ picked or
//	          available ∪ picked, must-include = picked, size = the whole
//	          request; answers outside the candidates ignored), the rest
//	reserve   picker.take: each device in the poddevices.Store as it is picked
//	plugin    callAllocate: the plugin's Allocate, without the lock
//	commit    commit: poddevices.Store.Commit with the plugin's response
//
// then allocTxn.finish writes the checkpoint (fsync) and notifies, or rolls
// back: unlike the kubelet's, allocation is a transaction. PrepareClaim
// (claims.go) shares the plugin and commit steps. A device reserved as soon
// as it is picked cannot be handed by a concurrent allocation or by garbage
// collection to another pod while an RPC runs (kubernetes #137534); after an RPC the
// candidates are checked again. Any failure rolls the reservation back and
// releases what the same call committed (earlier resources of the container,
// earlier containers of the pod for AllocatePod), so nothing is left
// behind (#130172). Calls for one pod are serialized; calls for different
// pods run concurrently, and no lock is held across an RPC, so a hung plugin
// delays only its own resource. Every RPC has a deadline
// (Config.AllocateTimeout 30 s, PreferredAllocationTimeout 10 s,
// PreStartTimeout 30 s); a failed or timed-out GetPreferredAllocation is
// logged and the manager chooses itself (the kubelet fails the pod).
// Checkpoint writes run outside the lock and are shared by concurrent
// transactions (group commit); Allocate returns once its allocation is on
// disk.
//
// A container that holds its devices is left alone (no RPC): the kubelet
// skips a running container after its own restart, and the agent, which
// cannot see the runtime, allocates before containers exist. AllocatePod of
// a fully allocated pod does nothing observable. Requests for 0 devices,
// native resources and extended resources a DRA claim serves are skipped, and
// so, as the kubelet's isDevicePluginResource rule says, are extended
// resources that are not device plugin resources: never registered nor
// restored from the checkpoint, and with no device of them held (an
// administrator's node-level resource, or another device manager's). The
// kubelet admits the pod against the Node's capacity for those. While a
// corrupt checkpoint awaits its rebuild, nothing is skipped: every request is
// refused, retryably.
//
// Refusals are *AllocationError values whose message is the kubelet's:
//
//	refusal                                                  reason               retryable
//	cannot allocate unregistered device %s (devices of a
//	  resource whose plugin is gone are still held)          PluginUnavailable    yes
//	no healthy devices present; ... (no live endpoint, or
//	  one that has not sent its first device list)           PluginUnavailable    yes
//	no healthy devices present; ... (serving plugin)         InsufficientDevices  no
//	previously allocated devices are no longer healthy; ...  InsufficientDevices  no
//	requested number of devices unavailable for %s. ...      InsufficientDevices  no
//	unexpectedly allocated less resources than required. ... InsufficientDevices  yes (lost a race during an RPC)
//	pod %q container %q changed request for resource ...     AllocateFailed       no
//	Resources cannot be allocated with Topology locality     TopologyAffinityError no
//	Allocate on a stopped endpoint                           PluginUnavailable    yes
//	Allocate RPC: Unavailable, DeadlineExceeded, Canceled,
//	  ResourceExhausted, Aborted                             AllocateFailed       yes
//	Allocate RPC: any other error                            AllocateFailed       no
//	no containers return in allocation response %v           AllocateFailed       no
//	checkpoint write failed                                  AllocateFailed       yes
//	checkpoint corrupt, not rebuilt yet                      PluginUnavailable    yes
//
// This follows kubernetes PR #139959: a resource whose plugin is not (yet)
// serving defers the pod, a serving plugin without devices refuses it.
//
// Topology (topology_hints.go): containerHintsLocked and podHintsLocked are
// the kubelet's hint provider (pod-level request: resourcehelper.PodLimits),
// computed where allocation needs them rather than exported: the agent
// admits pods itself, no topology manager asks for hints.
// At allocation the configured policy merges the container's hints
// (container scope) or the pod's, once per pod (pod scope), and refuses an
// unaligned allocation under restricted and single-numa-node; the affinity is
// kept per pod and container and used to split the available devices. Policy
// none allocates without affinity, as the kubelet without a topology manager.
//
// GetDeviceRunContainerOptions (run_options.go) allocates a container of an
// unfinished pod that misses its devices, calls PreStartContainer where the
// plugin asks for it, and returns the merged options (poddevices decides the
// merge, deterministically; conflicts are logged). The kubelet calls it before
// every start of a container, restarts included, so PreStartContainer runs
// each time. A caller that cannot block container creation on an RPC (the
// agent answers the runtime's NRI hook from memory) calls the step alone,
// PreStartContainer(pod, container), ahead of each start, and reads the
// options from PodAllocation; PreStartRequired(resource) says which
// resources need it. UpdateAllocatedDevices
// (gc.go) frees the pods not in the caller's list of active pods; it never
// frees an allocation in flight. SetCordons keeps devices from being
// allocated and counted as allocatable. PodAllocations and snapshots (a
// Holder per device) show committed allocations only.
//
// # DRA claims
//
// PrepareClaim and UnprepareClaim (claims.go) are the DRA driver's prepare
// and unprepare: exactly the devices the scheduler chose for a ResourceClaim,
// each known, healthy, not cordoned and held by nobody, allocated as a
// transaction like a container's (one Allocate per request and resource,
// PreStartContainer where required, the checkpoint fsync'd, rolled back on
// failure), idempotent, and re-allocated after a node reboot. A claim lives in
// the same poddevices.Store as the pods, under the key "claim:<UID>" (never a
// pod UID), so a device is never held through both paths; the pods' garbage
// collection, PodAllocations, PodsHolding and the PodResources API skip claim
// keys. Config.ServedByDRA names the resources served through DRA: only their
// devices are prepared for claims, and they are refused to pods that do not
// hold them already. Snapshots name a claim holder with DeviceHolder.Claim.
//
// # Checkpoint, restart and reboot
//
// persist.go keeps the checkpoint (Config.CheckpointPath, in Config.StateDir,
// never in the plugin directory the plugins mount) as the checkpoint
// package's Journal: a snapshot of the whole state with the node's boot ID,
// then appended frames, each the new state of the pods and resources that
// changed (dirtyPods, dirtyResources), so a write costs what changed, not
// what is registered or held. A frame is appended and fdatasync'd after each
// committed allocation (durable before Allocate returns; concurrent callers
// share one flush), appended without waiting for the disk after frees (the
// next flush carries it), and when a resource's registered device IDs change
// (not on health flaps: the kubelet writes on every ListAndWatch message, but
// the file records only which devices exist) or a resource is removed. The
// first write of a process, a restore and a failed write take a snapshot
// instead, and so does compaction when the frames outgrow the snapshot.
// Nothing is written before the checkpoint was restored, so an existing file
// is never overwritten with empty state.
//
// RestoreCheckpoint (before Start; Start does it otherwise) restores the
// allocations and the resources, which stay unallocatable (retryably) until
// their plugin registers again. It reads files of format 1 (JSON) too, and
// one left in the plugin directory by an earlier version, and converts them
// at once. A last frame the agent did not finish writing is reported
// (RestoreResult.TornTail, a metric, a saved copy) and left out: nobody was
// told it was durable. Any other damage is corruption: the file is quarantined and counted,
// the error wraps the *checkpoint.CorruptError, and allocation is refused
// until RestoreAllocations has rebuilt the state from the DeviceAllocation
// objects and written a fresh checkpoint. After a node reboot (boot ID
// changed) nothing is running: the restored allocations keep their devices,
// but AllocatePod runs the plugin's Allocate again with the same IDs once the
// plugin is back, and keeps the new response. Which allocations still wait
// for that is recorded next to the checkpoint (<checkpoint>.reallocate), so
// an agent restart in between does not forget it. ImportKubeletCheckpoint
// migrates the kubelet's kubelet_internal_checkpoint.
//
// # Internals
//
// All state is behind Manager.mu. Helpers named ...Locked expect it held;
// endpoint RPCs are called without it. Call m.notifyLocked(name) after any
// change a snapshot would show, and after any change the checkpoint records
// call m.podChangedLocked(uid) or m.resourceChangedLocked(name) (or
// m.stateReplacedLocked()), then m.persist() without the lock.
package nodeagent
