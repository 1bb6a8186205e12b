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

package remediation

import (
	"fmt"
	"testing"
	"time"
)

func TestLimitsSpaceEvictions(t *testing.T) {
	l := NewLimits(time.Minute, 10*time.Second)
	t0 := time.Unix(1000, 0)
	if wait, _ := l.Reserve("a", t0); wait != 0 {
		t.Fatalf("first eviction: wait %s, want none", wait)
	}
	// The cluster's token is spent: node b waits for it, node a for its own minute.
	if wait, _ := l.Reserve("b", t0); wait != 10*time.Second {
		t.Errorf("node b at t0: wait %s, want 10s", wait)
	}
	if wait, _ := l.Reserve("a", t0.Add(10*time.Second)); wait != 50*time.Second {
		t.Errorf("node a at t0+10s: wait %s, want 50s", wait)
	}
	if wait, _ := l.Reserve("b", t0.Add(10*time.Second)); wait != 0 {
		t.Errorf("node b at t0+10s: wait %s, want none", wait)
	}
	if wait, _ := l.Reserve("a", t0.Add(time.Minute)); wait != 0 {
		t.Errorf("node a at t0+1m: wait %s, want none", wait)
	}
}

func TestLimitsGiveBack(t *testing.T) {
	l := NewLimits(time.Minute, time.Minute)
	t0 := time.Unix(1000, 0)
	wait, giveBack := l.Reserve("a", t0)
	if wait != 0 {
		t.Fatalf("first eviction: wait %s", wait)
	}
	giveBack(t0)
	if wait, _ := l.Reserve("a", t0); wait != 0 {
		t.Errorf("after giving the eviction back: wait %s, want none", wait)
	}
}

func TestLimitsForgetNodesWithNothingToSpace(t *testing.T) {
	l := NewLimits(time.Minute, time.Nanosecond)
	t0 := time.Unix(1000, 0)
	for i := range 100 {
		if wait, _ := l.Reserve(fmt.Sprintf("n%d", i), t0.Add(time.Duration(i)*time.Millisecond)); wait != 0 {
			t.Fatalf("node n%d: wait %s, want none", i, wait)
		}
	}
	if len(l.nodes) != 100 {
		t.Fatalf("%d nodes remembered within the interval, want 100", len(l.nodes))
	}
	// A minute after its eviction a node is as new; only the one evicted now is remembered.
	if wait, _ := l.Reserve("n0", t0.Add(time.Minute+time.Second)); wait != 0 {
		t.Fatalf("node n0 a minute later: wait %s, want none", wait)
	}
	if len(l.nodes) != 1 {
		t.Errorf("%d nodes remembered, want 1 (n0)", len(l.nodes))
	}
	if wait, _ := l.Reserve("n0", t0.Add(time.Minute+2*time.Second)); wait == 0 {
		t.Error("node n0 evicted twice within its interval")
	}
}
