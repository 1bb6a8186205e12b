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
