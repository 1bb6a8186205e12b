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
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kubedevice/kubedevice/internal/nodeagent/dptest"
	"github.com/kubedevice/kubedevice/internal/nodeagent/topology"
)

// hang makes a stub RPC block until the test ends, and reports each call on
// entered.
func hang(t *testing.T) (entered chan struct{}, wait func()) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) }) // runs before the plugin's Stop
	entered = make(chan struct{}, 100)
	return entered, func() {
		entered <- struct{}{}
		<-release
	}
}

// A plugin whose Allocate hangs delays only its own resource: another
// resource keeps allocating meanwhile, and the hung call fails at its
// deadline, retryably, with nothing left reserved.
func TestHungPluginAllocate(t *testing.T) {
	const deadline = 2 * time.Second
	tm := newAllocManager(t, withConfig(func(c *Config) { c.AllocateTimeout = deadline }))
	pa := startPlugin(t, tm, "a.sock", res1, false, false, healthy("a0", "a1")...)
	startPlugin(t, tm, "b.sock", res2, false, false, healthy("b0", "b1", "b2", "b3")...)
	entered, wait := hang(t)
	pa.SetAllocateFunc(func(*pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
		wait()
		return nil, errors.New("unreachable")
	})

	hung := makePod("hung").container("c", req{res1, 1}).obj()
	result := make(chan error, 1)
	start := time.Now()
	go func() { result <- tm.AllocatePod(tm.ctx, hung) }()
	<-entered

	// The reserved device is not shown as held, and no other pod gets it.
	if snap, _ := tm.Snapshot(res1); snap.Allocated != 0 {
		t.Errorf("an allocation in flight shows as allocated: %+v", snap)
	}
	if got := tm.inUse(res1).Len(); got != 1 {
		t.Errorf("devices of %s reserved = %d, want 1", res1, got)
	}
	for _, name := range []string{"b1", "b2", "b3", "b4"} {
		pod := makePod(name).container("c", req{res2, 1}).obj()
		began := time.Now()
		if err := tm.AllocatePod(tm.ctx, pod); err != nil {
			t.Fatalf("AllocatePod %s while %s hangs: %v", name, res1, err)
		}
		if took := time.Since(began); took > time.Second {
			t.Errorf("allocating %s took %v while another plugin hangs", name, took)
		}
	}
	select {
	case err := <-result:
		t.Fatalf("the hung allocation returned before its deadline: %v", err)
	default:
	}

	err := <-result
	took := time.Since(start)
	if took < deadline || took > deadline+2*time.Second {
		t.Errorf("the hung allocation returned after %v, want about %v", took, deadline)
	}
	if !IsRetryable(err) || AllocationReasonOf(err) != AllocationAllocateFailed || status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("AllocatePod = %v; want a retryable AllocateFailed deadline refusal", err)
	}
	if got := tm.inUse(res1); got.Len() != 0 {
		t.Errorf("devices still reserved after the deadline: %v", sets.List(got))
	}
}

// A GetPreferredAllocation that hangs is abandoned at its deadline and the
// manager chooses the devices itself: the allocation succeeds.
func TestGetPreferredAllocationHangFallsBack(t *testing.T) {
	const deadline = 300 * time.Millisecond
	tm := newAllocManager(t, withConfig(func(c *Config) { c.PreferredAllocationTimeout = deadline }))
	p := startPlugin(t, tm, "a.sock", res1, false, true, healthy("a0", "a1", "a2")...)
	_, wait := hang(t)
	p.SetGetPreferredAllocationFunc(func(*pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
		wait()
		return nil, errors.New("unreachable")
	})
	pod := makePod("p").container("c", req{res1, 2}).obj()
	start := time.Now()
	if err := tm.AllocatePod(tm.ctx, pod); err != nil {
		t.Fatalf("AllocatePod: %v", err)
	}
	if took := time.Since(start); took < deadline || took > deadline+2*time.Second {
		t.Errorf("AllocatePod took %v, want about %v", took, deadline)
	}
	if diff := cmp.Diff(sets.New("a0", "a1"), tm.containerDevices(pod, "c", res1)); diff != "" {
		t.Errorf("devices (-want +got):\n%s", diff)
	}
	if got := len(p.allocateCalls()); got != 1 {
		t.Errorf("Allocate calls = %d, want 1", got)
	}
}

// Cordoned devices are never allocated and not allocatable; a device
// cordoned while allocated stays with its container.
func TestCordons(t *testing.T) {
	tm := newAllocManager(t, withNUMANodes(0, 1))
	sub := tm.Subscribe()
	defer sub.Close()
	tm.SetCordons(res1, []string{"d0", "d1", ""})
	if got := sub.Changed(); len(got) != 0 {
		t.Errorf("cordoning an unknown resource notified %v", got)
	}
	startPlugin(t, tm, "r.sock", res1, false, false, numaDevice("d0", 0), numaDevice("d1", 0), numaDevice("d2", 1), numaDevice("d3", 1))
	sub.Changed()

	if diff := cmp.Diff(map[string]string{res1: "4/2"}, tm.counts()); diff != "" {
		t.Errorf("capacity/allocatable (-want +got):\n%s", diff)
	}
	if got := sets.KeySet(tm.GetAllocatableDevices()[res1]); !got.Equal(sets.New("d2", "d3")) {
		t.Errorf("allocatable devices = %v", sets.List(got))
	}
	snap, _ := tm.Snapshot(res1)
	if snap.Allocatable != 2 || snap.Cordoned != 2 || !snap.Devices[0].Cordoned || snap.Devices[2].Cordoned {
		t.Errorf("snapshot: allocatable %d cordoned %d devices %+v", snap.Allocatable, snap.Cordoned, snap.Devices)
	}
	// Without the cordons {0} would be a preferred hint too.
	wantHints := hints(t, []int{1}, true, []int{0, 1}, false)
	if diff := cmp.Diff(map[string][]topology.Hint{res1: wantHints}, tm.topologyHints(makePod("h").container("c", req{res1, 2}).obj(), &v1.Container{Name: "c", Resources: v1.ResourceRequirements{Limits: limits([]req{{res1, 2}})}})); diff != "" {
		t.Errorf("hints ignore cordoned devices (-want +got):\n%s", diff)
	}

	err := tm.AllocatePod(tm.ctx, makePod("big").container("c", req{res1, 3}).obj())
	want := &errorView{Message: "requested number of devices unavailable for domain1.com/resource1. Requested: 3, Available: 2", Reason: AllocationInsufficientDevices}
	if diff := cmp.Diff(want, viewError(err)); diff != "" {
		t.Errorf("AllocatePod of 3 (-want +got):\n%s", diff)
	}
	pod := makePod("p").container("c", req{res1, 2}).obj()
	if err := tm.AllocatePod(tm.ctx, pod); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(sets.New("d2", "d3"), tm.containerDevices(pod, "c", res1)); diff != "" {
		t.Errorf("devices (-want +got):\n%s", diff)
	}

	sub.Changed()
	tm.SetCordons(res1, []string{"d2"})
	if diff := cmp.Diff([]string{res1}, sub.Changed()); diff != "" {
		t.Errorf("notified (-want +got):\n%s", diff)
	}
	tm.SetCordons(res1, []string{"d2"})
	if got := sub.Changed(); len(got) != 0 {
		t.Errorf("an unchanged cordon notified %v", got)
	}
	snap, _ = tm.Snapshot(res1)
	if d := snap.Devices[2]; d.ID != "d2" || !d.Cordoned || d.Holder == nil {
		t.Errorf("cordoned allocated device: %+v", d)
	}
	tm.SetCordons(res1, nil)
	if diff := cmp.Diff(map[string]string{res1: "4/4"}, tm.counts()); diff != "" {
		t.Errorf("capacity/allocatable without cordons (-want +got):\n%s", diff)
	}
}

// Snapshots show each committed device's holder and the number allocated;
// PodAllocations show the pods sorted by namespace and name.
func TestSnapshotHoldersAndPodAllocations(t *testing.T) {
	tm := newAllocManager(t)
	startPlugin(t, tm, "r.sock", res1, false, false, numaDevice("d0", 0), numaDevice("d1", 1), dptest.Device("d2", pluginapi.Healthy))
	b := makePod("b").namespace("ns1").init("init", req{res1, 1}).container("app", req{res1, 1}).obj()
	a := makePod("a").namespace("ns2").container("app", req{res1, 1}).obj()
	for _, p := range []*v1.Pod{b, a} {
		if err := tm.AllocatePod(tm.ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	snap, _ := tm.Snapshot(res1)
	holders := map[string]*DeviceHolder{}
	for _, d := range snap.Devices {
		holders[d.ID] = d.Holder
	}
	want := map[string]*DeviceHolder{
		"d0": {PodUID: "uid-b", Namespace: "ns1", PodName: "b", Container: "app"},
		"d1": {PodUID: "uid-a", Namespace: "ns2", PodName: "a", Container: "app"},
		"d2": nil,
	}
	if diff := cmp.Diff(want, holders); diff != "" {
		t.Errorf("holders (-want +got):\n%s", diff)
	}
	if snap.Allocated != 2 {
		t.Errorf("Allocated = %d, want 2", snap.Allocated)
	}
	var got []string
	for _, pa := range tm.PodAllocations() {
		var containers []string
		for _, c := range pa.Containers {
			containers = append(containers, c.Name)
			if len(c.Resources) != 1 || c.RuntimeOptions == nil {
				t.Errorf("%s/%s: %+v", pa.Name, c.Name, c)
			}
		}
		got = append(got, pa.Namespace+"/"+pa.Name+":"+strings.Join(containers, ","))
	}
	if diff := cmp.Diff([]string{"ns1/b:app,init", "ns2/a:app"}, got); diff != "" {
		t.Errorf("PodAllocations (-want +got):\n%s", diff)
	}
	pa, ok := tm.PodAllocation("uid-b")
	wantB := ResourceAllocation{ResourceName: res1, DeviceIDs: []string{"d0"}, NUMANodes: []int64{0}}
	if !ok || len(pa.Containers) != 2 || !cmp.Equal(wantB, pa.Containers[0].Resources[0]) {
		t.Errorf("PodAllocation(uid-b) = %+v, %t", pa, ok)
	}
	if _, ok := tm.PodAllocation("uid-none"); ok {
		t.Error("PodAllocation of an unknown pod")
	}
	if diff := cmp.Diff([]string{"uid-b"}, tm.PodsHolding("ns1", "b")); diff != "" {
		t.Errorf("PodsHolding(ns1, b) (-want +got):\n%s", diff)
	}
	if got := tm.PodsHolding("ns2", "b"); got != nil {
		t.Errorf("PodsHolding(ns2, b) = %v, want none", got)
	}

	// Freed pods lose their holders, and subscribers hear of it.
	sub := tm.Subscribe()
	defer sub.Close()
	sub.Changed()
	if err := tm.UpdateAllocatedDevices(context.Background(), []*v1.Pod{a}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{res1}, sub.Changed()); diff != "" {
		t.Errorf("notified (-want +got):\n%s", diff)
	}
	if snap, _ := tm.Snapshot(res1); snap.Allocated != 1 || snap.Devices[0].Holder != nil {
		t.Errorf("after freeing b: %+v", snap)
	}
	if got := tm.PodsHolding("ns1", "b"); got != nil {
		t.Errorf("PodsHolding(ns1, b) after freeing b = %v, want none", got)
	}
}
