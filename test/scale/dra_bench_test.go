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

package scale

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubedevice/kubedevice/internal/agent/dra"
)

const (
	// draDevices is the device count of the DRA benchmarks' plugin: one slice.
	draDevices = 8
	// draRunning is how long the agent of BenchmarkAgentDRARegister/agent-running has been ready
	// when the plugin registers: a plugin that starts after the agent, as most do.
	draRunning = 2 * time.Second
	// sliceTimeout bounds the wait for the slices to show what a DRA benchmark expects.
	sliceTimeout = time.Minute
)

// BenchmarkAgentDRARegister measures a device plugin of 8 devices registering with an agent
// that serves its resource through DRA: the time from the Register call to a watch on the API
// server seeing all of them, untainted, in the node's ResourceSlices (s/register), which is
// when the scheduler can allocate them to claims. agent-running registers draRunning after the
// agent became ready; agent-ready as soon as it is ready.
//
//	go test ./test/scale/ -run '^$' -bench AgentDRARegister -benchtime 5x
func BenchmarkAgentDRARegister(b *testing.B) {
	for _, c := range []struct {
		name  string
		delay time.Duration
	}{{"agent-running", draRunning}, {"agent-ready", 0}} {
		b.Run(c.name, func(b *testing.B) {
			e := getAgentEnv(b)
			for range b.N {
				b.StopTimer()
				elapsed, err := e.draRegisterOnce(b, c.delay)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(elapsed.Seconds(), "s/register")
				b.Logf("devices=%d: in a ResourceSlice %s after the Register call", draDevices, elapsed.Round(time.Millisecond))
			}
		})
	}
}

// draRegisterOnce starts an agent serving gopher through DRA on a new node, registers a plugin
// delay after the agent is ready and returns how long after the Register call a watch saw its
// devices published, untainted.
func (e *agentEnv) draRegisterOnce(b *testing.B, delay time.Duration) (time.Duration, error) {
	ctx := context.Background()
	n, err := e.newDRABenchNode(ctx)
	if err != nil {
		return 0, err
	}
	defer n.cleanup(b)
	if err := n.start(agentQPS, agentBurst); err != nil {
		return 0, err
	}
	if err := n.waitReady(); err != nil {
		return 0, err
	}
	time.Sleep(delay)
	p, err := n.plugin(gopher, draDevices)
	if err != nil {
		return 0, err
	}
	defer p.Stop()
	sw, err := n.watchSlices(ctx)
	if err != nil {
		return 0, err
	}
	defer sw.stop()
	published := sw.when(allDevices(untainted))
	b.StartTimer()
	start := time.Now()
	if err := p.Register(ctx, n.regSocket()); err != nil {
		return 0, err
	}
	at, err := published.wait(n)
	b.StopTimer()
	if err != nil {
		return 0, fmt.Errorf("the plugin's devices in the slices: %w; the slices show %v", err, sw.devices())
	}
	return at.Sub(start), nil
}

// BenchmarkAgentDRARestart measures an agent serving a resource through DRA that is killed while
// its plugin goes away too: the slices the stopped agent published
// still offer the devices untainted. It reports the time from the new agent's start to a watch
// seeing every device tainted kubedevice.io/plugin-disconnected in the slices (s/tainted: the
// scheduler allocates none of them from then on), and to the agent's readiness (s/ready).
//
//	go test ./test/scale/ -run '^$' -bench AgentDRARestart -benchtime 5x
func BenchmarkAgentDRARestart(b *testing.B) {
	e := getAgentEnv(b)
	ctx := context.Background()
	b.StopTimer()
	n, err := e.newDRABenchNode(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer n.cleanup(b)
	sw, err := n.watchSlices(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer sw.stop()
	for range b.N {
		if err := n.draServing(ctx, sw); err != nil {
			b.Fatal(err)
		}
		if devs := sw.devices(); !allDevices(untainted)(devs) {
			b.Fatalf("the killed agent's slices show %v, want every device untainted", devs)
		}
		tainted := sw.when(allDevices(disconnected))
		b.StartTimer()
		start := time.Now()
		if err := n.start(agentQPS, agentBurst); err != nil {
			b.Fatal(err)
		}
		err := n.waitReady()
		ready := time.Since(start)
		var at time.Time
		if err == nil {
			at, err = tainted.wait(n)
		}
		b.StopTimer()
		if err != nil {
			b.Fatalf("the restored devices tainted: %v; the slices show %v", err, sw.devices())
		}
		b.ReportMetric(at.Sub(start).Seconds(), "s/tainted")
		b.ReportMetric(ready.Seconds(), "s/ready")
		b.Logf("devices=%d: ready after %s, every device tainted after %s", draDevices,
			ready.Round(time.Millisecond), at.Sub(start).Round(time.Millisecond))
	}
}

// draServing brings the node to the state BenchmarkAgentDRARestart restarts from: its agent ran
// with the plugin registered and published the devices untainted, then the agent was killed and
// the plugin went away.
func (n *benchNode) draServing(ctx context.Context, sw *slicesWatch) error {
	if err := n.stop(); err != nil {
		return err
	}
	published := sw.when(allDevices(untainted))
	if err := n.start(agentQPS, agentBurst); err != nil {
		return err
	}
	if err := n.waitReady(); err != nil {
		return err
	}
	p, err := n.plugin(gopher, draDevices)
	if err != nil {
		return err
	}
	defer p.Stop()
	if err := p.Register(ctx, n.regSocket()); err != nil {
		return err
	}
	if _, err := published.wait(n); err != nil {
		return fmt.Errorf("the plugin's devices in the slices: %w; the slices show %v", err, sw.devices())
	}
	return n.kill()
}

// errKilled fails the requests of a killed agent.
var errKilled = errors.New("the agent was killed")

// offlineWrap is a rest.Config WrapTransport that fails every request while the node is offline.
func (n *benchNode) offlineWrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		if n.offline.Load() {
			return nil, errKilled
		}
		return rt.RoundTrip(req)
	})
}

// kill stops the agent as a SIGKILL does, as far as the API server can tell: nothing it writes
// on its way out (its core disconnecting the plugins) reaches the API server.
func (n *benchNode) kill() error {
	n.offline.Store(true)
	defer n.offline.Store(false)
	return n.stop()
}

// newDRABenchNode is a new node whose agent serves gopher through DRA.
func (e *agentEnv) newDRABenchNode(ctx context.Context) (*benchNode, error) {
	r, err := dra.ParseResources([]string{string(gopher)})
	if err != nil {
		return nil, err
	}
	n, err := e.newBenchNode(ctx)
	if err != nil {
		return nil, err
	}
	n.dra = r
	return n, nil
}

// slicesWatch follows the node's ResourceSlices through a watch, as the scheduler sees them, and
// records when they first meet a condition.
type slicesWatch struct {
	stop func()

	mu     sync.Mutex
	slices map[string]*resourceapi.ResourceSlice
	// waiters are the conditions not met yet.
	waiters []*sliceWaiter
}

// sliceWaiter is a condition on the devices of gopher's pool (device name → taint keys).
type sliceWaiter struct {
	cond func(map[string][]string) bool
	met  chan time.Time
}

func (n *benchNode) watchSlices(ctx context.Context) (*slicesWatch, error) {
	w, err := n.e.admin.Watch(ctx, &resourceapi.ResourceSliceList{}, client.MatchingFields{"spec.nodeName": n.name})
	if err != nil {
		return nil, fmt.Errorf("watching the ResourceSlices of %s: %w", n.name, err)
	}
	sw := &slicesWatch{stop: w.Stop, slices: map[string]*resourceapi.ResourceSlice{}}
	go func() {
		for ev := range w.ResultChan() {
			s, ok := ev.Object.(*resourceapi.ResourceSlice)
			if !ok {
				continue
			}
			now := time.Now()
			sw.mu.Lock()
			if ev.Type == watch.Deleted {
				delete(sw.slices, s.Name)
			} else {
				sw.slices[s.Name] = s
			}
			sw.checkLocked(now)
			sw.mu.Unlock()
		}
	}()
	return sw, nil
}

// when returns a waiter for cond, which it checks on every event from now on.
func (sw *slicesWatch) when(cond func(map[string][]string) bool) *sliceWaiter {
	w := &sliceWaiter{cond: cond, met: make(chan time.Time, 1)}
	sw.mu.Lock()
	defer sw.mu.Unlock()
	sw.waiters = append(sw.waiters, w)
	return w
}

func (sw *slicesWatch) checkLocked(now time.Time) {
	devs := sw.devicesLocked()
	kept := sw.waiters[:0]
	for _, w := range sw.waiters {
		if w.cond(devs) {
			w.met <- now
			continue
		}
		kept = append(kept, w)
	}
	sw.waiters = kept
}

// devices are the devices of gopher's pool in the kubedevice.io slices, with their taint keys.
func (sw *slicesWatch) devices() map[string][]string {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	return sw.devicesLocked()
}

func (sw *slicesWatch) devicesLocked() map[string][]string {
	out := map[string][]string{}
	for _, s := range sw.slices {
		if s.Spec.Driver != dra.DriverName || s.Spec.Pool.Name != string(gopher) {
			continue
		}
		for _, d := range s.Spec.Devices {
			keys := []string{}
			for _, t := range d.Taints {
				keys = append(keys, t.Key)
			}
			out[d.Name] = keys
		}
	}
	return out
}

// wait returns when the watch saw the condition met, or fails after sliceTimeout or when the
// agent stops on its own.
func (w *sliceWaiter) wait(n *benchNode) (time.Time, error) {
	deadline := time.After(sliceTimeout)
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		select {
		case at := <-w.met:
			return at, nil
		case <-deadline:
			return time.Time{}, errTimeout
		case <-tick.C:
			if err := n.alive(); err != nil {
				return time.Time{}, err
			}
		}
	}
}

// allDevices is the condition that the plugin's devices, gopher-0 … gopher-7, are published,
// each with taints that pass ok, and no other device.
func allDevices(ok func(taints []string) bool) func(map[string][]string) bool {
	return func(devs map[string][]string) bool {
		if len(devs) != draDevices {
			return false
		}
		for i := range draDevices {
			taints, found := devs[fmt.Sprintf("gopher-%d", i)]
			if !found || !ok(taints) {
				return false
			}
		}
		return true
	}
}

func untainted(taints []string) bool { return len(taints) == 0 }

func disconnected(taints []string) bool {
	for _, t := range taints {
		if t == dra.TaintPluginDisconnected {
			return true
		}
	}
	return false
}

// deleteSlices deletes the node's ResourceSlices (envtest has no garbage collector to follow
// their owner reference to the deleted Node).
func (n *benchNode) deleteSlices(ctx context.Context) error {
	list := &resourceapi.ResourceSliceList{}
	if err := n.e.admin.List(ctx, list, client.MatchingFields{"spec.nodeName": n.name}); err != nil {
		return err
	}
	var errs []error
	for i := range list.Items {
		errs = append(errs, client.IgnoreNotFound(n.e.admin.Delete(ctx, &list.Items[i])))
	}
	return errors.Join(errs...)
}
