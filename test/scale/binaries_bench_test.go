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
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
	"github.com/kubedevice/kubedevice/internal/nodeagent/dptest"
	"github.com/kubedevice/kubedevice/internal/testutil"
)

// The outside-in benchmark's workload: a 1 000- and a 10 000-device plugin registered on a live
// node, then pods of 10 devices each.
const (
	smallResource     corev1.ResourceName = "example.com/gopher-small"
	bigResource       corev1.ResourceName = "example.com/gopher-big"
	smallDevices                          = 1_000
	bigDevices                            = 10_000
	outsidePods                           = 100
	outsidePodDevices                     = 10
)

// The agent's memory budget (issue 24), on what the agent itself holds rather than the RSS, whose
// file-backed part is the binary's pages (shared with the page cache, reclaimable, and moving
// with it): anonymous memory (RssAnon) at most 12 MiB + 1 KiB per device, and the live heap after
// a collection at most 10 MiB + 0.6 KiB per device. BenchmarkBinaries asserts both with 11 000
// devices.
const (
	budgetAnonBaseMiB      = 12
	budgetAnonKiBPerDevice = 1
	budgetLiveBaseMiB      = 10
	budgetLiveKiBPerDevice = 0.6
)

// BenchmarkBinaries runs the built kubedevice-agent and kubedevice-controller binaries, as the
// agent's and the controller's service accounts, against the real API server: a node, its agent
// and the controller; then a 1 000-device plugin registers, then a 10 000-device one, then 100
// pods of 10 devices each are created bound to the node. Every request of each binary goes
// through a counting proxy of its own (the proxy adds the identity; the binaries keep their own
// client rate limits). It reports, per step, the time until a watch sees the result, the writes
// of each binary until both are quiet, the Node patches, and the agent's memory idle and with
// 11 000 devices: RSS (anonymous and file-backed), the Go heap in use, and the live heap after a
// collection; with 11 000 devices, the anonymous memory and the live heap must be within budget.
func BenchmarkBinaries(b *testing.B) {
	bins, err := buildBinaries(b)
	if err != nil {
		b.Fatal(err)
	}
	for range b.N {
		b.StopTimer()
		r, err := startBinariesRun(b, bins)
		if err != nil {
			b.Fatal(err)
		}
		err = r.run(b)
		r.stop(b)
		if err != nil {
			b.Fatal(err)
		}
	}
}

var (
	binariesOnce sync.Once
	binariesDir  string
	binariesErr  error
)

// buildBinaries builds the agent and the controller once per test binary, as the image does;
// KUBEDEVICE_SCALE_BINARIES names a directory holding them instead (another build to compare).
func buildBinaries(b *testing.B) (string, error) {
	binariesOnce.Do(func() {
		if dir := os.Getenv("KUBEDEVICE_SCALE_BINARIES"); dir != "" {
			binariesDir = dir
			return
		}
		dir, err := os.MkdirTemp("", "kd-bin")
		if err != nil {
			binariesErr = err
			return
		}
		start := time.Now()
		// As the image builds them (Makefile, image-binaries): the binary's own pages are most of
		// an idle agent's resident set.
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", dir+"/", "./cmd/kubedevice-agent", "./cmd/kubedevice-controller")
		cmd.Dir = testutil.RepoRoot()
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			binariesErr = fmt.Errorf("building the binaries: %w\n%s", err, out)
			return
		}
		b.Logf("built the agent and the controller in %s", time.Since(start).Round(time.Millisecond))
		binariesDir = dir
	})
	return binariesDir, binariesErr
}

// binariesRun is one run: its own control plane, node, agent and controller.
type binariesRun struct {
	env   *agentEnv
	dir   string
	node  string
	agent *process
	ctrl  *process
	// agentAPI and ctrlAPI count each binary's requests.
	agentAPI, ctrlAPI *countingProxy
	agentMetrics      string
	agentPprof        string
	plugins           []*dptest.Plugin
}

func startBinariesRun(b *testing.B, bins string) (_ *binariesRun, err error) {
	testEnv, err := testutil.NewEnvironment()
	if err != nil {
		return nil, err
	}
	cfg, err := testEnv.Start()
	if err != nil {
		return nil, fmt.Errorf("starting envtest: %w", err)
	}
	r := &binariesRun{env: &agentEnv{testEnv: testEnv, cfg: cfg}, node: "outside-node"}
	defer func() {
		if err != nil {
			r.stop(b)
		}
	}()
	admin := rest.CopyConfig(cfg)
	admin.QPS, admin.Burst = -1, 0
	if r.env.admin, err = client.NewWithWatch(admin, client.Options{Scheme: testEnv.Scheme}); err != nil {
		return r, err
	}
	ctx := context.Background()
	if err := installAsDeployed(ctx, r.env.admin,
		"config/rbac/agent/role.yaml",
		"config/rbac/agent_service_account.yaml",
		"config/rbac/agent_role_binding.yaml",
		"config/admission/agent_node_restriction.yaml",
		"config/rbac/controller/role.yaml",
		"config/rbac/controller_service_account.yaml",
		"config/rbac/controller_role_binding.yaml",
		"config/admission/controller_node_status.yaml",
	); err != nil {
		return r, err
	}
	if err := r.env.admin.Create(ctx, testutil.MakeNode(r.node).Obj()); err != nil {
		return r, err
	}
	if r.dir, err = os.MkdirTemp("", "kd"); err != nil {
		return r, err
	}
	groups := []string{"system:serviceaccounts", "system:serviceaccounts:" + agentNamespace, "system:authenticated"}
	if r.ctrlAPI, err = startCountingProxy(cfg, rest.ImpersonationConfig{UserName: controllerUser, Groups: groups}); err != nil {
		return r, err
	}
	if r.agentAPI, err = startCountingProxy(cfg, rest.ImpersonationConfig{UserName: agentUser, Groups: groups,
		Extra: map[string][]string{nodeNameExtraKey: {r.node}}}); err != nil {
		return r, err
	}
	ctrlHealth, err := freeAddr()
	if err != nil {
		return r, err
	}
	r.ctrl, err = startProcess(filepath.Join(bins, "kubedevice-controller"), filepath.Join(r.dir, "controller.log"),
		"--kubeconfig="+r.ctrlAPI.kubeconfig(r.dir, "controller"),
		"--leader-elect=false", "--agent-namespace="+agentNamespace,
		"--metrics-bind-address=0", "--health-probe-bind-address="+ctrlHealth)
	if err != nil {
		return r, err
	}
	agentHealth, err := freeAddr()
	if err != nil {
		return r, err
	}
	if r.agentMetrics, err = freeAddr(); err != nil {
		return r, err
	}
	if r.agentPprof, err = freeAddr(); err != nil {
		return r, err
	}
	agentArgs := []string{"--kubeconfig=" + r.agentAPI.kubeconfig(r.dir, "agent"),
		"--node-name=" + r.node, "--namespace=" + agentNamespace,
		"--plugin-dir=" + r.dir, "--state-dir=" + filepath.Join(r.dir, "state"),
		"--plugins-registry-dir=", "--pod-resources-socket=", "--runtime-injection=none",
		"--metrics-bind-address=" + r.agentMetrics, "--metrics-secure=false",
		"--health-probe-bind-address=" + agentHealth,
		// liveHeap forces a collection through the heap profile.
		"--pprof-bind-address=" + r.agentPprof}
	r.agent, err = startProcess(filepath.Join(bins, "kubedevice-agent"), filepath.Join(r.dir, "agent.log"), agentArgs...)
	if err != nil {
		return r, err
	}
	for _, h := range []struct {
		p    *process
		addr string
	}{{r.ctrl, ctrlHealth}, {r.agent, agentHealth}} {
		if err := r.waitFor(func() bool { return probeOK("http://" + h.addr + "/readyz") }); err != nil {
			return r, fmt.Errorf("%s not ready: %w\n%s", h.p.name, err, h.p.tail())
		}
	}
	return r, nil
}

func (r *binariesRun) stop(b *testing.B) {
	for _, p := range r.plugins {
		p.Stop()
	}
	for _, p := range []*process{r.agent, r.ctrl} {
		if p != nil {
			if err := p.stop(); err != nil {
				b.Errorf("%s: %v", p.name, err)
			}
		}
	}
	for _, p := range []*countingProxy{r.agentAPI, r.ctrlAPI} {
		if p != nil {
			p.stop()
		}
	}
	if r.env.testEnv != nil {
		r.env.stop()
	}
	if r.dir != "" {
		if b.Failed() {
			b.Logf("logs kept in %s", r.dir)
		} else {
			_ = os.RemoveAll(r.dir)
		}
	}
}

// run is the workload of one run; it reports as it goes.
func (r *binariesRun) run(b *testing.B) error {
	ctx := context.Background()
	if err := r.settle(); err != nil {
		return err
	}
	idle, err := r.memory()
	if err != nil {
		return err
	}
	b.Logf("agent idle: %s", idle)
	if idle.liveMiB, err = r.liveHeap(b, "idle"); err != nil {
		return err
	}
	reportMemory(b, idle, "idle")
	cpuIdle, err := r.agentCPU()
	if err != nil {
		return err
	}

	for _, step := range []struct {
		resource corev1.ResourceName
		devices  int
		label    string
	}{{smallResource, smallDevices, "1k"}, {bigResource, bigDevices, "10k"}} {
		elapsed, patches, agentReqs, ctrlReqs, err := r.register(ctx, b, step.resource, step.devices)
		if err != nil {
			return err
		}
		shards := (step.devices + kdv1alpha1.MaxDevicesPerShard - 1) / kdv1alpha1.MaxDevicesPerShard
		b.ReportMetric(elapsed.Seconds(), "s/register-"+step.label)
		b.ReportMetric(float64(patches), "node-patches-"+step.label)
		b.ReportMetric(float64(agentReqs.writes()), "agent-writes-"+step.label)
		b.ReportMetric(float64(ctrlReqs.writes()), "ctrl-writes-"+step.label)
		b.Logf("register %d devices: %d shards visible after %s; Node patched %d times; agent requests: %s; controller requests: %s",
			step.devices, shards, elapsed.Round(time.Millisecond), patches, agentReqs, ctrlReqs)
	}
	loaded, err := r.memory()
	if err != nil {
		return err
	}
	b.Logf("agent with %d devices: %s", smallDevices+bigDevices, loaded)
	cpuLoaded, err := r.agentCPU()
	if err != nil {
		return err
	}
	// The agent's CPU while 11 000 devices registered: what its garbage collector costs shows here.
	b.ReportMetric(cpuLoaded-cpuIdle, "agent-cpu-s-register")
	if loaded.liveMiB, err = r.liveHeap(b, "11k"); err != nil {
		return err
	}
	reportMemory(b, loaded, "11k")
	checkMemoryBudget(b, loaded, smallDevices+bigDevices)

	elapsed, agentReqs, ctrlReqs, err := r.allocate(ctx, b, outsidePods)
	if err != nil {
		return err
	}
	b.ReportMetric(elapsed.Seconds(), "s/allocate-100x10")
	b.ReportMetric(float64(agentReqs.writes())/outsidePods, "agent-writes/alloc")
	b.Logf("allocate %d pods × %d devices: all Allocated after %s; agent requests: %s (%.2f writes per allocation); controller requests: %s",
		outsidePods, outsidePodDevices, elapsed.Round(time.Millisecond), agentReqs, float64(agentReqs.writes())/outsidePods, ctrlReqs)
	after, err := r.memory()
	if err != nil {
		return err
	}
	b.Logf("agent after the allocations: %s", after)

	// A lone allocation, once everything is quiet: no burst shares the NodeDevice's coalesced
	// write, so this is the budget's worst case (2: the DeviceAllocation, created with its
	// status, and the NodeDevice's holders).
	elapsed, agentReqs, ctrlReqs, err = r.allocate(ctx, b, 1)
	if err != nil {
		return err
	}
	b.ReportMetric(float64(agentReqs.writes()), "agent-writes/lone-alloc")
	b.Logf("allocate 1 pod × %d devices alone: Allocated after %s; agent requests: %s (%d writes); controller requests: %s",
		outsidePodDevices, elapsed.Round(time.Millisecond), agentReqs, agentReqs.writes(), ctrlReqs)
	return nil
}

// register registers a plugin of devices devices for resource and waits until a watch sees all
// its shards with their capacities and the Node publishing them; it returns that time, and once
// both binaries are quiet, the Node patches and both binaries' requests.
func (r *binariesRun) register(ctx context.Context, b *testing.B, resource corev1.ResourceName, devices int) (time.Duration, int, requestCounts, requestCounts, error) {
	p, err := r.plugin(resource, devices)
	if err != nil {
		return 0, 0, nil, nil, err
	}
	n := &benchNode{e: r.env, name: r.node}
	sw, err := n.watchShards(ctx, resource)
	if err != nil {
		return 0, 0, nil, nil, err
	}
	defer sw.stop()
	agentBefore, ctrlBefore := r.agentAPI.counter.snapshot(), r.ctrlAPI.counter.snapshot()
	r.agentAPI.latency()
	cpuBefore, err := r.apiServerCPU(ctx)
	if err != nil {
		return 0, 0, nil, nil, err
	}
	if devices == bigDevices {
		stopProfile := r.apiServerProfile(ctx, b, "register-10k")
		defer stopProfile()
	}
	b.StartTimer()
	start := time.Now()
	err = p.Register(ctx, filepath.Join(r.dir, "kubelet.sock"))
	if err == nil {
		err = r.waitFor(func() bool { return sw.complete(r.node, resource, devices) })
	}
	elapsed := time.Since(start)
	b.StopTimer()
	b.Logf("register %d devices: the agent's requests took %s on average", devices, r.agentAPI.latency())
	if err != nil {
		return 0, 0, nil, nil, fmt.Errorf("registering %d devices of %s: %w (%d shards seen)", devices, resource, err, sw.count())
	}
	if err := r.waitFor(func() bool { return r.nodeCapacity(ctx, resource) == int64(devices) }); err != nil {
		return 0, 0, nil, nil, fmt.Errorf("the Node never published %d %s: %w", devices, resource, err)
	}
	if err := r.settle(); err != nil {
		return 0, 0, nil, nil, err
	}
	agentReqs := requestCounts(r.agentAPI.counter.snapshot()).since(agentBefore)
	ctrlReqs := requestCounts(r.ctrlAPI.counter.snapshot()).since(ctrlBefore)
	cpuAfter, err := r.apiServerCPU(ctx)
	if err != nil {
		return 0, 0, nil, nil, err
	}
	// Both binaries are quiet now: what the API server spent since Register is the registration's
	// cost to it (the test's own watches and lists are a small, fixed part of it).
	cpu := cpuAfter - cpuBefore
	b.ReportMetric(cpu, fmt.Sprintf("apiserver-cpu-s-%dk", devices/1000))
	b.Logf("register %d devices: the API server spent %.2f s of CPU", devices, cpu)
	return elapsed, ctrlReqs["PATCH nodes/status"], agentReqs, ctrlReqs, nil
}

// allocate creates pods pods bound to the node, in a namespace of their own, each asking for outsidePodDevices devices
// of bigResource, and waits until every DeviceAllocation says Allocated; it returns that time and,
// once both binaries are quiet, their requests.
func (r *binariesRun) allocate(ctx context.Context, b *testing.B, pods int) (time.Duration, requestCounts, requestCounts, error) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "outside-"}}
	if err := r.env.admin.Create(ctx, ns); err != nil {
		return 0, nil, nil, err
	}
	agentBefore, ctrlBefore := r.agentAPI.counter.snapshot(), r.ctrlAPI.counter.snapshot()
	r.agentAPI.latency()
	b.StartTimer()
	start := time.Now()
	err := forEach(ctx, pods, func(ctx context.Context, i int) error {
		return r.env.admin.Create(ctx, testutil.MakePod(fmt.Sprintf("pod-%d", i), ns.Name).Node(r.node).Request(bigResource, outsidePodDevices).Obj())
	})
	if err == nil {
		err = r.waitFor(func() bool {
			list := &kdv1alpha1.DeviceAllocationList{}
			if r.env.admin.List(ctx, list, client.InNamespace(ns.Name)) != nil {
				return false
			}
			done := 0
			for _, da := range list.Items {
				if meta.IsStatusConditionTrue(da.Status.Conditions, kdv1alpha1.DeviceAllocationAllocated) {
					done++
				}
			}
			return done == pods
		})
	}
	elapsed := time.Since(start)
	b.StopTimer()
	b.Logf("allocate: the agent's requests took %s on average", r.agentAPI.latency())
	if err != nil {
		return 0, nil, nil, fmt.Errorf("allocating %d pods: %w", pods, err)
	}
	if err := r.settle(); err != nil {
		return 0, nil, nil, err
	}
	return elapsed, requestCounts(r.agentAPI.counter.snapshot()).since(agentBefore),
		requestCounts(r.ctrlAPI.counter.snapshot()).since(ctrlBefore), nil
}

// plugin starts a stub plugin of devices devices for resource in the agent's plugin directory.
func (r *binariesRun) plugin(resource corev1.ResourceName, devices int) (*dptest.Plugin, error) {
	name := strings.NewReplacer("/", "-", ".", "-").Replace(string(resource))
	devs := make([]*pluginapi.Device, devices)
	for i := range devs {
		devs[i] = dptest.Device(fmt.Sprintf("gopher-%d", i), pluginapi.Healthy)
	}
	p := dptest.New(filepath.Join(r.dir, name+".sock"), string(resource), devs)
	p.SetAllocateFunc(envAllocator)
	if err := p.Start(); err != nil {
		return nil, err
	}
	r.plugins = append(r.plugins, p)
	return p, nil
}

// nodeCapacity is the Node's published capacity of resource, -1 when unknown.
func (r *binariesRun) nodeCapacity(ctx context.Context, resource corev1.ResourceName) int64 {
	node := &corev1.Node{}
	if err := r.env.admin.Get(ctx, client.ObjectKey{Name: r.node}, node); err != nil {
		return -1
	}
	q, ok := node.Status.Capacity[resource]
	if !ok {
		return -1
	}
	return q.Value()
}

// settle waits until neither binary has written anything for quiet.
func (r *binariesRun) settle() error {
	last, since := -1, time.Now()
	return r.waitFor(func() bool {
		w := requestCounts(r.agentAPI.counter.snapshot()).writes() + requestCounts(r.ctrlAPI.counter.snapshot()).writes()
		if w != last {
			last, since = w, time.Now()
		}
		return time.Since(since) >= quiet
	})
}

// apiServerCPU returns the CPU seconds the API server process has used (its
// process_cpu_seconds_total), read as the administrator.
func (r *binariesRun) apiServerCPU(ctx context.Context) (float64, error) {
	body, err := r.apiServerGet(ctx, "/metrics")
	if err != nil {
		return 0, err
	}
	defer func() { _ = body.Close() }()
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 0, 1<<16), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "process_cpu_seconds_total "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("reading the API server's metrics: %w", err)
	}
	return 0, errors.New("the API server's metrics have no process_cpu_seconds_total")
}

// apiServerProfile records a CPU profile of the API server for apiServerProfileSeconds into
// $KUBEDEVICE_SCALE_APISERVER_PROFILE/apiserver-cpu-<name>.pb.gz (nothing when unset: `go tool
// pprof bin/k8s/kube-apiserver <file>` reads it); the function it returns waits for it.
func (r *binariesRun) apiServerProfile(ctx context.Context, b *testing.B, name string) func() {
	dir := os.Getenv("KUBEDEVICE_SCALE_APISERVER_PROFILE")
	if dir == "" {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := r.saveAPIServerProfile(ctx, filepath.Join(dir, "apiserver-cpu-"+name+".pb.gz")); err != nil {
			b.Errorf("profiling the API server: %v", err)
		}
	}()
	return func() { <-done }
}

const apiServerProfileSeconds = 8

func (r *binariesRun) saveAPIServerProfile(ctx context.Context, path string) error {
	body, err := r.apiServerGet(ctx, fmt.Sprintf("/debug/pprof/profile?seconds=%d", apiServerProfileSeconds))
	if err != nil {
		return err
	}
	defer func() { _ = body.Close() }()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, body); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// apiServerGet GETs path from the API server as the administrator.
func (r *binariesRun) apiServerGet(ctx context.Context, path string) (io.ReadCloser, error) {
	hc, err := rest.HTTPClientFor(r.env.cfg)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(r.env.cfg.Host, "/")+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		_ = resp.Body.Close()
		return nil, fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	return resp.Body, nil
}

// waitFor is waitFor that also fails when a binary stops on its own.
func (r *binariesRun) waitFor(cond func() bool) error {
	var stopped error
	err := waitFor(func() bool {
		for _, p := range []*process{r.agent, r.ctrl} {
			if p != nil {
				if stopped = p.exited(); stopped != nil {
					return true
				}
			}
		}
		return cond()
	})
	if stopped != nil {
		return stopped
	}
	return err
}

// agentMemory is the agent's resident set, its Go heap in use, and what else the kernel and the
// Go runtime say of it.
type agentMemory struct {
	rssMiB, heapMiB float64
	// liveMiB is the live heap after a collection the benchmark forced (liveHeap).
	liveMiB float64
	// anonMiB is the resident set the process allocated (RssAnon: Go heap, stacks, the runtime's
	// own), fileMiB the binary's pages it touched (RssFile).
	anonMiB, fileMiB float64
	// detail is the resident set by kind (anonymous, file: the binary's pages) and the Go
	// runtime's own accounting.
	detail []string
}

func (m agentMemory) String() string {
	return fmt.Sprintf("RSS %.1f MiB, Go heap in use %.1f MiB (%s)", m.rssMiB, m.heapMiB, strings.Join(m.detail, ", "))
}

// memory reads the agent's VmRSS from /proc and go_memstats_heap_inuse_bytes from its metrics.
func (r *binariesRun) memory() (agentMemory, error) {
	var m agentMemory
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", r.agent.cmd.Process.Pid))
	if err != nil {
		return m, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		for k, to := range map[string]*float64{"RssAnon:": &m.anonMiB, "RssFile:": &m.fileMiB} {
			if rest, ok := strings.CutPrefix(s.Text(), k); ok {
				m.detail = append(m.detail, k+" "+strings.TrimSpace(rest))
				kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
				if err != nil {
					return m, fmt.Errorf("reading %s %q: %w", k, rest, err)
				}
				*to = kb / 1024
			}
		}
		if rest, ok := strings.CutPrefix(s.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			if err != nil {
				return m, fmt.Errorf("reading VmRSS %q: %w", rest, err)
			}
			m.rssMiB = kb / 1024
		}
	}
	resp, err := http.Get("http://" + r.agentMetrics + "/metrics")
	if err != nil {
		return m, err
	}
	defer resp.Body.Close()
	s = bufio.NewScanner(resp.Body)
	for s.Scan() {
		for _, k := range []string{"go_memstats_sys_bytes ", "go_memstats_heap_idle_bytes ", "go_memstats_heap_released_bytes ",
			"go_memstats_stack_inuse_bytes ", "go_memstats_heap_alloc_bytes ", "go_goroutines "} {
			if rest, ok := strings.CutPrefix(s.Text(), k); ok {
				if v, err := strconv.ParseFloat(rest, 64); err == nil && k != "go_goroutines " {
					rest = fmt.Sprintf("%.1f MiB", v/(1<<20))
				}
				m.detail = append(m.detail, strings.TrimSpace(k)+" "+rest)
			}
		}
		if rest, ok := strings.CutPrefix(s.Text(), "go_memstats_heap_inuse_bytes "); ok {
			v, err := strconv.ParseFloat(rest, 64)
			if err != nil {
				return m, err
			}
			m.heapMiB = v / (1 << 20)
		}
	}
	return m, s.Err()
}

// agentCPU is the CPU time the agent has used, user and system, from /proc (clock ticks of
// 1/100 s, USER_HZ on Linux).
func (r *binariesRun) agentCPU() (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", r.agent.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	// The fields after the command name, which is in parentheses and may hold spaces: utime and
	// stime are the 12th and 13th.
	_, after, ok := strings.Cut(string(b), ") ")
	f := strings.Fields(after)
	if !ok || len(f) < 13 {
		return 0, fmt.Errorf("reading /proc/%d/stat: %q", r.agent.cmd.Process.Pid, b)
	}
	var ticks float64
	for _, s := range f[11:13] {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return 0, fmt.Errorf("reading /proc/%d/stat: %w", r.agent.cmd.Process.Pid, err)
		}
		ticks += v
	}
	return ticks / 100, nil
}

// reportMemory reports m as the benchmark's MiB-*-<label> metrics.
func reportMemory(b *testing.B, m agentMemory, label string) {
	b.ReportMetric(m.rssMiB, "MiB-rss-"+label)
	b.ReportMetric(m.anonMiB, "MiB-anon-"+label)
	b.ReportMetric(m.fileMiB, "MiB-file-"+label)
	b.ReportMetric(m.heapMiB, "MiB-heap-"+label)
	b.ReportMetric(m.liveMiB, "MiB-live-"+label)
}

// checkMemoryBudget fails the benchmark when the agent with devices devices holds more anonymous
// memory or live heap than the budget allows.
func checkMemoryBudget(b *testing.B, m agentMemory, devices int) {
	anon := budgetAnonBaseMiB + float64(devices)*budgetAnonKiBPerDevice/1024
	live := budgetLiveBaseMiB + float64(devices)*budgetLiveKiBPerDevice/1024
	if m.anonMiB > anon {
		b.Errorf("the agent with %d devices holds %.1f MiB of anonymous memory (RssAnon), over the budget of %.1f MiB (%d MiB + %g KiB per device)",
			devices, m.anonMiB, anon, budgetAnonBaseMiB, float64(budgetAnonKiBPerDevice))
	}
	if m.liveMiB > live {
		b.Errorf("the agent with %d devices has a live heap of %.1f MiB after a collection, over the budget of %.1f MiB (%d MiB + %g KiB per device)",
			devices, m.liveMiB, live, budgetLiveBaseMiB, budgetLiveKiBPerDevice)
	}
}

// liveHeap forces a collection in the agent and returns, in MiB, the heap it found live: the
// runtime's /gc/heap/live:bytes, which the agent exports as go_gc_heap_live_bytes
// (controller-runtime registers client_golang's Go collector with every runtime metric). The
// collection is the one the agent's heap profile runs with gc=1, on the --pprof-bind-address the
// agent already has for measuring it; go_memstats_heap_alloc_bytes would also count what the
// scrape reading it allocates (with 11 000 devices, about 5 MB of kubedevice_device_info series).
// With KUBEDEVICE_SCALE_PPROF the profile is saved as agent-heap-<name>.pb.gz in that directory.
func (r *binariesRun) liveHeap(b *testing.B, name string) (float64, error) {
	var err error
	if dir := os.Getenv("KUBEDEVICE_SCALE_PPROF"); dir == "" {
		err = r.saveHeapProfile(io.Discard)
	} else {
		f, cerr := os.Create(filepath.Join(dir, "agent-heap-"+name+".pb.gz"))
		if cerr != nil {
			return 0, cerr
		}
		err = r.saveHeapProfile(f)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		return 0, err
	}
	live, err := r.agentMetric("go_gc_heap_live_bytes")
	if err != nil {
		return 0, err
	}
	m, err := r.memory()
	if err != nil {
		return 0, err
	}
	b.Logf("agent (%s) right after a GC: live heap %.1f MiB; %s", name, live/(1<<20), m)
	return live / (1 << 20), nil
}

// saveHeapProfile writes the agent's heap profile, taken after a collection, to out.
func (r *binariesRun) saveHeapProfile(out io.Writer) error {
	resp, err := http.Get("http://" + r.agentPprof + "/debug/pprof/heap?gc=1")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("the agent's heap profile: %s", resp.Status)
	}
	_, err = io.Copy(out, resp.Body)
	return err
}

// agentMetric is the value of the unlabelled metric name on the agent's /metrics.
func (r *binariesRun) agentMetric(name string) (float64, error) {
	resp, err := http.Get("http://" + r.agentMetrics + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	s := bufio.NewScanner(resp.Body)
	s.Buffer(make([]byte, 0, 1<<16), 1<<20)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	if err := s.Err(); err != nil {
		return 0, fmt.Errorf("reading the agent's metrics: %w", err)
	}
	return 0, fmt.Errorf("the agent's metrics have no %s", name)
}

// countingProxy is a plain-HTTP front of the API server for one binary: it forwards each request
// as the given identity (the admin's client certificate, impersonating) and counts it.
type countingProxy struct {
	counter *apiCounter
	srv     *http.Server
	url     string

	mu sync.Mutex
	// busy is the time spent in requests other than watches, summed, and their number.
	busy     time.Duration
	requests int
}

// latency returns the mean duration of the requests other than watches since the last call.
func (p *countingProxy) latency() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	defer func() { p.busy, p.requests = 0, 0 }()
	if p.requests == 0 {
		return 0
	}
	return p.busy / time.Duration(p.requests)
}

func startCountingProxy(cfg *rest.Config, identity rest.ImpersonationConfig) (*countingProxy, error) {
	c := rest.CopyConfig(cfg)
	c.Impersonate = identity
	rt, err := rest.TransportFor(c)
	if err != nil {
		return nil, err
	}
	target, err := url.Parse(cfg.Host)
	if err != nil {
		return nil, err
	}
	if target.Scheme == "" {
		target, err = url.Parse("https://" + cfg.Host)
		if err != nil {
			return nil, err
		}
	}
	p := &countingProxy{counter: &apiCounter{counts: map[string]int{}}}
	rp := httputil.NewSingleHostReverseProxy(target)
	timed := roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		start := time.Now()
		resp, err := rt.RoundTrip(req)
		if req.URL.Query().Get("watch") != "true" {
			p.mu.Lock()
			p.busy += time.Since(start)
			p.requests++
			p.mu.Unlock()
		}
		return resp, err
	})
	rp.Transport = p.counter.wrap(timed)
	rp.FlushInterval = -1
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p.url = "http://" + ln.Addr().String()
	p.srv = &http.Server{Handler: rp, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

// kubeconfig writes a kubeconfig pointing at the proxy into dir and returns its path.
func (p *countingProxy) kubeconfig(dir, name string) string {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["proxy"] = &clientcmdapi.Cluster{Server: p.url}
	kc.AuthInfos["proxy"] = &clientcmdapi.AuthInfo{}
	kc.Contexts["proxy"] = &clientcmdapi.Context{Cluster: "proxy", AuthInfo: "proxy"}
	kc.CurrentContext = "proxy"
	path := filepath.Join(dir, name+".kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		panic(err)
	}
	return path
}

func (p *countingProxy) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = p.srv.Shutdown(ctx)
	_ = p.srv.Close()
}

// process is a binary running in the background, logging to a file.
type process struct {
	name string
	log  string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

func startProcess(path, logPath string, args ...string) (*process, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("starting %s: %w", path, err)
	}
	p := &process{name: filepath.Base(path), log: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

// exited is not nil once the process has ended.
func (p *process) exited() error {
	select {
	case <-p.done:
		return fmt.Errorf("%s stopped: %w\n%s", p.name, p.err, p.tail())
	default:
		return nil
	}
}

// stop sends SIGTERM and waits for the process, killing it after 30 s.
func (p *process) stop() error {
	select {
	case <-p.done:
		return nil
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		return errors.New("did not stop within 30 s of SIGTERM")
	}
}

// tail is the end of the process's log.
func (p *process) tail() string {
	data, err := os.ReadFile(p.log)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-20):], "\n")
}

// freeAddr is a loopback address with a port nothing listens on now.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// probeOK reports whether GET url answers 200.
func probeOK(url string) bool {
	resp, err := http.Get(url) //nolint:gosec,noctx // a loopback health probe of a process we started
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}
