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
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/kubedevice/kubedevice/internal/nodeagent"
)

func TestSliceControllerPublishes(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	c := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "node-uid"}})
	sc := startSliceController(ctx, c, "n1")
	defer func() {
		cancel()
		sc.stop()
	}()
	ctrl, err := sc.wait(ctx, nil)
	if err != nil || ctrl == nil {
		t.Fatalf("wait = %v, %v; want the controller", ctrl, err)
	}
	if !sc.synced() {
		t.Error("synced is false once wait returned the controller")
	}
	resources, _ := driverResources([]nodeagent.ResourceSnapshot{{ResourceName: gopher, ServedByDRA: true, Devices: []nodeagent.DeviceSnapshot{
		{ID: "g-0", Health: nodeagent.Healthy},
	}}})
	sc.publisher().Update(&resources)
	deadline := time.Now().Add(10 * time.Second)
	for {
		list, err := c.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Items) == 1 {
			s := list.Items[0]
			// Owned by the Node, with its UID.
			if len(s.OwnerReferences) != 1 || s.OwnerReferences[0].UID != "node-uid" || s.Spec.Pool.Name != gopher || len(s.Spec.Devices) != 1 {
				t.Errorf("slice = %+v; want gopher's pool with g-0, owned by the Node", s)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d slices after 10 s, want 1", len(list.Items))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSliceControllerWaitsForFirstUpdate checks that the controller does not remove the slices an
// earlier run left before the flow's first Update gives it the pools, however long that takes:
// with no pools, its sync a SyncDelay after listing them would delete them.
func TestSliceControllerWaitsForFirstUpdate(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	earlier := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "earlier", ResourceVersion: "1"},
		Spec: resourceapi.ResourceSliceSpec{
			Driver: DriverName, NodeName: ptr.To("n1"),
			Pool:    resourceapi.ResourcePool{Name: gopher, Generation: 1, ResourceSliceCount: 1},
			Devices: []resourceapi.Device{{Name: "g-0"}},
		},
	}
	c := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "node-uid"}}, earlier)
	sc := startSliceController(ctx, c, "n1")
	defer func() {
		cancel()
		sc.stop()
	}()
	if ctrl, err := sc.wait(ctx, nil); err != nil || ctrl == nil {
		t.Fatalf("wait = %v, %v; want the controller", ctrl, err)
	}
	time.Sleep(sliceSyncDelay + 500*time.Millisecond)
	if _, err := c.ResourceV1().ResourceSlices().Get(ctx, "earlier", metav1.GetOptions{}); err != nil {
		t.Fatalf("the earlier run's slice before the first Update: %v", err)
	}
	if n := countActions(c, "delete", "create"); n != 0 {
		t.Errorf("%d ResourceSlice writes before the first Update, want none", n)
	}
}

// countActions counts the clientset's actions of the given verbs on ResourceSlices.
func countActions(c *fake.Clientset, verbs ...string) int {
	n := 0
	for _, a := range c.Actions() {
		if a.GetResource().Resource == "resourceslices" && slices.Contains(verbs, a.GetVerb()) {
			n++
		}
	}
	return n
}

func TestSliceControllerStopsBeforeSync(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	sc := startSliceController(ctx, fake.NewClientset(), "n1")
	cancel()
	done := make(chan struct{})
	go func() {
		sc.stop()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("stop did not return after the context ended")
	}
	if ctrl, err := sc.wait(ctx, nil); ctrl != nil || err != nil {
		t.Errorf("wait after the context ended = %v, %v; want nil, nil", ctrl, err)
	}
}

// fakePublisher records what publish hands it.
type fakePublisher struct {
	updates chan *resourceslice.DriverResources
}

func (f *fakePublisher) Update(r *resourceslice.DriverResources) { f.updates <- r.DeepCopy() }

func TestPublishRepublishesOnChange(t *testing.T) {
	n := newNode(t, "")
	ctx, cancel := context.WithCancel(n.ctx)
	defer cancel()
	pub := &fakePublisher{updates: make(chan *resourceslice.DriverResources, 16)}
	fatal := make(chan error)
	done := make(chan error, 1)
	go func() { done <- publish(ctx, n.core, pub, fatal) }()
	n.plugin(gopher, "g-0", "g-1")
	deadline := time.After(10 * time.Second)
	for {
		select {
		case r := <-pub.updates:
			if p, ok := r.Pools[gopher]; ok && len(p.Slices) == 1 && len(p.Slices[0].Devices) == 2 {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("publish = %v after the context ended, want nil", err)
				}
				return
			}
		case <-deadline:
			t.Fatal("the registered plugin's devices were not published")
		}
	}
}
