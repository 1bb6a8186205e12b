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
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kubedevice/kubedevice/internal/nodeagent/dptest"
	"github.com/kubedevice/kubedevice/internal/nodeagent/poddevices"
)

// ledger is the test's own record of which live pod holds which device,
// built from what AllocatePod returned: a device may never be handed to a
// pod while another pod that has not ended holds it.
type ledger struct {
	mu         sync.Mutex
	holder     map[string]map[string]string // resource → device → pod UID
	ended      sets.Set[string]
	violations []string
}

func (l *ledger) record(pa PodAllocation) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range pa.Containers {
		for _, r := range c.Resources {
			if l.holder[r.ResourceName] == nil {
				l.holder[r.ResourceName] = map[string]string{}
			}
			for _, id := range r.DeviceIDs {
				if h := l.holder[r.ResourceName][id]; h != "" && h != pa.PodUID && !l.ended.Has(h) {
					l.violations = append(l.violations, fmt.Sprintf("%s %s given to %s while %s holds it", r.ResourceName, id, pa.PodUID, h))
				}
				l.holder[r.ResourceName][id] = pa.PodUID
			}
		}
	}
}

// activePods is the test's set of pods that have not ended. GC takes its
// snapshot and runs under mu, so no pod becomes active between the
// snapshot and the GC (the agent's pod informer gives the same guarantee).
type activePods struct {
	mu   sync.Mutex
	pods map[string]*v1.Pod
	done []*v1.Pod // allocated, may end
}

// Allocations, frees, garbage collections, health flips, plugin
// re-registrations and reads in parallel (10,000 operations under -race):
// no device is ever held by two live pods, no allocation ever trips over a
// device the manager should not have picked, and once everything has ended
// nothing is left reserved or committed.
func TestConcurrentAllocationInvariant(t *testing.T) {
	ops := 10_000
	if testing.Short() {
		ops = 1_000
	}
	const workers = 8
	tm := newAllocManager(t)
	var devs1, devs2 []*pluginapi.Device
	for i := range 16 {
		devs1 = append(devs1, numaDevice(fmt.Sprintf("a%02d", i), int64(i%2)))
	}
	for i := range 8 {
		devs2 = append(devs2, dptest.Device(fmt.Sprintf("b%d", i), pluginapi.Healthy))
	}
	p1 := startPlugin(t, tm, "r1.sock", res1, true, true, devs1...)
	p2 := startPlugin(t, tm, "r2.sock", res2, false, false, devs2...)
	var prefSeq atomic.Uint64
	p1.SetGetPreferredAllocationFunc(func(r *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
		cr := r.GetContainerRequests()[0]
		avail := cr.GetAvailableDeviceIDs()
		rng := rand.New(rand.NewPCG(prefSeq.Add(1), 7))
		ids := []string{"bogus"}
		for range cr.GetAllocationSize() {
			ids = append(ids, avail[rng.IntN(len(avail))])
		}
		if rng.IntN(4) == 0 {
			time.Sleep(time.Millisecond) // widen the window without the lock
		}
		return &pluginapi.PreferredAllocationResponse{ContainerResponses: []*pluginapi.ContainerPreferredAllocationResponse{{DeviceIDs: ids}}}, nil
	})

	shapes := []func(*podBuilder) *podBuilder{
		func(b *podBuilder) *podBuilder { return b.container("c", req{res1, 1}) },
		func(b *podBuilder) *podBuilder { return b.container("c", req{res1, 2}, req{res2, 1}) },
		func(b *podBuilder) *podBuilder {
			return b.init("i", req{res1, 2}).container("c1", req{res1, 1}).container("c2", req{res1, 1})
		},
		func(b *podBuilder) *podBuilder {
			return b.sidecar("s", req{res2, 1}).container("c", req{res1, 1}, req{res2, 1})
		},
	}
	led := &ledger{holder: map[string]map[string]string{}, ended: sets.New[string]()}
	active := &activePods{pods: map[string]*v1.Pod{}}
	var unexpected []error
	var unexpectedMu sync.Mutex
	var counts [7]atomic.Int64
	var allocated atomic.Int64
	reasons := map[string]int{}
	var reasonsMu sync.Mutex

	gc := func(ctx context.Context) {
		active.mu.Lock()
		defer active.mu.Unlock()
		list := make([]*v1.Pod, 0, len(active.pods))
		for _, p := range active.pods {
			list = append(list, p)
		}
		if err := tm.UpdateAllocatedDevices(ctx, list); err != nil {
			t.Errorf("UpdateAllocatedDevices: %v", err)
		}
	}
	checkError := func(err error) {
		if err == nil {
			return
		}
		var ae *AllocationError
		if !errors.As(err, &ae) || errors.Is(err, poddevices.ErrDeviceInUse) || errors.Is(err, poddevices.ErrNotReserved) {
			unexpectedMu.Lock()
			unexpected = append(unexpected, err)
			unexpectedMu.Unlock()
		}
	}

	var wg sync.WaitGroup
	var next atomic.Int64
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 42))
			ctx := tm.ctx
			for i := next.Add(1); i <= int64(ops); i = next.Add(1) {
				counts[6].Add(1)
				switch op := rng.IntN(100); {
				case op < 40: // allocate a new pod
					counts[0].Add(1)
					pod := shapes[rng.IntN(len(shapes))](makePod(fmt.Sprintf("w%d-%d", w, i))).obj()
					active.mu.Lock()
					active.pods[string(pod.UID)] = pod
					active.mu.Unlock()
					err := tm.AllocatePod(ctx, pod)
					checkError(err)
					if err != nil {
						reasonsMu.Lock()
						reasons[firstWords(err.Error())]++
						reasonsMu.Unlock()
					}
					if err == nil {
						allocated.Add(1)
						if pa, ok := tm.PodAllocation(string(pod.UID)); ok {
							led.record(pa)
						} else {
							t.Errorf("pod %s allocated but has no allocation", pod.UID)
						}
					}
					// A refused pod fails; an allocated one runs until it ends.
					active.mu.Lock()
					if err == nil {
						active.done = append(active.done, pod)
					} else {
						delete(active.pods, string(pod.UID))
					}
					active.mu.Unlock()
				case op < 60: // a pod ends
					counts[1].Add(1)
					active.mu.Lock()
					if len(active.done) == 0 {
						active.mu.Unlock()
						continue
					}
					k := rng.IntN(len(active.done))
					pod := active.done[k]
					active.done = append(active.done[:k], active.done[k+1:]...)
					led.mu.Lock()
					led.ended.Insert(string(pod.UID))
					led.mu.Unlock()
					delete(active.pods, string(pod.UID))
					active.mu.Unlock()
					if rng.IntN(2) == 0 {
						gc(ctx)
					}
				case op < 75:
					counts[2].Add(1)
					gc(ctx)
				case op < 85: // health flip
					counts[3].Add(1)
					p, devs := p1, devs1
					if rng.IntN(2) == 0 {
						p, devs = p2, devs2
					}
					flipped := make([]*pluginapi.Device, len(devs))
					for j, d := range devs {
						health := pluginapi.Healthy
						if rng.IntN(5) == 0 {
							health = pluginapi.Unhealthy
						}
						flipped[j] = dptest.Device(d.GetID(), health)
						if n := d.GetTopology().GetNodes(); len(n) > 0 {
							flipped[j] = dptest.Device(d.GetID(), health, n[0].GetID())
						}
					}
					p.Update(flipped)
				case op < 88: // the plugin registers again
					counts[4].Add(1)
					p := p1
					if rng.IntN(2) == 0 {
						p = p2
					}
					_ = register(t, p.Plugin, tm.SocketPath())
				default: // readers
					counts[5].Add(1)
					active.mu.Lock()
					var pod *v1.Pod
					if len(active.done) > 0 {
						pod = active.done[rng.IntN(len(active.done))]
					}
					active.mu.Unlock()
					if pod != nil {
						// Refusals (re-allocation, PreStartContainer on a
						// replaced endpoint) are fine; tripping over a device
						// is not.
						_, err := tm.GetDeviceRunContainerOptions(ctx, pod, podContainers(pod)[0])
						if errors.Is(err, poddevices.ErrDeviceInUse) || errors.Is(err, poddevices.ErrNotReserved) {
							checkError(err)
						}
						tm.topologyHints(pod, podContainers(pod)[0])
					}
					tm.Snapshots()
					tm.PodAllocations()
				}
				tm.checkStoreInvariant(t)
			}
		}()
	}
	wg.Wait()
	t.Logf("operations: %d (allocate %d of which %d succeeded, end %d, gc %d, health %d, re-register %d, read %d)",
		counts[6].Load(), counts[0].Load(), allocated.Load(), counts[1].Load(), counts[2].Load(), counts[3].Load(), counts[4].Load(), counts[5].Load())
	t.Logf("refusals: %v", reasons)
	// The mix must keep devices flowing, or the test proves little.
	if allocated.Load() < counts[0].Load()/10 {
		t.Errorf("only %d of %d allocations succeeded", allocated.Load(), counts[0].Load())
	}
	if counts[6].Load() < int64(ops) {
		t.Errorf("ran %d operations, want %d", counts[6].Load(), ops)
	}
	for _, v := range led.violations {
		t.Error(v)
	}
	for _, err := range unexpected {
		t.Errorf("unexpected allocation error: %v", err)
	}

	// Everything ends: nothing may stay reserved or committed.
	if err := tm.UpdateAllocatedDevices(tm.ctx, nil); err != nil {
		t.Fatal(err)
	}
	tm.mu.Lock()
	left := tm.pods.Devices()
	tm.mu.Unlock()
	if diff := cmp.Diff(map[string]sets.Set[string]{}, left); diff != "" {
		t.Errorf("devices still in use after every pod ended (-want +got):\n%s", diff)
	}
}

// checkStoreInvariant checks, under the manager's lock, that no device is
// committed to two pods and that every committed device is counted as in
// use.
func (tm *testManager) checkStoreInvariant(t *testing.T) {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	holders := map[string]map[string]string{}
	inUse := tm.pods.Devices()
	for _, e := range tm.pods.Entries() {
		if holders[e.ResourceName] == nil {
			holders[e.ResourceName] = map[string]string{}
		}
		for _, ids := range e.DeviceIDs {
			for _, id := range ids {
				if h := holders[e.ResourceName][id]; h != "" && h != e.PodUID {
					t.Errorf("%s %s committed to pods %s and %s", e.ResourceName, id, h, e.PodUID)
				}
				holders[e.ResourceName][id] = e.PodUID
				if !inUse[e.ResourceName].Has(id) {
					t.Errorf("%s %s committed but not in use", e.ResourceName, id)
				}
			}
		}
	}
}

// firstWords is the start of an error message, to count refusals by kind.
func firstWords(msg string) string {
	if len(msg) > 48 {
		return msg[:48]
	}
	return msg
}
