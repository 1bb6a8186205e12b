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

package kube

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// apiWrites counts the agent's writes to the API server, so the write budgets (none in steady
// state but the Lease, one per NodeDevice per second at most) can be checked in production.
var apiWrites = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "kubedevice_agent_api_writes_total",
	Help: "Writes of the node agent to the API server, by kind and operation (apply, applyStatus, adoptStatus, delete, create, update).",
}, []string{"kind", "operation"})

func init() {
	metrics.Registry.MustRegister(apiWrites)
}

// CountWrite counts one write of the agent to the API server: Apply, ApplyWhole, ApplyStatus and
// Delete count theirs; a write made otherwise (the Lease) is counted by its writer.
func CountWrite(kind, operation string) {
	apiWrites.WithLabelValues(kind, operation).Inc()
}
