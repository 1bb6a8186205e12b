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
	"io"
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
	at         time.Duration
	goroutines float64
	heapInuse  float64
	rss        float64
	// liveHeap is HeapAlloc right after a forced GC: the bytes still reachable, not the garbage
	// heapInuse also counts until the next collection (GOGC).
	liveHeap float64
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

// liveHeap forces a GC in the agent and returns its heap allocated afterwards (runtime.MemStats
// HeapAlloc, printed in the trailer of /debug/pprof/heap?gc=1&debug=1): the live heap.
func liveHeap(ctx context.Context, pprofAddr string) (float64, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+pprofAddr+"/debug/pprof/heap?gc=1&debug=1", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET /debug/pprof/heap: %s", resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "# HeapAlloc = "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("no HeapAlloc in the heap profile's trailer")
}

// saveHeapProfile writes the agent's heap profile, taken after a forced GC, to path (the binary
// format `go tool pprof` reads).
func saveHeapProfile(ctx context.Context, pprofAddr, path string) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+pprofAddr+"/debug/pprof/heap?gc=1", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET /debug/pprof/heap: %s", resp.Status)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// TestSoak runs the agent (a production build, as a process) for KUBEDEVICE_SOAK_DURATION under
// random pod churn, device health flips and plugin restarts (SIGKILL, then started again), samples
// its goroutines and memory, and fails if they grow: the goroutines of the last quarter above the
// second quarter's highest by more than 20 %, or the live heap (after a forced GC, through the
// agent's --pprof-bind-address) of the last quarter on average more than 25 % above the second
// quarter's. Heap in use and RSS are recorded too, not judged: they include garbage awaiting the
// next GC, whose target moves with the live heap. With KUBEDEVICE_SOAK_PROFILES (a directory) it
// saves heap profiles soak-heap-early.pb.gz (an eighth into the run) and soak-heap-late.pb.gz (at
// its end), for `go tool pprof -diff_base early late`. At the end the node must converge as after
// a crash. Run by `make soak`; skipped without the variable.
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
	// The agent samples one allocation per 4 KiB instead of Go's default 512 KiB, so that its heap
	// profiles (a few MiB) resolve a growth of a few hundred KiB. Its child processes (the plugins,
	// started later) inherit the setting too; it costs them nothing that matters here.
	godebug := "memprofilerate=4096"
	if v := os.Getenv("GODEBUG"); v != "" {
		godebug = v + "," + godebug
	}
	t.Setenv("GODEBUG", godebug)
	metrics, pprofAddr := freeAddr(t), freeAddr(t)
	h.agent = h.startAgentBinary("soak-agent", "kubedevice-agent-release", "", metrics, "--pprof-bind-address="+pprofAddr)
	if err := h.agent.waitReady(h.ctx, time.Minute); err != nil {
		t.Fatal(err)
	}

	interval := max(d/60, 5*time.Second)
	var samples []sample
	start := time.Now()
	nextSample, nextFlip, nextPluginRestart, nextCleanup := start, start.Add(2*time.Second), start.Add(45*time.Second), start.Add(10*time.Second)
	steps, flips, pluginRestarts := 0, 0, 0
	profileDir := os.Getenv("KUBEDEVICE_SOAK_PROFILES")
	earlyProfile := profileDir == ""
	profile := func(name string) {
		path := filepath.Join(profileDir, name)
		if err := saveHeapProfile(h.ctx, pprofAddr, path); err != nil {
			t.Fatalf("saving the agent's heap profile: %v", err)
		}
		t.Logf("heap profile (after a GC) saved to %s", path)
	}
	gopherFile := func(i int) string { return filepath.Join(h.dir, "gophers", fmt.Sprintf("gopher-%d", i)) }
	for time.Since(start) < d {
		now := time.Now()
		if now.After(nextSample) {
			s, err := scrape(h.ctx, metrics)
			if err != nil {
				t.Fatalf("scraping the agent's metrics: %v\n%s", err, h.agent.logTail(20))
			}
			if s.liveHeap, err = liveHeap(h.ctx, pprofAddr); err != nil {
				t.Fatalf("reading the agent's live heap: %v\n%s", err, h.agent.logTail(20))
			}
			s.at = time.Since(start)
			samples = append(samples, s)
			t.Logf("soak %6v goroutines %4.0f live heap %6.1f MiB heap in use %6.1f MiB rss %6.1f MiB (steps %d, health flips %d, plugin restarts %d)",
				s.at.Round(time.Second), s.goroutines, s.liveHeap/(1<<20), s.heapInuse/(1<<20), s.rss/(1<<20), steps, flips, pluginRestarts)
			nextSample = nextSample.Add(interval)
			if !earlyProfile && s.at >= d/8 {
				profile("soak-heap-early.pb.gz")
				earlyProfile = true
			}
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
	if profileDir != "" {
		profile("soak-heap-late.pb.gz")
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
		b.WriteString("seconds,goroutines,heap_inuse_bytes,rss_bytes,live_heap_bytes\n")
		for _, s := range samples {
			fmt.Fprintf(&b, "%.0f,%.0f,%.0f,%.0f,%.0f\n", s.at.Seconds(), s.goroutines, s.heapInuse, s.rss, s.liveHeap)
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
	var maxG, maxGLast, live2, liveLast, inuse2, inuseLast float64
	for _, s := range second {
		maxG = max(maxG, s.goroutines)
		live2 += s.liveHeap / float64(len(second))
		inuse2 += s.heapInuse / float64(len(second))
	}
	for _, s := range last {
		maxGLast = max(maxGLast, s.goroutines)
		liveLast += s.liveHeap / float64(len(last))
		inuseLast += s.heapInuse / float64(len(last))
	}
	t.Logf("goroutines: second quarter max %.0f, last quarter max %.0f; live heap: second quarter mean %.1f MiB, last quarter mean %.1f MiB; heap in use (not judged): %.1f MiB, %.1f MiB",
		maxG, maxGLast, live2/(1<<20), liveLast/(1<<20), inuse2/(1<<20), inuseLast/(1<<20))
	if maxGLast > maxG*1.2 {
		t.Errorf("goroutines grew: %.0f in the last quarter against at most %.0f in the second", maxGLast, maxG)
	}
	if liveLast > live2*1.25 {
		t.Errorf("live heap grew: %.1f MiB on average in the last quarter against %.1f MiB in the second", liveLast/(1<<20), live2/(1<<20))
	}
}
