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

// runtimeInjectionMode says how a managing agent injects devices, so an alert on
// kubedevice_agent_nri_connected (0 with --runtime-injection=none too) can keep to the nodes whose
// containers need the NRI plugin. An observing agent exports no series.
var runtimeInjectionMode = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Name: "kubedevice_agent_runtime_injection",
	Help: "1 for the managing agent's --runtime-injection mode (nri, none); absent in observe mode.",
}, []string{"mode"})

func init() {
	// Both results exist from the start (0).
	checkpointRebuilds.WithLabelValues("Rebuilt")
	checkpointRebuilds.WithLabelValues("Partial")
	metrics.Registry.MustRegister(checkpointRebuilds, runtimeInjectionMode)
}

// exportRuntimeInjection makes mode the one series of kubedevice_agent_runtime_injection.
func exportRuntimeInjection(mode RuntimeInjection) {
	runtimeInjectionMode.Reset()
	runtimeInjectionMode.WithLabelValues(string(mode)).Set(1)
}
