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

package nodeagent

import (
	"errors"
	"time"

	"github.com/kubedevice/kubedevice/internal/nodeagent/poddevices"
)

// PodAllocation is what one pod's containers hold, as committed to the checkpoint. It is what the
// agent mirrors into a DeviceAllocation.
type PodAllocation struct {
	PodUID    string
	Namespace string
	Name      string
	// Containers holding devices, sorted by name; the agent orders them by the pod spec.
	Containers []ContainerAllocation
}

// ContainerAllocation is the devices of one container.
type ContainerAllocation struct {
	Name string
	// Resources sorted by resource name.
	Resources []ResourceAllocation
	// RuntimeOptions are the plugins' Allocate responses merged with the kubelet's rules.
	RuntimeOptions *poddevices.RunContainerOptions
}

// ResourceAllocation is the devices of one resource a container holds.
type ResourceAllocation struct {
	ResourceName string
	// DeviceIDs sorted.
	DeviceIDs []string
	// NUMANodes of the devices, sorted, without duplicates; nil when no device has topology.
	NUMANodes []int64
}

// DeviceHolder is the container a device is allocated to, or the DRA
// ResourceClaim it is prepared for (Claim set; the pod fields empty but
// Namespace, the claim's).
type DeviceHolder struct {
	PodUID    string
	Namespace string
	PodName   string
	Container string
	Claim     *ClaimRef
}

// CheckpointInfo is the provenance of the manager's state on disk.
type CheckpointInfo struct {
	// BootID is the node boot ID recorded in the checkpoint.
	BootID string
	// LastWrite is when the checkpoint was last written; zero before the first write.
	LastWrite time.Time
}

// AllocationReason classifies a refused allocation. The values are the DeviceAllocation
// condition reasons of the same names.
type AllocationReason string

const (
	// AllocationInsufficientDevices: fewer healthy, free, uncordoned devices than requested.
	AllocationInsufficientDevices AllocationReason = "InsufficientDevices"
	// AllocationPluginUnavailable: the resource has no registered plugin (yet), or its plugin is
	// disconnected; retryable.
	AllocationPluginUnavailable AllocationReason = "PluginUnavailable"
	// AllocationAllocateFailed: a plugin RPC failed or answered nonsense.
	AllocationAllocateFailed AllocationReason = "AllocateFailed"
	// AllocationTopologyAffinityError: the topology policy refused the container or pod.
	AllocationTopologyAffinityError AllocationReason = "TopologyAffinityError"
)

// AllocationError is the error Allocate returns for a refusal. Error() is the kubelet's message for
// the same refusal; Reason classifies it, and Retryable says the agent should try again later
// (the plugin has not registered yet, or a plugin call failed transiently) rather than give up.
type AllocationError struct {
	Reason    AllocationReason
	Retryable bool
	Err       error
}

func (e *AllocationError) Error() string { return e.Err.Error() }

func (e *AllocationError) Unwrap() error { return e.Err }

// IsRetryable reports whether err is an AllocationError the agent should retry.
func IsRetryable(err error) bool {
	var ae *AllocationError
	return errors.As(err, &ae) && ae.Retryable
}

// AllocationReasonOf returns the reason of an AllocationError, or AllocationAllocateFailed for
// any other error.
func AllocationReasonOf(err error) AllocationReason {
	var ae *AllocationError
	if errors.As(err, &ae) {
		return ae.Reason
	}
	return AllocationAllocateFailed
}
