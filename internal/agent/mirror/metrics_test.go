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
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kubedevice/kubedevice/internal/nodeagent"
)

// snapshotCore is a Core that only answers Snapshots.
type snapshotCore struct {
	Core
	snaps []nodeagent.ResourceSnapshot
}

func (c snapshotCore) Snapshots() []nodeagent.ResourceSnapshot { return c.snaps }

// One series per device, with its NUMA nodes, health and holder; a free device's holder labels
// are empty; a device gone from the core is gone from the metric.
func TestDeviceInfoOneSeriesPerDevice(t *testing.T) {
	core := &snapshotCore{snaps: []nodeagent.ResourceSnapshot{{
		ResourceName: "example.com/gopher",
		Devices: []nodeagent.DeviceSnapshot{
			{ID: "gopher-0", Health: nodeagent.Healthy, NUMANodes: []int64{0, 1},
				Holder: &nodeagent.DeviceHolder{Namespace: "ns", PodName: "p", Container: "c"}},
			{ID: "gopher-1", Health: nodeagent.Unhealthy},
		},
	}}}
	c := &deviceInfo{sources: map[*deviceInfoSource]struct{}{{node: "n1", core: core}: {}}}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	want := `
# HELP kubedevice_agent_device_info One series per device of the node, valued 1: its resource, ID, NUMA nodes (comma-separated, empty without topology), health, and the namespace, pod and container holding it (empty when free).
# TYPE kubedevice_agent_device_info gauge
kubedevice_agent_device_info{container="c",device_id="gopher-0",health="Healthy",namespace="ns",node="n1",numa_node="0,1",pod="p",resource="example.com/gopher"} 1
kubedevice_agent_device_info{container="",device_id="gopher-1",health="Unhealthy",namespace="",node="n1",numa_node="",pod="",resource="example.com/gopher"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), DeviceInfoMetric); err != nil {
		t.Error(err)
	}
	core.snaps[0].Devices = core.snaps[0].Devices[:1]
	if n := testutil.CollectAndCount(c, DeviceInfoMetric); n != 1 {
		t.Errorf("%d series after a device went, want 1", n)
	}
}
