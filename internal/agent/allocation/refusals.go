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

package allocation

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
)

// Pacing of a refused pod's DeviceAllocation: once it says a refusal, a different refusal is
// written no sooner than refusalFirstInterval after it, and each later one waits twice as long
// as the one before, up to refusalMaxInterval. A refusal that does not change is never written
// again, and the pod's devices being allocated are written at once.
const (
	refusalFirstInterval = time.Second
	refusalMaxInterval   = 30 * time.Second
)

// refusalPacer spaces the rewrites of each refused pod's DeviceAllocation, so that a plugin
// flapping (registering, disconnecting, changing its devices) cannot make the agent rewrite the
// status, and report an event, at every change.
type refusalPacer struct {
	clock clock.Clock

	mu   sync.Mutex
	pods map[types.NamespacedName]refusalWrites
}

// refusalWrites is when the refusal of a pod (its UID) was last written and how long the next
// must wait.
type refusalWrites struct {
	uid      types.UID
	last     time.Time
	interval time.Duration
}

func newRefusalPacer(clk clock.Clock) *refusalPacer {
	return &refusalPacer{clock: clk, pods: map[types.NamespacedName]refusalWrites{}}
}

// wait returns how long the pod named key, of uid, must wait before its refusal may be
// rewritten; 0 when it may be now.
func (p *refusalPacer) wait(key types.NamespacedName, uid types.UID) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	w, ok := p.pods[key]
	if !ok || w.uid != uid {
		return 0
	}
	return max(w.last.Add(w.interval).Sub(p.clock.Now()), 0)
}

// wrote records that the pod's DeviceAllocation was written with a refusal; first says it is
// the pod's first refusal since it was last allocated (or ever).
func (p *refusalPacer) wrote(key types.NamespacedName, uid types.UID, first bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	w, ok := p.pods[key]
	if !ok {
		refusedPods.Inc()
	}
	switch {
	case first || !ok || w.uid != uid:
		w = refusalWrites{uid: uid, interval: refusalFirstInterval}
	default:
		w.interval = min(2*w.interval, refusalMaxInterval)
	}
	w.last = p.clock.Now()
	p.pods[key] = w
}

// forget drops what is known of the pods named key: allocated, ended or gone.
func (p *refusalPacer) forget(key types.NamespacedName) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.pods[key]; ok {
		refusedPods.Dec()
		delete(p.pods, key)
	}
}
