package allocation

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// allocationFailures counts refused pod allocations, by DeviceAllocation condition reason.
var allocationFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "kubedevice_agent_allocation_failures_total",
	Help: "Pod device allocations the device manager refused, by reason (InsufficientDevices, PluginUnavailable, AllocateFailed, TopologyAffinityError).",
}, []string{"reason"})

func init() {
	metrics.Registry.MustRegister(allocationFailures)
}
