// Package status is `kubedevice status`: a per-node summary of the device plugin resources that
// the kubedevice agents report, computed from the NodeDevice and DeviceAllocation objects alone.
//
// For each node it shows each resource's devices summed over its NodeDevice shards (total,
// allocatable, allocated, unhealthy, cordoned) and the state of its plugin; every device with its
// health, NUMA nodes and the container holding it; the pods whose devices are not allocated (yet)
// and why; and any disagreement between what the NodeDevices and the DeviceAllocations say about
// who holds a device. Summarize is pure; Run reads the objects and Render writes the summary.
package status
