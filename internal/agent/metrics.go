package agent

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// checkpointRebuilds counts the rebuilds of a corrupt checkpoint from the node's
// DeviceAllocations (the core counts the corrupt checkpoints themselves, by reason, in
// kubedevice_checkpoint_corrupt_total).
var checkpointRebuilds = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "kubedevice_agent_checkpoint_rebuilds_total",
	Help: "Rebuilds of a corrupt device manager checkpoint from the node's DeviceAllocations, by result (Rebuilt, Partial: some allocations could not be restored).",
}, []string{"result"})

func init() {
	metrics.Registry.MustRegister(checkpointRebuilds)
}
