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

package crash

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kubedevice/kubedevice/internal/testutil"
)

// sample is one reading of the agent's own metrics.
type sample struct {
	at                       time.Duration
	goroutines               float64
	heapInuse, rss, pods, nd float64
}

// scrape reads the agent's go_goroutines, go_memstats_heap_inuse_bytes and
// process_resident_memory_bytes from its plain-HTTP metrics endpoint.
func scrape(ctx context.Context, addr string) (sample, error) {
	var s sample
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return s, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			continue
		}
		switch name {
		case "go_goroutines":
			s.goroutines = v
		case "go_memstats_heap_inuse_bytes":
			s.heapInuse = v
		case "process_resident_memory_bytes":
			s.rss = v
		}
	}
	return s, sc.Err()
}

// TestSoak runs the agent (a production build, as a process) for KUBEDEVICE_SOAK_DURATION under
// random pod churn, device health flips and plugin restarts (SIGKILL, then started again), samples
// its goroutines and memory, and fails if they grow: the goroutines of the last quarter above the
// second quarter's highest by more than 20 %, or the heap in use of the last quarter on average
// more than 50 % above the second quarter's. At the end it must converge as after a crash. Run by
// `make soak`; skipped without the variable.
func TestSoak(t *testing.T) {
	d, err := time.ParseDuration(os.Getenv("KUBEDEVICE_SOAK_DURATION"))
	if err != nil || d <= 0 {
		t.Skip("set KUBEDEVICE_SOAK_DURATION (make soak DURATION=30m)")
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("soak for %v, seed %d", d, seed)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	h := newHarness(t, rng)
	cmd := exec.Command("go", "build", "-o", filepath.Join(h.binDir, "kubedevice-agent-release"), "./cmd/kubedevice-agent")
	cmd.Dir = testutil.RepoRoot()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the agent: %v\n%s", err, out)
	}
	metrics := freeAddr(t)
	h.agent = h.startAgentBinary("soak-agent", "kubedevice-agent-release", "", metrics)
	if err := h.agent.waitReady(h.ctx, time.Minute); err != nil {
		t.Fatal(err)
	}

	interval := max(d/60, 5*time.Second)
	var samples []sample
	start := time.Now()
	nextSample, nextFlip, nextPluginRestart, nextCleanup := start, start.Add(2*time.Second), start.Add(45*time.Second), start.Add(10*time.Second)
	steps, flips, pluginRestarts := 0, 0, 0
	gopherFile := func(i int) string { return filepath.Join(h.dir, "gophers", fmt.Sprintf("gopher-%d", i)) }
	for time.Since(start) < d {
		now := time.Now()
		if now.After(nextSample) {
			s, err := scrape(h.ctx, metrics)
			if err != nil {
				t.Fatalf("scraping the agent's metrics: %v\n%s", err, h.agent.logTail(20))
			}
			s.at = time.Since(start)
			samples = append(samples, s)
			t.Logf("soak %6v goroutines %4.0f heap in use %6.1f MiB rss %6.1f MiB (steps %d, health flips %d, plugin restarts %d)",
				s.at.Round(time.Second), s.goroutines, s.heapInuse/(1<<20), s.rss/(1<<20), steps, flips, pluginRestarts)
			nextSample = nextSample.Add(interval)
		}
		if now.After(nextFlip) {
			content := "a gopher\n"
			if rng.IntN(2) == 0 {
				content = "unhealthy\n"
			}
			if err := os.WriteFile(gopherFile(rng.IntN(gophers)), []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
			flips++
			nextFlip = now.Add(time.Duration(1000+rng.IntN(4000)) * time.Millisecond)
		}
		if now.After(nextPluginRestart) {
			h.plugin.kill()
			h.plugin = h.startPlugin(fmt.Sprintf("soak-plugin-%d", pluginRestarts+1))
			pluginRestarts++
			nextPluginRestart = now.Add(time.Duration(30+rng.IntN(60)) * time.Second)
		}
		if now.After(nextCleanup) {
			h.cleanupEnded()
			nextCleanup = now.Add(10 * time.Second)
		}
		if !h.agent.alive() {
			t.Fatalf("the agent exited (%v):\n%s", h.agent.state, h.agent.logTail(40))
		}
		if err := h.step(); err != nil {
			t.Fatal(err)
		}
		steps++
		time.Sleep(time.Duration(50+rng.IntN(200)) * time.Millisecond)
	}

	// Every gopher healthy again: the node must converge as after a crash.
	for i := range gophers {
		if err := os.WriteFile(gopherFile(i), []byte("a gopher\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(convergeTimeout)
	for {
		obs, err := h.observe()
		var errs []string
		if err == nil {
			errs = obs.converged(h.active)
		} else {
			errs = []string{err.Error()}
		}
		if len(errs) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no convergence after the soak:\n  %s", strings.Join(errs, "\n  "))
		}
		time.Sleep(200 * time.Millisecond)
	}
	if errs := h.seen.violations(); len(errs) > 0 {
		t.Errorf("allocations changed while their pods were active:\n  %s", strings.Join(errs, "\n  "))
	}
	t.Logf("soak done: %v, %d workload steps, %d health flips, %d plugin restarts, %d pods seen holding devices",
		time.Since(start).Round(time.Second), steps, flips, pluginRestarts, h.seen.count())
	if path := os.Getenv("KUBEDEVICE_SOAK_REPORT"); path != "" {
		var b strings.Builder
		b.WriteString("seconds,goroutines,heap_inuse_bytes,rss_bytes\n")
		for _, s := range samples {
			fmt.Fprintf(&b, "%.0f,%.0f,%.0f,%.0f\n", s.at.Seconds(), s.goroutines, s.heapInuse, s.rss)
		}
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Error(err)
		}
	}
	if len(samples) < 8 {
		t.Logf("only %d samples: too few to judge growth", len(samples))
		return
	}
	q := len(samples) / 4
	second, last := samples[q:2*q], samples[len(samples)-q:]
	var maxG, heap2, heapLast, maxGLast float64
	for _, s := range second {
		maxG = max(maxG, s.goroutines)
		heap2 += s.heapInuse / float64(len(second))
	}
	for _, s := range last {
		maxGLast = max(maxGLast, s.goroutines)
		heapLast += s.heapInuse / float64(len(last))
	}
	t.Logf("goroutines: second quarter max %.0f, last quarter max %.0f; heap in use: second quarter mean %.1f MiB, last quarter mean %.1f MiB",
		maxG, maxGLast, heap2/(1<<20), heapLast/(1<<20))
	if maxGLast > maxG*1.2 {
		t.Errorf("goroutines grew: %.0f in the last quarter against at most %.0f in the second", maxGLast, maxG)
	}
	if heapLast > heap2*1.5 {
		t.Errorf("heap in use grew: %.1f MiB on average in the last quarter against %.1f MiB in the second", heapLast/(1<<20), heap2/(1<<20))
	}
}
