package controller

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// nodeCapacityPatches counts the patches of Node status.capacity/status.allocatable: one per
// effective change, none while nothing changes. Reconcile counts and latencies come with
// controller-runtime (controller_runtime_reconcile_*).
var nodeCapacityPatches = prometheus.NewCounter(prometheus.CounterOpts{
	Name: "kubedevice_node_capacity_patches_total",
	Help: "Patches of a Node's status.capacity and status.allocatable for kubedevice resources.",
})

func init() {
	metrics.Registry.MustRegister(nodeCapacityPatches)
}
