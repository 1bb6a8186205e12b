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

package checkpoint

import (
	"errors"
	"fmt"
	"slices"
)

// NoTopology is the NUMA node key under which DevicesPerNUMA records devices
// that report no NUMA affinity (the kubelet's nodeWithoutTopology).
const NoTopology int64 = -1

// DevicesPerNUMA maps a NUMA node ID to the IDs of the allocated devices
// attached to it. A device attached to several NUMA nodes is listed under
// each of them; a device without topology is listed under NoTopology.
//
// The name and underlying type are the kubelet's and must not change: they
// are part of the kubelet checkpoint checksum.
type DevicesPerNUMA map[int64][]string

// Devices returns the distinct device IDs of d, sorted.
func (d DevicesPerNUMA) Devices() []string {
	seen := make(map[string]struct{})
	var ids []string
	for _, devs := range d {
		for _, id := range devs {
			if _, ok := seen[id]; ok {
				continue
			}
			seen[id] = struct{}{}
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// Entry is one allocation: the devices of one resource held by one container
// of one pod.
type Entry struct {
	// PodUID is the UID of the pod holding the devices.
	PodUID string
	// PodNamespace is the namespace of the pod. Empty for entries read from
	// a kubelet checkpoint, which does not record it.
	PodNamespace string
	// PodName is the name of the pod. Empty for entries read from a kubelet
	// checkpoint, which does not record it.
	PodName string
	// ContainerName is the name of the container holding the devices.
	ContainerName string
	// ResourceName is the extended resource name, e.g. "example.com/gopher".
	ResourceName string
	// DeviceIDs are the allocated device IDs by NUMA node.
	DeviceIDs DevicesPerNUMA
	// AllocResp is proto.Marshal of the plugin's v1beta1.ContainerAllocateResponse
	// for this container, replayed to the container runtime after a restart.
	AllocResp []byte
}

// State is the content of a checkpoint.
type State struct {
	// Entries are the allocations, in the order they were given to the writer.
	Entries []Entry
	// RegisteredDevices maps each resource that had a registered plugin to
	// the IDs of its (healthy) devices.
	RegisteredDevices map[string][]string
}

// errInvalidState is wrapped by the errors reporting a State that cannot be
// written (or that was read but cannot be trusted).
var errInvalidState = errors.New("invalid checkpoint state")

// validate reports the first entry or resource that no correct writer would
// produce: empty keys, NUMA node IDs below NoTopology, empty device IDs.
func (s State) validate() error {
	for i, e := range s.Entries {
		switch {
		case e.PodUID == "":
			return fmt.Errorf("%w: entry %d has an empty pod UID", errInvalidState, i)
		case e.ContainerName == "":
			return fmt.Errorf("%w: entry %d (pod %s) has an empty container name", errInvalidState, i, e.PodUID)
		case e.ResourceName == "":
			return fmt.Errorf("%w: entry %d (pod %s container %q) has an empty resource name", errInvalidState, i, e.PodUID, e.ContainerName)
		}
		for node, ids := range e.DeviceIDs {
			if node < NoTopology {
				return fmt.Errorf("%w: entry %d (pod %s container %q) has NUMA node %d", errInvalidState, i, e.PodUID, e.ContainerName, node)
			}
			for _, id := range ids {
				if id == "" {
					return fmt.Errorf("%w: entry %d (pod %s container %q) has an empty device ID", errInvalidState, i, e.PodUID, e.ContainerName)
				}
			}
		}
	}
	for resource, ids := range s.RegisteredDevices {
		if resource == "" {
			return fmt.Errorf("%w: registered devices with an empty resource name", errInvalidState)
		}
		for _, id := range ids {
			if id == "" {
				return fmt.Errorf("%w: resource %s has an empty registered device ID", errInvalidState, resource)
			}
		}
	}
	return nil
}
