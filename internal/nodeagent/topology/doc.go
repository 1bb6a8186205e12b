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

// Package topology computes NUMA topology hints for device plugin resources
// and merges them under a topology manager policy, as the kubelet's
// devicemanager (topology_hints.go) and topologymanager (policy*.go,
// bitmask) do.
//
// Everything here is a pure function of its inputs, except ReadNUMANodes,
// which reads the machine's NUMA nodes from sysfs. The caller owns the
// device state and passes in, per resource, every device with its NUMA
// nodes (DeviceNodes), the available, reusable and already-allocated device
// IDs, and the request.
//
// Conventions, as in the kubelet:
//   - a nil []Hint means "no preference" (no device of the resource
//     reports topology); an empty non-nil one means "cannot be satisfied";
//   - an empty BitMask in a Hint means "any NUMA node" (the
//     kubelet's nil NUMANodeAffinity);
//   - NUMA node IDs are 0..63 (BitMask is 64 bits wide).
package topology
