package kube

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// apiWrites counts the agent's writes to the API server, so the write budgets (none in steady
// state but the Lease, one per NodeDevice per second at most) can be checked in production.
var apiWrites = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "kubedevice_agent_api_writes_total",
	Help: "Writes of the node agent to the API server, by kind and operation (apply, applyStatus, delete, create, update).",
}, []string{"kind", "operation"})

func init() {
	metrics.Registry.MustRegister(apiWrites)
}

// CountWrite counts one write of the agent to the API server: Apply, ApplyStatus and Delete count
// theirs; a write made otherwise (the Lease) is counted by its writer.
func CountWrite(kind, operation string) {
	apiWrites.WithLabelValues(kind, operation).Inc()
}
