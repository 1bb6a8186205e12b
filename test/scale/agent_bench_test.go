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
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
	"github.com/kubedevice/kubedevice/internal/agent"
	"github.com/kubedevice/kubedevice/internal/agent/dra"
	"github.com/kubedevice/kubedevice/internal/indexer"
	"github.com/kubedevice/kubedevice/internal/nodeagent"
	"github.com/kubedevice/kubedevice/internal/nodeagent/dptest"
	"github.com/kubedevice/kubedevice/internal/testutil"
)

const (
	// agentUser is the agent's service account, which the agents run as.
	agentUser = "system:serviceaccount:kubedevice-system:kubedevice-agent"
	// nodeNameExtraKey is the bound service account token's node claim, which the agent admission
	// policy checks.
	nodeNameExtraKey = "authentication.kubernetes.io/node-name"
	// agentQPS and agentBurst are the client rate limits of cmd/kubedevice-agent.
	agentQPS   = 20
	agentBurst = 200
	// agentDevices is the device count of the agent benchmarks' plugin: the 10 k devices per node
	// the agent must support, 79 NodeDevice shards.
	agentDevices = 10_000
	// rejectedDevices is the device count the agent must reject.
	rejectedDevices = 100_000
	// devicesPerPod is what each pod of the restart benchmark requests.
	devicesPerPod = 10
	// agentQuiet is how long an agent must write nothing to NodeDevices and DeviceAllocations to
	// count as settled: longer than a NodeDevice's write interval and settle time together.
	agentQuiet = 2 * time.Second
)

// agentEnv is the control plane of the agent benchmarks: the agent's RBAC and its node
// admission policy, no fixture cluster. The first agent benchmark starts it.
type agentEnv struct {
	testEnv *envtest.Environment
	cfg     *rest.Config
	// admin reads and writes as a cluster administrator (unthrottled).
	admin client.WithWatch
	// pods is the restart benchmark's pod count (KUBEDEVICE_SCALE_AGENT_PODS, default 990: 9 900
	// of the 10 000 devices held, the rest for the pod allocated after the restart).
	pods int
}

var (
	agentOnce   sync.Once
	agentShared *agentEnv
	agentErr    error
	agentNodes  atomic.Int64
)

func getAgentEnv(b *testing.B) *agentEnv {
	b.Helper()
	agentOnce.Do(func() { agentShared, agentErr = startAgentEnv(b) })
	if agentErr != nil {
		b.Fatalf("starting the agent scale environment: %v", agentErr)
	}
	return agentShared
}

func startAgentEnv(b *testing.B) (*agentEnv, error) {
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(zapLevel())))
	pods := 990
	if s := os.Getenv("KUBEDEVICE_SCALE_AGENT_PODS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 || n*devicesPerPod >= agentDevices {
			return nil, fmt.Errorf("KUBEDEVICE_SCALE_AGENT_PODS=%q: want a positive integer below %d", s, agentDevices/devicesPerPod)
		}
		pods = n
	}
	testEnv, err := testutil.NewEnvironment()
	if err != nil {
		return nil, err
	}
	start := time.Now()
	cfg, err := testEnv.Start()
	if err != nil {
		return nil, fmt.Errorf("starting envtest: %w", err)
	}
	e := &agentEnv{testEnv: testEnv, cfg: cfg, pods: pods}
	fail := func(err error) (*agentEnv, error) {
		e.stop()
		return nil, err
	}
	b.Logf("control plane up in %s", time.Since(start).Round(time.Millisecond))
	admin := rest.CopyConfig(cfg)
	admin.QPS, admin.Burst = -1, 0
	if e.admin, err = client.NewWithWatch(admin, client.Options{Scheme: testEnv.Scheme}); err != nil {
		return fail(fmt.Errorf("creating the admin client: %w", err))
	}
	ctx := context.Background()
	// The agents run as their service account with only the RBAC of config/rbac, and the
	// admission policy holds each to its own node's objects, as deployed.
	if err := installAsDeployed(ctx, e.admin,
		"config/rbac/agent/role.yaml",
		"config/rbac/agent_service_account.yaml",
		"config/rbac/agent_role_binding.yaml",
		"config/admission/agent_node_restriction.yaml",
	); err != nil {
		return fail(err)
	}
	return e, nil
}

func (e *agentEnv) stop() {
	if err := e.testEnv.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "stopping envtest: %v\n", err)
	}
}

// benchNode is one node with its agent, as test/integration/agent runs them: a Node object, a
// short directory for the sockets and the checkpoint, and the agent in-process with the real
// device manager core, as the agent's service account with the node's token claim and the
// client rate limits of cmd/kubedevice-agent. It can be stopped and started again on the same
// directory, as a restarted DaemonSet pod.
type benchNode struct {
	e    *agentEnv
	name string
	dir  string
	// dra are the resources the agent serves through DRA (none: node capacity only).
	dra dra.Resources
	// offline fails every request of the agent to the API server (kill).
	offline atomic.Bool

	// counter counts the running agent's requests; a start replaces it.
	counter *apiCounter
	// registry holds the running core's metrics.
	registry *prometheus.Registry
	dm       *nodeagent.Manager
	agent    *agent.Agent
	cancel   context.CancelFunc
	done     chan error
}

// newBenchNode creates a Node and its directory; the agent is not started.
func (e *agentEnv) newBenchNode(ctx context.Context) (*benchNode, error) {
	dir, err := os.MkdirTemp("", "kd")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "boot_id"), []byte("3d1c6a3e-6a5f-4f7e-9d2c-1b2a3c4d5e6f\n"), 0o600); err != nil {
		return nil, err
	}
	n := &benchNode{e: e, name: fmt.Sprintf("agent-node-%d", agentNodes.Add(1)), dir: dir}
	if err := e.admin.Create(ctx, testutil.MakeNode(n.name).Obj()); err != nil {
		return nil, fmt.Errorf("creating node %s: %w", n.name, err)
	}
	return n, nil
}

// start runs a new agent on the node's directory with the given client rate limits; it returns
// without waiting for the agent to be ready.
func (n *benchNode) start(qps float32, burst int) error {
	if n.cancel != nil {
		return errors.New("the agent is running")
	}
	core := nodeagent.DefaultConfig()
	core.PluginDir, core.StateDir = n.dir, n.dir
	core.PluginsRegistryDir = ""
	core.BootIDPath = filepath.Join(n.dir, "boot_id")
	n.registry = prometheus.NewRegistry()
	core.Registerer = n.registry
	opts := agent.Options{NodeName: n.name, Namespace: agentNamespace}
	if n.dra.Any() {
		core.ServedByDRA, opts.DRAResources = n.dra.Match, n.dra
		opts.DRA.KubeletPluginsDir = filepath.Join(n.dir, "plugins")
		opts.DRA.KubeletRegistryDir = filepath.Join(n.dir, "plugins_registry")
		opts.DRA.CDIDir = filepath.Join(n.dir, "cdi")
	}
	dm, err := nodeagent.New(core)
	if err != nil {
		return err
	}
	cfg := rest.CopyConfig(n.e.cfg)
	cfg.QPS, cfg.Burst = qps, burst
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: agentUser,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + agentNamespace, "system:authenticated"},
		Extra:    map[string][]string{nodeNameExtraKey: {n.name}},
	}
	n.counter = &apiCounter{counts: map[string]int{}}
	cfg.Wrap(n.counter.wrap)
	cfg.Wrap(n.offlineWrap)
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 n.e.testEnv.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  agent.CacheOptions(n.name),
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := indexer.Setup(ctx, mgr.GetFieldIndexer()); err != nil {
		cancel()
		return err
	}
	a, err := agent.Setup(mgr, dm, opts)
	if err != nil {
		cancel()
		return err
	}
	n.dm, n.agent, n.cancel, n.done = dm, a, cancel, make(chan error, 1)
	go func() { n.done <- mgr.Start(ctx) }()
	return nil
}

// waitReady waits until the agent passes its readiness check: the checkpoint is restored, the
// core started and its registration socket serves.
func (n *benchNode) waitReady() error {
	return waitForAgent(n, func() bool { return n.agent.ReadyCheck(nil) == nil })
}

// stop stops the agent and waits for it.
func (n *benchNode) stop() error {
	if n.cancel == nil {
		return nil
	}
	n.cancel()
	n.cancel = nil
	select {
	case err := <-n.done:
		return err
	case <-time.After(time.Minute):
		return errors.New("the agent did not stop within a minute")
	}
}

// alive fails if the agent's manager has ended on its own.
func (n *benchNode) alive() error {
	select {
	case err := <-n.done:
		n.done <- err
		if err == nil {
			return errors.New("the agent stopped")
		}
		return fmt.Errorf("the agent stopped: %w", err)
	default:
		return nil
	}
}

// cleanup stops the agent and removes the node's directory and Node.
func (n *benchNode) cleanup(b *testing.B) {
	if err := n.stop(); err != nil {
		b.Error(err)
	}
	_ = os.RemoveAll(n.dir)
	if n.dra.Any() {
		if err := n.deleteSlices(context.Background()); err != nil {
			b.Error(err)
		}
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.name}}
	if err := client.IgnoreNotFound(n.e.admin.Delete(context.Background(), node)); err != nil {
		b.Error(err)
	}
}

func (n *benchNode) regSocket() string { return filepath.Join(n.dir, "kubelet.sock") }

// plugin starts a stub device plugin for resource with count devices on the node's directory;
// it is not registered yet.
func (n *benchNode) plugin(resource corev1.ResourceName, count int) (*dptest.Plugin, error) {
	name := strings.NewReplacer("/", "-", ".", "-").Replace(string(resource))
	devs := make([]*pluginapi.Device, count)
	for i := range devs {
		devs[i] = dptest.Device(fmt.Sprintf("gopher-%d", i), pluginapi.Healthy)
	}
	p := dptest.New(filepath.Join(n.dir, name+".sock"), string(resource), devs)
	p.SetAllocateFunc(envAllocator)
	return p, p.Start()
}

// envAllocator answers Allocate with one env per container request naming its devices.
func envAllocator(req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for _, cr := range req.GetContainerRequests() {
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerAllocateResponse{
			Envs: map[string]string{"GOPHER_VISIBLE_DEVICES": strings.Join(cr.GetDevicesIds(), ",")},
		})
	}
	return resp, nil
}

// shardsWatch follows the node's NodeDevices of one resource through a watch, as any watcher
// of the API sees them.
type shardsWatch struct {
	mu       sync.Mutex
	capacity map[string]int32
	stop     func()
}

func (n *benchNode) watchShards(ctx context.Context, resource corev1.ResourceName) (*shardsWatch, error) {
	w, err := n.e.admin.Watch(ctx, &kdv1alpha1.NodeDeviceList{}, client.MatchingFields{"spec.nodeName": n.name})
	if err != nil {
		return nil, fmt.Errorf("watching the NodeDevices of %s: %w", n.name, err)
	}
	sw := &shardsWatch{capacity: map[string]int32{}, stop: w.Stop}
	go func() {
		for ev := range w.ResultChan() {
			nd, ok := ev.Object.(*kdv1alpha1.NodeDevice)
			if !ok || nd.Spec.ResourceName != string(resource) {
				continue
			}
			sw.mu.Lock()
			if ev.Type == "DELETED" {
				delete(sw.capacity, nd.Name)
			} else {
				sw.capacity[nd.Name] = nd.Status.Capacity
			}
			sw.mu.Unlock()
		}
	}()
	return sw, nil
}

// complete reports whether the watch has seen every shard of devices devices named as the
// agent names them, each with its capacity, and nothing else.
func (sw *shardsWatch) complete(node string, resource corev1.ResourceName, devices int) bool {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	shards := (devices + kdv1alpha1.MaxDevicesPerShard - 1) / kdv1alpha1.MaxDevicesPerShard
	if len(sw.capacity) != shards {
		return false
	}
	for i := range shards {
		want := int32(min(kdv1alpha1.MaxDevicesPerShard, devices-i*kdv1alpha1.MaxDevicesPerShard))
		if sw.capacity[agent.NodeDeviceName(node, string(resource), i)] != want {
			return false
		}
	}
	return true
}

func (sw *shardsWatch) count() int {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	return len(sw.capacity)
}

// BenchmarkAgentRegister10k measures a plugin of 10 000 devices registering with a ready agent
// running at cmd/kubedevice-agent's rate limits: the time from the Register call to a watch on
// the API server seeing all 79 NodeDevice shards with their capacities (s/register), and the
// agent's writes until it settles.
func BenchmarkAgentRegister10k(b *testing.B) {
	e := getAgentEnv(b)
	ctx := context.Background()
	for range b.N {
		b.StopTimer()
		n, err := e.newBenchNode(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := n.start(agentQPS, agentBurst); err != nil {
			b.Fatal(err)
		}
		err = n.waitReady()
		var p *dptest.Plugin
		if err == nil {
			p, err = n.plugin(gopher, agentDevices)
		}
		var sw *shardsWatch
		if err == nil {
			sw, err = n.watchShards(ctx, gopher)
		}
		if err != nil {
			n.cleanup(b)
			b.Fatal(err)
		}
		before := n.counter.snapshot()
		b.StartTimer()
		start := time.Now()
		err = p.Register(ctx, n.regSocket())
		if err == nil {
			err = waitForAgent(n, func() bool { return sw.complete(n.name, gopher, agentDevices) })
		}
		elapsed := time.Since(start)
		b.StopTimer()
		if err == nil {
			err = n.settle()
		}
		reqs := requestCounts(n.counter.snapshot()).since(before)
		shards := sw.count()
		sw.stop()
		p.Stop()
		n.cleanup(b)
		if err != nil {
			b.Fatalf("%v (%d NodeDevices seen); requests: %s", err, shards, reqs)
		}
		b.ReportMetric(elapsed.Seconds(), "s/register")
		b.ReportMetric(float64(reqs.writes()), "writes")
		b.Logf("devices=%d: %d NodeDevices visible after %s; requests: %s",
			agentDevices, shards, elapsed.Round(time.Millisecond), reqs)
	}
}

// BenchmarkAgentRestart10k measures an agent restart on a node whose plugin has 10 000 devices
// and whose agent holds the allocations of KUBEDEVICE_SCALE_AGENT_PODS pods of 10 devices each,
// in its checkpoint and in DeviceAllocations. It reports the time from the new agent's start to
// its readiness check passing (checkpoint restored, core serving: s/ready) and to the plugin,
// re-registering as plugins do when kubelet.sock is created again, being Registered with every
// device (s/serving: allocations can be served from then on), the writes of the restart besides
// the Lease (NodeDevice statuses only, at most two each, and no read), and the latency of the
// first allocation after it (s/first-alloc: pod created bound to the node → its DeviceAllocation
// Allocated, seen through the API).
func BenchmarkAgentRestart10k(b *testing.B) {
	e := getAgentEnv(b)
	ctx := context.Background()
	b.StopTimer()
	n, err := e.newBenchNode(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer n.cleanup(b)
	ns, p, err := n.allocatePods(ctx, b, e.pods)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { p.Stop() }()
	for i := range b.N {
		if err := n.stop(); err != nil {
			b.Fatal(err)
		}
		// The plugin starts again and registers once the new agent creates kubelet.sock, as
		// the SDK's plugins do; the agent removes the old plugin socket at its start.
		reg, err := restartOnSocketCreation(p, n)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start := time.Now()
		if err := n.start(agentQPS, agentBurst); err != nil {
			b.Fatal(err)
		}
		err = n.waitReady()
		ready := time.Since(start)
		var restarted *dptest.Plugin
		if err == nil {
			restarted, err = reg.wait()
		}
		if err == nil {
			p = restarted
			err = waitForAgent(n, func() bool { return n.serving(gopher, agentDevices) })
		}
		serving := time.Since(start)
		b.StopTimer()
		if err == nil {
			err = n.settle()
		}
		reqs := requestCounts(n.counter.snapshot())
		if err != nil {
			b.Fatalf("%v; requests: %s", err, reqs)
		}
		held := len(n.dm.PodAllocations())
		// One more pod, on the devices the first ones left free.
		pod := testutil.MakePod(fmt.Sprintf("after-restart-%d", i), ns).Node(n.name).Request(gopher, devicesPerPod).Obj()
		allocStart := time.Now()
		if err := e.admin.Create(ctx, pod); err != nil {
			b.Fatal(err)
		}
		if err := waitForAgent(n, func() bool { return e.allocated(ctx, pod) }); err != nil {
			b.Fatal(err)
		}
		firstAlloc := time.Since(allocStart)
		if err := e.admin.Delete(ctx, pod, client.GracePeriodSeconds(0)); err != nil {
			b.Fatal(err)
		}
		if err := waitForAgent(n, func() bool { _, ok := n.dm.PodAllocation(string(pod.UID)); return !ok }); err != nil {
			b.Fatal(err)
		}
		if err := n.settle(); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(ready.Seconds(), "s/ready")
		b.ReportMetric(serving.Seconds(), "s/serving")
		b.ReportMetric(float64(reqs.writes()), "writes")
		b.ReportMetric(firstAlloc.Seconds(), "s/first-alloc")
		b.Logf("devices=%d pods=%d (%d held after the restart): ready after %s, serving after %s, first allocation in %s; restart requests: %s",
			agentDevices, e.pods, held, ready.Round(time.Millisecond), serving.Round(time.Millisecond), firstAlloc.Round(time.Millisecond), reqs)
		if held != e.pods {
			b.Errorf("the restarted agent holds %d pods' allocations, want %d", held, e.pods)
		}
		// Since issue 13 a restart tells the cluster at once that its restored resources await
		// their plugin, then that the plugin is back (plugin.since moves): at most two status
		// writes per NodeDevice, nothing else, and no read.
		shards := (agentDevices + kdv1alpha1.MaxDevicesPerShard - 1) / kdv1alpha1.MaxDevicesPerShard
		if w, st := reqs.writes(), reqs["PATCH nodedevices/status"]; w != st || st > 2*shards {
			b.Errorf("an idle restart wrote %d times besides the Lease, want only NodeDevice statuses, at most %d: %s", w, 2*shards, reqs)
		}
		if r := reqs["GET nodedevices"] + reqs["GET deviceallocations"]; r != 0 {
			b.Errorf("an idle restart read %d objects from the API server, want none (the cache shows them): %s", r, reqs)
		}
	}
}

// allocatePods starts the agent with a plugin of 10 000 devices and creates pods bound to the
// node, each requesting devicesPerPod, and waits until the agent has allocated them all and
// settled. The agent runs unthrottled here: this only builds the state a restart starts from.
func (n *benchNode) allocatePods(ctx context.Context, b *testing.B, pods int) (string, *dptest.Plugin, error) {
	start := time.Now()
	if err := n.start(setupQPS, setupQPS); err != nil {
		return "", nil, err
	}
	if err := n.waitReady(); err != nil {
		return "", nil, err
	}
	p, err := n.plugin(gopher, agentDevices)
	if err != nil {
		return "", nil, err
	}
	if err := p.Register(ctx, n.regSocket()); err != nil {
		return "", p, err
	}
	if err := waitForAgent(n, func() bool { return n.serving(gopher, agentDevices) }); err != nil {
		return "", p, err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "agent-bench-"}}
	if err := n.e.admin.Create(ctx, ns); err != nil {
		return "", p, err
	}
	err = forEach(ctx, pods, func(ctx context.Context, i int) error {
		return n.e.admin.Create(ctx, testutil.MakePod(fmt.Sprintf("pod-%d", i), ns.Name).Node(n.name).Request(gopher, devicesPerPod).Obj())
	})
	if err != nil {
		return ns.Name, p, fmt.Errorf("creating pods: %w", err)
	}
	err = waitForAgent(n, func() bool {
		list := &kdv1alpha1.DeviceAllocationList{}
		if n.e.admin.List(ctx, list, client.InNamespace(ns.Name)) != nil {
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
	if err == nil {
		err = n.settle()
	}
	if err != nil {
		return ns.Name, p, fmt.Errorf("allocating %d pods: %w", pods, err)
	}
	b.Logf("allocated %d pods × %d devices in %s; requests: %s", pods, devicesPerPod, time.Since(start).Round(time.Millisecond), requestCounts(n.counter.snapshot()))
	return ns.Name, p, nil
}

// serving reports whether the core has the resource Registered with all its devices.
func (n *benchNode) serving(resource corev1.ResourceName, devices int) bool {
	s, ok := n.dm.Snapshot(string(resource))
	return ok && s.State == nodeagent.PluginRegistered && s.Capacity == devices
}

// allocated reports whether the pod's DeviceAllocation says Allocated=True.
func (e *agentEnv) allocated(ctx context.Context, pod *corev1.Pod) bool {
	da := &kdv1alpha1.DeviceAllocation{}
	key := client.ObjectKey{Namespace: pod.Namespace, Name: agent.DeviceAllocationName(pod.Spec.NodeName, pod.Name, string(pod.UID))}
	return e.admin.Get(ctx, key, da) == nil && meta.IsStatusConditionTrue(da.Status.Conditions, kdv1alpha1.DeviceAllocationAllocated)
}

// settle waits until the agent has written nothing to NodeDevices and DeviceAllocations for
// agentQuiet.
func (n *benchNode) settle() error {
	last, since := -1, time.Now()
	return waitForAgent(n, func() bool {
		if w := requestCounts(n.counter.snapshot()).writes(); w != last {
			last, since = w, time.Now()
		}
		return time.Since(since) >= agentQuiet
	})
}

// waitForAgent is waitFor that also fails when the agent stops on its own.
func waitForAgent(n *benchNode, cond func() bool) error {
	var stopped error
	err := waitFor(func() bool {
		if stopped = n.alive(); stopped != nil {
			return true
		}
		return cond()
	})
	if stopped != nil {
		return stopped
	}
	return err
}

// registration is a plugin restart that waits for kubelet.sock.
type registration struct {
	done chan struct{}
	p    *dptest.Plugin
	err  error
}

func (r *registration) wait() (*dptest.Plugin, error) {
	select {
	case <-r.done:
		return r.p, r.err
	case <-time.After(settleTimeout):
		return nil, errors.New("the plugin did not register again")
	}
}

// restartOnSocketCreation stops p, and once the next agent creates kubelet.sock, starts a
// plugin with the same devices on the same socket and registers it, as device plugins built on
// the SDK do (the agent removes the sockets a previous run left before it serves kubelet.sock).
func restartOnSocketCreation(p *dptest.Plugin, n *benchNode) (*registration, error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	if err := w.Add(n.dir); err != nil {
		w.Close()
		return nil, err
	}
	p.Stop()
	r := &registration{done: make(chan struct{})}
	go func() {
		defer close(r.done)
		defer w.Close()
		for ev := range w.Events {
			if ev.Name != n.regSocket() || !ev.Has(fsnotify.Create) {
				continue
			}
			r.p, r.err = n.plugin(gopher, agentDevices)
			if r.err == nil {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				r.err = r.p.Register(ctx, n.regSocket())
				cancel()
			}
			return
		}
		r.err = errors.New("watching the plugin directory ended")
	}()
	return r, nil
}

// BenchmarkAgentReject100k registers a plugin of 100 000 devices beside a plugin of another
// resource with an agent: the agent must reject the device list (the invalid-updates metric
// counts it, no NodeDevice lists a device of it), keep running and keep serving the other
// resource. It reports the time from the Register call to the rejection being counted
// (s/reject) and the agent's writes meanwhile.
func BenchmarkAgentReject100k(b *testing.B) {
	const other corev1.ResourceName = "example.com/other"
	e := getAgentEnv(b)
	ctx := context.Background()
	for range b.N {
		b.StopTimer()
		n, err := e.newBenchNode(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := n.start(agentQPS, agentBurst); err != nil {
			b.Fatal(err)
		}
		var small, big *dptest.Plugin
		err = n.waitReady()
		if err == nil {
			small, err = n.plugin(other, 8)
		}
		if err == nil {
			err = small.Register(ctx, n.regSocket())
		}
		if err == nil {
			err = waitForAgent(n, func() bool { return n.serving(other, 8) })
		}
		if err == nil {
			err = n.settle()
		}
		if err == nil {
			big, err = n.plugin(gopher, rejectedDevices)
		}
		if err != nil {
			n.cleanup(b)
			b.Fatal(err)
		}
		before := n.counter.snapshot()
		b.StartTimer()
		start := time.Now()
		err = big.Register(ctx, n.regSocket())
		if err == nil {
			err = waitForAgent(n, func() bool { return n.invalidUpdates(gopher) > 0 })
		}
		elapsed := time.Since(start)
		b.StopTimer()
		if err == nil {
			err = n.settle()
		}
		reqs := requestCounts(n.counter.snapshot()).since(before)
		var problems []string
		if err == nil {
			problems = n.rejected(ctx, gopher, other, 8)
		}
		big.Stop()
		small.Stop()
		n.cleanup(b)
		if err != nil {
			b.Fatalf("%v; requests: %s", err, reqs)
		}
		b.ReportMetric(elapsed.Seconds(), "s/reject")
		b.ReportMetric(float64(reqs.writes()), "writes")
		b.Logf("devices=%d: rejected after %s; requests: %s", rejectedDevices, elapsed.Round(time.Millisecond), reqs)
		for _, p := range problems {
			b.Error(p)
		}
	}
}

// invalidUpdates is kubedevice_device_plugin_invalid_updates_total of resource, over reasons.
func (n *benchNode) invalidUpdates(resource corev1.ResourceName) float64 {
	families, err := n.registry.Gather()
	if err != nil {
		return 0
	}
	var sum float64
	for _, f := range families {
		if f.GetName() != "kubedevice_device_plugin_invalid_updates_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "resource_name" && l.GetValue() == string(resource) {
					sum += m.GetCounter().GetValue()
				}
			}
		}
	}
	return sum
}

// rejected checks the state after a rejected device list of resource: the core has none of its
// devices, no NodeDevice lists any, and the other resource is still served and mirrored.
func (n *benchNode) rejected(ctx context.Context, resource, other corev1.ResourceName, otherDevices int) []string {
	var problems []string
	if s, ok := n.dm.Snapshot(string(resource)); ok && s.Capacity != 0 {
		problems = append(problems, fmt.Sprintf("the core took %d devices of %s", s.Capacity, resource))
	}
	if !n.serving(other, otherDevices) {
		problems = append(problems, fmt.Sprintf("the core no longer serves %s", other))
	}
	list := &kdv1alpha1.NodeDeviceList{}
	if err := n.e.admin.List(ctx, list, client.MatchingFields{"spec.nodeName": n.name}); err != nil {
		return append(problems, err.Error())
	}
	otherCapacity := int32(-1)
	for _, nd := range list.Items {
		switch nd.Spec.ResourceName {
		case string(resource):
			if nd.Status.Capacity != 0 {
				problems = append(problems, fmt.Sprintf("NodeDevice %s lists %d devices of %s", nd.Name, nd.Status.Capacity, resource))
			}
		case string(other):
			otherCapacity = nd.Status.Capacity
		}
	}
	if otherCapacity != int32(otherDevices) {
		problems = append(problems, fmt.Sprintf("the NodeDevice of %s has capacity %d, want %d", other, otherCapacity, otherDevices))
	}
	return problems
}
