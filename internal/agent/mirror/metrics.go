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

package mirror

import (
	"context"
	"strconv"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// DeviceInfoMetric is the name of the per-device info metric: one series per device of the node,
// valued 1, whose labels say what the NodeDevices say of it. It lets a device exporter's metrics
// (dcgm-exporter and the like, keyed by device ID) be joined to the pod holding the device
// without PodResources plumbing; docs/observe.md shows the PromQL.
const DeviceInfoMetric = "kubedevice_agent_device_info"

var deviceInfoDesc = prometheus.NewDesc(DeviceInfoMetric,
	"One series per device of the node, valued 1: its resource, ID, NUMA nodes (comma-separated, empty without topology), "+
		"health, and the namespace, pod and container holding it (empty when free).",
	[]string{"node", "resource", "device_id", "numa_node", "health", "namespace", "pod", "container"}, nil)

// deviceInfo collects DeviceInfoMetric from the snapshots of every running mirror's core at
// each scrape (one in the agent; tests may run several), so the series are exactly the devices
// the core (or the observed kubelet) knows: a device that goes away takes its series with it, and
// a device changing hands changes its series. One series per device at any time: the cardinality
// is the node's device count.
type deviceInfo struct {
	mu      sync.Mutex
	sources map[*deviceInfoSource]struct{}
}

type deviceInfoSource struct {
	node string
	core Core
}

var deviceInfoCollector = &deviceInfo{sources: map[*deviceInfoSource]struct{}{}}

func init() {
	metrics.Registry.MustRegister(deviceInfoCollector)
}

// Describe sends the one descriptor.
func (*deviceInfo) Describe(ch chan<- *prometheus.Desc) { ch <- deviceInfoDesc }

// Collect sends one series per device of every source.
func (d *deviceInfo) Collect(ch chan<- prometheus.Metric) {
	d.mu.Lock()
	sources := make([]*deviceInfoSource, 0, len(d.sources))
	for s := range d.sources {
		sources = append(sources, s)
	}
	d.mu.Unlock()
	for _, src := range sources {
		for _, s := range src.core.Snapshots() {
			for _, dev := range s.Devices {
				var ns, pod, container string
				if h := dev.Holder; h != nil {
					ns, pod, container = h.Namespace, h.PodName, h.Container
				}
				ch <- prometheus.MustNewConstMetric(deviceInfoDesc, prometheus.GaugeValue, 1,
					src.node, s.ResourceName, dev.ID, numaLabel(dev.NUMANodes), string(apiHealth(dev.Health)), ns, pod, container)
			}
		}
	}
}

func numaLabel(nodes []int64) string {
	s := make([]string, len(nodes))
	for i, n := range nodes {
		s[i] = strconv.FormatInt(n, 10)
	}
	return strings.Join(s, ",")
}

// deviceInfoRunnable adds its source to the collector while the manager runs.
type deviceInfoRunnable struct{ src *deviceInfoSource }

// NeedLeaderElection is false: every node's agent runs.
func (deviceInfoRunnable) NeedLeaderElection() bool { return false }

// Start adds the source until ctx ends.
func (r deviceInfoRunnable) Start(ctx context.Context) error {
	deviceInfoCollector.mu.Lock()
	deviceInfoCollector.sources[r.src] = struct{}{}
	deviceInfoCollector.mu.Unlock()
	<-ctx.Done()
	deviceInfoCollector.mu.Lock()
	delete(deviceInfoCollector.sources, r.src)
	deviceInfoCollector.mu.Unlock()
	return nil
}
