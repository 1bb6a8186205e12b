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

package dra

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	promtestutil "github.com/prometheus/client_golang/prometheus/testutil"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2/ktesting"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"k8s.io/utils/ptr"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/kubedevice/kubedevice/internal/nodeagent"
	"github.com/kubedevice/kubedevice/internal/nodeagent/dptest"
)

const (
	gopher = "example.com/gopher"
	other  = "example.com/other"
)

// node is a real core with real stub plugins over unix sockets, and the DRA driver over it.
type node struct {
	t       testing.TB
	ctx     context.Context
	dir     string
	cdiDir  string
	core    *nodeagent.Manager
	driver  *driver
	mu      sync.Mutex
	allocs  [][]string
	plugins []*dptest.Plugin
}

func newNode(t testing.TB, dir string) *node {
	t.Helper()
	if dir == "" {
		dir = dptest.ShortTempDir(t)
	}
	_, ctx := ktesting.NewTestContext(t)
	n := &node{t: t, ctx: ctx, dir: dir, cdiDir: filepath.Join(dir, "cdi")}
	boot := filepath.Join(dir, "boot_id")
	if err := os.WriteFile(boot, []byte("11111111-2222-3333-4444-555555555555\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	core, err := nodeagent.New(nodeagent.Config{
		PluginDir: filepath.Join(dir, "dp"), StateDir: filepath.Join(dir, "state"), BootIDPath: boot,
		Registerer: prometheus.NewRegistry(), ServedByDRA: sets.New(gopher).Has,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(core.Stop)
	if err := core.Start(ctx); err != nil {
		t.Fatal(err)
	}
	w, err := newCDIWriter(n.cdiDir)
	if err != nil {
		t.Fatal(err)
	}
	n.core, n.driver = core, &driver{core: core, cdi: w, fatal: make(chan error, 1)}
	return n
}

// plugin starts and registers a stub plugin whose Allocate answers with an env, a device node, a
// mount, an annotation and a CDI device of its own.
func (n *node) plugin(resource string, ids ...string) *dptest.Plugin { //nolint:unparam // the resource is named at every call, so a test of a second resource reads the same
	n.t.Helper()
	var devs []*pluginapi.Device
	for i, id := range ids {
		devs = append(devs, dptest.Device(id, pluginapi.Healthy, int64(i%2)))
	}
	p := dptest.New(filepath.Join(n.dir, "dp", strings.ReplaceAll(resource, "/", "_")+".sock"), resource, devs)
	p.SetAllocateFunc(func(r *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
		out := &pluginapi.AllocateResponse{}
		for _, cr := range r.GetContainerRequests() {
			ids := cr.GetDevicesIds()
			n.mu.Lock()
			n.allocs = append(n.allocs, slices.Clone(ids))
			n.mu.Unlock()
			resp := &pluginapi.ContainerAllocateResponse{
				Envs:        map[string]string{"GOPHERS": strings.Join(ids, ",")},
				Annotations: map[string]string{"example.com/hint": "x"},
				CdiDevices:  []*pluginapi.CDIDevice{{Name: "vendor.example.com/gpu=" + ids[0]}},
			}
			for _, id := range ids {
				resp.Devices = append(resp.Devices, &pluginapi.DeviceSpec{ContainerPath: "/dev/" + id, HostPath: "/dev/null", Permissions: "rw"})
				resp.Mounts = append(resp.Mounts, &pluginapi.Mount{ContainerPath: "/gopher/" + id, HostPath: "/tmp", ReadOnly: true})
			}
			out.ContainerResponses = append(out.ContainerResponses, resp)
		}
		return out, nil
	})
	if err := p.Start(); err != nil {
		n.t.Fatal(err)
	}
	n.t.Cleanup(p.Stop)
	ctx, cancel := context.WithTimeout(n.ctx, 5*time.Second)
	defer cancel()
	if err := p.Register(ctx, n.core.SocketPath()); err != nil {
		n.t.Fatal(err)
	}
	dptest.Eventually(n.t, 5*time.Second, func() error {
		s, ok := n.core.Snapshot(resource)
		if !ok || s.Capacity != len(ids) {
			return fmt.Errorf("%s not registered yet", resource)
		}
		return nil
	})
	n.plugins = append(n.plugins, p)
	return p
}

func (n *node) allocateCalls() [][]string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.allocs)
}

// claim is an allocated claim of the driver's devices: request → plugin IDs of resource.
func claim(uid, name, resource string, requests map[string][]string) *resourceapi.ResourceClaim { //nolint:unparam // as plugin: the resource is named at every call
	c := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID(uid)},
		Status:     resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{}},
	}
	for _, rq := range slices.Sorted(func(yield func(string) bool) {
		for k := range requests {
			if !yield(k) {
				return
			}
		}
	}) {
		for _, id := range requests[rq] {
			c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results, resourceapi.DeviceRequestAllocationResult{
				Request: rq, Driver: DriverName, Pool: PoolName(resource), Device: DeviceName(id),
			})
		}
	}
	// A device of another driver is not ours.
	c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results, resourceapi.DeviceRequestAllocationResult{
		Request: "net", Driver: "net.example.com", Pool: "x", Device: "eth0",
	})
	return c
}

func (n *node) prepare(c *resourceapi.ResourceClaim) kubeletplugin.PrepareResult {
	n.t.Helper()
	res, err := n.driver.PrepareResourceClaims(n.ctx, []*resourceapi.ResourceClaim{c})
	if err != nil {
		n.t.Fatal(err)
	}
	return res[c.UID]
}

func (n *node) unprepare(c *resourceapi.ResourceClaim) error {
	n.t.Helper()
	res, err := n.driver.UnprepareResourceClaims(n.ctx, []kubeletplugin.NamespacedObject{{UID: c.UID, NamespacedName: types.NamespacedName{Namespace: c.Namespace, Name: c.Name}}})
	if err != nil {
		n.t.Fatal(err)
	}
	return res[c.UID]
}

// cdiEdits reads the spec directory as a runtime does and returns the env a container gets from
// ids.
func (n *node) cdiEnv(ids []string) ([]string, error) {
	cache, err := cdiapi.NewCache(cdiapi.WithSpecDirs(n.cdiDir), cdiapi.WithAutoRefresh(false))
	if err != nil {
		return nil, err
	}
	var env []string
	for _, id := range ids {
		d := cache.GetDevice(id)
		if d == nil {
			if strings.HasPrefix(id, "vendor.example.com/") {
				continue // the plugin's own CDI device, passed through
			}
			return nil, fmt.Errorf("CDI device %s not found; errors %v", id, cache.GetErrors())
		}
		env = append(env, d.ContainerEdits.Env...)
		if len(d.ContainerEdits.DeviceNodes) == 0 || len(d.ContainerEdits.Mounts) == 0 {
			return nil, fmt.Errorf("CDI device %s has no device nodes or mounts: %+v", id, d.ContainerEdits)
		}
	}
	return env, nil
}

func TestPrepareUnprepare(t *testing.T) {
	n := newNode(t, "")
	n.plugin(gopher, "gopher-0", "gopher-1", "Gopher_2")
	c := claim("aaaaaaaa-0000-4000-8000-000000000001", "c1", gopher, map[string][]string{"a": {"gopher-1"}, "b": {"Gopher_2", "gopher-0"}})

	successes := promtestutil.ToFloat64(prepares.WithLabelValues(prepareSuccess))
	res := n.prepare(c)
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	if got := promtestutil.ToFloat64(prepares.WithLabelValues(prepareSuccess)) - successes; got != 1 {
		t.Errorf("kubedevice_agent_dra_prepare_total{result=success} grew by %v, want 1", got)
	}
	// One Allocate per request, with exactly its devices.
	if diff := cmp.Diff([][]string{{"gopher-1"}, {"Gopher_2", "gopher-0"}}, n.allocateCalls()); diff != "" {
		t.Errorf("Allocate calls (-want +got):\n%s", diff)
	}
	// One result per device of ours; the CDI devices on the first device of each request.
	var cdiIDs = map[string][]string{}
	for _, d := range res.Devices {
		if d.PoolName != gopher {
			t.Errorf("device %+v in pool %q", d, d.PoolName)
		}
		cdiIDs[d.Requests[0]] = append(cdiIDs[d.Requests[0]], d.CDIDeviceIDs...)
	}
	if len(res.Devices) != 3 {
		t.Fatalf("devices = %+v; want 3", res.Devices)
	}
	wantA := []string{"kubedevice.io/device=" + string(c.UID) + "-0", "vendor.example.com/gpu=gopher-1"}
	if diff := cmp.Diff(wantA, cdiIDs["a"]); diff != "" {
		t.Errorf("CDI IDs of request a (-want +got):\n%s", diff)
	}
	env, err := n.cdiEnv(cdiIDs["b"])
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"GOPHERS=Gopher_2,gopher-0"}, env); diff != "" {
		t.Errorf("env of request b from the CDI spec (-want +got):\n%s", diff)
	}

	// The kubelet retries: the same answer, no second Allocate.
	again := n.prepare(c)
	if again.Err != nil || !cmp.Equal(again.Devices, res.Devices) || len(n.allocateCalls()) != 2 {
		t.Errorf("second prepare = %+v (Allocate calls %d); want the same answer, no RPC", again, len(n.allocateCalls()))
	}
	// A second claim for a held device is refused and holds nothing.
	c2 := claim("aaaaaaaa-0000-4000-8000-000000000002", "c2", gopher, map[string][]string{"a": {"gopher-0"}})
	if r := n.prepare(c2); r.Err == nil || !strings.Contains(r.Err.Error(), "held by ResourceClaim default/c1") {
		t.Errorf("prepare of a held device = %v", r.Err)
	}

	if err := n.unprepare(c); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(n.cdiDir, specName(string(c.UID)))); !os.IsNotExist(err) {
		t.Errorf("CDI spec after unprepare: %v", err)
	}
	if err := n.unprepare(c); err != nil {
		t.Errorf("second unprepare = %v; want nothing to do", err)
	}
	if r := n.prepare(c2); r.Err != nil {
		t.Errorf("prepare of the freed device = %v", r.Err)
	}
}

// TestPrepareSurvivesRestart: the agent restarts between prepare and unprepare; the claim is
// prepared again from the record (no Allocate), then unprepared, and its devices are free.
func TestPrepareSurvivesRestart(t *testing.T) {
	dir := dptest.ShortTempDir(t)
	n := newNode(t, dir)
	n.plugin(gopher, "gopher-0", "gopher-1")
	c := claim("aaaaaaaa-0000-4000-8000-000000000003", "c3", gopher, map[string][]string{"r": {"gopher-1"}})
	if r := n.prepare(c); r.Err != nil {
		t.Fatal(r.Err)
	}
	for _, p := range n.plugins {
		p.Stop()
	}
	n.core.Stop()

	m := newNode(t, dir)
	// The pods' garbage collection of the restarted agent keeps the claim.
	if err := m.core.UpdateAllocatedDevices(m.ctx, nil); err != nil {
		t.Fatal(err)
	}
	if _, ok := m.core.Claim(string(c.UID)); !ok {
		t.Fatal("the claim is gone after the restart")
	}
	m.plugin(gopher, "gopher-0", "gopher-1")
	if r := m.prepare(c); r.Err != nil || len(m.allocateCalls()) != 0 {
		t.Errorf("prepare after restart = %v, Allocate calls %v; want the record", r.Err, m.allocateCalls())
	}
	if err := m.unprepare(c); err != nil {
		t.Fatal(err)
	}
	s, _ := m.core.Snapshot(gopher)
	if s.Allocated != 0 {
		t.Errorf("allocated after unprepare = %d", s.Allocated)
	}
}

// TestPrepareFailure: a failing Allocate fails the claim with the plugin's message, no spec.
func TestPrepareFailure(t *testing.T) {
	failures := promtestutil.ToFloat64(prepares.WithLabelValues(prepareFailure))
	successes := promtestutil.ToFloat64(prepares.WithLabelValues(prepareSuccess))
	n := newNode(t, "")
	p := n.plugin(gopher, "gopher-0")
	p.SetAllocateFunc(func(*pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
		return nil, fmt.Errorf("gopher asleep")
	})
	c := claim("aaaaaaaa-0000-4000-8000-000000000004", "c4", gopher, map[string][]string{"r": {"gopher-0"}})
	r := n.prepare(c)
	if r.Err == nil || !strings.Contains(r.Err.Error(), "gopher asleep") {
		t.Fatalf("prepare = %v; want the plugin's message", r.Err)
	}
	if entries, _ := os.ReadDir(n.cdiDir); len(entries) != 0 {
		t.Errorf("CDI dir after a failed prepare: %v", entries)
	}
	if _, ok := n.core.Claim(string(c.UID)); ok {
		t.Error("the failed claim holds devices")
	}
	// Admin access is refused: a device plugin hands a device to one container at a time.
	admin := claim("aaaaaaaa-0000-4000-8000-000000000006", "c6", gopher, map[string][]string{"r": {"gopher-0"}})
	admin.Status.Allocation.Devices.Results[0].AdminAccess = ptr.To(true)
	if r := n.prepare(admin); r.Err == nil || !strings.Contains(r.Err.Error(), "admin access") {
		t.Errorf("prepare with admin access = %v", r.Err)
	}
	// A device name that is not published is refused.
	bad := claim("aaaaaaaa-0000-4000-8000-000000000005", "c5", gopher, map[string][]string{"r": {"nope"}})
	if r := n.prepare(bad); r.Err == nil || !strings.Contains(r.Err.Error(), "not one of the agent's devices") {
		t.Errorf("prepare of an unknown device = %v", r.Err)
	}
	// Each failed claim is counted once, and none as a success.
	if got := promtestutil.ToFloat64(prepares.WithLabelValues(prepareFailure)) - failures; got != 3 {
		t.Errorf("kubedevice_agent_dra_prepare_total{result=failure} grew by %v, want 3", got)
	}
	if got := promtestutil.ToFloat64(prepares.WithLabelValues(prepareSuccess)) - successes; got != 0 {
		t.Errorf("kubedevice_agent_dra_prepare_total{result=success} grew by %v, want 0", got)
	}
}

func TestDeviceName(t *testing.T) {
	for _, tc := range []struct{ id, want string }{
		{"gopher-0", "gopher-0"},
		{"GPU-0", "gpu-0-"},
		{"gpu_0", "gpu-0-"},
		{"0000:3b:00.0", "0000-3b-00-0-"},
		{"___", "d-"},
		{strings.Repeat("a", 64), strings.Repeat("a", 52) + "-"},
	} {
		got := DeviceName(tc.id)
		if !strings.HasPrefix(got, tc.want) || len(got) > 63 {
			t.Errorf("DeviceName(%q) = %q; want prefix %q, at most 63 characters", tc.id, got, tc.want)
		}
		if got != tc.id && len(got) != len(strings.TrimSuffix(tc.want, "-"))+1+hashLen && tc.want != "d-" {
			t.Errorf("DeviceName(%q) = %q; want a %d-digit hash suffix", tc.id, got, hashLen)
		}
	}
	if DeviceName("GPU-0") == DeviceName("gpu_0") || DeviceName("GPU-0") == DeviceName("gpu-0") {
		t.Error("IDs differing only in case or punctuation collide")
	}
	if PoolName(gopher) != gopher || PoolName("Example.com/GPU") == "Example.com/GPU" {
		t.Errorf("PoolName: %q, %q", PoolName(gopher), PoolName("Example.com/GPU"))
	}
}

func TestHealthReport(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	snap := nodeagent.ResourceSnapshot{ResourceName: gopher, ServedByDRA: true, Devices: []nodeagent.DeviceSnapshot{
		{ID: "g-0", Health: nodeagent.Healthy, Reason: nodeagent.ReasonReportedHealthy},
		{ID: "g-1", Health: nodeagent.Unhealthy, Reason: nodeagent.ReasonReportedUnhealthy, Message: "bad"},
		{ID: "g-2", Health: nodeagent.Unhealthy, Reason: nodeagent.ReasonNotReported, Message: "gone"},
		{ID: "g-3", Health: nodeagent.Unhealthy, Reason: nodeagent.ReasonPluginDisconnected, Message: "no plugin"},
		{ID: "g-4", Health: nodeagent.Unhealthy, Reason: nodeagent.ReasonAwaitingPlugin, Message: "restored"},
	}}
	notDRA := nodeagent.ResourceSnapshot{ResourceName: other, Devices: []nodeagent.DeviceSnapshot{{ID: "o-0", Health: nodeagent.Healthy}}}
	got := healthReport([]nodeagent.ResourceSnapshot{snap, notDRA}, now)
	dev := func(name string, h kubeletplugin.HealthStatus, msg string) kubeletplugin.DeviceHealth {
		return kubeletplugin.DeviceHealth{PoolName: PoolName(gopher), DeviceName: name, Health: h, Message: msg, LastUpdated: now, HealthCheckTimeout: healthTimeout}
	}
	want := kubeletplugin.DeviceHealthReport{Devices: []kubeletplugin.DeviceHealth{
		dev("g-0", kubeletplugin.HealthStatusHealthy, ""),
		dev("g-1", kubeletplugin.HealthStatusUnhealthy, "PluginReportedUnhealthy: bad"),
		dev("g-2", kubeletplugin.HealthStatusUnhealthy, "NotReportedByPlugin: gone"),
		dev("g-3", kubeletplugin.HealthStatusUnknown, "PluginDisconnected: no plugin"),
		dev("g-4", kubeletplugin.HealthStatusUnknown, "AwaitingPluginRegistration: restored"),
	}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("health report (-want +got):\n%s", diff)
	}
}
