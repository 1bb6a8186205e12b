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

// Package status is `kubedevice status`: a per-node summary of the device plugin resources that
// the kubedevice agents report, computed from the NodeDevice and DeviceAllocation objects alone.
//
// For each node it shows each resource's devices summed over its NodeDevice shards (total,
// allocatable, allocated, unhealthy, cordoned) and the state of its plugin; every device with its
// health, NUMA nodes and the container holding it; the pods whose devices are not allocated (yet)
// and why; and any disagreement between what the NodeDevices and the DeviceAllocations say about
// who holds a device. Summarize is pure; Run reads the objects and Render writes the summary.
package status
