package agent

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	// apiWrites counts the agent's writes to the API server, so the write budgets (none in steady
	// state but the Lease, one per NodeDevice per second at most) can be checked in production.
	apiWrites = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kubedevice_agent_api_writes_total",
		Help: "Writes of the node agent to the API server, by kind and operation (apply, applyStatus, delete, create, update).",
	}, []string{"kind", "operation"})

	// checkpointRebuilds counts the rebuilds of a corrupt checkpoint from the node's
	// DeviceAllocations (the core counts the corrupt checkpoints themselves, by reason, in
	// kubedevice_checkpoint_corrupt_total).
	checkpointRebuilds = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kubedevice_agent_checkpoint_rebuilds_total",
		Help: "Rebuilds of a corrupt device manager checkpoint from the node's DeviceAllocations, by result (Rebuilt, Partial: some allocations could not be restored).",
	}, []string{"result"})

	// allocationFailures counts refused pod allocations, by DeviceAllocation condition reason.
	allocationFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kubedevice_agent_allocation_failures_total",
		Help: "Pod device allocations the device manager refused, by reason (InsufficientDevices, PluginUnavailable, AllocateFailed, TopologyAffinityError).",
	}, []string{"reason"})

	// preStartCalls counts the PreStartContainer calls the agent makes ahead of container starts.
	preStartCalls = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kubedevice_agent_prestart_container_total",
		Help: "PreStartContainer calls the node agent made ahead of container starts, for plugins that require them, by trigger " +
			"(allocation: the first start; restart: the pod's status showed the container ended and to be restarted; " +
			"creation: a container creation was refused for want of one; retry: the last call failed) and result (success, failure).",
	}, []string{"trigger", "result"})
)

func init() {
	metrics.Registry.MustRegister(apiWrites, checkpointRebuilds, allocationFailures, preStartCalls)
}
