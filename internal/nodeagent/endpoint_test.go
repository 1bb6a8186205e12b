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
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kubedevice/kubedevice/internal/nodeagent/dptest"
)

// The endpoint's RPCs reach the plugin with the kubelet's request shapes and
// return its answers unchanged.
func TestEndpointRPCs(t *testing.T) {
	tm := newTestManager(t, true)
	p := newPlugin(t, tm.dir, "p.sock", testResource, dptest.Device("a", pluginapi.Healthy), dptest.Device("b", pluginapi.Healthy))
	p.SetOptions(true, true)

	var (
		mu       sync.Mutex
		requests []any
	)
	allocResp := &pluginapi.AllocateResponse{ContainerResponses: []*pluginapi.ContainerAllocateResponse{{
		Envs:        map[string]string{"GOPHERS": "a,b"},
		Mounts:      []*pluginapi.Mount{{ContainerPath: "/dev/gopher", HostPath: "/var/gopher", ReadOnly: true}},
		Devices:     []*pluginapi.DeviceSpec{{ContainerPath: "/dev/g0", HostPath: "/dev/g0", Permissions: "rw"}},
		Annotations: map[string]string{"gopher": "yes"},
		CdiDevices:  []*pluginapi.CDIDevice{{Name: "example.com/gopher=a"}},
	}}}
	prefResp := &pluginapi.PreferredAllocationResponse{ContainerResponses: []*pluginapi.ContainerPreferredAllocationResponse{{DeviceIDs: []string{"b"}}}}
	record := func(r any) {
		mu.Lock()
		defer mu.Unlock()
		requests = append(requests, r)
	}
	p.SetAllocateFunc(func(r *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
		record(r)
		return allocResp, nil
	})
	p.SetGetPreferredAllocationFunc(func(r *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
		record(r)
		return prefResp, nil
	})
	p.SetPreStartContainerFunc(func(r *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
		record(r)
		return &pluginapi.PreStartContainerResponse{}, nil
	})
	mustRegister(t, p, tm.SocketPath())
	tm.waitCounts(t, map[string]string{testResource: "2/2"})

	tm.mu.Lock()
	e, ok := tm.endpointLocked(testResource)
	tm.mu.Unlock()
	if !ok || e.isStopped() {
		t.Fatalf("no live endpoint for %s", testResource)
	}
	if !e.opts().GetPreStartRequired() || !e.opts().GetGetPreferredAllocationAvailable() {
		t.Errorf("endpoint options = %v", e.opts())
	}
	ctx := context.Background()
	gotAlloc, err := e.allocate(ctx, []string{"a", "b"})
	if err != nil {
		t.Fatalf("allocate: %v", err)
	}
	if diff := cmp.Diff(allocResp, gotAlloc, protocmp.Transform()); diff != "" {
		t.Errorf("allocate response (-want +got):\n%s", diff)
	}
	ctxDeadline, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	gotPref, err := e.getPreferredAllocation(ctxDeadline, []string{"a", "b"}, []string{"a"}, -1)
	if err != nil {
		t.Fatalf("getPreferredAllocation: %v", err)
	}
	if diff := cmp.Diff(prefResp, gotPref, protocmp.Transform()); diff != "" {
		t.Errorf("preferred allocation response (-want +got):\n%s", diff)
	}
	if err := e.preStartContainer(ctx, []string{"a"}); err != nil {
		t.Fatalf("preStartContainer: %v", err)
	}

	wantRequests := []any{
		&pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"a", "b"}}}},
		&pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{
			AvailableDeviceIDs: []string{"a", "b"}, MustIncludeDeviceIDs: []string{"a"}, AllocationSize: -1,
		}}},
		&pluginapi.PreStartContainerRequest{DevicesIds: []string{"a"}},
	}
	mu.Lock()
	defer mu.Unlock()
	if diff := cmp.Diff(wantRequests, requests, protocmp.Transform()); diff != "" {
		t.Errorf("requests seen by the plugin (-want +got):\n%s", diff)
	}
}

func TestStoppedEndpoint(t *testing.T) {
	stoppedAt := testEpoch
	e := newStoppedEndpoint("example.com/gopher", stoppedAt)
	if !e.isStopped() || e.opts() != nil || e.socketPath() != "" {
		t.Errorf("restored endpoint: stopped %t, options %v, socket %q", e.isStopped(), e.opts(), e.socketPath())
	}
	want := "endpoint example.com/gopher has been stopped"
	ctx := context.Background()
	if _, err := e.allocate(ctx, []string{"a"}); err == nil || err.Error() != want {
		t.Errorf("allocate: %v, want %q", err, want)
	}
	if _, err := e.getPreferredAllocation(ctx, []string{"a"}, nil, 1); err == nil || err.Error() != want {
		t.Errorf("getPreferredAllocation: %v, want %q", err, want)
	}
	if err := e.preStartContainer(ctx, []string{"a"}); err == nil || err.Error() != want {
		t.Errorf("preStartContainer: %v, want %q", err, want)
	}
	for _, tc := range []struct {
		after time.Duration
		want  bool
	}{{0, false}, {DefaultEndpointGracePeriod - time.Nanosecond, false}, {DefaultEndpointGracePeriod, true}, {time.Hour, true}} {
		if got := e.stopGracePeriodExpired(stoppedAt.Add(tc.after), DefaultEndpointGracePeriod); got != tc.want {
			t.Errorf("expired %v after stopping = %t, want %t", tc.after, got, tc.want)
		}
	}
	live := &endpoint{resourceName: testResource}
	if live.isStopped() || live.stopGracePeriodExpired(stoppedAt.Add(time.Hour), time.Minute) {
		t.Error("a live endpoint counts as stopped")
	}
}
