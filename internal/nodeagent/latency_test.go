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

	"golang.org/x/time/rate"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kubedevice/kubedevice/internal/nodeagent/dptest"
)

// latencyBound is generous on purpose: the target is 100 ms from the first
// ListAndWatch message to the device counts, and the measurement is logged; the
// bound only catches a real regression on a loaded 2-core machine.
const latencyBound = time.Second

// waitAllocatable waits, driven by the subscription, until the snapshot
// reports want allocatable devices for name, and returns when it saw them.
func waitAllocatable(tb testing.TB, tm *testManager, sub *Subscription, name string, want int64) time.Time {
	tb.Helper()
	timeout := time.After(waitTimeout)
	for {
		if s, ok := tm.Snapshot(name); ok && int64(s.Allocatable) == want {
			return time.Now()
		}
		select {
		case <-sub.Ready():
			sub.Changed()
		case <-timeout:
			tb.Fatalf("allocatable of %s never reached %d", name, want)
		}
	}
}

// A v1beta1 plugin that dials <plugin-dir>/kubelet.sock shows its devices in
// the snapshot's counts right after its first ListAndWatch message.
func TestRegisterToCapacityLatency(t *testing.T) {
	tm := newTestManager(t, true)
	sub := tm.Subscribe()
	defer sub.Close()
	p := newPlugin(t, tm.dir, "p.sock", testResource, dptest.Device("a", pluginapi.Healthy), dptest.Device("b", pluginapi.Healthy))

	registerStart := time.Now()
	mustRegister(t, p, tm.SocketPath())
	visible := waitAllocatable(t, tm, sub, testResource, 2)
	sent := p.SendTimes()[0]
	latency := visible.Sub(sent)
	t.Logf("first ListAndWatch message → counted: %v; Register call → counted: %v", latency, visible.Sub(registerStart))
	if latency > latencyBound {
		t.Errorf("devices visible %v after the first ListAndWatch message, want well under 100ms (bound %v)", latency, latencyBound)
	}
}

// BenchmarkListAndWatchToCapacity measures one device update, from the
// plugin sending it to the snapshot counting it.
func BenchmarkListAndWatchToCapacity(b *testing.B) {
	tm := newTestManager(b, true)
	sub := tm.Subscribe()
	defer sub.Close()
	devs := make([]*pluginapi.Device, 100)
	for i := range devs {
		devs[i] = dptest.Device(fmt.Sprintf("d%03d", i), pluginapi.Healthy)
	}
	p := newPlugin(b, tm.dir, "p.sock", testResource, devs...)
	mustRegister(b, p, tm.SocketPath())
	waitAllocatable(b, tm, sub, testResource, 100)

	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		want := int64(100)
		if i%2 == 0 {
			devs[0].Health, want = pluginapi.Unhealthy, 99
		} else {
			devs[0].Health = pluginapi.Healthy
		}
		p.Update(devs)
		waitAllocatable(b, tm, sub, testResource, want)
	}
}

// BenchmarkRegisterToCapacity measures a whole registration: Register,
// dial back, options, first ListAndWatch message, counted in the snapshot.
// It registers b.N plugins as fast as it can, so it lifts the registration
// rate limit (10 a second, burst 50), which would refuse the 51st; and each
// plugin goes away before the next registers (untimed), as the agent admits
// at most 128 resources connected at once.
func BenchmarkRegisterToCapacity(b *testing.B) {
	tm := newTestManager(b, true, func(_ *testManager, cfg *Config) { cfg.RegistrationRate = rate.Inf })
	sub := tm.Subscribe()
	defer sub.Close()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		name := fmt.Sprintf("example.com/r%d", i)
		p := newPlugin(b, tm.dir, fmt.Sprintf("p%d.sock", i), name, dptest.Device("a", pluginapi.Healthy))
		b.StartTimer()
		mustRegister(b, p, tm.SocketPath())
		waitAllocatable(b, tm, sub, name, 1)
		b.StopTimer()
		p.Stop()
		waitDisconnected(b, tm, sub, name)
	}
}

// waitDisconnected waits, driven by the subscription, until the snapshot
// reports name's plugin disconnected (the registration server has let go of
// its connection by then).
func waitDisconnected(tb testing.TB, tm *testManager, sub *Subscription, name string) {
	tb.Helper()
	timeout := time.After(waitTimeout)
	for {
		if s, ok := tm.Snapshot(name); ok && s.State == PluginDisconnected {
			return
		}
		select {
		case <-sub.Ready():
			sub.Changed()
		case <-timeout:
			tb.Fatalf("%s never reported its plugin disconnected", name)
		}
	}
}
