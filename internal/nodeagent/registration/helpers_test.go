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

package registration

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kubedevice/kubedevice/internal/nodeagent/dptest"
)

const (
	testResource = "example.com/gopher"
	waitTimeout  = 5 * time.Second
)

// event is one Handler call as recordingHandler saw it.
type event struct {
	Kind     string // Connected, Devices, Disconnected
	Resource string
	Socket   string
	ID       ClientID
	Devices  []string // for Devices
	Options  *pluginapi.DevicePluginOptions
}

// recordingHandler records Handler calls. connectErr, if set, refuses
// PluginConnected.
type recordingHandler struct {
	mu         sync.Mutex
	events     []event
	connectErr error
}

func (h *recordingHandler) PluginConnected(_ context.Context, p DevicePlugin) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.connectErr != nil {
		return h.connectErr
	}
	h.events = append(h.events, event{Kind: "Connected", Resource: p.Resource(), Socket: p.SocketPath(), ID: p.ID(), Options: p.Options()})
	return nil
}

func (h *recordingHandler) PluginListAndWatchReceiver(_ context.Context, p DevicePlugin, resp *pluginapi.ListAndWatchResponse) {
	ids := []string{}
	for _, d := range resp.GetDevices() {
		ids = append(ids, d.GetID())
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = append(h.events, event{Kind: "Devices", Resource: p.Resource(), Socket: p.SocketPath(), ID: p.ID(), Devices: ids})
}

func (h *recordingHandler) PluginDisconnected(_ context.Context, p DevicePlugin, _ error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = append(h.events, event{Kind: "Disconnected", Resource: p.Resource(), Socket: p.SocketPath(), ID: p.ID()})
}

func (h *recordingHandler) Events() []event {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.events)
}

// kinds returns the kinds of the events of client id.
func (h *recordingHandler) kinds(id ClientID) []string {
	var out []string
	for _, e := range h.Events() {
		if e.ID == id {
			out = append(out, e.Kind)
		}
	}
	return out
}

// waitEvents waits until the handler has recorded at least n events.
func (h *recordingHandler) waitEvents(t *testing.T, n int) []event {
	t.Helper()
	dptest.Eventually(t, waitTimeout, func() error {
		if got := len(h.Events()); got < n {
			return fmt.Errorf("%d events, want %d: %+v", got, n, h.Events())
		}
		return nil
	})
	return h.Events()
}

// testServer is a started server in a fresh directory.
type testServer struct {
	*Server
	dir         string
	registryDir string
	handler     *recordingHandler
	ctx         context.Context // carries the test logger; use it for Start

	mu            sync.Mutex
	registrations []string
}

func (s *testServer) Registrations() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.registrations)
}

type serverOption func(*Config)

func withRegistry(dir string) serverOption { return func(c *Config) { c.PluginsRegistryDir = dir } }
func withDialTimeout(d time.Duration) serverOption {
	return func(c *Config) { c.DialTimeout = d }
}

// newTestServer creates a server; start says whether to start it.
func newTestServer(t *testing.T, start bool, opts ...serverOption) *testServer {
	t.Helper()
	dir := filepath.Join(dptest.ShortTempDir(t), "dp")
	ts := &testServer{dir: dir, handler: &recordingHandler{}}
	cfg := Config{
		PluginDir: dir,
		Handler:   ts.handler,
		OnRegistration: func(name string) {
			ts.mu.Lock()
			defer ts.mu.Unlock()
			ts.registrations = append(ts.registrations, name)
		},
	}
	for _, o := range opts {
		o(&cfg)
	}
	ts.registryDir = cfg.PluginsRegistryDir
	s, err := NewServer(cfg)
	if err != nil {
		t.Fatalf("NewServer: %v", err)
	}
	ts.Server = s
	// Before Cleanup(s.Stop), so the logger outlives Stop.
	_, ts.ctx = ktesting.NewTestContext(t)
	t.Cleanup(s.Stop)
	if start {
		if err := s.Start(ts.ctx); err != nil {
			t.Fatalf("Start: %v", err)
		}
	}
	return ts
}

// newPlugin starts a stub plugin with socket name in dir.
func newPlugin(t *testing.T, dir, name, resource string, devs ...*pluginapi.Device) *dptest.Plugin {
	t.Helper()
	p := dptest.New(filepath.Join(dir, name), resource, devs)
	if err := p.Start(); err != nil {
		t.Fatalf("starting stub plugin: %v", err)
	}
	t.Cleanup(p.Stop)
	return p
}

func register(t *testing.T, p *dptest.Plugin, regSocket string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	return p.Register(ctx, regSocket)
}
