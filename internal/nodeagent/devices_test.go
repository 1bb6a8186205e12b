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
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/testing/protocmp"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kubedevice/kubedevice/internal/nodeagent/dptest"
	"github.com/kubedevice/kubedevice/internal/nodeagent/registration"
)

func TestValidateDeviceList(t *testing.T) {
	dev := func(ids ...string) []*pluginapi.Device {
		var out []*pluginapi.Device
		for _, id := range ids {
			out = append(out, dptest.Device(id, pluginapi.Healthy))
		}
		return out
	}
	many := make([]string, 100_000)
	for i := range many {
		many[i] = fmt.Sprintf("d%d", i)
	}
	cases := map[string]struct {
		devs       []*pluginapi.Device
		wantReason string
	}{
		"empty list":             {devs: nil},
		"valid":                  {devs: dev("a", "GPU-9f2c", "mig-1g.5gb/0", strings.Repeat("x", 253))},
		"duplicate ID":           {devs: dev("a", "b", "a"), wantReason: invalidDuplicateID},
		"empty ID":               {devs: dev("a", ""), wantReason: invalidEmptyID},
		"ID too long":            {devs: dev(strings.Repeat("x", 254)), wantReason: invalidIDTooLong},
		"control characters":     {devs: dev("a\nb", "\x01", "\x7f", "\u0085")}, // the kubelet accepts any ID
		"NUL":                    {devs: dev("\x00", "a\x00")},
		"invalid UTF-8":          {devs: dev("a\xff"), wantReason: invalidIDCharacters},
		"too many devices":       {devs: dev(many[:MaxDevicesPerResource+1]...), wantReason: invalidTooManyDevices},
		"exactly the most":       {devs: dev(many[:MaxDevicesPerResource]...)},
		"10 k, supported":        {devs: dev(many[:10_000]...)},
		"100 k, rejected":        {devs: dev(many...), wantReason: invalidTooManyDevices},
		"duplicate after change": {devs: append(dev("a"), dptest.Device("a", pluginapi.Unhealthy)), wantReason: invalidDuplicateID},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			reason, err := validateDeviceList(tc.devs)
			if reason != tc.wantReason || (err != nil) != (tc.wantReason != "") {
				t.Errorf("validateDeviceList() = %q, %v; want reason %q", reason, err, tc.wantReason)
			}
		})
	}
}

// An invalid message is rejected whole: the previous devices stay, the
// rejection is counted, and the next valid message applies.
func TestInvalidListAndWatchMessageRejected(t *testing.T) {
	tm := newTestManager(t, true)
	good := []*pluginapi.Device{dptest.Device("a", pluginapi.Healthy), dptest.Device("b", pluginapi.Healthy)}
	p := newPlugin(t, tm.dir, "p.sock", testResource, good...)
	mustRegister(t, p, tm.SocketPath())
	tm.waitCounts(t, map[string]string{testResource: "2/2"})

	bad := map[string][]*pluginapi.Device{
		invalidDuplicateID: {dptest.Device("a", pluginapi.Healthy), dptest.Device("a", pluginapi.Unhealthy), dptest.Device("c", pluginapi.Healthy)},
		invalidEmptyID:     {dptest.Device("", pluginapi.Healthy)},
		invalidIDTooLong:   {dptest.Device(strings.Repeat("x", 300), pluginapi.Healthy)},
		// InvalidDeviceID (invalid UTF-8) cannot be sent: protobuf refuses to marshal it, and the
		// kubelet's gRPC client would refuse to unmarshal it (TestValidateDeviceList covers it).
	}
	for reason, devs := range bad {
		t.Run(reason, func(t *testing.T) {
			counter := tm.metrics.invalidUpdates.WithLabelValues(testResource, reason)
			p.Update(devs)
			dptest.Eventually(t, waitTimeout, func() error {
				if got := testutil.ToFloat64(counter); got != 1 {
					return fmt.Errorf("invalid updates counted %v, want 1", got)
				}
				return nil
			})
			if diff := cmp.Diff(map[string]string{testResource: "2/2"}, tm.counts()); diff != "" {
				t.Errorf("the previous devices must stay (-want +got):\n%s", diff)
			}
			// The refusal is in the snapshot, for the NodeDevice's condition.
			dptest.Eventually(t, waitTimeout, func() error {
				snap, _ := tm.Snapshot(testResource)
				if snap.Rejected == nil || snap.Rejected.Reason != reason || snap.Rejected.Message == "" {
					return fmt.Errorf("snapshot's Rejected = %+v, want reason %s", snap.Rejected, reason)
				}
				return nil
			})
		})
	}
	p.Update([]*pluginapi.Device{dptest.Device("c", pluginapi.Healthy)})
	tm.waitCounts(t, map[string]string{testResource: "1/1"})
	if snap, _ := tm.Snapshot(testResource); snap.Rejected != nil {
		t.Errorf("snapshot's Rejected = %+v after an accepted message, want nil", snap.Rejected)
	}
}

// The kubelet accepts any device ID: control characters, NUL included, are
// carried as the plugin's exact bytes, and Allocate sends them back.
func TestControlCharacterDeviceIDs(t *testing.T) {
	tm := newTestManager(t, true)
	ids := []string{"\x00", "\x01", "\n", "\x1f"}
	var devs []*pluginapi.Device
	for _, id := range ids {
		devs = append(devs, dptest.Device(id, pluginapi.Healthy))
	}
	p := newPlugin(t, tm.dir, "p.sock", testResource, devs...)
	mustRegister(t, p, tm.SocketPath())
	tm.waitCounts(t, map[string]string{testResource: "4/4"})
	snap, _ := tm.Snapshot(testResource)
	var got []string
	for _, d := range snap.Devices {
		got = append(got, d.ID)
	}
	if diff := cmp.Diff([]string{"\x00", "\x01", "\n", "\x1f"}, got); diff != "" {
		t.Errorf("snapshot device IDs (-want +got):\n%s", diff)
	}
	if snap.Rejected != nil {
		t.Errorf("Rejected = %+v, want nil", snap.Rejected)
	}
}

// A message over the receive limit ends the stream; it is counted, and the
// resource is disconnected like any stream end.
func TestListAndWatchMessageTooLarge(t *testing.T) {
	if testing.Short() {
		t.Skip("sends a 17 MiB message")
	}
	tm := newTestManager(t, true)
	p := newPlugin(t, tm.dir, "p.sock", testResource, dptest.Device("a", pluginapi.Healthy))
	mustRegister(t, p, tm.SocketPath())
	tm.waitCounts(t, map[string]string{testResource: "1/1"})

	// A few devices with 1 MiB IDs: gRPC refuses the message by the length in
	// its header, before the agent reads a device. 70,000 devices with 250-byte
	// IDs took 0.25-0.5 s under -race from Update to counted (marshalled device
	// by device), and 4 s of the 5 s wait when the test got a tenth of a CPU;
	// these 17 take a quarter of that.
	huge := make([]*pluginapi.Device, registration.MaxListAndWatchMessageSize>>20+1)
	for i := range huge {
		huge[i] = dptest.Device(fmt.Sprintf("%d-%s", i, strings.Repeat("x", 1<<20)), pluginapi.Healthy)
	}
	p.Update(huge)
	dptest.Eventually(t, waitTimeout, func() error {
		if got := testutil.ToFloat64(tm.metrics.invalidUpdates.WithLabelValues(testResource, invalidMessageTooLarge)); got != 1 {
			return fmt.Errorf("too large messages counted %v, want 1", got)
		}
		return nil
	})
	tm.waitCounts(t, map[string]string{testResource: "1/0"})
}

// Snapshots: devices sorted by ID, NUMA nodes sorted and deduplicated, a
// reason and message per device, and transition times that move only when
// the health changes.
func TestSnapshot(t *testing.T) {
	tm := newTestManager(t, false)
	h, ctx := tm.handler(), tm.ctx
	p := &fakePlugin{id: 7, resource: testResource, socket: "/dp/p.sock", options: &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true}}
	if err := h.PluginConnected(ctx, p); err != nil {
		t.Fatal(err)
	}
	connectedAt := tm.clock.Now()
	h.PluginListAndWatchReceiver(ctx, p, devices(
		dptest.Device("gpu-2", pluginapi.Healthy, 1, 0, 1),
		dptest.Device("gpu-10", "Overheated"),
		dptest.Device("gpu-1", pluginapi.Healthy, 0),
	))
	tm.clock.Step(time.Minute)
	later := tm.clock.Now()
	h.PluginListAndWatchReceiver(ctx, p, devices(
		dptest.Device("gpu-2", pluginapi.Unhealthy, 1, 0),
		dptest.Device("gpu-10", pluginapi.Unhealthy),
		dptest.Device("gpu-1", pluginapi.Healthy, 0),
	))

	want := ResourceSnapshot{
		ResourceName: testResource,
		Endpoints:    []string{"/dp/p.sock"},
		Registration: 7,
		State:        PluginRegistered,
		StateSince:   connectedAt,
		Options:      PluginOptions{GetPreferredAllocationAvailable: true},
		Capacity:     3,
		Allocatable:  1,
		Devices: []DeviceSnapshot{
			{ID: "gpu-1", Health: Healthy, Reason: ReasonReportedHealthy, Message: msgReportedHealthy, LastTransitionTime: connectedAt, NUMANodes: []int64{0}},
			// Unhealthy before and after: the time stays, the message follows.
			{ID: "gpu-10", Health: Unhealthy, Reason: ReasonReportedUnhealthy, Message: `The device plugin reports the device as "Unhealthy".`, LastTransitionTime: connectedAt},
			{ID: "gpu-2", Health: Unhealthy, Reason: ReasonReportedUnhealthy, Message: `The device plugin reports the device as "Unhealthy".`, LastTransitionTime: later, NUMANodes: []int64{0, 1}},
		},
	}
	got, ok := tm.Snapshot(testResource)
	if !ok {
		t.Fatal("no snapshot")
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("snapshot (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]ResourceSnapshot{want}, tm.Snapshots()); diff != "" {
		t.Errorf("Snapshots (-want +got):\n%s", diff)
	}
	// A snapshot is a copy.
	got.Devices[2].NUMANodes[0] = 42
	again, _ := tm.Snapshot(testResource)
	if again.Devices[2].NUMANodes[0] != 0 {
		t.Error("modifying a snapshot changed the manager's state")
	}
	if _, ok := tm.Snapshot("example.com/unknown"); ok {
		t.Error("snapshot of an unknown resource")
	}
}

// A snapshot's Registration names the connection serving the resource: it changes with every
// registration, a new socket's or a takeover of the same socket, follows the serving endpoint when
// the newest one goes, and is 0 while no plugin is connected.
func TestSnapshotRegistration(t *testing.T) {
	tm := newTestManager(t, false)
	h, ctx := tm.handler(), tm.ctx
	registration := func() uint64 {
		t.Helper()
		s, ok := tm.Snapshot(testResource)
		if !ok {
			t.Fatal("no snapshot")
		}
		return s.Registration
	}
	first := &fakePlugin{id: 3, resource: testResource, socket: "/dp/a.sock"}
	takeover := &fakePlugin{id: 4, resource: testResource, socket: "/dp/a.sock"}
	second := &fakePlugin{id: 5, resource: testResource, socket: "/dp/b.sock"}
	var got []uint64
	for _, p := range []*fakePlugin{first, takeover, second} {
		if err := h.PluginConnected(ctx, p); err != nil {
			t.Fatal(err)
		}
		got = append(got, registration())
	}
	h.PluginDisconnected(ctx, second, nil)
	got = append(got, registration())
	h.PluginDisconnected(ctx, takeover, nil)
	got = append(got, registration())
	if diff := cmp.Diff([]uint64{3, 4, 5, 4, 0}, got); diff != "" {
		t.Errorf("Registration after each connect and disconnect (-want +got):\n%s", diff)
	}
}

func TestUnknownHealthMessageIsBounded(t *testing.T) {
	d := deviceFromProto(dptest.Device("a", strings.Repeat("h", 500)))
	if d.health != Unhealthy || len(d.message) > len(msgReportedUnhealthy)+maxHealthInMessage {
		t.Errorf("device from an unknown health: %q %q", d.health, d.message)
	}
}

func TestGetAllocatableDevices(t *testing.T) {
	tm := newTestManager(t, false)
	h, ctx := tm.handler(), tm.ctx
	p1 := &fakePlugin{id: 1, resource: "example.com/one", socket: "/dp/1.sock"}
	p2 := &fakePlugin{id: 2, resource: "example.com/two", socket: "/dp/2.sock"}
	for _, p := range []*fakePlugin{p1, p2} {
		if err := h.PluginConnected(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	h.PluginListAndWatchReceiver(ctx, p1, devices(dptest.Device("a", pluginapi.Healthy, 1), dptest.Device("b", pluginapi.Unhealthy, 0)))
	h.PluginListAndWatchReceiver(ctx, p2, devices(dptest.Device("x", pluginapi.Healthy)))
	want := ResourceDeviceInstances{
		"example.com/one": {"a": dptest.Device("a", pluginapi.Healthy, 1)},
		"example.com/two": {"x": dptest.Device("x", pluginapi.Healthy)},
	}
	if diff := cmp.Diff(want, tm.GetAllocatableDevices(), protocmp.Transform()); diff != "" {
		t.Errorf("allocatable devices (-want +got):\n%s", diff)
	}

	// b turns healthy, a unhealthy.
	h.PluginListAndWatchReceiver(ctx, p1, devices(dptest.Device("a", pluginapi.Unhealthy, 1), dptest.Device("b", pluginapi.Healthy, 0)))
	want["example.com/one"] = DeviceInstances{"b": dptest.Device("b", pluginapi.Healthy, 0)}
	if diff := cmp.Diff(want, tm.GetAllocatableDevices(), protocmp.Transform()); diff != "" {
		t.Errorf("allocatable devices after the health change (-want +got):\n%s", diff)
	}
	// A disconnected resource has nothing allocatable.
	h.PluginDisconnected(ctx, p2, nil)
	want["example.com/two"] = DeviceInstances{}
	if diff := cmp.Diff(want, tm.GetAllocatableDevices(), protocmp.Transform()); diff != "" {
		t.Errorf("allocatable devices after the disconnect (-want +got):\n%s", diff)
	}
	tm.mu.Lock()
	healthy := tm.healthyDevicesLocked("example.com/one")
	r := tm.resourceLocked("example.com/one")
	tm.mu.Unlock()
	if !healthy.Equal(r.healthy) || !healthy.Has("b") || healthy.Len() != 1 {
		t.Errorf("healthyDevicesLocked = %v", healthy)
	}
	if tm.healthyDevicesLocked("example.com/unknown") != nil {
		t.Error("healthy devices of an unknown resource")
	}
}
