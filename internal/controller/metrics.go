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

package controller

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// nodeCapacityPatches counts the patches of Node status.capacity/status.allocatable: one per
// effective change, none while nothing changes. Reconcile counts and latencies come with
// controller-runtime (controller_runtime_reconcile_*).
var nodeCapacityPatches = prometheus.NewCounter(prometheus.CounterOpts{
	Name: "kubedevice_node_capacity_patches_total",
	Help: "Patches of a Node's status.capacity and status.allocatable for kubedevice resources.",
})

// nodeCapacityHeld is 1 for each resource of a node that the controller holds back from the Node's
// capacity because another field manager claims it (node_claims.go): manager is that manager
// ("kubelet" for the kubelet's device manager), reason the NodeDevice condition's reason. A series
// goes when its hold ends. node and resource are the labels of the agents' device metrics
// (kubedevice_agent_device_info), so the two join. A hold by the kubelet lasts its grace period, 5
// minutes, or 5.5 after a kubelet restart: one older than 10 minutes is worth an alert.
var nodeCapacityHeld = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Name: "kubedevice_node_capacity_held",
	Help: "1 while the controller leaves a node's kubedevice resource out of its capacity because another field manager (the kubelet's device manager) claims it.",
}, []string{"node", "resource", "manager", "reason"})

// remediationEvictions counts the remediation policy's evictions of pods holding a device that stayed
// unhealthy past its resource's grace period (remediation_controller.go), by result: evicted,
// blocked (the Eviction API refused it: a PodDisruptionBudget; asked again later) or error. node
// and resource join kubedevice_agent_device_info.
var remediationEvictions = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "kubedevice_remediation_evictions_total",
	Help: "Evictions of pods holding a device unhealthy past the --remediate grace period, by result (evicted, blocked, error).",
}, []string{"node", "resource", "result"})

func init() {
	metrics.Registry.MustRegister(nodeCapacityPatches, nodeCapacityHeld, remediationEvictions)
}
