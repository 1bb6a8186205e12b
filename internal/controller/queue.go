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

package controller

import (
	"time"

	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// requeueQueue is the controllers' work queue. Events and error retries go through a rate-limited
// queue on the real clock; AddAfter, which is how controller-runtime carries out RequeueAfter, goes
// through a delaying queue on the controllers' clock. A reconciler that asks to come back when a
// Lease expires thus comes back when the injected clock reaches the expiry: in tests, when the fake
// clock is stepped past it, while failed reconciles still back off in real time.
type requeueQueue[T comparable] struct {
	workqueue.TypedRateLimitingInterface[T]
	// onClock delays items on the injected clock, then adds them to the embedded queue.
	onClock workqueue.TypedDelayingInterface[T]
}

func newRequeueQueue[T comparable](name string, rl workqueue.TypedRateLimiter[T], clk clock.WithTicker) *requeueQueue[T] {
	q := workqueue.NewTypedRateLimitingQueueWithConfig(rl, workqueue.TypedRateLimitingQueueConfig[T]{Name: name})
	return &requeueQueue[T]{
		TypedRateLimitingInterface: q,
		onClock:                    workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[T]{Clock: clk, Queue: q}),
	}
}

// newQueueFunc returns a controller-runtime NewQueue function building requeueQueues on clk.
func newQueueFunc(clk clock.WithTicker) func(string, workqueue.TypedRateLimiter[reconcile.Request]) workqueue.TypedRateLimitingInterface[reconcile.Request] {
	return func(name string, rl workqueue.TypedRateLimiter[reconcile.Request]) workqueue.TypedRateLimitingInterface[reconcile.Request] {
		return newRequeueQueue(name, rl, clk)
	}
}

// AddAfter adds item once the injected clock has advanced by d.
func (q *requeueQueue[T]) AddAfter(item T, d time.Duration) {
	q.onClock.AddAfter(item, d)
}

// ShutDown stops both queues.
func (q *requeueQueue[T]) ShutDown() {
	q.onClock.ShutDown() // shuts the embedded queue down too
}

// ShutDownWithDrain waits for the items being processed, then stops both queues.
func (q *requeueQueue[T]) ShutDownWithDrain() {
	q.TypedRateLimitingInterface.ShutDownWithDrain()
	q.onClock.ShutDown()
}
