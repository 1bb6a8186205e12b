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
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/kubedevice/kubedevice/internal/nodeagent"
)

// staleSlice is a slice an earlier run published for pool, its devices untainted.
func staleSlice(name, pool string, devices ...string) *resourceapi.ResourceSlice {
	s := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: "1"},
		Spec: resourceapi.ResourceSliceSpec{
			Driver: DriverName, NodeName: ptr.To("n1"),
			Pool: resourceapi.ResourcePool{Name: pool, Generation: 1, ResourceSliceCount: 1},
		},
	}
	for _, d := range devices {
		s.Spec.Devices = append(s.Spec.Devices, resourceapi.Device{Name: d})
	}
	return s
}

// sliceTaints are the taints of every device of the slice the client holds, as key=value.
func sliceTaints(t *testing.T, c *fake.Clientset, name string) map[string][]string {
	t.Helper()
	s, err := c.ResourceV1().ResourceSlices().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, d := range s.Spec.Devices {
		out[d.Name] = []string{}
		for _, tt := range d.Taints {
			out[d.Name] = append(out[d.Name], tt.Key+"="+tt.Value)
		}
	}
	return out
}

func TestTaintStale(t *testing.T) {
	awaiting := TaintPluginDisconnected + "=" + nodeagent.ReasonAwaitingPlugin
	restored := nodeagent.ResourceSnapshot{ResourceName: gopher, State: nodeagent.PluginDisconnected, ServedByDRA: true, Devices: []nodeagent.DeviceSnapshot{
		{ID: "g-0", Health: nodeagent.Unhealthy, Reason: nodeagent.ReasonAwaitingPlugin},
		{ID: "g-1", Health: nodeagent.Unhealthy, Reason: nodeagent.ReasonAwaitingPlugin, Cordoned: true},
	}}
	back := nodeagent.ResourceSnapshot{ResourceName: other, State: nodeagent.PluginRegistered, ServedByDRA: true, Devices: []nodeagent.DeviceSnapshot{
		{ID: "o-0", Health: nodeagent.Healthy},
	}}
	c := fake.NewClientset(
		staleSlice("gopher", gopher, "g-0", "g-1", "g-gone"),
		staleSlice("other", other, "o-0"),
		staleSlice("old-pool", "example.com/old", "x-0"),
	)
	n, err := taintStale(context.Background(), c, "n1", []nodeagent.ResourceSnapshot{restored, back})
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Errorf("updated %d slices, want 2 (gopher and old-pool; other is as its state says)", n)
	}
	for name, want := range map[string]map[string][]string{
		// Restored devices as the state taints them; one the state does not know as awaiting its plugin.
		"gopher": {"g-0": {awaiting}, "g-1": {awaiting, TaintCordoned + "="}, "g-gone": {awaiting}},
		// Its plugin registered again before the gate opened: nothing to taint.
		"other": {"o-0": {}},
		// A pool of a resource the state does not have.
		"old-pool": {"x-0": {awaiting}},
	} {
		if diff := cmp.Diff(want, sliceTaints(t, c, name)); diff != "" {
			t.Errorf("slice %s: taints (-want +got):\n%s", name, diff)
		}
	}
	for _, a := range c.Actions() {
		if u, ok := a.(k8stesting.UpdateAction); ok && u.GetObject().(*resourceapi.ResourceSlice).Name == "other" {
			t.Error("the slice whose taints were right was updated")
		}
	}

	// Run again, as when nothing changed: nothing to write.
	c.ClearActions()
	if n, err := taintStale(context.Background(), c, "n1", []nodeagent.ResourceSnapshot{restored, back}); err != nil || n != 0 {
		t.Errorf("second run: updated %d, err %v; want 0, nil", n, err)
	}
}

func TestRetaintKeepsTimeAdded(t *testing.T) {
	added := metav1.NewTime(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC))
	s := staleSlice("s", gopher, "g-0")
	s.Spec.Devices[0].Taints = []resourceapi.DeviceTaint{{Key: TaintCordoned, Effect: resourceapi.DeviceTaintEffectNoSchedule, TimeAdded: &added}}
	want := map[string][]resourceapi.DeviceTaint{"g-0": {
		{Key: TaintPluginDisconnected, Value: nodeagent.ReasonAwaitingPlugin, Effect: resourceapi.DeviceTaintEffectNoSchedule},
		{Key: TaintCordoned, Effect: resourceapi.DeviceTaintEffectNoSchedule},
	}}
	if !retaint(s, want) {
		t.Fatal("retaint reported no change")
	}
	got := s.Spec.Devices[0].Taints
	if len(got) != 2 || got[0].TimeAdded != nil || got[1].TimeAdded == nil || !got[1].TimeAdded.Equal(&added) {
		t.Errorf("taints = %+v; want the new taint without a time, the cordon with its time", got)
	}
	if retaint(s, want) {
		t.Error("retaint changed taints that were right already")
	}
}
