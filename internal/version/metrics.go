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

package version

import "github.com/prometheus/client_golang/prometheus"

// BuildInfoMetric is the name of the gauge NewCollector exports.
const BuildInfoMetric = "kubedevice_build_info"

// NewCollector returns the gauge kubedevice_build_info{version, commit, go_version}, always 1: the
// Prometheus convention (as prometheus_build_info, kube_state_metrics_build_info) for joining a
// binary's build onto its other series, e.g. `kubedevice_build_info * on (pod) group_right
// (version) ...`, and for seeing a rollout's versions side by side.
func NewCollector() prometheus.Collector {
	return newCollector(Get())
}

func newCollector(info Info) prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: BuildInfoMetric,
		Help: "The binary's build: version (the release), commit (git, with -dirty for a modified tree) and go_version; always 1.",
		ConstLabels: prometheus.Labels{
			"version":    info.Version,
			"commit":     info.Commit,
			"go_version": info.GoVersion,
		},
	})
	g.Set(1)
	return g
}
