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
