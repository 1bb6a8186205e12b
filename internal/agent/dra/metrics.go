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

package dra

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Values of the result label of kubedevice_agent_dra_prepare_total.
const (
	prepareSuccess = "success"
	prepareFailure = "failure"
)

// prepares counts the claims the kubelet asked the driver to prepare, by result. Both series exist
// from the start (0), so an alert on the failures' increase sees the first one.
var prepares = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "kubedevice_agent_dra_prepare_total",
	Help: "ResourceClaims the kubelet asked the agent's DRA driver to prepare, by result (success, failure: the kubelet retries).",
}, []string{"result"})

func init() {
	prepares.WithLabelValues(prepareSuccess)
	prepares.WithLabelValues(prepareFailure)
	metrics.Registry.MustRegister(prepares)
}

// countPrepare counts one claim's preparation, failed when err is not nil.
func countPrepare(err error) {
	result := prepareSuccess
	if err != nil {
		result = prepareFailure
	}
	prepares.WithLabelValues(result).Inc()
}
