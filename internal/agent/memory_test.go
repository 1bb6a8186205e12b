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

package agent

import (
	"runtime"
	"runtime/debug"
	"testing"
)

// TestMemoryReleaserWaitsForQuiet checks the decision: no release while collections run, none
// below the threshold, one once quiet with enough free.
func TestMemoryReleaserWaitsForQuiet(t *testing.T) {
	var cycles, free uint64 // free: reclaimable
	m := &memoryReleaser{threshold: 4 << 20, read: func() (uint64, uint64) { return cycles, free }}
	m.release = func() { cycles++; free = 0 }
	last := uint64(0)

	cycles, free = 3, 64<<20 // a burst: collections ran since the last check
	if last = m.check(last); m.released != 0 || last != 3 {
		t.Fatalf("released %d times while collections ran (last %d)", m.released, last)
	}
	free = 1 << 20 // quiet, but little free
	if last = m.check(last); m.released != 0 {
		t.Fatalf("released %d times with 1 MiB free", m.released)
	}
	free = 8 << 20 // quiet with 8 MiB free
	if last = m.check(last); m.released != 1 || last != 4 {
		t.Fatalf("released %d times once quiet with 8 MiB free (last %d), want once", m.released, last)
	}
	if m.check(last); m.released != 1 {
		t.Fatalf("released again with nothing free: %d", m.released)
	}
}

// sink keeps the test's garbage from being optimised away.
var sink [][]byte

// TestMemoryReleaserReturnsFreeHeap runs the real releaser's check after garbage was made, both
// collected and not yet, and wants what it would reclaim below the threshold afterwards.
func TestMemoryReleaserReturnsFreeHeap(t *testing.T) {
	// No collection of the runtime's own between making the garbage and the check.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	for _, collected := range []bool{true, false} {
		m := MemoryReleaser().(*memoryReleaser)
		for range 64 {
			sink = append(sink, make([]byte, 512<<10))
		}
		sink = nil
		if collected {
			runtime.GC()
		}
		cycles, before := m.read()
		if before < m.threshold {
			// The background scavenger may return collected garbage first.
			t.Logf("collected %v: only %d bytes reclaimable after dropping 32 MiB; the runtime returned them already", collected, before)
			continue
		}
		m.check(cycles)
		if m.released != 1 {
			t.Fatalf("collected %v: released %d times with %d bytes reclaimable and no collection since, want once", collected, m.released, before)
		}
		if _, after := m.read(); after >= m.threshold {
			t.Errorf("collected %v: %d bytes reclaimable after the release (before: %d), want under %d", collected, after, before, m.threshold)
		}
	}
}
