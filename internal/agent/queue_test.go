package agent

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/client-go/util/workqueue"
	testingclock "k8s.io/utils/clock/testing"

	dptest "github.com/kubedevice/kubedevice/internal/nodeagent/testing"
)

func TestCoalescingQueue(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	q := newCoalescingQueue("test", workqueue.DefaultTypedControllerRateLimiter[string](), clk, time.Second, 100*time.Millisecond)
	defer q.ShutDown()

	// The delaying queue moves items asynchronously: poll for them, and give a wrong move a
	// moment to show before concluding that nothing moved.
	waitLen := func(want int) {
		t.Helper()
		dptest.Eventually(t, 5*time.Second, func() error {
			if got := q.Len(); got != want {
				return fmt.Errorf("queue length %d, want %d", got, want)
			}
			return nil
		})
	}
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
		waitLen(1)
		item, _ := q.Get()
		if item != want {
			t.Fatalf("got %q, want %q", item, want)
		}
		q.Done(item)
	}

	// The first change waits the settle time; those during it coalesce into one run.
	q.Add("gpu")
	q.Add("gpu")
	staysEmpty("an item was handed out before the settle time")
	clk.Step(100 * time.Millisecond)
	take("gpu")
	staysEmpty("two adds during the settle time ran twice")

	// A change soon after a run waits for the rest of the interval.
	clk.Step(200 * time.Millisecond)
	q.Add("gpu")
	q.Add("gpu")
	clk.Step(700 * time.Millisecond)
	staysEmpty("an item was handed out twice within the interval")
	clk.Step(100 * time.Millisecond)
	take("gpu")

	// Another item is not held back by the first one's interval.
	q.Add("fpga")
	clk.Step(100 * time.Millisecond)
	take("fpga")

	// After a quiet interval, a change waits only the settle time.
	clk.Step(5 * time.Second)
	q.Add("gpu")
	clk.Step(100 * time.Millisecond)
	take("gpu")
}
