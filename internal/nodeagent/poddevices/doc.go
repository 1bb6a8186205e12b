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

// Package poddevices is the node agent's record of which devices each pod's containers hold:
// pod UID → container name → resource name → device IDs grouped by NUMA node, together with the
// ContainerAllocateResponse the device plugin returned for them. It plays the part of the kubelet's
// podDevices (pkg/kubelet/cm/devicemanager/pod_devices.go) with two differences that matter:
//
//   - Allocation is a transaction. Devices picked for a container are first Reserved (in flight:
//     counted as used, so no concurrent allocation can pick them, but invisible to everything that
//     reports or persists allocations), then Committed once the plugin's Allocate call succeeded,
//     or Rolled back when it failed. Garbage collection of inactive pods never drops an in-flight
//     reservation. This closes the kubelet's double-allocation race (kubernetes#137534), in which
//     rebuilding the used-device set from committed allocations while an Allocate RPC ran outside
//     the lock handed the same device to a second pod.
//   - Everything is deterministic. Merging the run-time options of a container's resources
//     iterates resources in name order (the kubelet uses map order, so which plugin's setting won
//     a conflict could change between container restarts), every list comes back sorted, and
//     conflicts are returned to the caller instead of logged.
//
// The Store is deliberately a plain data structure: it makes no RPC, writes no file and logs
// nothing. The device manager holds it under its own mutex, persists its Entries (the checkpoint's
// entry type) and restores them with FromEntries, and logs or reports the errors and conflicts the
// Store returns.
package poddevices
