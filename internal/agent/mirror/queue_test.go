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
	"fmt"
	"testing"
	"time"

	"k8s.io/client-go/util/workqueue"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/kubedevice/kubedevice/internal/nodeagent/dptest"
)

func TestSettlingQueue(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	q := newSettlingQueue("test", workqueue.DefaultTypedControllerRateLimiter[string](), clk, 100*time.Millisecond)
	defer q.ShutDown()

	// The delaying queue moves items asynchronously: poll for them, and give a wrong move a
	// moment to show before concluding that nothing moved.
	staysEmpty := func(what string) {
		t.Helper()
		for deadline := time.Now().Add(50 * time.Millisecond); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			if q.Len() != 0 {
				t.Fatal(what)
			}
		}
	}
	take := func(want string) {
		t.Helper()
		dptest.Eventually(t, 5*time.Second, func() error {
			if got := q.Len(); got != 1 {
				return fmt.Errorf("queue length %d, want 1", got)
			}
			return nil
		})
		item, _ := q.Get()
		if item != want {
			t.Fatalf("got %q, want %q", item, want)
		}
		q.Done(item)
	}

	// A change waits the settle time; those during it coalesce into one run.
	q.Add("gpu")
	clk.Step(50 * time.Millisecond)
	q.Add("gpu")
	staysEmpty("an item was handed out before the settle time")
	clk.Step(50 * time.Millisecond)
	take("gpu")
	staysEmpty("two adds within the settle time ran twice")

	// RequeueAfter is not delayed further.
	q.AddAfter("fpga", 10*time.Millisecond)
	clk.Step(10 * time.Millisecond)
	take("fpga")
}
