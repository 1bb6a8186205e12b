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

package allocation

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// allocationFailures counts refused pod allocations, by DeviceAllocation condition reason.
var allocationFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "kubedevice_agent_allocation_failures_total",
	Help: "Pod device allocations the device manager refused, by reason (InsufficientDevices, PluginUnavailable, AllocateFailed, TopologyAffinityError).",
}, []string{"reason"})

func init() {
	metrics.Registry.MustRegister(allocationFailures)
}
