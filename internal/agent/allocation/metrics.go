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

	"github.com/kubedevice/kubedevice/internal/nodeagent"
)

// allocationFailures counts refused pod allocations, by DeviceAllocation condition reason.
var allocationFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "kubedevice_agent_allocation_failures_total",
	Help: "Pod device allocations the device manager refused, by reason (InsufficientDevices, PluginUnavailable, AllocateFailed, TopologyAffinityError).",
}, []string{"reason"})

// refusedPods is the number of the node's pods whose DeviceAllocation says a refusal now: the pods
// the refusal pacer knows, from their first refusal written until they are allocated, end or go.
// Alerts read it as "pods have waited for devices for N minutes".
var refusedPods = prometheus.NewGauge(prometheus.GaugeOpts{
	Name: "kubedevice_agent_refused_pods",
	Help: "Pods of the node whose DeviceAllocation says their devices were refused (Allocated=False) and that are still waiting for them.",
})

func init() {
	// Every reason's series exists from the start (0), so a dashboard or an alert sees the first
	// refusal as an increase.
	for _, reason := range []nodeagent.AllocationReason{nodeagent.AllocationInsufficientDevices, nodeagent.AllocationPluginUnavailable,
		nodeagent.AllocationAllocateFailed, nodeagent.AllocationTopologyAffinityError} {
		allocationFailures.WithLabelValues(string(reason))
	}
	metrics.Registry.MustRegister(allocationFailures, refusedPods)
}
