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
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kubedevice/kubedevice/internal/nodeagent/dptest"
	"github.com/kubedevice/kubedevice/internal/nodeagent/poddevices"
	"github.com/kubedevice/kubedevice/internal/nodeagent/topology"
)

const (
	res1 = "domain1.com/resource1"
	res2 = "domain2.com/resource2"
	res3 = "domain2.com/resource3"

	testBootID = "11111111-2222-3333-4444-555555555555"
)

// withBootID makes the manager read its boot ID from a file of the test
// holding id.
func withBootID(id string) func(*testManager, *Config) {
	return func(tm *testManager, c *Config) {
		path := filepath.Join(filepath.Dir(tm.dir), "boot_id")
		if err := os.WriteFile(path, []byte(id+"\n"), 0o600); err != nil {
			panic(err)
		}
		c.BootIDPath = path
	}
}

// withNUMANodes makes the manager see a machine with the given NUMA nodes.
func withNUMANodes(nodes ...int) func(*testManager, *Config) {
	return func(tm *testManager, c *Config) {
		root := filepath.Join(filepath.Dir(tm.dir), "sysroot")
		for _, n := range nodes {
			if err := os.MkdirAll(filepath.Join(root, "sys/devices/system/node", fmt.Sprintf("node%d", n)), 0o755); err != nil {
				panic(err)
			}
		}
		c.SysRoot = root
	}
}

func withTopology(policy topology.Policy, scope topology.Scope) func(*testManager, *Config) {
	return func(_ *testManager, c *Config) {
		c.TopologyPolicy, c.TopologyScope = policy, scope
	}
}

func withConfig(f func(*Config)) func(*testManager, *Config) {
	return func(_ *testManager, c *Config) { f(c) }
}

// newAllocManager is a started manager with a boot ID of the test's own.
func newAllocManager(t testing.TB, opts ...func(*testManager, *Config)) *testManager {
	t.Helper()
	return newTestManager(t, true, append([]func(*testManager, *Config){withBootID(testBootID)}, opts...)...)
}

// req is one resource request of a test container.
type req struct {
	resource string
	count    int64
}

// podBuilder builds test pods: makePod("p").container("c", req{res1, 2}).obj().
type podBuilder struct{ pod *v1.Pod }

func makePod(name string) *podBuilder {
	return &podBuilder{pod: &v1.Pod{ObjectMeta: metav1.ObjectMeta{
		Name: name, Namespace: "default", UID: types.UID("uid-" + name),
	}}}
}

func limits(reqs []req) v1.ResourceList {
	out := v1.ResourceList{}
	for _, r := range reqs {
		out[v1.ResourceName(r.resource)] = *resource.NewQuantity(r.count, resource.DecimalSI)
	}
	return out
}

func (b *podBuilder) uid(uid string) *podBuilder {
	b.pod.UID = types.UID(uid)
	return b
}

func (b *podBuilder) namespace(ns string) *podBuilder {
	b.pod.Namespace = ns
	return b
}

func (b *podBuilder) container(name string, reqs ...req) *podBuilder {
	b.pod.Spec.Containers = append(b.pod.Spec.Containers, v1.Container{
		Name: name, Resources: v1.ResourceRequirements{Limits: limits(reqs), Requests: limits(reqs)},
	})
	return b
}

func (b *podBuilder) init(name string, reqs ...req) *podBuilder {
	b.pod.Spec.InitContainers = append(b.pod.Spec.InitContainers, v1.Container{
		Name: name, Resources: v1.ResourceRequirements{Limits: limits(reqs), Requests: limits(reqs)},
	})
	return b
}

func (b *podBuilder) sidecar(name string, reqs ...req) *podBuilder {
	always := v1.ContainerRestartPolicyAlways
	b.init(name, reqs...)
	b.pod.Spec.InitContainers[len(b.pod.Spec.InitContainers)-1].RestartPolicy = &always
	return b
}

func (b *podBuilder) phase(p v1.PodPhase) *podBuilder {
	b.pod.Status.Phase = p
	return b
}

func (b *podBuilder) obj() *v1.Pod { return b.pod }

// testPlugin is a started, registered stub plugin whose devices the manager
// has seen, answering Allocate with echoResponse and recording requests.
type testPlugin struct {
	*dptest.Plugin
	resource string

	mu        sync.Mutex
	allocated [][]string
	preferred []*pluginapi.ContainerPreferredAllocationRequest
	preStart  [][]string
}

// echoResponse is the stub plugins' default Allocate answer for ids: one
// env with the IDs, one device node and one mount per device.
func echoResponse(resourceName string, ids []string) *pluginapi.ContainerAllocateResponse {
	key := strings.ToUpper(strings.NewReplacer(".", "_", "/", "_").Replace(resourceName))
	resp := &pluginapi.ContainerAllocateResponse{Envs: map[string]string{key: strings.Join(ids, ",")}}
	for _, id := range ids {
		resp.Devices = append(resp.Devices, &pluginapi.DeviceSpec{ContainerPath: "/dev/" + id, HostPath: "/dev/" + id, Permissions: "rw"})
		resp.Mounts = append(resp.Mounts, &pluginapi.Mount{ContainerPath: "/lib/" + id, HostPath: "/host/lib/" + id, ReadOnly: true})
	}
	return resp
}

// startPlugin starts and registers a stub plugin for resource with devs and
// waits until the manager has its devices.
func startPlugin(t testing.TB, tm *testManager, sock, resourceName string, preStart, preferred bool, devs ...*pluginapi.Device) *testPlugin {
	t.Helper()
	p := &testPlugin{Plugin: dptest.New(filepath.Join(tm.dir, sock), resourceName, devs), resource: resourceName}
	p.SetOptions(preStart, preferred)
	p.SetAllocateFunc(func(r *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
		out := &pluginapi.AllocateResponse{}
		for _, cr := range r.GetContainerRequests() {
			p.mu.Lock()
			p.allocated = append(p.allocated, slices.Clone(cr.GetDevicesIds()))
			p.mu.Unlock()
			out.ContainerResponses = append(out.ContainerResponses, echoResponse(resourceName, cr.GetDevicesIds()))
		}
		return out, nil
	})
	p.SetGetPreferredAllocationFunc(func(r *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
		p.mu.Lock()
		p.preferred = append(p.preferred, r.GetContainerRequests()...)
		p.mu.Unlock()
		return &pluginapi.PreferredAllocationResponse{}, nil
	})
	p.SetPreStartContainerFunc(func(r *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
		p.mu.Lock()
		p.preStart = append(p.preStart, slices.Clone(r.GetDevicesIds()))
		p.mu.Unlock()
		return &pluginapi.PreStartContainerResponse{}, nil
	})
	if err := p.Start(); err != nil {
		t.Fatalf("starting stub plugin: %v", err)
	}
	t.Cleanup(p.Stop)
	mustRegister(t, p.Plugin, tm.SocketPath())
	tm.waitDevices(t, resourceName, devs...)
	return p
}

// waitDevices waits until the manager reports exactly devs for resource,
// with their health. Held devices the plugin no longer reports, which
// snapshots show as such (ReasonNotReported), are not counted.
func (tm *testManager) waitDevices(t testing.TB, resourceName string, devs ...*pluginapi.Device) {
	t.Helper()
	want := map[string]Health{}
	for _, d := range devs {
		h := Unhealthy
		if d.GetHealth() == pluginapi.Healthy {
			h = Healthy
		}
		want[d.GetID()] = h
	}
	dptest.Eventually(t, waitTimeout, func() error {
		s, ok := tm.Snapshot(resourceName)
		if !ok || s.State != PluginRegistered {
			return fmt.Errorf("resource %s not registered", resourceName)
		}
		got := map[string]Health{}
		for _, d := range s.Devices {
			if d.Reason != ReasonNotReported {
				got[d.ID] = d.Health
			}
		}
		if len(got) != len(want) {
			return fmt.Errorf("devices of %s: %v, want %v", resourceName, got, want)
		}
		for id, h := range want {
			if got[id] != h {
				return fmt.Errorf("devices of %s: %v, want %v", resourceName, got, want)
			}
		}
		tm.mu.Lock()
		reported := tm.resources[resourceName].reported
		tm.mu.Unlock()
		if !reported {
			return fmt.Errorf("resource %s has not reported", resourceName)
		}
		return nil
	})
}

func (p *testPlugin) allocateCalls() [][]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.allocated)
}

func (p *testPlugin) preferredCalls() []*pluginapi.ContainerPreferredAllocationRequest {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.preferred)
}

func (p *testPlugin) preStartCalls() [][]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.preStart)
}

// healthy returns healthy devices with the given IDs.
func healthy(ids ...string) []*pluginapi.Device {
	out := make([]*pluginapi.Device, len(ids))
	for i, id := range ids {
		out[i] = dptest.Device(id, pluginapi.Healthy)
	}
	return out
}

// numaDevice is a healthy device on one NUMA node.
func numaDevice(id string, node int64) *pluginapi.Device {
	return dptest.Device(id, pluginapi.Healthy, node)
}

// hold commits ids of resource to the pod's container directly, as a
// finished allocation would, with the echo response.
func (tm *testManager) hold(t testing.TB, pod *v1.Pod, container, resourceName string, ids ...string) {
	t.Helper()
	tm.mu.Lock()
	defer tm.mu.Unlock()
	uid := string(pod.UID)
	if err := tm.pods.Reserve(uid, container, resourceName, ids...); err != nil {
		t.Fatalf("reserving %v: %v", ids, err)
	}
	ref := poddevices.PodRef{UID: uid, Namespace: pod.Namespace, Name: pod.Name}
	if err := tm.pods.Commit(ref, container, resourceName, tm.devicesPerNUMALocked(resourceName, ids), echoResponse(resourceName, ids)); err != nil {
		t.Fatalf("committing %v: %v", ids, err)
	}
	tm.podRefs[uid] = ref
	tm.podChangedLocked(uid)
}

// containerDevices returns the devices committed to a container.
func (tm *testManager) containerDevices(pod *v1.Pod, container, resourceName string) sets.Set[string] {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	return tm.pods.ContainerDevices(string(pod.UID), container, resourceName)
}

// inUse returns every device of resource committed or reserved.
func (tm *testManager) inUse(resourceName string) sets.Set[string] {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	return tm.pods.Devices()[resourceName]
}

// allocateResourceWith runs one resource's allocation transaction for a
// container with a given topology affinity, as the kubelet's tests call
// devicesToAllocate with a mock affinity store.
func (tm *testManager) allocateResourceWith(ctx context.Context, pod *v1.Pod, container, resourceName string, count int, affinity topology.BitMask) error {
	unlock := tm.lockPod(string(pod.UID))
	defer unlock()
	tx := tm.newTxn(pod)
	return tx.finish(ctx, tm.allocateResource(ctx, tx, pod, container, deviceRequest{resource: resourceName, count: count}, affinity))
}

func mask(t testing.TB, nodes ...int) topology.BitMask {
	t.Helper()
	m, err := topology.NewBitMask(nodes...)
	if err != nil {
		t.Fatal(err)
	}
	return m
}
