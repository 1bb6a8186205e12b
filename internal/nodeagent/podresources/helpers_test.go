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

package podresources

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2/ktesting"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/kubedevice/kubedevice/internal/nodeagent"
	"github.com/kubedevice/kubedevice/internal/nodeagent/dptest"
)

const (
	resA = "example.com/gopher"
	resB = "example.com/beaver"
	resC = "example.com/capybara"

	waitTimeout = 10 * time.Second
)

// fakePods is an in-memory PodsProvider: the pods bound to the node.
type fakePods struct {
	mu   sync.Mutex
	pods []*corev1.Pod
}

func (f *fakePods) set(pods ...*corev1.Pod) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pods = pods
}

func (f *fakePods) ActivePods(context.Context) ([]*corev1.Pod, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*corev1.Pod
	for _, p := range f.pods {
		if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			out = append(out, p)
		}
	}
	return out, nil
}

func (f *fakePods) Pod(_ context.Context, namespace, name string) (*corev1.Pod, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range f.pods {
		if p.Namespace == namespace && p.Name == name {
			return p, nil
		}
	}
	return nil, nil
}

// newCore returns a started device manager core in a directory of the test's own, with a fresh
// metrics registry.
func newCore(t testing.TB) *nodeagent.Manager {
	t.Helper()
	dir := dptest.ShortTempDir(t)
	bootID := filepath.Join(dir, "boot_id")
	if err := os.WriteFile(bootID, []byte("11111111-2222-3333-4444-555555555555\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := nodeagent.DefaultConfig()
	cfg.PluginDir, cfg.StateDir = filepath.Join(dir, "dp"), filepath.Join(dir, "state")
	cfg.PluginsRegistryDir = ""
	cfg.BootIDPath = bootID
	cfg.Registerer = prometheus.NewRegistry()
	m, err := nodeagent.New(cfg)
	if err != nil {
		t.Fatalf("nodeagent.New: %v", err)
	}
	_, ctx := ktesting.NewTestContext(t)
	t.Cleanup(m.Stop)
	if err := m.Start(ctx); err != nil {
		t.Fatalf("Start: %v", err)
	}
	return m
}

// startPlugin starts and registers a stub plugin for resource whose Allocate answers one response
// per container, and waits until the core has its devices.
func startPlugin(t testing.TB, core *nodeagent.Manager, resource string, devs ...*pluginapi.Device) *dptest.Plugin {
	t.Helper()
	name := strings.NewReplacer("/", "-", ".", "-").Replace(resource)
	p := dptest.New(filepath.Join(filepath.Dir(core.SocketPath()), name+".sock"), resource, devs)
	p.SetAllocateFunc(echoAllocate)
	if err := p.Start(); err != nil {
		t.Fatalf("starting plugin %s: %v", resource, err)
	}
	t.Cleanup(p.Stop)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := p.Register(ctx, core.SocketPath()); err != nil {
		t.Fatalf("registering plugin %s: %v", resource, err)
	}
	dptest.Eventually(t, waitTimeout, func() error {
		if s, ok := core.Snapshot(resource); !ok || s.Capacity != len(devs) {
			return fmt.Errorf("the core does not have the %d devices of %s yet", len(devs), resource)
		}
		return nil
	})
	return p
}

func echoAllocate(req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for _, cr := range req.GetContainerRequests() {
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerAllocateResponse{
			Envs: map[string]string{"DEVICES": strings.Join(cr.GetDevicesIds(), ",")},
		})
	}
	return resp, nil
}

// allocate allocates the pod's devices through the core.
func allocate(t testing.TB, core *nodeagent.Manager, pod *corev1.Pod) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := core.AllocatePod(ctx, pod); err != nil {
		t.Fatalf("allocating pod %s: %v", pod.Name, err)
	}
}

// serve starts a server over a socket in a directory of the test's own (the socket's directory
// is created by Start) and returns it with a client.
func serve(t testing.TB, pods PodsProvider, devices DevicesProvider, opts Options) (*Server, podresourcesapi.PodResourcesListerClient) {
	t.Helper()
	if opts.SocketPath == "" {
		opts.SocketPath = filepath.Join(dptest.ShortTempDir(t), "pod-resources", "kubelet.sock")
	}
	s, err := New(pods, devices, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	_, ctx := ktesting.NewTestContext(t)
	if err := s.Start(ctx); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(s.Stop)
	return s, dial(t, opts.SocketPath)
}

// dial returns a client of the socket, as a monitoring agent's.
func dial(t testing.TB, socket string) podresourcesapi.PodResourcesListerClient {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("dialing %s: %v", socket, err)
	}
	t.Cleanup(func() { conn.Close() })
	return podresourcesapi.NewPodResourcesListerClient(conn)
}

func callCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	t.Cleanup(cancel)
	return ctx
}

// dev is one expected ContainerDevices entry: numa < 0 means no topology.
func dev(resource, id string, numa int64) *podresourcesapi.ContainerDevices {
	cd := &podresourcesapi.ContainerDevices{ResourceName: resource, DeviceIds: []string{id}}
	if numa >= 0 {
		cd.Topology = &podresourcesapi.TopologyInfo{Nodes: []*podresourcesapi.NUMANode{{ID: numa}}}
	}
	return cd
}

func ctr(name string, devs ...*podresourcesapi.ContainerDevices) *podresourcesapi.ContainerResources {
	return &podresourcesapi.ContainerResources{Name: name, Devices: devs}
}

func podRes(pod *corev1.Pod, containers ...*podresourcesapi.ContainerResources) *podresourcesapi.PodResources {
	return &podresourcesapi.PodResources{Name: pod.Name, Namespace: pod.Namespace, Containers: containers}
}
