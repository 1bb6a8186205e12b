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

package nodeagent

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// benchPool returns n healthy devices.
func benchPool(n int) []*pluginapi.Device {
	devs := make([]*pluginapi.Device, n)
	for i := range devs {
		devs[i] = numaDevice(fmt.Sprintf("dev-%04d", i), int64(i%2))
	}
	return devs
}

// reportLatencies reports the p50, p99 and p99.9 of lat in milliseconds,
// and the allocations per second they amount to one at a time.
func reportLatencies(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	pct := func(p float64) float64 {
		i := min(int(float64(len(lat))*p), len(lat)-1)
		return float64(lat[i]) / float64(time.Millisecond)
	}
	var total time.Duration
	for _, l := range lat {
		total += l
	}
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
	b.ReportMetric(pct(0.999), "p99.9-ms")
	b.ReportMetric(float64(len(lat))/total.Seconds(), "allocs/s")
}

// BenchmarkAllocatePod measures one allocation end to end with a no-op
// plugin over a real unix socket and the checkpoint fsync'd: AllocatePod of
// a pod with one container asking for one device (reserve, Allocate RPC,
// commit, checkpoint write), then freeing it (UpdateAllocatedDevices, a
// second checkpoint write). ns/op covers both; the percentiles and allocs/s
// cover AllocatePod alone.
func BenchmarkAllocatePod(b *testing.B) {
	tm := newAllocManager(b)
	startPlugin(b, tm, "r.sock", res1, false, false, benchPool(64)...)
	ctx := klog.NewContext(context.Background(), logr.Discard())
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		pod := makePod(fmt.Sprintf("p%d", i)).container("c", req{res1, 1}).obj()
		start := time.Now()
		if err := tm.AllocatePod(ctx, pod); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
		if err := tm.UpdateAllocatedDevices(ctx, nil); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	reportLatencies(b, lat)
}

// BenchmarkAllocatePodParallel measures throughput with allocations for
// different pods running concurrently (8 per core), sharing checkpoint
// writes; every goroutine frees everything committed every 32 allocations.
func BenchmarkAllocatePodParallel(b *testing.B) {
	tm := newAllocManager(b)
	startPlugin(b, tm, "r.sock", res1, false, false, benchPool(512)...)
	ctx := klog.NewContext(context.Background(), logr.Discard())
	var seq atomic.Int64
	writesBefore := tm.checkpointWriteCount()
	b.SetParallelism(8)
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		n := 0
		for pb.Next() {
			pod := makePod(fmt.Sprintf("p%d", seq.Add(1))).container("c", req{res1, 1}).obj()
			if err := tm.AllocatePod(ctx, pod); err != nil {
				b.Error(err)
				return
			}
			if n++; n%32 == 0 {
				if err := tm.UpdateAllocatedDevices(ctx, nil); err != nil {
					b.Error(err)
					return
				}
			}
		}
	})
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "allocs/s")
	b.ReportMetric(float64(tm.checkpointWriteCount()-writesBefore)/float64(b.N), "writes/alloc")
}

// BenchmarkCheckpointWrite measures one checkpoint write with 100 pods
// holding one device each: a snapshot (encode, write, fsync, rename,
// directory fsync; the first write of a process, and compaction) and an
// append of one changed pod (encode, write, fdatasync; every allocation and
// free).
func BenchmarkCheckpointWrite(b *testing.B) {
	for _, kind := range []string{"snapshot", "append"} {
		b.Run(kind, func(b *testing.B) {
			tm := newAllocManager(b)
			startPlugin(b, tm, "r.sock", res1, false, false, benchPool(128)...)
			for i := range 100 {
				pod := makePod(fmt.Sprintf("p%d", i)).container("c", req{res1, 1}).obj()
				tm.hold(b, pod, "c", res1, fmt.Sprintf("dev-%04d", i))
			}
			if err := tm.persist(); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for range b.N {
				tm.mu.Lock()
				if kind == "snapshot" {
					tm.stateReplacedLocked()
				} else {
					tm.podChangedLocked("uid-p0")
				}
				tm.mu.Unlock()
				if err := tm.persist(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func (tm *testManager) checkpointWriteCount() float64 {
	return testutil.ToFloat64(tm.metrics.checkpointWrites.WithLabelValues(resultSuccess))
}
