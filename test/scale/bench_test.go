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

package scale

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
)

const (
	// longLease is the agent lease duration of the benchmarks that renew every Lease once at the
	// start: long enough that no Lease expires while they measure.
	longLease = time.Hour
	// agentLease is the controller's default --agent-lease-duration, which the steady-state
	// benchmark runs with while every agent renews every renewInterval.
	agentLease    = 40 * time.Second
	renewInterval = 10 * time.Second
	// defaultQPS and defaultBurst are the controller's client rate limits by default.
	defaultQPS   = 20
	defaultBurst = 30
	// setupQPS is the rate limit of controllers that only bring the cluster to a known state.
	setupQPS = 500
	// quiet is how long a controller must go without a write to count as done.
	quiet = 2 * time.Second
	// pollInterval is how often the benchmarks look at their conditions.
	pollInterval = 50 * time.Millisecond
	// settleTimeout bounds every wait.
	settleTimeout = 20 * time.Minute
)

// BenchmarkColdStart measures a first install: the agents have written every NodeDevice and
// renew their Leases, no capacity is published, and the controller starts. It reports the time
// until every Node publishes its devices (s/resync), the nodes/status patches per node (exactly
// one), and the controller's writes. It runs once per client rate limit in
// KUBEDEVICE_SCALE_QPS (default "20,100"; burst 1.5 × QPS).
func BenchmarkColdStart(b *testing.B) {
	e := getEnv(b)
	qpsList, err := qpsValues()
	if err != nil {
		b.Fatal(err)
	}
	for _, qps := range qpsList {
		b.Run(fmt.Sprintf("qps=%d", qps), func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				ctx := context.Background()
				if err := e.cluster.unpublish(ctx); err != nil {
					b.Fatal(err)
				}
				if err := e.cluster.renewAll(ctx); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				start := time.Now()
				rc, err := e.startController(controllerOptions{qps: float32(qps), burst: qps * 3 / 2, leaseDuration: longLease})
				if err != nil {
					b.Fatal(err)
				}
				settled, err := e.waitPublished(rc)
				b.StopTimer()
				if err == nil {
					err = waitQuiet(rc, e.cluster)
				}
				reqs := rc.requests()
				if stopErr := rc.stop(); err == nil {
					err = stopErr
				}
				if err != nil {
					b.Fatal(err)
				}
				e.cluster.markPublished()
				nodePatches := reqs["PATCH nodes/status"]
				b.ReportMetric(settled.Sub(start).Seconds(), "s/resync")
				b.ReportMetric(float64(nodePatches)/float64(e.nodes), "patches/node")
				b.ReportMetric(float64(reqs.writes()), "writes")
				b.Logf("nodes=%d nodeDevices=%d qps=%d: all published after %s; requests: %s",
					e.nodes, len(e.cluster.nodeDevices), qps, settled.Sub(start).Round(time.Millisecond), reqs)
				if nodePatches != e.nodes {
					b.Errorf("%d nodes/status patches for %d nodes, want exactly one per node", nodePatches, e.nodes)
				}
			}
		})
	}
}

// BenchmarkFailover measures a new leader taking over a cluster whose capacity is published: the
// time from its start to its first full reconcile (every Node and NodeDevice reconciled), which
// must write nothing.
func BenchmarkFailover(b *testing.B) {
	e := getEnv(b)
	for range b.N {
		b.StopTimer()
		ctx := context.Background()
		if err := e.ensurePublished(ctx); err != nil {
			b.Fatal(err)
		}
		if err := e.cluster.renewAll(ctx); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start := time.Now()
		rc, err := e.startController(controllerOptions{qps: defaultQPS, burst: defaultBurst, leaseDuration: longLease})
		if err != nil {
			b.Fatal(err)
		}
		err = waitFor(func() bool { return rc.fullyReconciled(e.cluster) })
		elapsed := time.Since(start)
		b.StopTimer()
		if err == nil {
			// Anything the first pass queued would be written now.
			time.Sleep(quiet)
		}
		reqs := rc.requests()
		if stopErr := rc.stop(); err == nil {
			err = stopErr
		}
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(elapsed.Seconds(), "s/full-reconcile")
		b.ReportMetric(float64(reqs.writes()), "writes")
		b.ReportMetric(float64(reqs.reads()), "api-reads")
		b.Logf("nodes=%d nodeDevices=%d: first full reconcile after %s; requests: %s",
			e.nodes, len(e.cluster.nodeDevices), elapsed.Round(time.Millisecond), reqs)
		if w := reqs.writes(); w != 0 {
			b.Errorf("a failover onto a published cluster wrote %d times, want none: %s", w, reqs)
		}
	}
}

// BenchmarkSteadyState measures the controller's writes while nothing changes but every agent
// renews its Lease every 10 s and the controller judges them with the default 40 s duration. It
// reports writes per second (none allowed), its leader election's requests per second, reconciles
// per second and reads sent to the API server instead of the cache.
func BenchmarkSteadyState(b *testing.B) {
	e := getEnv(b)
	for range b.N {
		b.StopTimer()
		ctx := context.Background()
		if err := e.ensurePublished(ctx); err != nil {
			b.Fatal(err)
		}
		if err := e.cluster.renewAll(ctx); err != nil {
			b.Fatal(err)
		}
		renewCtx, stopRenewing := context.WithCancel(ctx)
		renewed := make(chan error, 1)
		go func() { renewed <- e.cluster.renewContinuously(renewCtx) }()
		rc, err := e.startController(controllerOptions{qps: defaultQPS, burst: defaultBurst, leaseDuration: agentLease})
		if err != nil {
			stopRenewing()
			b.Fatal(err)
		}
		err = waitFor(func() bool { return rc.fullyReconciled(e.cluster) })
		var before, after requestCounts
		var reconciles float64
		if err == nil {
			before = rc.requests()
			reconcilesBefore := rc.reconciles()
			b.StartTimer()
			time.Sleep(e.window)
			b.StopTimer()
			after = rc.requests()
			reconciles = rc.reconciles() - reconcilesBefore
		}
		stopRenewing()
		if renewErr := <-renewed; err == nil {
			err = renewErr
		}
		if stopErr := rc.stop(); err == nil {
			err = stopErr
		}
		if err != nil {
			b.Fatal(err)
		}
		window := after.since(before)
		seconds := e.window.Seconds()
		b.ReportMetric(float64(window.writes())/seconds, "writes/s")
		b.ReportMetric(float64(window[leaderKey])/seconds, "leader-requests/s")
		b.ReportMetric(reconciles/seconds, "reconciles/s")
		b.ReportMetric(float64(window.reads()), "api-reads")
		b.Logf("nodes=%d nodeDevices=%d, %d Lease renewals/s: requests in %s: %s",
			e.nodes, len(e.cluster.nodeDevices), int(float64(e.nodes)/renewInterval.Seconds()), e.window, window)
		if w := window.writes(); w != 0 {
			b.Errorf("the controller wrote %d times in a steady state, want none: %s", w, window)
		}
	}
}

// BenchmarkChurn changes the allocatable count of KUBEDEVICE_SCALE_CHURN_RATE NodeDevices per
// second (a device turning unhealthy or healthy again, as the agent reports it) and reports the
// nodes/status patches per change (at most one) and the latency from the agent's status write to
// the Node publishing the new count, seen through a watch.
func BenchmarkChurn(b *testing.B) {
	e := getEnv(b)
	for range b.N {
		b.StopTimer()
		ctx := context.Background()
		if err := e.ensurePublished(ctx); err != nil {
			b.Fatal(err)
		}
		if err := e.cluster.renewAll(ctx); err != nil {
			b.Fatal(err)
		}
		rc, err := e.startController(controllerOptions{qps: defaultQPS, burst: defaultBurst, leaseDuration: longLease})
		if err != nil {
			b.Fatal(err)
		}
		err = waitFor(func() bool { return rc.fullyReconciled(e.cluster) })
		var changes int
		var window requestCounts
		if err == nil {
			e.watcher.takeLatencies()
			before := rc.requests()
			b.StartTimer()
			changes, err = e.churn(ctx)
			if err == nil {
				err = waitFor(func() bool { return e.watcher.pendingCount() == 0 })
			}
			b.StopTimer()
			if err == nil {
				err = waitQuiet(rc, e.cluster)
			}
			window = rc.requests().since(before)
		}
		if stopErr := rc.stop(); err == nil {
			err = stopErr
		}
		if err != nil {
			b.Fatalf("%v (%d changes not published)", err, e.watcher.pendingCount())
		}
		lat := e.watcher.takeLatencies()
		patches := window["PATCH nodes/status"]
		b.ReportMetric(float64(changes), "changes")
		b.ReportMetric(float64(patches)/float64(changes), "patches/change")
		b.ReportMetric(float64(percentile(lat, 0.5).Milliseconds()), "p50-ms")
		b.ReportMetric(float64(percentile(lat, 0.99).Milliseconds()), "p99-ms")
		b.ReportMetric(float64(percentile(lat, 1).Milliseconds()), "max-ms")
		b.Logf("nodes=%d nodeDevices=%d, %d changes/s for %s: %d changes, latency p50 %s p99 %s max %s; requests: %s",
			e.nodes, len(e.cluster.nodeDevices), e.churnRate, e.window, changes,
			percentile(lat, 0.5), percentile(lat, 0.99), percentile(lat, 1), window)
		if patches > changes {
			b.Errorf("%d nodes/status patches for %d changes, want at most one per change", patches, changes)
		}
		if other := window.writes() - patches; other != 0 {
			b.Errorf("%d writes besides the node patches, want none: %s", other, window)
		}
	}
}

// churn sends churnRate allocatable changes per second for the window, each to a node no other
// change in flight touches, and returns how many it sent.
func (e *env) churn(ctx context.Context) (int, error) {
	order := e.cluster.changeOrder(uint64(time.Now().UnixNano()))
	total := int(e.window.Seconds() * float64(e.churnRate))
	tick := time.NewTicker(time.Second / time.Duration(e.churnRate))
	defer tick.Stop()
	g, ctx := errgroup.WithContext(ctx)
	for i := range total {
		select {
		case <-ctx.Done():
			return i, g.Wait()
		case <-tick.C:
		}
		nd := order[i%len(order)]
		want, send := e.cluster.flip(ctx, nd)
		g.Go(func() error {
			e.watcher.expect(nd.Spec.NodeName, want, time.Now())
			return send()
		})
	}
	return total, g.Wait()
}

// renewContinuously renews every agent's Lease once per renewInterval, spread evenly over it,
// as the agents of a cluster do, until ctx ends.
func (cl *cluster) renewContinuously(ctx context.Context) error {
	const slots = 100
	tick := time.NewTicker(renewInterval / slots)
	defer tick.Stop()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	defer wg.Wait()
	for slot := 0; ; slot = (slot + 1) % slots {
		select {
		case <-ctx.Done():
			wg.Wait()
			return firstErr
		case <-tick.C:
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			now := time.Now()
			err := forEach(ctx, cl.p.nodes/slots+1, func(ctx context.Context, j int) error {
				i := slot + j*slots
				if i >= cl.p.nodes {
					return nil
				}
				return renewLease(ctx, cl.c, nodeName(i), now)
			})
			if err != nil && ctx.Err() == nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			}
		}()
	}
}

// ensurePublished brings the cluster to the state a controller leaves: every finalizer,
// condition and node capacity in place.
func (e *env) ensurePublished(ctx context.Context) error {
	if e.cluster.isPublished() {
		return nil
	}
	if err := e.cluster.unpublish(ctx); err != nil {
		return err
	}
	if err := e.cluster.renewAll(ctx); err != nil {
		return err
	}
	rc, err := e.startController(controllerOptions{qps: setupQPS, burst: setupQPS, leaseDuration: longLease})
	if err != nil {
		return err
	}
	_, err = e.waitPublished(rc)
	if err == nil {
		err = waitQuiet(rc, e.cluster)
	}
	if stopErr := rc.stop(); err == nil {
		err = stopErr
	}
	if err != nil {
		return fmt.Errorf("publishing the cluster's capacity: %w", err)
	}
	e.cluster.markPublished()
	return nil
}

// waitPublished waits until every node publishes its capacity, and returns when the last one
// started to.
func (e *env) waitPublished(rc *runningController) (time.Time, error) {
	var at time.Time
	err := waitFor(func() bool {
		var ok bool
		at, ok = e.watcher.settledAt(e.cluster)
		return ok
	})
	if err != nil {
		return at, fmt.Errorf("%w: %d nodes do not publish their capacity; requests: %s", err, e.watcher.missing(e.cluster), rc.requests())
	}
	return at, nil
}

// waitQuiet waits until rc has reconciled everything and written nothing for the quiet period.
func waitQuiet(rc *runningController, cl *cluster) error {
	last, lastChange := -1, time.Now()
	return waitFor(func() bool {
		w := rc.requests().writes()
		if w != last {
			last, lastChange = w, time.Now()
		}
		return time.Since(lastChange) >= quiet && rc.fullyReconciled(cl)
	})
}

var errTimeout = fmt.Errorf("timed out after %s", settleTimeout)

// waitFor polls cond until it holds, or fails after settleTimeout.
func waitFor(cond func() bool) error {
	deadline := time.Now().Add(settleTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			return errTimeout
		}
		time.Sleep(pollInterval)
	}
	return nil
}

func (cl *cluster) isPublished() bool {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return cl.published
}

func (cl *cluster) markPublished() {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	cl.published = true
}

// qpsValues are the client rate limits BenchmarkColdStart runs with (KUBEDEVICE_SCALE_QPS).
func qpsValues() ([]int, error) {
	s := os.Getenv("KUBEDEVICE_SCALE_QPS")
	if s == "" {
		return []int{defaultQPS, 100}, nil
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("KUBEDEVICE_SCALE_QPS=%q: want positive integers separated by commas", s)
		}
		out = append(out, n)
	}
	return out, nil
}
