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
