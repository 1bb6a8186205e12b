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
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kubedevice/kubedevice/internal/nodeagent/dptest"
)

func TestNewDefaults(t *testing.T) {
	m, err := New(Config{})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	want := Config{PluginDir: "/var/lib/kubedevice/device-plugins", EndpointGracePeriod: 5 * time.Minute}
	got := Config{PluginDir: m.cfg.PluginDir, EndpointGracePeriod: m.grace, PluginsRegistryDir: m.cfg.PluginsRegistryDir}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("defaults (-want +got):\n%s", diff)
	}
	if m.SocketPath() != "/var/lib/kubedevice/device-plugins/kubelet.sock" {
		t.Errorf("SocketPath() = %q", m.SocketPath())
	}
	if got := DefaultConfig().PluginsRegistryDir; got != "/var/lib/kubedevice/plugins_registry" {
		t.Errorf("DefaultConfig().PluginsRegistryDir = %q", got)
	}
	// Issue 13: the checkpoint is not in the directory the plugins mount.
	if got := DefaultConfig().StateDir; got != "/var/lib/kubedevice/state" {
		t.Errorf("DefaultConfig().StateDir = %q", got)
	}
	if got := m.cfg.CheckpointPath; got != "/var/lib/kubedevice/device-plugins/kubedevice_checkpoint" {
		t.Errorf("CheckpointPath without a state directory = %q, want the plugin directory's (earlier versions' layout)", got)
	}
	if _, err := New(Config{PluginDir: "relative"}); err == nil {
		t.Error("New with a relative plugin directory succeeded")
	}
}

func TestStop(t *testing.T) {
	t.Run("without Start, twice", func(t *testing.T) {
		tm := newTestManager(t, false)
		tm.Stop()
		tm.Stop()
	})
	t.Run("after Start, twice", func(t *testing.T) {
		tm := newTestManager(t, true)
		p := newPlugin(t, tm.dir, "p.sock", testResource, dptest.Device("a", pluginapi.Healthy))
		mustRegister(t, p, tm.SocketPath())
		tm.waitCounts(t, map[string]string{testResource: "1/1"})
		tm.Stop()
		tm.Stop()
		// Stopping disconnects the plugins: their devices are unusable.
		if diff := cmp.Diff(map[string]string{testResource: "1/0"}, tm.counts()); diff != "" {
			t.Errorf("capacity/allocatable after Stop (-want +got):\n%s", diff)
		}
		if _, err := os.Lstat(tm.SocketPath()); !os.IsNotExist(err) {
			t.Errorf("registration socket still present after Stop: %v", err)
		}
		if err := tm.Check(); err != nil {
			t.Errorf("Check() after Stop = %v", err)
		}
	})
}

// Stop waits for a removal a grace timer has started, so nothing writes the
// checkpoint once it has returned (the removal's write used to come later:
// into a test's removed directory, or over the file of the agent started next).
func TestStopWaitsForGraceRemoval(t *testing.T) {
	tm := newTestManager(t, true)
	p := newPlugin(t, tm.dir, "p.sock", testResource, dptest.Device("a", pluginapi.Healthy))
	mustRegister(t, p, tm.SocketPath())
	tm.waitCounts(t, map[string]string{testResource: "1/1"})
	p.Stop()
	tm.waitCounts(t, map[string]string{testResource: "1/0"})

	// The removal writes the checkpoint: holding the writers' lock holds it.
	tm.ckptMu.Lock()
	tm.clock.Step(DefaultEndpointGracePeriod) // starts the removal
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		tm.Stop()
	}()
	select {
	case <-stopped:
		tm.ckptMu.Unlock()
		t.Fatal("Stop returned while the removal's checkpoint write was pending")
	case <-time.After(100 * time.Millisecond):
	}
	tm.ckptMu.Unlock()
	select {
	case <-stopped:
	case <-time.After(waitTimeout):
		t.Fatal("Stop did not return once the removal could write")
	}
	if _, ok := tm.Snapshot(testResource); ok {
		t.Error("resource still present after Stop")
	}
	if got := tm.readCheckpoint(t).State.RegisteredDevices; len(got) != 0 {
		t.Errorf("checkpoint after Stop registers %v, want the removal written", got)
	}
}

// The kubelet's TestDevicePluginReRegistration and its probe-mode twin: a
// plugin re-registering on a new socket with the same devices keeps them, and
// one with different devices replaces them.
func TestDevicePluginReRegistration(t *testing.T) {
	devs := []*pluginapi.Device{dptest.Device("Dev1", pluginapi.Healthy), dptest.Device("Dev2", pluginapi.Healthy)}
	// The same devices, with a topology only so the test can tell when p2's
	// first message has been applied: messages of different plugins race.
	sameDevs := []*pluginapi.Device{dptest.Device("Dev1", pluginapi.Healthy, 0), dptest.Device("Dev2", pluginapi.Healthy, 0)}
	devsForRegistration := []*pluginapi.Device{dptest.Device("Dev3", pluginapi.Healthy)}
	for _, probeMode := range []bool{false, true} {
		for _, preStart := range []bool{false, true} {
			for _, preferred := range []bool{false, true} {
				name := fmt.Sprintf("probeMode=%t/preStartRequired=%t/getPreferredAllocationAvailable=%t", probeMode, preStart, preferred)
				t.Run(name, func(t *testing.T) {
					var tm *testManager
					dir := ""
					if probeMode {
						tm = newTestManager(t, true, withPluginsRegistry())
						dir = tm.registryDir
					} else {
						tm = newTestManager(t, true)
						dir = tm.dir
					}
					start := func(name string, devs []*pluginapi.Device) *dptest.Plugin {
						p := dptest.New(filepath.Join(dir, name), testResource, devs)
						p.SetOptions(preStart, preferred)
						if err := p.Start(); err != nil { // in probe mode, this registers
							t.Fatal(err)
						}
						t.Cleanup(p.Stop)
						if !probeMode {
							mustRegister(t, p, tm.SocketPath())
						}
						return p
					}
					wantOpts := PluginOptions{PreStartRequired: preStart, GetPreferredAllocationAvailable: preferred}

					p1 := start("p1.sock", devs)
					tm.waitCounts(t, map[string]string{testResource: "2/2"})

					p2 := start("p2.sock", sameDevs)
					snap := tm.waitSnapshot(t, func(s ResourceSnapshot, ok bool) error {
						if err := endpointsAre(p2.SocketPath(), p1.SocketPath())(s, ok); err != nil {
							return err
						}
						if len(s.Devices) != 2 || len(s.Devices[0].NUMANodes) != 1 {
							return fmt.Errorf("p2's devices not applied yet: %+v", s.Devices)
						}
						return nil
					})
					if diff := cmp.Diff(map[string]string{testResource: "2/2"}, tm.counts()); diff != "" {
						t.Errorf("devices should not change (-want +got):\n%s", diff)
					}
					if diff := cmp.Diff(wantOpts, snap.Options); diff != "" {
						t.Errorf("options (-want +got):\n%s", diff)
					}

					p3 := start("p3.sock", devsForRegistration)
					tm.waitSnapshot(t, endpointsAre(p3.SocketPath(), p2.SocketPath(), p1.SocketPath()))
					// Devices of the plugin previously registered are replaced.
					tm.waitCounts(t, map[string]string{testResource: "1/1"})

					for _, p := range []*dptest.Plugin{p1, p2, p3} {
						want := []string{dptest.CallGetDevicePluginOptions, dptest.CallListAndWatch}
						if probeMode {
							want = []string{dptest.CallGetInfo, dptest.CallGetDevicePluginOptions, dptest.CallListAndWatch, dptest.CallNotifyRegistrationStatus}
						}
						dptest.Eventually(t, waitTimeout, func() error {
							if got := len(p.Calls()); got != len(want) {
								return fmt.Errorf("%s: calls %v, want %v", p.SocketPath(), p.Calls(), want)
							}
							return nil
						})
					}
					p2.Stop()
					p3.Stop()
					tm.waitSnapshot(t, endpointsAre(p1.SocketPath()))
					// p1's devices are not re-sent: the set stays p3's.
					if diff := cmp.Diff(map[string]string{testResource: "1/1"}, tm.counts()); diff != "" {
						t.Errorf("capacity/allocatable (-want +got):\n%s", diff)
					}
					p1.Stop()
					tm.waitCounts(t, map[string]string{testResource: "1/0"})
				})
			}
		}
	}
}

// The kubelet's TestUpdateCapacityAllocatable sequence, through the handler.
func TestUpdateCapacityAllocatable(t *testing.T) {
	tm := newTestManager(t, false)
	h := tm.handler()
	ctx := tm.ctx
	res1, res2 := "domain1.com/resource1", "domain2.com/resource2"
	p1 := &fakePlugin{id: 1, resource: res1, socket: "/dp/r1.sock"}
	p2 := &fakePlugin{id: 2, resource: res2, socket: "/dp/r2.sock", api: pluginapi.NewDevicePluginClient(nil)}
	dev := dptest.Device

	type step struct {
		name        string
		do          func(t *testing.T)
		wantCounts  map[string]string
		wantRemoved []string
	}
	steps := []step{{
		name: "three devices, two healthy",
		do: func(t *testing.T) {
			if err := h.PluginConnected(ctx, p1); err != nil {
				t.Fatal(err)
			}
			h.PluginListAndWatchReceiver(ctx, p1, devices(dev("Device1", "Healthy"), dev("Device2", "Healthy"), dev("Device3", "Unhealthy")))
		},
		wantCounts: map[string]string{res1: "3/2"},
	}, {
		name: "deleting an unhealthy device changes capacity only",
		do: func(t *testing.T) {
			h.PluginListAndWatchReceiver(ctx, p1, devices(dev("Device1", "Healthy"), dev("Device2", "Healthy")))
		},
		wantCounts: map[string]string{res1: "2/2"},
	}, {
		name: "a healthy device turning unhealthy lowers allocatable",
		do: func(t *testing.T) {
			h.PluginListAndWatchReceiver(ctx, p1, devices(dev("Device1", "Healthy"), dev("Device2", "Unhealthy"), dev("Device3", "Unhealthy")))
		},
		wantCounts: map[string]string{res1: "3/1"},
	}, {
		name: "deleting a healthy device lowers both",
		do: func(t *testing.T) {
			h.PluginListAndWatchReceiver(ctx, p1, devices(dev("Device2", "Unhealthy"), dev("Device3", "Unhealthy")))
		},
		wantCounts: map[string]string{res1: "2/0"},
	}, {
		name: "another resource",
		do: func(t *testing.T) {
			if err := h.PluginConnected(ctx, p2); err != nil {
				t.Fatal(err)
			}
			h.PluginListAndWatchReceiver(ctx, p2, devices(dev("Device1", "Healthy"), dev("Device2", "Unhealthy"), dev("Device3", "Unhealthy")))
		},
		wantCounts: map[string]string{res1: "2/0", res2: "3/1"},
	}, {
		name: "an expired endpoint is removed",
		do: func(t *testing.T) {
			h.PluginDisconnected(ctx, p1, nil)
			tm.clock.Step(DefaultEndpointGracePeriod + 10*time.Second)
		},
		wantCounts:  map[string]string{res2: "3/1"},
		wantRemoved: []string{res1},
	}, {
		name: "a disconnected resource keeps its capacity with nothing allocatable",
		do: func(t *testing.T) {
			h.PluginDisconnected(ctx, p2, nil)
		},
		wantCounts: map[string]string{res2: "3/0"},
	}}
	for _, s := range steps {
		s.do(t)
		for _, name := range s.wantRemoved {
			tm.waitGone(t, name)
		}
		if diff := cmp.Diff(s.wantCounts, tm.counts()); diff != "" {
			t.Errorf("%s: capacity/allocatable (-want +got):\n%s", s.name, diff)
		}
	}

	// res1 is gone from every piece of state (#133702).
	tm.mu.Lock()
	_, known := tm.resources[res1]
	tm.mu.Unlock()
	if known {
		t.Errorf("%s still in the device state", res1)
	}

	// The stopped endpoint refuses RPCs with the kubelet's error.
	tm.mu.Lock()
	e, ok := tm.endpointLocked(res2)
	tm.mu.Unlock()
	if !ok || !e.isStopped() {
		t.Fatalf("endpoint of %s: %v, stopped %t", res2, ok, ok && e.isStopped())
	}
	wantErr := "endpoint domain2.com/resource2 at /dp/r2.sock has been stopped"
	if _, err := e.allocate(ctx, []string{"Device1"}); err == nil || err.Error() != wantErr {
		t.Errorf("allocate on a stopped endpoint: %v, want %q", err, wantErr)
	}
	if err := e.preStartContainer(ctx, []string{"Device1"}); err == nil || err.Error() != wantErr {
		t.Errorf("preStartContainer on a stopped endpoint: %v, want %q", err, wantErr)
	}
	if _, err := e.getPreferredAllocation(ctx, []string{"Device1"}, nil, 1); err == nil || err.Error() != wantErr {
		t.Errorf("getPreferredAllocation on a stopped endpoint: %v, want %q", err, wantErr)
	}

	// After a restart, the checkpointed resource gets a stopped endpoint and
	// 0/0, and is still a device plugin resource, so pods scheduled meanwhile
	// are refused rather than started.
	restarted := newTestManager(t, false)
	restarted.RestoreRegisteredResources(map[string][]string{res2: {"Device1"}})
	if diff := cmp.Diff(map[string]string{res2: "0/0"}, restarted.counts()); diff != "" {
		t.Errorf("after restore (-want +got):\n%s", diff)
	}
	restarted.mu.Lock()
	isResource := restarted.isDevicePluginResourceLocked(res2)
	e, _ = restarted.endpointLocked(res2)
	restarted.mu.Unlock()
	if !isResource || !e.isStopped() || e.opts() != nil {
		t.Errorf("restored %s: device plugin resource %t, stopped %t, options %v", res2, isResource, e.isStopped(), e.opts())
	}
}

func TestGetDevicePluginOptionsFailureLeavesResourceAbsent(t *testing.T) {
	tm := newTestManager(t, true)
	p := newPlugin(t, tm.dir, "p.sock", testResource, dptest.Device("a", pluginapi.Healthy))
	p.FailGetDevicePluginOptions(dptest.ErrInjected)
	err := register(t, p, tm.SocketPath())
	if err == nil || !strings.Contains(status.Convert(err).Message(), "failed to get device plugin options") {
		t.Fatalf("Register error = %v, want the options failure", err)
	}
	tm.Stop()
	if diff := cmp.Diff(map[string]string{}, tm.counts()); diff != "" {
		t.Errorf("capacity (-want +got):\n%s", diff)
	}
	if snaps := tm.Snapshots(); len(snaps) != 0 {
		t.Errorf("Snapshots() = %+v, want none", snaps)
	}
	if diff := cmp.Diff([]string{dptest.CallGetDevicePluginOptions}, p.Calls()); diff != "" {
		t.Errorf("plugin calls (-want +got):\n%s", diff)
	}
}

// A stream that ends makes the devices unhealthy at once; the resource stays
// for the grace period, then is removed, which subscribers learn without
// polling. ListAndWatch is never retried.
func TestStreamEndThenGracePeriod(t *testing.T) {
	tm := newTestManager(t, true)
	p := newPlugin(t, tm.dir, "p.sock", testResource,
		dptest.Device("a", pluginapi.Healthy, 0), dptest.Device("b", pluginapi.Healthy), dptest.Device("c", pluginapi.Unhealthy))
	mustRegister(t, p, tm.SocketPath())
	tm.waitCounts(t, map[string]string{testResource: "3/2"})
	sub := tm.Subscribe()
	defer sub.Close()
	<-sub.Ready()
	sub.Changed()

	tm.clock.Step(time.Minute)
	disconnectedAt := tm.clock.Now()
	p.EndStreams(errors.New("device plugin crashed"))
	snap := tm.waitSnapshot(t, func(s ResourceSnapshot, ok bool) error {
		if s.State != PluginDisconnected {
			return fmt.Errorf("state %q", s.State)
		}
		return nil
	})
	want := ResourceSnapshot{
		ResourceName: testResource,
		State:        PluginDisconnected,
		StateSince:   disconnectedAt,
		Capacity:     3,
		Devices: []DeviceSnapshot{
			{ID: "a", Health: Unhealthy, Reason: ReasonPluginDisconnected, Message: msgPluginDisconnected, LastTransitionTime: disconnectedAt, NUMANodes: []int64{0}},
			{ID: "b", Health: Unhealthy, Reason: ReasonPluginDisconnected, Message: msgPluginDisconnected, LastTransitionTime: disconnectedAt},
			// Already unhealthy: the transition time stays.
			{ID: "c", Health: Unhealthy, Reason: ReasonPluginDisconnected, Message: msgPluginDisconnected, LastTransitionTime: testEpoch},
		},
	}
	if diff := cmp.Diff(want, snap); diff != "" {
		t.Errorf("snapshot after the stream ended (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]string{testResource: "3/0"}, tm.counts()); diff != "" {
		t.Errorf("capacity/allocatable (-want +got):\n%s", diff)
	}
	waitChanged(t, sub, testResource)

	tm.clock.Step(DefaultEndpointGracePeriod - time.Second)
	if diff := cmp.Diff(map[string]string{testResource: "3/0"}, tm.counts()); diff != "" {
		t.Errorf("within the grace period (-want +got):\n%s", diff)
	}
	tm.clock.Step(time.Second)
	// The timer removes the resource and tells subscribers.
	waitChanged(t, sub, testResource)
	if _, ok := tm.Snapshot(testResource); ok {
		t.Error("resource still present after the grace period")
	}
	if diff := cmp.Diff(map[string]string{}, tm.counts()); diff != "" {
		t.Errorf("after the grace period (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{dptest.CallGetDevicePluginOptions, dptest.CallListAndWatch}, p.Calls()); diff != "" {
		t.Errorf("ListAndWatch must not be retried; calls (-want +got):\n%s", diff)
	}
}

// The e2e "ListAndWatch fails immediately": nothing allocatable, no retry,
// removal after the grace period.
func TestListAndWatchFailsImmediately(t *testing.T) {
	tm := newTestManager(t, true)
	p := newPlugin(t, tm.dir, "p.sock", testResource, dptest.Device("a", pluginapi.Healthy))
	p.FailListAndWatch(dptest.ErrInjected)
	mustRegister(t, p, tm.SocketPath())
	tm.waitSnapshot(t, func(s ResourceSnapshot, ok bool) error {
		if !ok || s.State != PluginDisconnected {
			return fmt.Errorf("present %t, state %q", ok, s.State)
		}
		return nil
	})
	if diff := cmp.Diff(map[string]string{testResource: "0/0"}, tm.counts()); diff != "" {
		t.Errorf("capacity/allocatable (-want +got):\n%s", diff)
	}
	tm.clock.Step(DefaultEndpointGracePeriod)
	tm.waitGone(t, testResource)
	if diff := cmp.Diff([]string{dptest.CallGetDevicePluginOptions, dptest.CallListAndWatch}, p.Calls()); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
}

func waitChanged(t *testing.T, sub *Subscription, name string) {
	t.Helper()
	select {
	case <-sub.Ready():
	case <-time.After(waitTimeout):
		t.Fatalf("no change signalled for %s", name)
	}
	if diff := cmp.Diff([]string{name}, sub.Changed()); diff != "" {
		t.Fatalf("changed resources (-want +got):\n%s", diff)
	}
}

// A plugin that comes back within the grace period makes the resource
// Registered again; its first message makes the devices healthy.
func TestReRegistrationWithinGracePeriod(t *testing.T) {
	tm := newTestManager(t, true)
	p1 := newPlugin(t, tm.dir, "p.sock", testResource, dptest.Device("a", pluginapi.Healthy))
	mustRegister(t, p1, tm.SocketPath())
	tm.waitCounts(t, map[string]string{testResource: "1/1"})
	p1.Stop()
	tm.waitCounts(t, map[string]string{testResource: "1/0"})
	tm.clock.Step(DefaultEndpointGracePeriod - time.Second)

	p2 := newPlugin(t, tm.dir, "p.sock", testResource, dptest.Device("a", pluginapi.Healthy))
	mustRegister(t, p2, tm.SocketPath())
	tm.waitCounts(t, map[string]string{testResource: "1/1"})
	tm.clock.Step(time.Hour)
	if diff := cmp.Diff(map[string]string{testResource: "1/1"}, tm.counts()); diff != "" {
		t.Errorf("after the old grace period (-want +got):\n%s", diff)
	}
	snap, _ := tm.Snapshot(testResource)
	if snap.State != PluginRegistered || !snap.StateSince.Equal(testEpoch.Add(DefaultEndpointGracePeriod-time.Second)) {
		t.Errorf("state %q since %v", snap.State, snap.StateSince)
	}
}

// Our socket deleted (as a kubelet's CleanupPluginDirectory would): it is
// re-created within a second, the plugin re-registers on the same socket,
// and the resource never loses its devices.
func TestSocketDeletedPluginReRegisters(t *testing.T) {
	tm := newTestManager(t, true)
	p := newPlugin(t, tm.dir, "p.sock", testResource, dptest.Device("a", pluginapi.Healthy), dptest.Device("b", pluginapi.Healthy))
	if err := p.RegisterOnSocketCreation(tm.SocketPath()); err != nil {
		t.Fatal(err)
	}
	mustRegister(t, p, tm.SocketPath())
	tm.waitCounts(t, map[string]string{testResource: "2/2"})
	stopSampling, minAllocatable := sampleAllocatable(tm, testResource)

	start := time.Now()
	if err := os.Remove(tm.SocketPath()); err != nil {
		t.Fatal(err)
	}
	dptest.Eventually(t, time.Second, func() error {
		_, err := os.Stat(tm.SocketPath())
		return err
	})
	t.Logf("registration socket re-created after %v", time.Since(start))
	dptest.Eventually(t, waitTimeout, func() error {
		if got := strings.Count(strings.Join(p.Calls(), ","), dptest.CallListAndWatch); got != 2 {
			return fmt.Errorf("%d ListAndWatch calls, want 2 (re-registration)", got)
		}
		return nil
	})
	tm.waitSnapshot(t, endpointsAre(p.SocketPath()))
	stopSampling()
	if got := minAllocatable(); got != 2 {
		t.Errorf("allocatable dropped to %d during the re-registration", got)
	}
	// The new connection is live: its updates apply.
	p.Update([]*pluginapi.Device{dptest.Device("a", pluginapi.Healthy)})
	tm.waitCounts(t, map[string]string{testResource: "1/1"})
	dptest.Eventually(t, waitTimeout, func() error {
		if n := p.OpenStreams(); n != 1 {
			return fmt.Errorf("%d open streams, want 1 (the old connection is closed)", n)
		}
		return nil
	})
}

// sampleAllocatable polls the snapshot of name until stopped and returns the lowest
// allocatable it saw for name (-1 for absent).
func sampleAllocatable(tm *testManager, name string) (stop func(), lowest func() int64) {
	var (
		min  atomic.Int64
		done = make(chan struct{})
		wg   sync.WaitGroup
	)
	min.Store(1 << 62)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			v := int64(-1)
			if s, ok := tm.Snapshot(name); ok {
				v = int64(s.Allocatable)
			}
			if v < min.Load() {
				min.Store(v)
			}
			time.Sleep(100 * time.Microsecond)
		}
	}()
	return func() { close(done); wg.Wait() }, min.Load
}

// Two plugins for one resource rolling over (e2e "Device Plugin Multiple"):
// allocatable never drops, and the late end of the old plugin's stream does
// not evict the new plugin.
func TestRollingUpdateNoDrop(t *testing.T) {
	tm := newTestManager(t, true)
	devs := []*pluginapi.Device{dptest.Device("a", pluginapi.Healthy), dptest.Device("b", pluginapi.Healthy)}
	old := newPlugin(t, tm.dir, "old.sock", testResource, devs...)
	mustRegister(t, old, tm.SocketPath())
	tm.waitCounts(t, map[string]string{testResource: "2/2"})
	stopSampling, minAllocatable := sampleAllocatable(tm, testResource)

	replacement := newPlugin(t, tm.dir, "new.sock", testResource, devs...)
	replacement.SetOptions(true, false)
	mustRegister(t, replacement, tm.SocketPath())
	tm.waitSnapshot(t, endpointsAre(replacement.SocketPath(), old.SocketPath()))
	tm.mu.Lock()
	primary, _ := tm.endpointLocked(testResource)
	tm.mu.Unlock()
	if primary.socketPath() != replacement.SocketPath() {
		t.Errorf("RPCs go to %s, want the newest plugin %s", primary.socketPath(), replacement.SocketPath())
	}

	// The old plugin goes away after the new one is serving.
	old.EndStreams(errors.New("old plugin terminating"))
	old.Stop()
	snap := tm.waitSnapshot(t, endpointsAre(replacement.SocketPath()))
	stopSampling()
	if got := minAllocatable(); got != 2 {
		t.Errorf("allocatable dropped to %d during the rollout", got)
	}
	if snap.State != PluginRegistered || !snap.Options.PreStartRequired {
		t.Errorf("after the rollout: state %q, options %+v", snap.State, snap.Options)
	}
	replacement.Update(append(devs, dptest.Device("c", pluginapi.Healthy)))
	tm.waitCounts(t, map[string]string{testResource: "3/3"})
}

// Late callbacks of a replaced connection change nothing, whatever the order
// in which they arrive.
func TestLateCallbacksOfReplacedConnection(t *testing.T) {
	const socket = "/dp/p.sock"
	older := &fakePlugin{id: 1, resource: testResource, socket: socket}
	newer := &fakePlugin{id: 2, resource: testResource, socket: socket}
	dev := dptest.Device
	tm := newTestManager(t, false)
	h, ctx := tm.handler(), tm.ctx
	if err := h.PluginConnected(ctx, older); err != nil {
		t.Fatal(err)
	}
	h.PluginListAndWatchReceiver(ctx, older, devices(dev("a", "Healthy"), dev("b", "Healthy")))
	if err := h.PluginConnected(ctx, newer); err != nil {
		t.Fatalf("takeover by the newer connection: %v", err)
	}
	h.PluginListAndWatchReceiver(ctx, newer, devices(dev("a", "Healthy"), dev("b", "Healthy"), dev("c", "Healthy")))

	// The older connection's late message, late disconnect and a late
	// (raced) connect are all ignored or refused.
	h.PluginListAndWatchReceiver(ctx, older, devices(dev("a", "Unhealthy")))
	h.PluginDisconnected(ctx, older, errors.New("stream ended"))
	if err := h.PluginConnected(ctx, older); !errors.Is(err, errSupersededConnection) {
		t.Errorf("PluginConnected of the older connection = %v, want %v", err, errSupersededConnection)
	}
	if diff := cmp.Diff(map[string]string{testResource: "3/3"}, tm.counts()); diff != "" {
		t.Errorf("capacity/allocatable (-want +got):\n%s", diff)
	}
	snap, _ := tm.Snapshot(testResource)
	if snap.State != PluginRegistered || !cmp.Equal(snap.Endpoints, []string{socket}) {
		t.Errorf("state %q, endpoints %v", snap.State, snap.Endpoints)
	}
	tm.mu.Lock()
	e, _ := tm.endpointLocked(testResource)
	tm.mu.Unlock()
	if e.clientID != newer.id || e.isStopped() {
		t.Errorf("primary endpoint is client %d (stopped %t), want %d", e.clientID, e.isStopped(), newer.id)
	}

	// The newer connection's own disconnect does count.
	h.PluginDisconnected(ctx, newer, nil)
	if diff := cmp.Diff(map[string]string{testResource: "3/0"}, tm.counts()); diff != "" {
		t.Errorf("after the newer connection ended (-want +got):\n%s", diff)
	}
}

// Same socket, real gRPC: a plugin registering again while its first
// connection is still up takes over, and the old connection's stream end does
// not evict it.
func TestSameSocketTakeover(t *testing.T) {
	tm := newTestManager(t, true)
	p := newPlugin(t, tm.dir, "p.sock", testResource, dptest.Device("a", pluginapi.Healthy), dptest.Device("b", pluginapi.Healthy))
	mustRegister(t, p, tm.SocketPath())
	tm.waitCounts(t, map[string]string{testResource: "2/2"})
	mustRegister(t, p, tm.SocketPath())
	dptest.Eventually(t, waitTimeout, func() error {
		if n := p.OpenStreams(); n != 1 || len(p.Calls()) != 4 {
			return fmt.Errorf("%d open streams and calls %v, want 1 stream after the takeover", n, p.Calls())
		}
		return nil
	})
	snap := tm.waitSnapshot(t, endpointsAre(p.SocketPath()))
	if snap.State != PluginRegistered {
		t.Errorf("state %q after the takeover", snap.State)
	}
	if diff := cmp.Diff(map[string]string{testResource: "2/2"}, tm.counts()); diff != "" {
		t.Errorf("capacity/allocatable (-want +got):\n%s", diff)
	}
	p.Update([]*pluginapi.Device{dptest.Device("a", pluginapi.Healthy)})
	tm.waitCounts(t, map[string]string{testResource: "1/1"})
}

// Registration of one plugin is not held up while another plugin's dial
// hangs.
func TestRegistrationNotBlockedByHangingPlugin(t *testing.T) {
	tm := newTestManager(t, true)
	hang, err := dptest.ListenAndHang(filepath.Join(tm.dir, "hang.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer hang.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errA := make(chan error, 1)
	go func() {
		errA <- dptest.Register(ctx, tm.SocketPath(), &pluginapi.RegisterRequest{
			Version: pluginapi.Version, Endpoint: "hang.sock", ResourceName: "example.com/slow",
		})
	}()
	dptest.Eventually(t, waitTimeout, func() error {
		if hang.Accepted() == 0 {
			return errors.New("not dialed yet")
		}
		return nil
	})
	p := newPlugin(t, tm.dir, "p.sock", testResource, dptest.Device("a", pluginapi.Healthy))
	start := time.Now()
	mustRegister(t, p, tm.SocketPath())
	tm.waitCounts(t, map[string]string{testResource: "1/1"})
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("registration took %v while another plugin's dial hung", took)
	}
	select {
	case err := <-errA:
		t.Fatalf("the hanging registration returned: %v", err)
	default:
	}
	cancel()
	if err := <-errA; err == nil {
		t.Error("the hanging registration succeeded")
	}
}

func TestRestoreRegisteredResources(t *testing.T) {
	tm := newTestManager(t, true)
	tm.RestoreRegisteredResources(map[string][]string{testResource: {"d2", "d1", ""}, "example.com/gone": nil, "not-extended": {"x"}})
	if diff := cmp.Diff(map[string]string{testResource: "0/0", "example.com/gone": "0/0"}, tm.counts()); diff != "" {
		t.Errorf("after restore (-want +got):\n%s", diff)
	}
	awaiting := func(id string) DeviceSnapshot {
		return DeviceSnapshot{ID: id, Health: Unhealthy, Reason: ReasonAwaitingPlugin, Message: msgAwaitingPlugin, LastTransitionTime: testEpoch}
	}
	want := ResourceSnapshot{
		ResourceName: testResource, State: PluginDisconnected, StateSince: testEpoch,
		Devices: []DeviceSnapshot{awaiting("d1"), awaiting("d2")},
	}
	snap, _ := tm.Snapshot(testResource)
	if diff := cmp.Diff(want, snap); diff != "" {
		t.Errorf("restored snapshot (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(ResourceDeviceInstances{testResource: {}, "example.com/gone": {}}, tm.GetAllocatableDevices()); diff != "" {
		t.Errorf("allocatable devices (-want +got):\n%s", diff)
	}

	tm.clock.Step(time.Minute)
	p := newPlugin(t, tm.dir, "p.sock", testResource, dptest.Device("d1", pluginapi.Healthy))
	mustRegister(t, p, tm.SocketPath())
	tm.waitCounts(t, map[string]string{testResource: "1/1", "example.com/gone": "0/0"})
	snap, _ = tm.Snapshot(testResource)
	if diff := cmp.Diff([]DeviceSnapshot{{
		ID: "d1", Health: Healthy, Reason: ReasonReportedHealthy, Message: msgReportedHealthy, LastTransitionTime: tm.clock.Now(),
	}}, snap.Devices); diff != "" {
		t.Errorf("devices once the plugin reported (-want +got):\n%s", diff)
	}

	// The resource whose plugin never came back goes after the grace period.
	tm.clock.Step(DefaultEndpointGracePeriod)
	tm.waitGone(t, "example.com/gone")
}
