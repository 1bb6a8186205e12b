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

func init() {
	metrics.Registry.MustRegister(nodeCapacityPatches)
}
