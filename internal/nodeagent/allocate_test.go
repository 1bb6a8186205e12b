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
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kubedevice/kubedevice/internal/nodeagent/dptest"
	"github.com/kubedevice/kubedevice/internal/nodeagent/poddevices"
	"github.com/kubedevice/kubedevice/internal/nodeagent/registration"
)

// kubeletStubAllocate is the kubelet tests' allocateStubFunc: dev1 brings two
// device nodes and a mount, dev2 a device node, a mount and an env. The
// kubelet's host paths are relative (host_dir1/file1); allocpolicy refuses
// those, so they are made absolute.
func kubeletStubAllocate(r *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.ContainerAllocateResponse{Envs: map[string]string{}}
	for _, dev := range r.GetContainerRequests()[0].GetDevicesIds() {
		switch dev {
		case "dev1":
			resp.Devices = append(resp.Devices,
				&pluginapi.DeviceSpec{ContainerPath: "/dev/aaa", HostPath: "/dev/aaa", Permissions: "mrw"},
				&pluginapi.DeviceSpec{ContainerPath: "/dev/bbb", HostPath: "/dev/bbb", Permissions: "mrw"})
			resp.Mounts = append(resp.Mounts, &pluginapi.Mount{ContainerPath: "/container_dir1/file1", HostPath: "/host_dir1/file1", ReadOnly: true})
		case "dev2":
			resp.Devices = append(resp.Devices, &pluginapi.DeviceSpec{ContainerPath: "/dev/ccc", HostPath: "/dev/ccc", Permissions: "mrw"})
			resp.Mounts = append(resp.Mounts, &pluginapi.Mount{ContainerPath: "/container_dir1/file2", HostPath: "/host_dir1/file2", ReadOnly: true})
			resp.Envs["key1"] = "val1"
		}
	}
	return &pluginapi.AllocateResponse{ContainerResponses: []*pluginapi.ContainerAllocateResponse{resp}}, nil
}

// kubeletStubAllocate2 is the kubelet tests' resource2 plugin: one env whose
// value depends on the device.
func kubeletStubAllocate2(r *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.ContainerAllocateResponse{Envs: map[string]string{}}
	for _, dev := range r.GetContainerRequests()[0].GetDevicesIds() {
		switch dev {
		case "dev3":
			resp.Envs["key2"] = "val2"
		case "dev4":
			resp.Envs["key2"] = "val3"
		}
	}
	return &pluginapi.AllocateResponse{ContainerResponses: []*pluginapi.ContainerAllocateResponse{resp}}, nil
}

// startKubeletTestResources registers the kubelet tests' two resources:
// res1 (dev1, dev2 on NUMA 0) and res2 (dev3, dev4 without topology).
func startKubeletTestResources(t *testing.T, tm *testManager) {
	t.Helper()
	p1 := startPlugin(t, tm, "r1.sock", res1, false, false, numaDevice("dev1", 0), numaDevice("dev2", 0))
	p1.SetAllocateFunc(kubeletStubAllocate)
	p2 := startPlugin(t, tm, "r2.sock", res2, false, false, healthy("dev3", "dev4")...)
	p2.SetAllocateFunc(kubeletStubAllocate2)
}

// optionCounts is (devices, mounts, envs) of run-container options; nil for
// no options.
func optionCounts(o *poddevices.RunContainerOptions) []int {
	if o == nil {
		return nil
	}
	return []int{len(o.Devices), len(o.Mounts), len(o.Envs)}
}

// errorView is what a test checks of a refusal.
type errorView struct {
	Message   string
	Reason    AllocationReason
	Retryable bool
}

func viewError(err error) *errorView {
	if err == nil {
		return nil
	}
	return &errorView{Message: err.Error(), Reason: AllocationReasonOf(err), Retryable: IsRetryable(err)}
}

// The kubelet's TestPodContainerDeviceAllocation.
func TestPodContainerDeviceAllocation(t *testing.T) {
	tm := newAllocManager(t)
	startKubeletTestResources(t, tm)

	cases := []struct {
		name          string
		pod           *v1.Pod
		wantOpts      []int
		wantInUseRes1 int
		wantInUseRes2 int
		wantErr       *errorView
	}{
		{
			name:          "successful allocation of two res1 devices and one res2 device",
			pod:           makePod("p0").container("c", req{res1, 2}, req{"cpu", 2}, req{res2, 1}).obj(),
			wantOpts:      []int{3, 2, 2},
			wantInUseRes1: 2,
			wantInUseRes2: 1,
		},
		{
			name:          "a pod asking for more than is left fails",
			pod:           makePod("p1").container("c", req{res1, 1}).obj(),
			wantInUseRes1: 2,
			wantInUseRes2: 1,
			wantErr: &errorView{
				Message: "requested number of devices unavailable for domain1.com/resource1. Requested: 1, Available: 0",
				Reason:  AllocationInsufficientDevices,
			},
		},
		{
			name:          "successful allocation of the last res2 device",
			pod:           makePod("p2").container("c", req{res2, 1}).obj(),
			wantOpts:      []int{0, 0, 1},
			wantInUseRes1: 2,
			wantInUseRes2: 2,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tm.Allocate(tm.ctx, tc.pod, &tc.pod.Spec.Containers[0])
			if diff := cmp.Diff(tc.wantErr, viewError(err)); diff != "" {
				t.Errorf("Allocate error (-want +got):\n%s", diff)
			}
			opts, err := tm.GetDeviceRunContainerOptions(tm.ctx, tc.pod, &tc.pod.Spec.Containers[0])
			if diff := cmp.Diff(tc.wantErr, viewError(err)); diff != "" {
				t.Errorf("GetDeviceRunContainerOptions error (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantOpts, optionCounts(opts)); diff != "" {
				t.Errorf("options (devices, mounts, envs) (-want +got):\n%s", diff)
			}
			if got := tm.inUse(res1).Len(); got != tc.wantInUseRes1 {
				t.Errorf("devices of %s in use = %d, want %d", res1, got, tc.wantInUseRes1)
			}
			if got := tm.inUse(res2).Len(); got != tc.wantInUseRes2 {
				t.Errorf("devices of %s in use = %d, want %d", res2, got, tc.wantInUseRes2)
			}
		})
	}
}

// The kubelet's TestPodContainerDeviceToAllocate: its three refusals, with
// the reason and retryability of each.
func TestPodContainerDeviceToAllocate(t *testing.T) {
	tm := newAllocManager(t)
	// res1 is registered with no healthy device; res2 is not registered;
	// res3's previously allocated dev5 is gone (healthy: dev7, dev8).
	startPlugin(t, tm, "r1.sock", res1, false, false, dptest.Device("dev1", pluginapi.Unhealthy), dptest.Device("dev2", pluginapi.Unhealthy))
	p3 := startPlugin(t, tm, "r3.sock", res3, false, false, healthy("dev5", "dev7", "dev8")...)
	pod3 := makePod("pod3").container("con3", req{res3, 1}).obj()
	tm.hold(t, pod3, "con3", res3, "dev5")
	p3.Update(healthy("dev7", "dev8"))
	tm.waitDevices(t, res3, healthy("dev7", "dev8")...)
	// S20: the held device the plugin dropped is shown, held and missing.
	if s, _ := tm.Snapshot(res3); !slices.ContainsFunc(s.Devices, func(d DeviceSnapshot) bool {
		return d.ID == "dev5" && d.Health == Unhealthy && d.Reason == ReasonNotReported && d.Holder != nil && d.Holder.PodUID == string(pod3.UID)
	}) || s.Allocated != 1 || s.Capacity != 2 {
		t.Errorf("snapshot of %s after its plugin dropped the held dev5: %+v; want dev5 shown unhealthy, NotReported, held by pod3, allocated 1, capacity 2", res3, s)
	}
	// The kubelet reaches the third check when pod3 is admitted again after a
	// reboot; so does the manager.
	tm.mu.Lock()
	tm.markStaleLocked(string(pod3.UID), "con3", res3)
	tm.mu.Unlock()

	allocatePod := func(pod *v1.Pod) func() error {
		return func() error { return tm.AllocatePod(tm.ctx, pod) }
	}
	cases := []struct {
		name     string
		allocate func() error
		want     *errorView
	}{
		{
			name:     "no healthy devices to allocate",
			allocate: allocatePod(makePod("pod1").container("con1", req{res1, 2}).obj()),
			want:     &errorView{Message: "no healthy devices present; cannot allocate unhealthy devices domain1.com/resource1", Reason: AllocationInsufficientDevices},
		},
		{
			// As in the kubelet's test, devicesToAllocate itself: AllocatePod
			// skips a resource that is not a device plugin resource at all
			// (isDevicePluginResource), so it reaches this check only for a
			// resource whose plugin is gone while devices of it are held.
			name: "resource not registered",
			allocate: func() error {
				tm.mu.Lock()
				defer tm.mu.Unlock()
				_, _, err := tm.devicesToAllocateLocked(tm.ctx, makePod("pod2").container("con2", req{res2, 1}).obj(), "con2", res2, 1, 0)
				return err
			},
			want: &errorView{Message: "cannot allocate unregistered device domain2.com/resource2", Reason: AllocationPluginUnavailable, Retryable: true},
		},
		{
			name:     "previously allocated devices no longer healthy",
			allocate: allocatePod(pod3),
			want:     &errorView{Message: "previously allocated devices are no longer healthy; cannot allocate unhealthy devices domain2.com/resource3", Reason: AllocationInsufficientDevices},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, viewError(tc.allocate())); diff != "" {
				t.Errorf("allocation error (-want +got):\n%s", diff)
			}
		})
	}
	// Nothing was reserved or changed by the refusals.
	if diff := cmp.Diff(sets.New("dev5"), tm.inUse(res3)); diff != "" {
		t.Errorf("devices of %s in use (-want +got):\n%s", res3, diff)
	}
	if got := tm.inUse(res1); got.Len() != 0 {
		t.Errorf("devices of %s in use: %v", res1, sets.List(got))
	}
}

// The retryability of every refusal: the kubelet's messages, with
// kubernetes PR #139959's semantics (a plugin that is not serving defers; a
// serving plugin without devices refuses).
func TestAllocationRefusals(t *testing.T) {
	type setup func(t *testing.T, tm *testManager)
	onePod := makePod("p").container("c", req{res1, 1}).obj()
	cases := []struct {
		name  string
		setup setup
		pod   *v1.Pod
		want  *errorView
	}{
		{
			name: "restored from the checkpoint, plugin not back",
			setup: func(_ *testing.T, tm *testManager) {
				tm.RestoreRegisteredResources(map[string][]string{res1: {"dev1"}})
			},
			pod:  onePod,
			want: &errorView{Message: "no healthy devices present; cannot allocate unhealthy devices domain1.com/resource1", Reason: AllocationPluginUnavailable, Retryable: true},
		},
		{
			name: "plugin disconnected",
			setup: func(t *testing.T, tm *testManager) {
				p := startPlugin(t, tm, "r1.sock", res1, false, false, healthy("dev1")...)
				p.Stop()
				tm.waitCounts(t, map[string]string{res1: "1/0"})
			},
			pod:  onePod,
			want: &errorView{Message: "no healthy devices present; cannot allocate unhealthy devices domain1.com/resource1", Reason: AllocationPluginUnavailable, Retryable: true},
		},
		{
			name: "plugin connected, no device list yet",
			setup: func(t *testing.T, tm *testManager) {
				err := tm.handler().PluginConnected(tm.ctx, &fakePlugin{id: 1, resource: res1, socket: "/x.sock"})
				if err != nil {
					t.Fatal(err)
				}
			},
			pod:  onePod,
			want: &errorView{Message: "no healthy devices present; cannot allocate unhealthy devices domain1.com/resource1", Reason: AllocationPluginUnavailable, Retryable: true},
		},
		{
			name: "plugin serving, every device unhealthy",
			setup: func(t *testing.T, tm *testManager) {
				startPlugin(t, tm, "r1.sock", res1, false, false, dptest.Device("dev1", pluginapi.Unhealthy))
			},
			pod:  onePod,
			want: &errorView{Message: "no healthy devices present; cannot allocate unhealthy devices domain1.com/resource1", Reason: AllocationInsufficientDevices},
		},
		{
			name: "not enough devices",
			setup: func(t *testing.T, tm *testManager) {
				startPlugin(t, tm, "r1.sock", res1, false, false, healthy("dev1")...)
			},
			pod:  makePod("p").container("c", req{res1, 2}).obj(),
			want: &errorView{Message: "requested number of devices unavailable for domain1.com/resource1. Requested: 2, Available: 1", Reason: AllocationInsufficientDevices},
		},
		{
			name: "changed request",
			setup: func(t *testing.T, tm *testManager) {
				startPlugin(t, tm, "r1.sock", res1, false, false, healthy("dev1", "dev2")...)
				tm.hold(t, onePod, "c", res1, "dev1")
			},
			pod:  makePod("p").container("c", req{res1, 2}).obj(),
			want: &errorView{Message: `pod "uid-p" container "c" changed request for resource "domain1.com/resource1" from 1 to 2`, Reason: AllocationAllocateFailed},
		},
		{
			name: "plugin Allocate unavailable",
			setup: func(t *testing.T, tm *testManager) {
				p := startPlugin(t, tm, "r1.sock", res1, false, false, healthy("dev1")...)
				p.SetAllocateFunc(func(*pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
					return nil, status.Error(codes.Unavailable, "busy")
				})
			},
			pod: onePod,
			want: &errorView{
				Message: `allocating domain1.com/resource1 for container "c": rpc error: code = Unavailable desc = busy`,
				Reason:  AllocationAllocateFailed, Retryable: true,
			},
		},
		{
			name: "plugin Allocate refuses",
			setup: func(t *testing.T, tm *testManager) {
				p := startPlugin(t, tm, "r1.sock", res1, false, false, healthy("dev1")...)
				p.SetAllocateFunc(func(*pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
					return nil, status.Error(codes.InvalidArgument, "no")
				})
			},
			pod: onePod,
			want: &errorView{
				Message: `allocating domain1.com/resource1 for container "c": rpc error: code = InvalidArgument desc = no`,
				Reason:  AllocationAllocateFailed,
			},
		},
		{
			name: "plugin answers no container response",
			setup: func(t *testing.T, tm *testManager) {
				p := startPlugin(t, tm, "r1.sock", res1, false, false, healthy("dev1")...)
				p.SetAllocateFunc(func(*pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
					return &pluginapi.AllocateResponse{}, nil
				})
			},
			pod:  onePod,
			want: &errorView{Message: "no containers return in allocation response ", Reason: AllocationAllocateFailed},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tm := newAllocManager(t)
			if tc.setup != nil {
				tc.setup(t, tm)
			}
			before := tm.inUse(res1)
			err := tm.AllocatePod(tm.ctx, tc.pod)
			if diff := cmp.Diff(tc.want, viewError(err)); diff != "" {
				t.Errorf("AllocatePod error (-want +got):\n%s", diff)
			}
			var ae *AllocationError
			if !errors.As(err, &ae) {
				t.Errorf("error %T is not an *AllocationError", err)
			}
			if diff := cmp.Diff(before, tm.inUse(res1)); diff != "" {
				t.Errorf("devices in use changed by the refusal (-before +after):\n%s", diff)
			}
		})
	}
}

// The kubelet's TestInitContainerDeviceAllocation: devices of regular init
// containers are reused by the app containers, which do not share theirs.
func TestInitContainerDeviceAllocation(t *testing.T) {
	tm := newAllocManager(t)
	startKubeletTestResources(t, tm)
	pod := makePod("p").
		init("init1", req{res1, 1}).
		init("init2", req{res1, 2}).
		container("app1", req{res1, 1}, req{res2, 1}).
		container("app2", req{res1, 1}, req{res2, 1}).obj()
	for _, c := range podContainers(pod) {
		if err := tm.Allocate(tm.ctx, pod, c); err != nil {
			t.Fatalf("Allocate %s: %v", c.Name, err)
		}
	}
	init1 := tm.containerDevices(pod, "init1", res1)
	init2 := tm.containerDevices(pod, "init2", res1)
	app1 := tm.containerDevices(pod, "app1", res1)
	app2 := tm.containerDevices(pod, "app2", res1)
	if diff := cmp.Diff([]int{1, 2, 1, 1}, []int{init1.Len(), init2.Len(), app1.Len(), app2.Len()}); diff != "" {
		t.Errorf("device counts init1, init2, app1, app2 (-want +got):\n%s", diff)
	}
	if !init2.IsSuperset(init1) || !init2.IsSuperset(app1) || !init2.IsSuperset(app2) {
		t.Errorf("init2 %v does not hold init1 %v, app1 %v and app2 %v", sets.List(init2), sets.List(init1), sets.List(app1), sets.List(app2))
	}
	if app1.HasAny(app2.UnsortedList()...) {
		t.Errorf("app1 %v and app2 %v share a device", sets.List(app1), sets.List(app2))
	}
}

// The kubelet's TestRestartableInitContainerDeviceAllocation: sidecars keep
// their devices; only the regular init container's are shared.
func TestRestartableInitContainerDeviceAllocation(t *testing.T) {
	tm := newAllocManager(t)
	startPlugin(t, tm, "r1.sock", res1, false, false, healthy("dev1", "dev2", "dev3", "dev4", "dev5", "dev6")...)
	pod := makePod("p").
		init("regular", req{res1, 3}).
		sidecar("sidecar1", req{res1, 1}).
		sidecar("sidecar2", req{res1, 2}).
		container("app1", req{res1, 1}).
		container("app2", req{res1, 2}).obj()
	// AllocatePod walks the containers in the kubelet's order.
	if err := tm.AllocatePod(tm.ctx, pod); err != nil {
		t.Fatalf("AllocatePod: %v", err)
	}
	regular := tm.containerDevices(pod, "regular", res1)
	dedicated := map[string]sets.Set[string]{}
	for _, c := range []string{"sidecar1", "sidecar2", "app1", "app2"} {
		dedicated[c] = tm.containerDevices(pod, c, res1)
	}
	got := map[string]int{"regular": regular.Len()}
	for c, d := range dedicated {
		got[c] = d.Len()
	}
	if diff := cmp.Diff(map[string]int{"regular": 3, "sidecar1": 1, "sidecar2": 2, "app1": 1, "app2": 2}, got); diff != "" {
		t.Errorf("device counts (-want +got):\n%s", diff)
	}
	if !regular.IsSuperset(dedicated["sidecar1"]) || !regular.IsSuperset(dedicated["sidecar2"]) {
		t.Errorf("the sidecars %v, %v did not reuse the regular init container's %v", dedicated["sidecar1"], dedicated["sidecar2"], regular)
	}
	seen := sets.New[string]()
	for c, d := range dedicated {
		if seen.HasAny(d.UnsortedList()...) {
			t.Errorf("%s shares a device with another sidecar or app container: %v", c, sets.List(d))
		}
		seen.Insert(d.UnsortedList()...)
	}
}

// AllocatePod of a pod that holds its devices does nothing observable: no
// RPC, no checkpoint write, no notification.
func TestAllocatePodIdempotent(t *testing.T) {
	tm := newAllocManager(t)
	p := startPlugin(t, tm, "r1.sock", res1, false, true, healthy("dev1", "dev2")...)
	pod := makePod("p").init("i", req{res1, 1}).container("c", req{res1, 2}).obj()
	if err := tm.AllocatePod(tm.ctx, pod); err != nil {
		t.Fatal(err)
	}
	calls := len(p.Calls())
	writes := testutil.ToFloat64(tm.metrics.checkpointWrites.WithLabelValues(resultSuccess))
	sub := tm.Subscribe()
	defer sub.Close()
	sub.Changed()
	for range 3 {
		if err := tm.AllocatePod(tm.ctx, pod); err != nil {
			t.Fatal(err)
		}
		if err := tm.Allocate(tm.ctx, pod, &pod.Spec.Containers[0]); err != nil {
			t.Fatal(err)
		}
	}
	if got := p.Calls()[calls:]; len(got) != 0 {
		t.Errorf("RPCs after the first AllocatePod: %v", got)
	}
	if got := testutil.ToFloat64(tm.metrics.checkpointWrites.WithLabelValues(resultSuccess)); got != writes {
		t.Errorf("checkpoint writes went from %v to %v", writes, got)
	}
	if got := sub.Changed(); len(got) != 0 {
		t.Errorf("notified of %v", got)
	}
}

// Like the kubelet's isDevicePluginResource: an extended resource no plugin
// registered (say, one an administrator advertises on the Node) is not the
// device manager's to allocate, so a pod asking for it is allocated its device
// plugin resources and nothing else; a resource whose plugin is gone while
// devices of it are still held stays a device plugin resource and is refused.
func TestAllocateSkipsNonDevicePluginResources(t *testing.T) {
	tm := newAllocManager(t)
	startPlugin(t, tm, "r1.sock", res1, false, false, healthy("dev1", "dev2")...)
	const dongle = "example.com/dongle"
	pod := makePod("p").container("c", req{res1, 1}, req{dongle, 3}).obj()
	if err := tm.AllocatePod(tm.ctx, pod); err != nil {
		t.Fatalf("AllocatePod: %v", err)
	}
	got, ok := tm.PodAllocation(string(pod.UID))
	if !ok {
		t.Fatal("no allocation for the pod")
	}
	var resources []string
	for _, c := range got.Containers {
		for _, r := range c.Resources {
			resources = append(resources, r.ResourceName)
		}
	}
	if diff := cmp.Diff([]string{res1}, resources); diff != "" {
		t.Errorf("allocated resources (-want +got):\n%s", diff)
	}

	// res2's devices are held by a pod, but its plugin is gone: a new pod
	// asking for it is refused with the kubelet's message, retryably.
	tm.mu.Lock()
	reserveErr := tm.pods.Reserve("holder", "c", res2, "x1")
	tm.mu.Unlock()
	if reserveErr != nil {
		t.Fatal(reserveErr)
	}
	err := tm.AllocatePod(tm.ctx, makePod("q").container("c", req{res2, 1}).obj())
	want := &errorView{Message: "cannot allocate unregistered device domain2.com/resource2", Reason: AllocationPluginUnavailable, Retryable: true}
	if diff := cmp.Diff(want, viewError(err)); diff != "" {
		t.Errorf("AllocatePod error for a held, unregistered resource (-want +got):\n%s", diff)
	}
}

// A failure rolls the whole transaction back: nothing stays reserved or
// committed, earlier resources and containers included, and the checkpoint
// does not keep them.
func TestAllocateRollback(t *testing.T) {
	tm := newAllocManager(t)
	startPlugin(t, tm, "r1.sock", res1, false, false, healthy("a1", "a2")...)
	p2 := startPlugin(t, tm, "r2.sock", res2, false, false, healthy("b1", "b2")...)
	p2.SetAllocateFunc(func(*pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
		return nil, status.Error(codes.Internal, "broken")
	})
	sub := tm.Subscribe()
	defer sub.Close()

	t.Run("second resource of a container fails", func(t *testing.T) {
		pod := makePod("p1").container("c", req{res1, 1}, req{res2, 1}).obj()
		err := tm.Allocate(tm.ctx, pod, &pod.Spec.Containers[0])
		if AllocationReasonOf(err) != AllocationAllocateFailed || err == nil {
			t.Fatalf("Allocate = %v, want an AllocateFailed refusal", err)
		}
		tm.assertNothingHeld(t)
	})
	t.Run("second container of a pod fails", func(t *testing.T) {
		pod := makePod("p2").container("c1", req{res1, 2}).container("c2", req{res2, 1}).obj()
		if err := tm.AllocatePod(tm.ctx, pod); err == nil {
			t.Fatal("AllocatePod succeeded")
		}
		tm.assertNothingHeld(t)
		if _, ok := tm.PodAllocation(string(pod.UID)); ok {
			t.Error("PodAllocation shows the rolled-back pod")
		}
	})
	t.Run("retry succeeds once the plugin works", func(t *testing.T) {
		p2.SetAllocateFunc(func(r *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
			return &pluginapi.AllocateResponse{ContainerResponses: []*pluginapi.ContainerAllocateResponse{echoResponse(res2, r.GetContainerRequests()[0].GetDevicesIds())}}, nil
		})
		pod := makePod("p2").container("c1", req{res1, 2}).container("c2", req{res2, 1}).obj()
		if err := tm.AllocatePod(tm.ctx, pod); err != nil {
			t.Fatal(err)
		}
		if got := tm.inUse(res1).Len() + tm.inUse(res2).Len(); got != 3 {
			t.Errorf("devices in use = %d, want 3", got)
		}
	})
}

func (tm *testManager) assertNothingHeld(t *testing.T) {
	t.Helper()
	tm.mu.Lock()
	defer tm.mu.Unlock()
	if d := tm.pods.Devices(); len(d) != 0 {
		t.Errorf("devices still reserved or committed: %v", d)
	}
	if e := tm.pods.Entries(); len(e) != 0 {
		t.Errorf("allocations still committed: %v", e)
	}
	if len(tm.checkpointStateLocked().Entries) != 0 {
		t.Errorf("the checkpoint state holds allocations")
	}
}

// The kubelet's TestDevicesToAllocateConflictWithUpdateAllocatedDevices: a
// garbage collection while GetPreferredAllocation runs does not break the
// allocation; nor does another pod allocating meanwhile, which never gets a
// device this allocation holds.
func TestDevicesToAllocateConflictWithUpdateAllocatedDevices(t *testing.T) {
	for _, otherAllocates := range []bool{false, true} {
		t.Run(fmt.Sprintf("otherPodAllocates=%t", otherAllocates), func(t *testing.T) {
			tm := newAllocManager(t)
			p := startPlugin(t, tm, "r.sock", res1, false, true, healthy("deviceID", "gone")...)
			inRPC, release := make(chan struct{}), make(chan struct{})
			var calls atomic.Int32
			p.SetGetPreferredAllocationFunc(func(*pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
				if calls.Add(1) == 1 {
					inRPC <- struct{}{}
					<-release
				}
				return &pluginapi.PreferredAllocationResponse{ContainerResponses: []*pluginapi.ContainerPreferredAllocationResponse{{DeviceIDs: []string{"deviceID"}}}}, nil
			})
			toRemove := makePod("podToRemove").container("containerToRemove", req{res1, 1}).obj()
			tm.hold(t, toRemove, "containerToRemove", res1, "gone")
			pod := makePod("podToAllocate").container("containerToAllocate", req{res1, 1}).obj()
			other := makePod("other").container("c", req{res1, 1}).obj()

			done := make(chan error, 1)
			go func() {
				defer close(release)
				<-inRPC
				if err := tm.UpdateAllocatedDevices(tm.ctx, []*v1.Pod{pod, other}); err != nil || !otherAllocates {
					done <- err
					return
				}
				done <- tm.AllocatePod(tm.ctx, other)
			}()
			if err := tm.AllocatePod(tm.ctx, pod); err != nil {
				t.Fatalf("AllocatePod: %v", err)
			}
			if err := <-done; err != nil {
				t.Fatalf("during the RPC: %v", err)
			}
			if got := tm.containerDevices(toRemove, "containerToRemove", res1); got != nil {
				t.Errorf("podToRemove still holds %v", sets.List(got))
			}
			a, b := tm.containerDevices(pod, "containerToAllocate", res1), tm.containerDevices(other, "c", res1)
			if !otherAllocates {
				if diff := cmp.Diff(sets.New("deviceID"), a); diff != "" {
					t.Errorf("podToAllocate's devices (-want +got):\n%s", diff)
				}
				return
			}
			// Nothing was picked before the RPC, so the other pod may take
			// the preferred device: each pod gets one device of its own.
			if a.Len() != 1 || b.Len() != 1 || a.Equal(b) {
				t.Errorf("podToAllocate holds %v and other %v; want one distinct device each", sets.List(a), sets.List(b))
			}
		})
	}
}

// The kubelet's TestDevicePreStartContainer: PreStartContainer gets exactly
// the container's devices, and the options are the Allocate response's; a
// pod asking for 0 devices gets no PreStartContainer.
func TestDevicePreStartContainer(t *testing.T) {
	tm := newAllocManager(t)
	p := startPlugin(t, tm, "r1.sock", res1, true, false, healthy("dev1", "dev2")...)
	p.SetAllocateFunc(kubeletStubAllocate)
	pod := makePod("p").container("c", req{res1, 2}).obj()
	if err := tm.Allocate(tm.ctx, pod, &pod.Spec.Containers[0]); err != nil {
		t.Fatal(err)
	}
	opts, err := tm.GetDeviceRunContainerOptions(tm.ctx, pod, &pod.Spec.Containers[0])
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([][]string{{"dev1", "dev2"}}, p.preStartCalls()); diff != "" {
		t.Errorf("PreStartContainer calls (-want +got):\n%s", diff)
	}
	want, _ := kubeletStubAllocate(&pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"dev1", "dev2"}}}})
	wantResp := want.GetContainerResponses()[0]
	if diff := cmp.Diff([]int{len(wantResp.Devices), len(wantResp.Mounts), len(wantResp.Envs)}, optionCounts(opts)); diff != "" {
		t.Errorf("options (devices, mounts, envs) (-want +got):\n%s", diff)
	}

	pod2 := makePod("p2").container("c", req{res1, 0}).obj()
	if err := tm.Allocate(tm.ctx, pod2, &pod2.Spec.Containers[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := tm.GetDeviceRunContainerOptions(tm.ctx, pod2, &pod2.Spec.Containers[0]); err != nil {
		t.Fatal(err)
	}
	if got := len(p.preStartCalls()); got != 1 {
		t.Errorf("PreStartContainer calls = %d, want 1", got)
	}

	t.Run("PreStartContainer fails", func(t *testing.T) {
		p.SetPreStartContainerFunc(func(*pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
			return nil, status.Error(codes.Internal, "not ready")
		})
		_, err := tm.GetDeviceRunContainerOptions(tm.ctx, pod, &pod.Spec.Containers[0])
		want := "device plugin PreStartContainer rpc failed with err: rpc error: code = Internal desc = not ready"
		if err == nil || err.Error() != want {
			t.Errorf("GetDeviceRunContainerOptions error = %v, want %q", err, want)
		}
	})
	t.Run("no devices for a finished pod", func(t *testing.T) {
		done := makePod("done").container("c", req{res1, 1}).phase(v1.PodSucceeded).obj()
		_, err := tm.GetDeviceRunContainerOptions(tm.ctx, done, &done.Spec.Containers[0])
		want := "no devices found allocated in local cache for pod uid-done, container c, resource domain1.com/resource1"
		if err == nil || err.Error() != want {
			t.Errorf("GetDeviceRunContainerOptions error = %v, want %q", err, want)
		}
	})
}

// PreStartContainer is the kubelet's PreStartContainer step alone: each call
// (each start of the container) calls the plugins that require it, with the
// container's devices of their resource, and no other plugin; it allocates
// nothing, and a failure is the kubelet's error.
func TestPreStartContainer(t *testing.T) {
	tm := newAllocManager(t)
	pre := startPlugin(t, tm, "r1.sock", res1, true, false, healthy("dev1", "dev2", "dev3")...)
	plain := startPlugin(t, tm, "r2.sock", res2, false, false, healthy("other1")...)
	for _, tc := range []struct {
		resource        string
		required, known bool
	}{{res1, true, true}, {res2, false, true}, {"example.com/none", false, false}} {
		if required, known := tm.PreStartRequired(tc.resource); required != tc.required || known != tc.known {
			t.Errorf("PreStartRequired(%s) = %t, %t; want %t, %t", tc.resource, required, known, tc.required, tc.known)
		}
	}
	pod := makePod("p").container("c", req{res1, 2}, req{res2, 1}).obj()
	c := &pod.Spec.Containers[0]

	if err := tm.PreStartContainer(tm.ctx, pod, c); err == nil || !strings.HasPrefix(err.Error(), "no devices found allocated in local cache") {
		t.Fatalf("PreStartContainer before allocation: got %v, want the kubelet's no-devices error", err)
	}
	if got := tm.containerDevices(pod, "c", res1); got.Len() != 0 {
		t.Fatalf("PreStartContainer allocated %v", sets.List(got))
	}
	if err := tm.Allocate(tm.ctx, pod, c); err != nil {
		t.Fatal(err)
	}
	held := sets.List(tm.containerDevices(pod, "c", res1))
	for range 3 {
		if err := tm.PreStartContainer(tm.ctx, pod, c); err != nil {
			t.Fatal(err)
		}
	}
	if diff := cmp.Diff([][]string{held, held, held}, pre.preStartCalls()); diff != "" {
		t.Errorf("PreStartContainer calls of the plugin that requires them (-want +got):\n%s", diff)
	}
	if got := plain.preStartCalls(); len(got) != 0 {
		t.Errorf("the plugin that does not require PreStartContainer got %v", got)
	}

	pre.SetPreStartContainerFunc(func(*pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
		return nil, status.Error(codes.FailedPrecondition, "device busy")
	})
	want := "device plugin PreStartContainer rpc failed with err: rpc error: code = FailedPrecondition desc = device busy"
	if err := tm.PreStartContainer(tm.ctx, pod, c); err == nil || err.Error() != want {
		t.Errorf("PreStartContainer error = %v, want %q", err, want)
	}
}

// The kubelet's TestGetDeviceRunContainerOptions: options while the pod is
// active; nil, and no error, once it has finished and its devices were
// freed.
func TestGetDeviceRunContainerOptions(t *testing.T) {
	tm := newAllocManager(t)
	startKubeletTestResources(t, tm)
	pod1 := makePod("p1").container("c", req{res1, 2}, req{res2, 1}).obj()
	pod2 := makePod("p2").container("c", req{res2, 1}).obj()
	for _, p := range []*v1.Pod{pod1, pod2} {
		if err := tm.Allocate(tm.ctx, p, &p.Spec.Containers[0]); err != nil {
			t.Fatal(err)
		}
	}
	opts, err := tm.GetDeviceRunContainerOptions(tm.ctx, pod1, &pod1.Spec.Containers[0])
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]int{3, 2, 2}, optionCounts(opts)); diff != "" {
		t.Errorf("options (devices, mounts, envs) (-want +got):\n%s", diff)
	}

	pod1.Status.Phase = v1.PodSucceeded
	if err := tm.UpdateAllocatedDevices(tm.ctx, []*v1.Pod{pod2}); err != nil {
		t.Fatal(err)
	}
	opts, err = tm.GetDeviceRunContainerOptions(tm.ctx, pod1, &pod1.Spec.Containers[0])
	if err != nil || opts != nil {
		t.Errorf("GetDeviceRunContainerOptions of the finished pod = %+v, %v; want nil, nil", opts, err)
	}
}

// GetDeviceRunContainerOptions allocates a container of an active pod that
// is missing its devices, then merges the options of its resources in
// resource name order, logging conflicts.
func TestGetDeviceRunContainerOptionsMerge(t *testing.T) {
	tm := newAllocManager(t)
	pa := startPlugin(t, tm, "a.sock", res1, false, false, healthy("a")...)
	pb := startPlugin(t, tm, "b.sock", res2, false, false, healthy("b")...)
	respond := func(env, mountHost string) func(*pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
		return func(*pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
			return &pluginapi.AllocateResponse{ContainerResponses: []*pluginapi.ContainerAllocateResponse{{
				Envs:        map[string]string{"SHARED": env},
				Mounts:      []*pluginapi.Mount{{ContainerPath: "/data", HostPath: mountHost}},
				Annotations: map[string]string{"vendor/" + env: "x"},
				CdiDevices:  []*pluginapi.CDIDevice{{Name: "vendor.com/dev=" + env}, {Name: "vendor.com/dev=shared"}},
			}}}, nil
		}
	}
	pa.SetAllocateFunc(respond("a", "/host/a"))
	pb.SetAllocateFunc(respond("b", "/host/b"))
	pod := makePod("p").container("c", req{res2, 1}, req{res1, 1}).obj()
	opts, err := tm.GetDeviceRunContainerOptions(tm.ctx, pod, &pod.Spec.Containers[0])
	if err != nil {
		t.Fatal(err)
	}
	want := &poddevices.RunContainerOptions{
		Envs:        []poddevices.EnvVar{{Name: "SHARED", Value: "a"}},
		Mounts:      []poddevices.Mount{{ContainerPath: "/data", HostPath: "/host/a"}},
		Annotations: []poddevices.Annotation{{Key: "vendor/a", Value: "x"}, {Key: "vendor/b", Value: "x"}},
		CDIDevices:  []string{"vendor.com/dev=a", "vendor.com/dev=shared", "vendor.com/dev=b"},
	}
	if diff := cmp.Diff(want, opts); diff != "" {
		t.Errorf("options (-want +got):\n%s", diff)
	}
}

// Requests the manager does not serve are left alone: native resources, and
// extended resources a DRA claim serves; a request for 0 devices needs no
// plugin.
func TestContainerRequests(t *testing.T) {
	pod := makePod("p").container("c", req{"cpu", 2}, req{"memory", 1 << 20}, req{"hugepages-2Mi", 4}, req{"kubernetes.io/x", 1},
		req{res1, 2}, req{res2, 0}, req{"dra.example.com/gpu", 1}).obj()
	pod.Status.ExtendedResourceClaimStatus = &v1.PodExtendedResourceClaimStatus{
		RequestMappings: []v1.ContainerExtendedResourceRequest{{ContainerName: "c", ResourceName: "dra.example.com/gpu", RequestName: "r"}},
	}
	got := containerRequests(pod, &pod.Spec.Containers[0])
	if diff := cmp.Diff([]deviceRequest{{resource: res1, count: 2}}, got, cmp.AllowUnexported(deviceRequest{})); diff != "" {
		t.Errorf("containerRequests (-want +got):\n%s", diff)
	}
	if !registration.IsExtendedResourceName(res1) {
		t.Fatal("test resource is not an extended resource name")
	}
}

// The Allocate RPC is timed per resource, as the kubelet's
// device_plugin_alloc_duration_seconds, and the whole transaction in
// allocation_duration_seconds, by result.
func TestAllocationMetrics(t *testing.T) {
	tm := newAllocManager(t)
	startPlugin(t, tm, "r1.sock", res1, false, false, healthy("dev1")...)
	if err := tm.AllocatePod(tm.ctx, makePod("p").container("c", req{res1, 1}).obj()); err != nil {
		t.Fatal(err)
	}
	if err := tm.AllocatePod(tm.ctx, makePod("q").container("c", req{res1, 1}).obj()); err == nil {
		t.Fatal("second pod allocated the only device")
	}
	want := map[string]uint64{
		"kubedevice_device_plugin_alloc_duration_seconds{resource_name=domain1.com/resource1}": 1,
		"kubedevice_allocation_duration_seconds{result=success}":                               1,
		"kubedevice_allocation_duration_seconds{result=error}":                                 1,
	}
	if diff := cmp.Diff(want, histogramCounts(t, tm, "kubedevice_device_plugin_alloc_duration_seconds", "kubedevice_allocation_duration_seconds")); diff != "" {
		t.Errorf("histogram sample counts (-want +got):\n%s", diff)
	}
}

// histogramCounts returns the sample count of every series of the named
// histograms, keyed name{label=value,...}.
func histogramCounts(t *testing.T, tm *testManager, names ...string) map[string]uint64 {
	t.Helper()
	families, err := tm.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]uint64{}
	for _, f := range families {
		if !slices.Contains(names, f.GetName()) {
			continue
		}
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			out[f.GetName()+"{"+strings.Join(labels, ",")+"}"] = m.GetHistogram().GetSampleCount()
		}
	}
	return out
}
