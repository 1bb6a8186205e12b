package agent

import (
	"sync"
	"time"

	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
)

// coalescingQueue is a rate-limited work queue that hands out each item at most once per
// interval, so a reconciler that writes each of its objects at most once per run writes them at
// most once per interval. An item added when it may run is handed out after settle, so the burst
// of changes one event causes (a plugin registers, then sends its devices) is one run; an item
// added before interval has passed since it was last handed out waits for the rest of the
// interval. Adding an item that is already waiting does nothing: the changes coalesce.
//
// Error retries (AddRateLimited) and RequeueAfter (AddAfter) go straight to the embedded queue.
type coalescingQueue[T comparable] struct {
	workqueue.TypedRateLimitingInterface[T]

	clock    clock.PassiveClock
	interval time.Duration
	settle   time.Duration

	mu sync.Mutex
	// lastGet is when each item was last handed out.
	lastGet map[T]time.Time
}

func newCoalescingQueue[T comparable](name string, rl workqueue.TypedRateLimiter[T], clk clock.WithTicker, interval, settle time.Duration) *coalescingQueue[T] {
	return &coalescingQueue[T]{
		TypedRateLimitingInterface: workqueue.NewTypedRateLimitingQueueWithConfig(rl,
			workqueue.TypedRateLimitingQueueConfig[T]{Name: name, Clock: clk}),
		clock:    clk,
		interval: interval,
		settle:   settle,
		lastGet:  make(map[T]time.Time),
	}
}

// Add queues item after settle, or when interval has passed since it was last handed out.
func (q *coalescingQueue[T]) Add(item T) {
	if d := q.delay(item); d > 0 {
		q.AddAfter(item, d)
		return
	}
	q.TypedRateLimitingInterface.Add(item)
}

// Get hands out the next item and remembers when.
func (q *coalescingQueue[T]) Get() (T, bool) {
	item, shutdown := q.TypedRateLimitingInterface.Get()
	if !shutdown {
		q.mu.Lock()
		q.lastGet[item] = q.clock.Now()
		q.mu.Unlock()
	}
	return item, shutdown
}

func (q *coalescingQueue[T]) delay(item T) time.Duration {
	q.mu.Lock()
	defer q.mu.Unlock()
	now := q.clock.Now()
	d := q.settle
	if last, ok := q.lastGet[item]; ok {
		if wait := last.Add(q.interval).Sub(now); wait > d {
			d = wait
		} else if wait <= 0 {
			// Forget items whose interval is over, so the map holds only recent ones.
			delete(q.lastGet, item)
		}
	}
	return d
}
