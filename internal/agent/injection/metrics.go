package injection

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// preStartCalls counts the PreStartContainer calls the agent makes ahead of container starts.
var preStartCalls = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "kubedevice_agent_prestart_container_total",
	Help: "PreStartContainer calls the node agent made ahead of container starts, for plugins that require them, by trigger " +
		"(allocation: the first start; restart: the pod's status showed the container ended and to be restarted; " +
		"creation: a container creation was refused for want of one; retry: the last call failed) and result (success, failure).",
}, []string{"trigger", "result"})

func init() {
	metrics.Registry.MustRegister(preStartCalls)
}
