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
	"testing"
	"time"

	"k8s.io/client-go/util/workqueue"
	clocktesting "k8s.io/utils/clock/testing"
)

// waitLen polls q until it holds n items or a second has passed.
func waitLen(t *testing.T, q workqueue.TypedRateLimitingInterface[string], n int) {
	t.Helper()
	deadline := time.Now().Add(time.Second)
	for q.Len() != n {
		if time.Now().After(deadline) {
			t.Fatalf("queue length = %d, want %d", q.Len(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestRequeueQueueDelaysOnTheInjectedClock(t *testing.T) {
	clk := clocktesting.NewFakeClock(testNow)
	q := newRequeueQueue("", workqueue.NewTypedItemExponentialFailureRateLimiter[string](time.Millisecond, time.Millisecond), clk)
	defer q.ShutDown()

	q.AddAfter("lease-expiry", 40*time.Second)
	clk.Step(39 * time.Second)
	// Give the delaying loop a chance to (wrongly) release the item before checking it did not.
	time.Sleep(20 * time.Millisecond)
	if q.Len() != 0 {
		t.Fatal("item released a second before its time")
	}
	clk.Step(time.Second)
	waitLen(t, q, 1)
	item, _ := q.Get()
	if item != "lease-expiry" {
		t.Fatalf("got %q, want lease-expiry", item)
	}
	q.Done(item)

	// Failed items back off in real time, whatever the injected clock does.
	q.AddRateLimited("failed")
	waitLen(t, q, 1)
}

func TestRequeueQueueShutsDown(t *testing.T) {
	q := newRequeueQueue("", workqueue.DefaultTypedControllerRateLimiter[string](), clocktesting.NewFakeClock(testNow))
	q.Add("a")
	q.ShutDownWithDrain()
	if !q.ShuttingDown() {
		t.Fatal("queue not shutting down after ShutDownWithDrain")
	}
	q.AddAfter("b", time.Second) // must not block or panic once shut down
}
