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
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2/ktesting"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/kubedevice/kubedevice/internal/nodeagent/dptest"
	"github.com/kubedevice/kubedevice/internal/nodeagent/registration"
)

const (
	testResource = "example.com/gopher"
	waitTimeout  = 5 * time.Second
)

var testEpoch = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

// testManager is a manager in fresh directories, with a fake clock and a
// fresh metrics registry.
type testManager struct {
	*Manager
	dir         string
	registryDir string
	clock       *testingclock.FakeClock
	registry    *prometheus.Registry
	ctx         context.Context
}

// withPluginsRegistry enables the plugins_registry path in a directory of
// the test's own.
func withPluginsRegistry() func(*testManager, *Config) {
	return func(tm *testManager, c *Config) {
		tm.registryDir = filepath.Join(filepath.Dir(tm.dir), "reg")
		c.PluginsRegistryDir = tm.registryDir
	}
}

// newTestManager creates a manager; start says whether to start it.
func newTestManager(t testing.TB, start bool, opts ...func(*testManager, *Config)) *testManager {
	t.Helper()
	tm := &testManager{
		dir:      filepath.Join(dptest.ShortTempDir(t), "dp"),
		clock:    testingclock.NewFakeClock(testEpoch),
		registry: prometheus.NewRegistry(),
	}
	cfg := Config{PluginDir: tm.dir, Clock: tm.clock, Registerer: tm.registry}
	for _, o := range opts {
		o(tm, &cfg)
	}
	m, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	tm.Manager = m
	// Before Cleanup(m.Stop), so the logger outlives Stop.
	_, tm.ctx = ktesting.NewTestContext(t)
	t.Cleanup(m.Stop)
	if start {
		if err := m.Start(tm.ctx); err != nil {
			t.Fatalf("Start: %v", err)
		}
	}
	return tm
}

// newPlugin returns a started stub plugin with socket name in dir.
func newPlugin(t testing.TB, dir, name, resource string, devs ...*pluginapi.Device) *dptest.Plugin {
	t.Helper()
	p := dptest.New(filepath.Join(dir, name), resource, devs)
	if err := p.Start(); err != nil {
		t.Fatalf("starting stub plugin: %v", err)
	}
	t.Cleanup(p.Stop)
	return p
}

func register(t testing.TB, p *dptest.Plugin, regSocket string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	return p.Register(ctx, regSocket)
}

func mustRegister(t testing.TB, p *dptest.Plugin, regSocket string) {
	t.Helper()
	if err := register(t, p, regSocket); err != nil {
		t.Fatalf("Register %s: %v", p.SocketPath(), err)
	}
}

// counts renders the snapshots' counts as resource → "capacity/allocatable"
// (the kubelet's GetCapacity semantics, see ResourceSnapshot).
func (tm *testManager) counts() map[string]string {
	out := map[string]string{}
	for _, s := range tm.Snapshots() {
		out[s.ResourceName] = fmt.Sprintf("%d/%d", s.Capacity, s.Allocatable)
	}
	return out
}

// waitGone waits until the manager no longer knows resource: its grace
// period timer removed it.
func (tm *testManager) waitGone(t testing.TB, resource string) {
	t.Helper()
	dptest.Eventually(t, waitTimeout, func() error {
		if _, ok := tm.Snapshot(resource); ok {
			return fmt.Errorf("resource %s still present", resource)
		}
		return nil
	})
}

// waitCounts waits until the snapshots' counts are want.
func (tm *testManager) waitCounts(t testing.TB, want map[string]string) {
	t.Helper()
	dptest.Eventually(t, waitTimeout, func() error {
		if diff := cmp.Diff(want, tm.counts()); diff != "" {
			return fmt.Errorf("capacity/allocatable (-want +got):\n%s", diff)
		}
		return nil
	})
}

// waitSnapshot waits until check accepts the snapshot of testResource.
func (tm *testManager) waitSnapshot(t testing.TB, check func(ResourceSnapshot, bool) error) ResourceSnapshot {
	t.Helper()
	var snap ResourceSnapshot
	dptest.Eventually(t, waitTimeout, func() error {
		var ok bool
		snap, ok = tm.Snapshot(testResource)
		return check(snap, ok)
	})
	return snap
}

func endpointsAre(want ...string) func(ResourceSnapshot, bool) error {
	return func(s ResourceSnapshot, ok bool) error {
		if !ok {
			return fmt.Errorf("resource absent")
		}
		if diff := cmp.Diff(want, s.Endpoints, cmpEmpty); diff != "" {
			return fmt.Errorf("endpoints (-want +got):\n%s", diff)
		}
		return nil
	}
}

var cmpEmpty = cmpopts.EquateEmpty()

// fakePlugin is a DevicePlugin without gRPC, to drive the handler directly.
type fakePlugin struct {
	id       registration.ClientID
	resource string
	socket   string
	options  *pluginapi.DevicePluginOptions
	api      pluginapi.DevicePluginClient
}

func (p *fakePlugin) ID() registration.ClientID               { return p.id }
func (p *fakePlugin) Resource() string                        { return p.resource }
func (p *fakePlugin) SocketPath() string                      { return p.socket }
func (p *fakePlugin) Options() *pluginapi.DevicePluginOptions { return p.options }
func (p *fakePlugin) API() pluginapi.DevicePluginClient       { return p.api }

// handler is the manager's registration.Handler, to drive it directly.
func (tm *testManager) handler() registration.Handler { return pluginHandler{tm.Manager} }

// devices is a ListAndWatch message.
func devices(devs ...*pluginapi.Device) *pluginapi.ListAndWatchResponse {
	return &pluginapi.ListAndWatchResponse{Devices: devs}
}
