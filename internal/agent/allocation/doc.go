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

// Package allocation is the agent's allocation flow: pods in, devices allocated by the core, a
// DeviceAllocation out.
//
// The pod controller, keyed by pod namespace/name, allocates the devices of each active pod that
// limits an extended resource (Core.AllocatePod; init containers first; a resource no plugin
// serves is skipped, as the kubelet does, and the pod gets no DeviceAllocation until a plugin
// registers it), frees those of pods that ended, disappeared or were replaced
// (Core.UpdateAllocatedDevices with the node's active pods from the synced cache), and keeps one
// DeviceAllocation per pod, named kube.DeviceAllocationName(node, pod, UID). A reconcile of an active
// pod reads in steps (allocate.go): take the outcome of the pod's allocation attempt (or start
// one and return), compute the DeviceAllocation's status once
// (desiredStatus), decide from the cache or else the API server whether it must be written
// (kube.Fresh), prepare the first starts of newly allocated containers (PreStart), tell runtime
// injection what the pod's containers get (Injection), write the metadata and the status with
// server-side apply, report a refusal, and requeue.
//
// A refusal is an Allocated=False condition with the core's reason and a DeviceAllocationFailed
// Warning event on the pod, once per distinct refusal. A refused pod is never failed (the kubelet
// owns its phase, and the agent allocates before the kubelet admits it): retryable refusals are
// retried with backoff, and every change of a resource (a plugin registering, devices freed or
// healthy again) retriggers the pods still waiting for it. An unchanged refusal is never
// rewritten, and a different refusal of a pod already refused waits for the pod's pace
// (refusals.go: 1 s after the first, doubling up to 30 s), so a flapping plugin cannot make the
// agent rewrite a waiting pod's DeviceAllocation, or report an event, at every flap.
//
// No reconcile waits on a plugin's Allocate. Core.AllocatePod runs as an attempt beside the workers
// (attempts.go), one per pod, at most attemptsPerResource at once per resource asked for; its end
// requeues the pod, whose next reconcile takes the outcome; a refusal of an attempt made before a
// change of one of the pod's resources (its plugin registering, its first devices arriving) is not
// taken, and the retriggered pod is tried again at once. A pod asking for a resource with no room
// is parked until an attempt of that resource ends. A plugin hanging in Allocate thus delays only
// the pods of its own resource, and a pod asking for several resources is still allocated all at
// once or not at all, by one AllocatePod call. When the agent stops, no attempt starts and those in
// flight are cancelled and awaited.
//
// A pod holding devices through DRA ResourceClaims the agent prepared (the DRA flow) gets them
// listed in its DeviceAllocation too, by container (claims.go: Core.ClaimNamed, the containers'
// resources.claims, the scheduler's extended-resource request mappings); they are never
// recorded for injection nor prepared here, the kubelet hands them to the runtime through CDI.
//
// A pod's DeviceAllocation also says whether every device it holds is healthy (package kube's
// HealthView, which observe mode uses the same way): the Healthy condition and
// status.unhealthyDevices, each with the reason (PluginReportedUnhealthy, NotReportedByPlugin,
// ResourceRemoved); a plugin disconnected within its grace period, or not yet registered again
// since an agent restart, says nothing new, and the devices keep what the object said. The health
// is read from a view of the core's devices that are not healthy, refreshed when the core
// announces a change of a resource; then only the pods whose DeviceAllocation no longer shows it
// are reconciled (HealthView.Changed), so a flip costs one write per DeviceAllocation holding the
// device and none for a device no pod holds. Each change the DeviceAllocation records is told to
// the pod (healthevents.go): a DeviceUnhealthy Warning or a DeviceHealthy Normal event naming the
// containers, the device and the reason, for the device plugin path's devices only (the kubelet
// shows the health of DRA claims' devices in the pod's allocatedResourcesStatus).
//
// When a pod ends its DeviceAllocation is marked Released, then deleted. PodAllocationsOf turns
// DeviceAllocations back into the core's records, for the agent's start-up to rebuild a corrupt
// checkpoint.
//
// It owns the pod controller, the DeviceAllocation's status (status.go, pure functions), the
// health events and the metrics kubedevice_agent_allocation_failures_total and
// kubedevice_agent_refused_pods (the pods refused now, which the refusal pacer knows). It may not
// touch NodeDevices, the NRI index or the PreStartContainer grants but through its Injection and
// PreStart interfaces, nor any method of the core but those of its Core interface.
package allocation
