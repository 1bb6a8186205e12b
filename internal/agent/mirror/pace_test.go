package mirror

import (
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"
)

func TestPacer(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	p := newPacer(time.Second, clk)
	if got := p.wait(testResource); got != 0 {
		t.Fatalf("a resource never written waits %v", got)
	}
	p.wrote(testResource)
	clk.Step(400 * time.Millisecond)
	if got := p.wait(testResource); got != 600*time.Millisecond {
		t.Errorf("400 ms after a write, wait %v, want 600ms", got)
	}
	if got := p.wait("acme.io/fpga"); got != 0 {
		t.Errorf("another resource waits %v", got)
	}
	clk.Step(600 * time.Millisecond)
	if got := p.wait(testResource); got > 0 {
		t.Errorf("an interval after a write, wait %v", got)
	}
	if _, ok := p.lastWrite[testResource]; ok {
		t.Error("a write older than the interval is still remembered")
	}
}
