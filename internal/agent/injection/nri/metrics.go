package nri

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	// connectedGauge says whether the agent is registered with the runtime's NRI socket.
	connectedGauge = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "kubedevice_agent_nri_connected",
		Help: "1 while the node agent is registered as an NRI plugin with the container runtime and injects devices into containers at creation, 0 otherwise (socket missing, disconnected, or --runtime-injection=none).",
	})

	// createContainerTotal counts the CreateContainer requests the plugin answered, by result.
	createContainerTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kubedevice_agent_nri_create_container_total",
		Help: "Container creations the node agent's NRI plugin answered, by result (injected: devices added; untouched: the container holds no kubedevice device; refused: its pod's devices are not allocated yet, or PreStartContainer has not run for this start; the kubelet retries).",
	}, []string{"result"})
)

func init() {
	metrics.Registry.MustRegister(connectedGauge, createContainerTotal)
}
