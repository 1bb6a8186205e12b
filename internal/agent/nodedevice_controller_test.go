package agent

import (
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"
)

func TestWriteWait(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	r := &nodeDeviceReconciler{
		Agent:     &Agent{opts: Options{WriteInterval: time.Second}, clock: clk},
		lastWrite: map[string]time.Time{},
	}
	if got := r.writeWait(testResource); got != 0 {
		t.Fatalf("a resource never written waits %v", got)
	}
	r.wrote(testResource)
	clk.Step(400 * time.Millisecond)
	if got := r.writeWait(testResource); got != 600*time.Millisecond {
		t.Errorf("400 ms after a write, wait %v, want 600ms", got)
	}
	if got := r.writeWait("acme.io/fpga"); got != 0 {
		t.Errorf("another resource waits %v", got)
	}
	clk.Step(600 * time.Millisecond)
	if got := r.writeWait(testResource); got > 0 {
		t.Errorf("an interval after a write, wait %v", got)
	}
	if _, ok := r.lastWrite[testResource]; ok {
		t.Error("a write older than the interval is still remembered")
	}
}
