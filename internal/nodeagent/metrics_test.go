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

package nodeagent

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kubedevice/kubedevice/internal/nodeagent/dptest"
)

func TestMetrics(t *testing.T) {
	tm := newTestManager(t, true)
	p := newPlugin(t, tm.dir, "p.sock", testResource,
		dptest.Device("a", pluginapi.Healthy), dptest.Device("b", pluginapi.Healthy), dptest.Device("c", pluginapi.Unhealthy))
	mustRegister(t, p, tm.SocketPath())
	tm.waitCounts(t, map[string]string{testResource: "3/2"})
	// Refused registrations are counted too; an invalid name under one label.
	for _, name := range []string{"bogus", "also bogus"} {
		_ = dptest.Register(context.Background(), tm.SocketPath(), &pluginapi.RegisterRequest{
			Version: pluginapi.Version, Endpoint: "x.sock", ResourceName: name,
		})
	}
	tm.metrics.allocDuration.WithLabelValues(testResource).Observe(0.02)

	want := `
# HELP kubedevice_device_plugin_connected Number of connected device plugin endpoints, by resource name.
# TYPE kubedevice_device_plugin_connected gauge
kubedevice_device_plugin_connected{resource_name="example.com/gopher"} 1
# HELP kubedevice_device_plugin_registration_total Number of device plugin registration attempts, counted before validation, by resource name.
# TYPE kubedevice_device_plugin_registration_total counter
kubedevice_device_plugin_registration_total{resource_name="<invalid>"} 2
kubedevice_device_plugin_registration_total{resource_name="example.com/gopher"} 1
# HELP kubedevice_devices Number of devices known to the node agent, by resource name and health.
# TYPE kubedevice_devices gauge
kubedevice_devices{health="Healthy",resource_name="example.com/gopher"} 2
kubedevice_devices{health="Unhealthy",resource_name="example.com/gopher"} 1
`
	names := []string{"kubedevice_device_plugin_connected", "kubedevice_device_plugin_registration_total", "kubedevice_devices"}
	if err := testutil.GatherAndCompare(tm.registry, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
	if n, err := testutil.GatherAndCount(tm.registry, "kubedevice_device_plugin_alloc_duration_seconds"); err != nil || n != 1 {
		t.Errorf("alloc duration series = %d, %v; want 1", n, err)
	}

	// After the grace period the gauges of the removed resource go.
	p.Stop()
	tm.waitCounts(t, map[string]string{testResource: "3/0"})
	tm.clock.Step(DefaultEndpointGracePeriod)
	tm.waitGone(t, testResource)
	for _, name := range []string{"kubedevice_device_plugin_connected", "kubedevice_devices"} {
		if n, err := testutil.GatherAndCount(tm.registry, name); err != nil || n != 0 {
			t.Errorf("%s series after removal = %d, %v; want 0", name, n, err)
		}
	}
}

func TestMetricsRegistration(t *testing.T) {
	reg := prometheus.NewRegistry()
	dir := dptest.ShortTempDir(t)
	if _, err := New(Config{PluginDir: dir, Registerer: reg}); err != nil {
		t.Fatalf("first manager: %v", err)
	}
	// The same registry cannot take a second manager's collectors.
	if _, err := New(Config{PluginDir: dir, Registerer: reg}); err == nil {
		t.Error("registering the metrics twice succeeded")
	}
	// Without a Registerer the metrics are not registered anywhere.
	if _, err := New(Config{PluginDir: dir}); err != nil {
		t.Errorf("manager without metrics registry: %v", err)
	}
}
