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
