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

package mirror

import (
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// pacer spaces the writes of each resource's NodeDevices: a run that comes less than interval
// after the last run that wrote waits for the rest of the interval, so each NodeDevice is written
// at most once per interval, while a change after a quiet interval is written at once.
type pacer struct {
	interval time.Duration
	clock    clock.Clock

	mu sync.Mutex
	// lastWrite is when the last run that wrote ended, per resource.
	lastWrite map[string]time.Time
}

func newPacer(interval time.Duration, clk clock.Clock) *pacer {
	return &pacer{interval: interval, clock: clk, lastWrite: map[string]time.Time{}}
}

// wait returns how long resource must wait before its NodeDevices may be written again.
func (p *pacer) wait(resource string) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	last, ok := p.lastWrite[resource]
	if !ok {
		return 0
	}
	wait := last.Add(p.interval).Sub(p.clock.Now())
	if wait <= 0 {
		delete(p.lastWrite, resource)
	}
	return wait
}

// wrote records that a run wrote the NodeDevices of resource.
func (p *pacer) wrote(resource string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lastWrite[resource] = p.clock.Now()
}
