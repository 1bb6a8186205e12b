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
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kubedevice/kubedevice/internal/nodeagent/dptest"
)

// listAndWatchSeed marshals a ListAndWatch message for the fuzz corpus.
func listAndWatchSeed(f *testing.F, devs ...*pluginapi.Device) {
	f.Helper()
	b, err := proto.Marshal(&pluginapi.ListAndWatchResponse{Devices: devs})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
}

// wantAccepted is the documented rule for a ListAndWatch message, written out
// independently of validateDeviceList: at most MaxDevicesPerResource devices,
// each ID non-empty, at most MaxDeviceIDLength bytes, valid UTF-8 (control
// characters, NUL included, are accepted, as by the kubelet), and no ID twice.
func wantAccepted(devs []*pluginapi.Device) bool {
	if len(devs) > MaxDevicesPerResource {
		return false
	}
	ids := map[string]bool{}
	for _, d := range devs {
		id := d.GetID()
		if id == "" || len(id) > MaxDeviceIDLength || !utf8.ValidString(id) || ids[id] {
			return false
		}
		ids[id] = true
	}
	return true
}

// FuzzListAndWatchMessage feeds plugin-controlled ListAndWatch messages
// (protobuf bytes, as they come off the wire) to the manager's receiver, one
// after another on one connected resource. Properties: it never panics; it
// accepts exactly the messages the documented rule accepts; an accepted
// message becomes the device set with every invariant of a snapshot (IDs
// sorted and unique, health Healthy or Unhealthy as reported, NUMA nodes
// sorted and unique, capacity and allocatable counted); a rejected one leaves
// the previous snapshot untouched.
func FuzzListAndWatchMessage(f *testing.F) {
	listAndWatchSeed(f, dptest.Device("gpu-0", pluginapi.Healthy, 0), dptest.Device("gpu-1", pluginapi.Unhealthy, 1, 0, 1))
	listAndWatchSeed(f, dptest.Device("gopher-0", pluginapi.Healthy), dptest.Device("gopher-1", "Overheated"))
	listAndWatchSeed(f)
	listAndWatchSeed(f, dptest.Device("a", pluginapi.Healthy), dptest.Device("a", pluginapi.Healthy))
	listAndWatchSeed(f, dptest.Device("bad\nid", pluginapi.Healthy))
	listAndWatchSeed(f, dptest.Device(strings.Repeat("x", MaxDeviceIDLength+1), pluginapi.Healthy))
	listAndWatchSeed(f, dptest.Device("", pluginapi.Healthy))
	listAndWatchSeed(f, dptest.Device("n", pluginapi.Healthy, -1, 1<<62), &pluginapi.Device{ID: "nil-topology", Topology: &pluginapi.TopologyInfo{Nodes: []*pluginapi.NUMANode{nil}}})

	tm := newTestManager(f, false)
	// The test context's logger belongs to f, which the fuzz function must not use.
	h, ctx := tm.handler(), klog.NewContext(context.Background(), logr.Discard())
	p := &fakePlugin{id: 1, resource: testResource, socket: "/dp/p.sock"}
	if err := h.PluginConnected(ctx, p); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, msg []byte) {
		var resp pluginapi.ListAndWatchResponse
		if err := proto.Unmarshal(msg, &resp); err != nil {
			return // grpc refuses it before the manager sees it
		}
		before, _ := tm.Snapshot(testResource)
		tm.clock.Step(time.Second)
		h.PluginListAndWatchReceiver(ctx, p, &resp)
		after, ok := tm.Snapshot(testResource)
		if !ok {
			t.Fatal("resource gone after a ListAndWatch message")
		}
		devs := resp.GetDevices()
		if !wantAccepted(devs) {
			if after.Rejected == nil {
				t.Fatal("a rejected message is not shown in the snapshot's Rejected")
			}
			after.Rejected = before.Rejected
			if diff := cmp.Diff(before, after); diff != "" {
				t.Fatalf("rejected message changed the resource (-before +after):\n%s", diff)
			}
			return
		}
		if after.Rejected != nil {
			t.Fatalf("an accepted message left Rejected = %+v", after.Rejected)
		}
		if len(after.Devices) != len(devs) || after.Capacity != len(devs) {
			t.Fatalf("accepted %d devices, snapshot has %d (capacity %d)", len(devs), len(after.Devices), after.Capacity)
		}
		reported := map[string]*pluginapi.Device{}
		for _, d := range devs {
			reported[d.GetID()] = d
		}
		healthy := 0
		for i, d := range after.Devices {
			if i > 0 && after.Devices[i-1].ID >= d.ID {
				t.Fatalf("devices not sorted and unique: %q then %q", after.Devices[i-1].ID, d.ID)
			}
			in := reported[d.ID]
			if in == nil {
				t.Fatalf("device %q was not reported", d.ID)
			}
			if len(d.ID) > MaxDeviceIDLength || !utf8.ValidString(d.ID) {
				t.Fatalf("accepted invalid ID %q", d.ID)
			}
			wantHealth := Unhealthy
			if in.GetHealth() == pluginapi.Healthy {
				wantHealth = Healthy
				healthy++
			}
			if d.Health != wantHealth {
				t.Fatalf("device %q reported %q is %q, want %q", d.ID, in.GetHealth(), d.Health, wantHealth)
			}
			if !utf8.ValidString(d.Message) || len(d.Message) > len(msgReportedUnhealthy)+4*maxHealthInMessage {
				t.Fatalf("device %q message %q: invalid UTF-8 or unbounded", d.ID, d.Message)
			}
			var wantNUMA []int64
			for _, n := range in.GetTopology().GetNodes() {
				if n != nil {
					wantNUMA = append(wantNUMA, n.GetID())
				}
			}
			slices.Sort(wantNUMA)
			wantNUMA = slices.Compact(wantNUMA)
			if !slices.Equal(d.NUMANodes, wantNUMA) {
				t.Fatalf("device %q NUMA nodes %v, want %v", d.ID, d.NUMANodes, wantNUMA)
			}
		}
		if after.Allocatable != healthy {
			t.Fatalf("allocatable %d, want %d healthy", after.Allocatable, healthy)
		}
	})
}
