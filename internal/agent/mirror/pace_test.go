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
