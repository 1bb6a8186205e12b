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

// Package observe is the agent's observe mode (--mode=observe): the kubelet keeps managing its own
// device plugins, and the agent reads, read-only, what the kubelet reports and mirrors it into the
// same NodeDevice and DeviceAllocation objects.
//
// The Observer (observer.go) reads, every second, the kubelet's PodResources API (List,
// GetAllocatableResources; kubelet.go), its device manager checkpoint with the kubelet-format
// reader of internal/nodeagent/checkpoint, and the Node and its pods from the cache, and computes
// the view (view.go, pure functions): per resource the snapshot the NodeDevice mirror reads of a
// core (nodeagent.ResourceSnapshot), per pod what it holds (nodeagent.PodAllocation). It is the
// mirror's Core in observe mode, so the mirror's status computation, settling and pacing are the
// same code as in manage mode. The allocations controller (allocations.go) writes a
// DeviceAllocation per active pod holding observed devices with the status computation package
// kube shares with the allocation flow, and releases it when the pod ends. Its Healthy condition
// and status.unhealthyDevices are the allocation flow's too (kube.HealthView over the Observer's
// snapshots; a held device the kubelet no longer lists as allocatable is unhealthy,
// KubeletNotAllocatable): when the Observer announces that resources changed, only the pods whose
// DeviceAllocation no longer shows its devices' health are reconciled, one write each. No event
// is sent to the pod: observe mode only looks.
//
// What the kubelet does not say (which devices are unhealthy, why, whether a plugin is gone) and
// what the package does about it is in docs/observe.md, "How observe mode works".
//
// It imports kube and the core's types, never another flow; it writes nothing on the node.
package observe
