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

// Package kube is what every flow of the agent says to the API server the same way: the names of
// the objects the agent writes (NodeDeviceName, DeviceAllocationName, LabelValue), server-side
// apply and delete under the agent's field owner with the write counter
// kubedevice_agent_api_writes_total (Apply, ApplyStatus, ApplyWhole for a kind without a status
// subresource, Delete), the decision "up to date in the
// cache, else read from the API server and decide again — only if the agent wrote the object
// lately, else the cache shows it as it is" (Fresh, with the memory of writes Written),
// the node's pods as the cache
// has them (Pods) and what the flows read of a pod (RequestedResources, RuntimeUID, ...), the
// action that keeps distinct Warning events apart (EventAction), and the start-up gate every flow
// waits on (Gate). What a DeviceAllocation says is computed here for both flows that write one
// (deviceallocation.go: the allocation flow and observe mode), the health of the devices it lists
// included (health.go: HealthView, the Healthy condition and status.unhealthyDevices from a core's
// snapshots, and the pods to reconcile when a resource's devices change).
//
// It owns no controller and no state of its own but the gate, the flows' memories of writes and
// their health views. It may not import the core's manager (of internal/nodeagent it knows only
// the types a core hands out, PodAllocation and ResourceSnapshot, and registration's rule of what
// an extended resource is) nor any other package of the agent: the flows (allocation, mirror,
// injection, observe) and the agent's wiring import it, never the other way round.
package kube
