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

// Package mirror is the agent's NodeDevice mirror: the core's resource snapshots in, NodeDevice
// objects out.
//
// The controller is keyed by resource name and fed by the core's subscription, by the node's
// NodeDevices, by the Node's re-creation and by changes of runtime injection. Its queue (queue.go)
// lets the changes of one event settle into one run, and the pacer (pace.go) makes a run less
// than a second after the last one that wrote wait for the rest of the second, so each NodeDevice
// is written at most once per second; a write is made only when the desired status (status.go,
// pure functions) differs from the object, so nothing is written in steady state. Resources with
// more than 128 devices are split into shards named kube.NodeDeviceName(node, resource, shard).
//
// The mirror reads the core and writes the cluster, with two writes into the node on its way,
// each its own step of the reconcile: the administrators' cordons of every shard
// (NodeDevice.spec.cordons) are handed to the core (cordons.go, through Cordoner), and runtime
// injection is told whether the core serves the resource and whether its plugin requires
// PreStartContainer (through Injection), before the NRI hook admits containers by it. When the
// core refused a plugin's latest device list, the first shard's Healthy condition says so
// (DeviceListRejected) and a Warning Event of that reason is recorded on it, once per distinct
// refusal (events.go).
//
// It owns the NodeDevices' metadata, spec and the status the agent writes. It may not allocate
// or free, nor touch DeviceAllocations, pods, the NRI index or the PreStartContainer grants but
// through its Injection interface, nor call any method of the core but those of Core and
// Cordoner.
package mirror
