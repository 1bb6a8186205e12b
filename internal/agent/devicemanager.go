package agent

import (
	"context"

	corev1 "k8s.io/api/core/v1"

	"github.com/kubedevice/kubedevice/internal/nodeagent"
	"github.com/kubedevice/kubedevice/internal/nodeagent/poddevices"
)

// DeviceManager is what the agent uses of the device manager core, *nodeagent.Manager.
type DeviceManager interface {
	// RestoreCheckpoint loads the checkpoint; it is called once, before Start.
	RestoreCheckpoint(ctx context.Context) (nodeagent.RestoreResult, error)
	// RestoreAllocations rebuilds the allocations when the checkpoint was corrupt.
	RestoreAllocations(allocs []nodeagent.PodAllocation) error
	Start(ctx context.Context) error
	Stop()
	// Check is nil while plugins can register.
	Check() error

	Snapshots() []nodeagent.ResourceSnapshot
	Snapshot(name string) (nodeagent.ResourceSnapshot, bool)
	Subscribe() *nodeagent.Subscription
	CheckpointInfo() nodeagent.CheckpointInfo
	SetCordons(resource string, ids []string)

	AllocatePod(ctx context.Context, pod *corev1.Pod) error
	// PreStartContainer prepares one start of container (the kubelet calls it at each start);
	// PreStartRequired says whether resource's plugin asks for it, once the plugin said.
	PreStartContainer(ctx context.Context, pod *corev1.Pod, container *corev1.Container) error
	PreStartRequired(resource string) (required, known bool)
	UpdateAllocatedDevices(ctx context.Context, activePods []*corev1.Pod) error
	PodAllocation(podUID string) (nodeagent.PodAllocation, bool)
	PodsHolding(namespace, name string) []string

	// GetDevices and GetAllocatableDevices serve the PodResources API.
	GetDevices(podUID, container string) []poddevices.ContainerDevice
	GetAllocatableDevices() nodeagent.ResourceDeviceInstances
}

var _ DeviceManager = (*nodeagent.Manager)(nil)
