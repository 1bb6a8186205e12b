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
	"context"
	"runtime/debug"
	"runtime/metrics"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// Returning the heap a burst of work left free: checked every releasePeriod, done when no garbage
// collection ran since the last check (the agent is quiet) and at least releaseThreshold of the
// heap is free but still resident or garbage not yet collected.
const (
	releasePeriod    = 500 * time.Millisecond
	releaseThreshold = 4 << 20
)

// The runtime/metrics the releaser reads.
const (
	metricGCCycles    = "/gc/cycles/total:gc-cycles"
	metricHeapFree    = "/memory/classes/heap/free:bytes"
	metricHeapObjects = "/memory/classes/heap/objects:bytes"
	metricHeapLive    = "/gc/heap/live:bytes"
)

// MemoryReleaser returns the runnable that gives the operating system back the heap a burst of
// work (a plugin registering thousands of devices, a burst of pods) left free, once the agent is
// quiet. The Go runtime keeps freed heap resident up to about 1.1 times its next heap goal and
// returns the rest slowly; after a burst that goal was set by the burst. A node agent's memory is
// charged to every node, and what a registration allocated for seconds should not stay resident
// until the next one: one forced collection and scavenge (debug.FreeOSMemory), at most twice a
// second and only when no collection ran in the last half second, costs a few milliseconds of
// CPU on this heap (docs/decisions/0024-agent-returns-free-heap.md).
func MemoryReleaser() manager.Runnable {
	return &memoryReleaser{period: releasePeriod, threshold: releaseThreshold, release: debug.FreeOSMemory, read: readGCState}
}

type memoryReleaser struct {
	period    time.Duration
	threshold uint64
	release   func()
	// read returns the number of completed collections and the heap a collection and a scavenge
	// would give back, in bytes.
	read func() (cycles, reclaimable uint64)
	// released counts the releases, for tests.
	released int
}

// readGCState reads from runtime/metrics the completed collections and what a collection and a
// scavenge would give back: the free heap still resident, and the objects allocated since the
// last collection beyond what it found live (garbage, as the agent is quiet).
func readGCState() (cycles, reclaimable uint64) {
	s := []metrics.Sample{{Name: metricGCCycles}, {Name: metricHeapFree}, {Name: metricHeapObjects}, {Name: metricHeapLive}}
	metrics.Read(s)
	reclaimable = s[1].Value.Uint64()
	if objects, live := s[2].Value.Uint64(), s[3].Value.Uint64(); objects > live {
		reclaimable += objects - live
	}
	return s[0].Value.Uint64(), reclaimable
}

// NeedLeaderElection is false: every agent has its own memory.
func (*memoryReleaser) NeedLeaderElection() bool { return false }

// Start checks every period until ctx ends.
func (m *memoryReleaser) Start(ctx context.Context) error {
	t := time.NewTicker(m.period)
	defer t.Stop()
	last, _ := m.read()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			last = m.check(last)
		}
	}
}

// check releases the free heap when no collection completed since lastCycles and enough is
// reclaimable, and returns the collection count to compare with next time.
func (m *memoryReleaser) check(lastCycles uint64) uint64 {
	cycles, reclaimable := m.read()
	if cycles != lastCycles || reclaimable < m.threshold {
		return cycles
	}
	m.release()
	m.released++
	// The release ran a collection of its own.
	cycles, _ = m.read()
	return cycles
}
