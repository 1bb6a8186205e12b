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

package gopher_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kubedevice/kubedevice/internal/gopher"
	"github.com/kubedevice/kubedevice/internal/nodeagent"
	"github.com/kubedevice/kubedevice/internal/nodeagent/dptest"
	"github.com/kubedevice/kubedevice/pkg/deviceplugin"
)

const waitTimeout = 10 * time.Second

// setup returns fresh gophers, plugin and plugins registry directories.
func setup(t *testing.T) (gophers, pluginDir, registryDir string) {
	t.Helper()
	base := dptest.ShortTempDir(t)
	gophers = filepath.Join(base, "g")
	if err := os.Mkdir(gophers, 0o755); err != nil {
		t.Fatal(err)
	}
	return gophers, filepath.Join(base, "dp"), filepath.Join(base, "reg")
}

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

// startGopher runs the gopher plugin until the end of the test.
func startGopher(t *testing.T, opts gopher.Options) *gopher.Plugin {
	t.Helper()
	g, err := gopher.New(opts)
	if err != nil {
		t.Fatalf("creating gopher plugin: %v", err)
	}
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return g
}

func writeGopher(t *testing.T, dir, id, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, id), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// waitForDevices waits until the manager lists exactly want ("ID=Health",
// sorted by ID) for example.com/gopher, registered at socket with both
// options.
func waitForDevices(t *testing.T, m *nodeagent.Manager, socket string, want ...string) {
	t.Helper()
	dptest.Eventually(t, waitTimeout, func() error {
		snap, ok := m.Snapshot(gopher.DefaultResourceName)
		if !ok {
			return errors.New("resource not known to the manager")
		}
		if snap.State != nodeagent.PluginRegistered || !cmp.Equal(snap.Endpoints, []string{socket}) {
			return fmt.Errorf("plugin state %s, endpoints %v; want registered at %s", snap.State, snap.Endpoints, socket)
		}
		if want := (nodeagent.PluginOptions{PreStartRequired: true, GetPreferredAllocationAvailable: true}); snap.Options != want {
			return fmt.Errorf("options %+v, want %+v", snap.Options, want)
		}
		got := []string{}
		for _, d := range snap.Devices {
			got = append(got, d.ID+"="+string(d.Health))
		}
		if diff := cmp.Diff(append([]string{}, want...), got); diff != "" {
			return fmt.Errorf("devices (-want +got):\n%s", diff)
		}
		return nil
	})
}

func dialPlugin(t *testing.T, socket string) v1beta1.DevicePluginClient {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+socket,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.WaitForReady(true)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return v1beta1.NewDevicePluginClient(conn)
}

func TestGopherDevicesFollowTheDirectory(t *testing.T) {
	gophers, pluginDir, _ := setup(t)
	writeGopher(t, gophers, "gopher-1", "")
	writeGopher(t, gophers, "gopher-2", "unhealthy\n")
	m := startManager(t, pluginDir, "")
	// An hour between rescans: every change below is seen through events.
	g := startGopher(t, gopher.Options{GophersDir: gophers, PluginDir: pluginDir, ResyncPeriod: time.Hour})
	socket := filepath.Join(pluginDir, gopher.DefaultSocketName)
	if g.SocketPath() != socket {
		t.Errorf("SocketPath() = %q, want %q", g.SocketPath(), socket)
	}
	waitForDevices(t, m, socket, "gopher-1=Healthy", "gopher-2=Unhealthy")

	writeGopher(t, gophers, "gopher-10", "")
	waitForDevices(t, m, socket, "gopher-1=Healthy", "gopher-10=Healthy", "gopher-2=Unhealthy")

	writeGopher(t, gophers, "gopher-1", "unhealthy")
	waitForDevices(t, m, socket, "gopher-1=Unhealthy", "gopher-10=Healthy", "gopher-2=Unhealthy")
	writeGopher(t, gophers, "gopher-2", "all good")
	writeGopher(t, gophers, "gopher-1", "")
	waitForDevices(t, m, socket, "gopher-1=Healthy", "gopher-10=Healthy", "gopher-2=Healthy")

	if err := os.Remove(filepath.Join(gophers, "gopher-2")); err != nil {
		t.Fatal(err)
	}
	waitForDevices(t, m, socket, "gopher-1=Healthy", "gopher-10=Healthy")
	if err := os.Rename(filepath.Join(gophers, "gopher-10"), filepath.Join(gophers, "gopher-3")); err != nil {
		t.Fatal(err)
	}
	waitForDevices(t, m, socket, "gopher-1=Healthy", "gopher-3=Healthy")

	// Hidden files and directories are not gophers.
	writeGopher(t, gophers, ".gopher-4.swp", "")
	if err := os.Mkdir(filepath.Join(gophers, "gopher-5"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeGopher(t, gophers, "gopher-6", "")
	waitForDevices(t, m, socket, "gopher-1=Healthy", "gopher-3=Healthy", "gopher-6=Healthy")
}

func TestGopherDirectoryComesBack(t *testing.T) {
	gophers, pluginDir, _ := setup(t)
	writeGopher(t, gophers, "gopher-1", "")
	m := startManager(t, pluginDir, "")
	g := startGopher(t, gopher.Options{GophersDir: gophers, PluginDir: pluginDir, ResyncPeriod: 100 * time.Millisecond})
	waitForDevices(t, m, g.SocketPath(), "gopher-1=Healthy")

	if err := os.RemoveAll(gophers); err != nil {
		t.Fatal(err)
	}
	waitForDevices(t, m, g.SocketPath())
	if err := os.Mkdir(gophers, 0o755); err != nil {
		t.Fatal(err)
	}
	writeGopher(t, gophers, "gopher-7", "")
	waitForDevices(t, m, g.SocketPath(), "gopher-7=Healthy")
	// Watched again: a change shows without waiting for a rescan... and
	// with one, the result is the same.
	writeGopher(t, gophers, "gopher-8", "unhealthy")
	waitForDevices(t, m, g.SocketPath(), "gopher-7=Healthy", "gopher-8=Unhealthy")
}

func TestGopherWatcherRegistration(t *testing.T) {
	gophers, pluginDir, registryDir := setup(t)
	writeGopher(t, gophers, "gopher-1", "")
	m := startManager(t, pluginDir, registryDir)
	g := startGopher(t, gopher.Options{
		GophersDir:         gophers,
		PluginDir:          pluginDir,
		Registration:       deviceplugin.RegistrationWatcher,
		PluginsRegistryDir: registryDir,
		SocketName:         "g.sock",
	})
	socket := filepath.Join(registryDir, "g.sock")
	if g.SocketPath() != socket {
		t.Errorf("SocketPath() = %q, want %q", g.SocketPath(), socket)
	}
	waitForDevices(t, m, socket, "gopher-1=Healthy")
}

func TestGopherRPCs(t *testing.T) {
	gophers, pluginDir, _ := setup(t)
	for _, id := range []string{"gopher-1", "gopher-2", "gopher-3", "gopher-10"} {
		writeGopher(t, gophers, id, "")
	}
	g := startGopher(t, gopher.Options{GophersDir: gophers, PluginDir: pluginDir})
	client := dialPlugin(t, g.SocketPath())
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()

	t.Run("Allocate", func(t *testing.T) {
		resp, err := client.Allocate(ctx, &v1beta1.AllocateRequest{ContainerRequests: []*v1beta1.ContainerAllocateRequest{
			{DevicesIds: []string{"gopher-10", "gopher-2"}},
			{DevicesIds: []string{"gopher-3"}},
		}})
		if err != nil {
			t.Fatal(err)
		}
		mount := func(id string) *v1beta1.Mount {
			return &v1beta1.Mount{ContainerPath: "/gophers/" + id, HostPath: filepath.Join(gophers, id), ReadOnly: true}
		}
		want := &v1beta1.AllocateResponse{ContainerResponses: []*v1beta1.ContainerAllocateResponse{
			{Envs: map[string]string{"GOPHER": "gopher-2,gopher-10"}, Mounts: []*v1beta1.Mount{mount("gopher-2"), mount("gopher-10")}},
			{Envs: map[string]string{"GOPHER": "gopher-3"}, Mounts: []*v1beta1.Mount{mount("gopher-3")}},
		}}
		if diff := cmp.Diff(want, resp, protocmp.Transform()); diff != "" {
			t.Errorf("Allocate (-want +got):\n%s", diff)
		}
	})
	t.Run("Allocate an unknown gopher", func(t *testing.T) {
		for _, id := range []string{"gopher-99", "../g/gopher-1", ".hidden"} {
			_, err := client.Allocate(ctx, &v1beta1.AllocateRequest{ContainerRequests: []*v1beta1.ContainerAllocateRequest{
				{DevicesIds: []string{"gopher-1", id}},
			}})
			if status.Code(err) != codes.NotFound {
				t.Errorf("Allocate of %q: %v, want NotFound", id, err)
			}
		}
	})
	t.Run("GetPreferredAllocation", func(t *testing.T) {
		resp, err := client.GetPreferredAllocation(ctx, &v1beta1.PreferredAllocationRequest{ContainerRequests: []*v1beta1.ContainerPreferredAllocationRequest{
			{AvailableDeviceIDs: []string{"gopher-10", "gopher-3", "gopher-2", "gopher-1"}, MustIncludeDeviceIDs: []string{"gopher-10"}, AllocationSize: 3},
			{AvailableDeviceIDs: []string{"gopher-10", "gopher-3", "gopher-2"}, AllocationSize: 2},
		}})
		if err != nil {
			t.Fatal(err)
		}
		want := &v1beta1.PreferredAllocationResponse{ContainerResponses: []*v1beta1.ContainerPreferredAllocationResponse{
			{DeviceIDs: []string{"gopher-1", "gopher-2", "gopher-10"}},
			{DeviceIDs: []string{"gopher-2", "gopher-3"}},
		}}
		if diff := cmp.Diff(want, resp, protocmp.Transform()); diff != "" {
			t.Errorf("GetPreferredAllocation (-want +got):\n%s", diff)
		}
		_, err = client.GetPreferredAllocation(ctx, &v1beta1.PreferredAllocationRequest{ContainerRequests: []*v1beta1.ContainerPreferredAllocationRequest{
			{AvailableDeviceIDs: []string{"gopher-1"}, AllocationSize: 2},
		}})
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("GetPreferredAllocation of 2 out of 1: %v, want InvalidArgument", err)
		}
	})
	t.Run("PreStartContainer", func(t *testing.T) {
		if _, err := client.PreStartContainer(ctx, &v1beta1.PreStartContainerRequest{DevicesIds: []string{"gopher-1", "gopher-10"}}); err != nil {
			t.Errorf("PreStartContainer: %v", err)
		}
		_, err := client.PreStartContainer(ctx, &v1beta1.PreStartContainerRequest{DevicesIds: []string{"gopher-1", "gopher-404"}})
		if status.Code(err) != codes.NotFound {
			t.Errorf("PreStartContainer with an unknown gopher: %v, want NotFound", err)
		}
	})
}
