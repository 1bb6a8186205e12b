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

package podresources

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the server's collectors: the kubelet's
// kubelet_pod_resources_endpoint_{requests,errors}_* counters, one per method there, as two
// counters with a method label here. Each Server has its own, registered with
// Options.Registerer, so tests use a fresh registry.
type metrics struct {
	// requests counts every call, rate-limited ones included.
	requests *prometheus.CounterVec
	// errors counts the calls that failed, rate-limited ones included.
	errors *prometheus.CounterVec
}

func newMetrics() *metrics {
	return &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kubedevice_agent_pod_resources_requests_total",
			Help: "Calls of the node agent's PodResources API, by API version and method (List, GetAllocatableResources, Get), rate-limited calls included.",
		}, []string{"server_api_version", "method"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kubedevice_agent_pod_resources_errors_total",
			Help: "Failed calls of the node agent's PodResources API (rate-limited calls and pods not found included), by API version and method.",
		}, []string{"server_api_version", "method"}),
	}
}

// register registers every collector with r.
func (m *metrics) register(r prometheus.Registerer) error {
	return errors.Join(r.Register(m.requests), r.Register(m.errors))
}
