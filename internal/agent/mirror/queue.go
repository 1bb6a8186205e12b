package mirror

import (
	"time"

	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
)

// settlingQueue is a rate-limited work queue that hands an added item out only after settle, so
// the burst of changes one event causes (a plugin registers, then sends its devices; a pod is
// allocated, then its DeviceAllocation written) is one run: adding an item that is already
// waiting does nothing. Error retries (AddRateLimited) and RequeueAfter (AddAfter) go straight to
// the embedded queue. The NodeDevice mirror spaces its writes itself (writeWait).
type settlingQueue[T comparable] struct {
	workqueue.TypedRateLimitingInterface[T]
	settle time.Duration
}

func newSettlingQueue[T comparable](name string, rl workqueue.TypedRateLimiter[T], clk clock.WithTicker, settle time.Duration) *settlingQueue[T] {
	return &settlingQueue[T]{
		TypedRateLimitingInterface: workqueue.NewTypedRateLimitingQueueWithConfig(rl,
			workqueue.TypedRateLimitingQueueConfig[T]{Name: name, Clock: clk}),
		settle: settle,
	}
}

// Add queues item after the settle time.
func (q *settlingQueue[T]) Add(item T) {
	q.AddAfter(item, q.settle)
}
