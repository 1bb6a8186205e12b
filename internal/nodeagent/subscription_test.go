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
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kubedevice/kubedevice/internal/nodeagent/dptest"
)

func TestSubscription(t *testing.T) {
	tm := newTestManager(t, false)
	h, ctx := tm.handler(), tm.ctx
	existing := &fakePlugin{id: 1, resource: "example.com/existing", socket: "/dp/e.sock"}
	if err := h.PluginConnected(ctx, existing); err != nil {
		t.Fatal(err)
	}

	sub := tm.Subscribe()
	idle := tm.Subscribe() // never read: must not block the manager
	defer idle.Close()

	// The first Changed lists what already exists.
	waitReady(t, sub)
	if diff := cmp.Diff([]string{"example.com/existing"}, sub.Changed()); diff != "" {
		t.Errorf("initial changes (-want +got):\n%s", diff)
	}
	if got := sub.Changed(); got != nil {
		t.Errorf("Changed() again = %v, want nil", got)
	}

	// Many changes while nobody reads: the manager does not block, and they
	// coalesce into one signal and one set.
	p := &fakePlugin{id: 2, resource: testResource, socket: "/dp/p.sock"}
	if err := h.PluginConnected(ctx, p); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 1000 {
			health := pluginapi.Healthy
			if i%2 == 1 {
				health = pluginapi.Unhealthy
			}
			h.PluginListAndWatchReceiver(ctx, p, devices(dptest.Device("a", health)))
		}
		h.PluginDisconnected(ctx, existing, nil)
	}()
	select {
	case <-done:
	case <-time.After(waitTimeout):
		t.Fatal("the manager blocked on its subscribers")
	}
	waitReady(t, sub)
	if diff := cmp.Diff([]string{"example.com/existing", testResource}, sub.Changed()); diff != "" {
		t.Errorf("coalesced changes (-want +got):\n%s", diff)
	}
	select {
	case <-sub.Ready():
		t.Errorf("a second signal is pending; changes: %v", sub.Changed())
	default:
	}

	// A message that changes nothing is not a change.
	h.PluginListAndWatchReceiver(ctx, p, devices(dptest.Device("a", pluginapi.Unhealthy)))
	select {
	case <-sub.Ready():
		t.Errorf("signalled for an identical message: %v", sub.Changed())
	default:
	}

	sub.Close()
	sub.Close()
	h.PluginListAndWatchReceiver(ctx, p, devices(dptest.Device("b", pluginapi.Healthy)))
	select {
	case <-sub.Ready():
		t.Errorf("signalled after Close: %v", sub.Changed())
	default:
	}
	if got := idle.Changed(); len(got) != 2 {
		t.Errorf("the idle subscriber lost changes: %v", got)
	}
}

func waitReady(t *testing.T, sub *Subscription) {
	t.Helper()
	select {
	case <-sub.Ready():
	case <-time.After(waitTimeout):
		t.Fatal("no change signalled")
	}
}

// A consumer that reads snapshots on every signal ends with the final state,
// however the changes were coalesced.
func TestSubscriptionConsumerConverges(t *testing.T) {
	tm := newTestManager(t, true)
	sub := tm.Subscribe()
	defer sub.Close()
	mirror := map[string]int{}
	consume := func() {
		for _, name := range sub.Changed() {
			if s, ok := tm.Snapshot(name); ok {
				mirror[name] = s.Allocatable
			} else {
				delete(mirror, name)
			}
		}
	}

	p := newPlugin(t, tm.dir, "p.sock", testResource, dptest.Device("a", pluginapi.Healthy))
	mustRegister(t, p, tm.SocketPath())
	for i := range 20 {
		devs := []*pluginapi.Device{}
		for j := 0; j <= i; j++ {
			devs = append(devs, dptest.Device(fmt.Sprintf("d%d", j), pluginapi.Healthy))
		}
		p.Update(devs)
	}
	dptest.Eventually(t, waitTimeout, func() error {
		select {
		case <-sub.Ready():
			consume()
		default:
		}
		if mirror[testResource] != 20 {
			return fmt.Errorf("mirror %v", mirror)
		}
		return nil
	})
}

// A Notifier's subscriptions start from the names they are given, accumulate what is notified
// until taken, and hear nothing once closed.
func TestNotifier(t *testing.T) {
	var n Notifier
	a := n.Subscribe("r1", "r2")
	b := n.Subscribe()
	select {
	case <-a.Ready():
	default:
		t.Fatal("a subscription with initial names is not ready")
	}
	if diff := cmp.Diff([]string{"r1", "r2"}, a.Changed()); diff != "" {
		t.Errorf("first Changed (-want +got):\n%s", diff)
	}
	n.Notify("r3")
	n.Notify("r1", "r3")
	<-a.Ready()
	if diff := cmp.Diff([]string{"r1", "r3"}, a.Changed()); diff != "" {
		t.Errorf("Changed after two notifications (-want +got):\n%s", diff)
	}
	b.Close()
	n.Notify("r4")
	select {
	case <-b.Ready():
		if diff := cmp.Diff([]string{"r1", "r3"}, b.Changed()); diff != "" {
			t.Errorf("b heard, before and after it closed (-want +got):\n%s", diff)
		}
	default:
		t.Error("b missed what was notified before it closed")
	}
	if got := b.Changed(); got != nil {
		t.Errorf("a closed subscription heard %q", got)
	}
}
