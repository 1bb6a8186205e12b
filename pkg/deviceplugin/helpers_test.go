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

package deviceplugin_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kubedevice/kubedevice/internal/nodeagent"
	"github.com/kubedevice/kubedevice/internal/nodeagent/dptest"
	"github.com/kubedevice/kubedevice/pkg/deviceplugin"
)

const (
	testResource = "example.com/gopher"
	waitTimeout  = 10 * time.Second
)

// dirs returns a fresh plugin directory and plugins registry directory with
// short paths.
func dirs(t *testing.T) (pluginDir, registryDir string) {
	t.Helper()
	base := dptest.ShortTempDir(t)
	return filepath.Join(base, "dp"), filepath.Join(base, "reg")
}

// startManager starts kubedevice's device manager core on pluginDir and, if
// registryDir is not empty, its plugin watcher there. It is stopped at the
// end of the test.
func startManager(t *testing.T, pluginDir, registryDir string) *nodeagent.Manager {
	t.Helper()
	m, err := nodeagent.New(nodeagent.Config{PluginDir: pluginDir, PluginsRegistryDir: registryDir})
	if err != nil {
		t.Fatalf("creating device manager: %v", err)
	}
	_, ctx := ktesting.NewTestContext(t)
	t.Cleanup(m.Stop)
	if err := m.Start(ctx); err != nil {
		t.Fatalf("starting device manager: %v", err)
	}
	return m
}

// runPlugin creates a plugin from cfg and runs it until the end of the test,
// when it checks that Run returned nil.
func runPlugin(t *testing.T, cfg deviceplugin.Config) *deviceplugin.Plugin {
	t.Helper()
	p, err := deviceplugin.New(cfg)
	if err != nil {
		t.Fatalf("creating plugin: %v", err)
	}
	_, ctx := ktesting.NewTestContext(t)
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() {
		p.Stop()
		if err := <-done; err != nil {
			t.Errorf("Run returned %v", err)
		}
	})
	return p
}

// view is what a test checks of the manager's state for a resource.
type view struct {
	State     nodeagent.PluginState
	Endpoints []string
	Options   nodeagent.PluginOptions
	// Devices are "ID=Health", sorted.
	Devices []string
}

func viewOf(m *nodeagent.Manager) (view, bool) {
	snap, ok := m.Snapshot(testResource)
	if !ok {
		return view{}, false
	}
	v := view{State: snap.State, Endpoints: snap.Endpoints, Options: snap.Options}
	for _, d := range snap.Devices {
		v.Devices = append(v.Devices, d.ID+"="+string(d.Health))
	}
	return v, true
}

// registered is the view of a resource registered by one plugin at socket.
func registered(socket string, opts nodeagent.PluginOptions, devices ...string) view {
	return view{State: nodeagent.PluginRegistered, Endpoints: []string{socket}, Options: opts, Devices: devices}
}

// waitForView waits until the manager's view of the resource is want.
func waitForView(t *testing.T, m *nodeagent.Manager, want view) {
	t.Helper()
	dptest.Eventually(t, waitTimeout, func() error {
		got, ok := viewOf(m)
		if !ok {
			return errors.New("resource not known to the manager")
		}
		if diff := cmp.Diff(want, got); diff != "" {
			return fmt.Errorf("manager's view (-want +got):\n%s", diff)
		}
		return nil
	})
}

// waitForStatus waits until the plugin's status satisfies cond.
func waitForStatus(t *testing.T, p *deviceplugin.Plugin, what string, cond func(deviceplugin.Status) bool) {
	t.Helper()
	dptest.Eventually(t, waitTimeout, func() error {
		if st := p.Status(); !cond(st) {
			return fmt.Errorf("plugin status %+v: want %s", st, what)
		}
		return nil
	})
}

// dialPlugin connects to a plugin's socket. Its calls wait until the
// socket is served (bounded by their context).
func dialPlugin(t *testing.T, socket string) v1beta1.DevicePluginClient {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+socket,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.WaitForReady(true)))
	if err != nil {
		t.Fatalf("creating client for %s: %v", socket, err)
	}
	t.Cleanup(func() { conn.Close() })
	return v1beta1.NewDevicePluginClient(conn)
}

// rpcContext is the context of one RPC from a test.
func rpcContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	t.Cleanup(cancel)
	return ctx
}

// deviceList renders a ListAndWatch message as "ID=Health" strings.
func deviceList(resp *v1beta1.ListAndWatchResponse) []string {
	var out []string
	for _, d := range resp.GetDevices() {
		out = append(out, d.GetID()+"="+d.GetHealth())
	}
	return out
}
