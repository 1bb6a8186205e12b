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
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kubedevice/kubedevice/internal/nodeagent"
)

func TestTaints(t *testing.T) {
	snap := nodeagent.ResourceSnapshot{ResourceName: gopher, State: nodeagent.PluginRegistered, ServedByDRA: true}
	for _, tc := range []struct {
		name string
		dev  nodeagent.DeviceSnapshot
		want []string
	}{
		{"healthy", nodeagent.DeviceSnapshot{Health: nodeagent.Healthy}, nil},
		{"unhealthy", nodeagent.DeviceSnapshot{Health: nodeagent.Unhealthy, Reason: nodeagent.ReasonReportedUnhealthy}, []string{TaintUnhealthy + "=PluginReportedUnhealthy"}},
		{"disconnected", nodeagent.DeviceSnapshot{Health: nodeagent.Unhealthy, Reason: nodeagent.ReasonPluginDisconnected}, []string{TaintPluginDisconnected + "=PluginDisconnected"}},
		{"awaiting", nodeagent.DeviceSnapshot{Health: nodeagent.Unhealthy, Reason: nodeagent.ReasonAwaitingPlugin}, []string{TaintPluginDisconnected + "=AwaitingPluginRegistration"}},
		{"cordoned", nodeagent.DeviceSnapshot{Health: nodeagent.Healthy, Cordoned: true}, []string{TaintCordoned + "="}},
		{"held by a pod", nodeagent.DeviceSnapshot{Health: nodeagent.Healthy, Holder: &nodeagent.DeviceHolder{PodUID: "u", PodName: "p"}}, []string{TaintDevicePluginPath + "="}},
		{"held by a claim", nodeagent.DeviceSnapshot{Health: nodeagent.Healthy, Holder: &nodeagent.DeviceHolder{Claim: &nodeagent.ClaimRef{UID: "c"}}}, nil},
		{"odd reason", nodeagent.DeviceSnapshot{Health: nodeagent.Unhealthy, Reason: "fan failure / " + strings.Repeat("x", 80)}, []string{TaintUnhealthy + "=fan-failure---" + strings.Repeat("x", 49)}},
	} {
		var got []string
		for _, tt := range taints(snap, tc.dev) {
			if tt.Effect != "NoSchedule" {
				t.Errorf("%s: effect %s", tc.name, tt.Effect)
			}
			got = append(got, tt.Key+"="+tt.Value)
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s: taints (-want +got):\n%s", tc.name, diff)
		}
	}
}

func TestPoolOfDropsCollidingNames(t *testing.T) {
	// "Gpu_0" is sanitized to gpu-0-<hash>; an ID spelled exactly like that result is a DNS label
	// of its own and would take the same name.
	collider := DeviceName("Gpu_0")
	snap := nodeagent.ResourceSnapshot{ResourceName: gopher, ServedByDRA: true, Devices: []nodeagent.DeviceSnapshot{
		{ID: "Gpu_0", Health: nodeagent.Healthy}, {ID: collider, Health: nodeagent.Healthy}, {ID: "gpu-1", Health: nodeagent.Healthy},
	}}
	p := poolOf(snap)
	if diff := cmp.Diff([]string{"Gpu_0", collider}, p.dropped); diff != "" {
		t.Errorf("dropped (-want +got):\n%s", diff)
	}
	if len(p.slices) != 1 || len(p.slices[0].Devices) != 1 || p.slices[0].Devices[0].Name != "gpu-1" {
		t.Errorf("slices = %+v; want only gpu-1", p.slices)
	}
	if _, ok := p.ids[collider]; ok {
		t.Error("a colliding name maps to a device ID")
	}
}
