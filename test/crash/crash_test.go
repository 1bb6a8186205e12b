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
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
	"github.com/kubedevice/kubedevice/internal/crashpoint"
	"github.com/kubedevice/kubedevice/internal/nodeagent/checkpoint"
	"github.com/kubedevice/kubedevice/internal/testutil"
)

const (
	resource       = "example.com/gopher"
	gophers        = 4
	maxActive      = gophers + 1 // one pod more than devices: refusals and retries are exercised
	nodeName       = "crash-node"
	agentNamespace = "kubedevice-system"
	podNamespace   = "crash"
	agentUser      = "system:serviceaccount:kubedevice-system:kubedevice-agent"
	nodeNameExtra  = "authentication.kubernetes.io/node-name"

	// randomPoint is the run kind killed from outside at a random time instead of at a point.
	randomPoint = "random-time"

	// phase bounds the armed agent's life: a point not reached by then is killed from outside.
	phase = 8 * time.Second
	// convergeTimeout bounds the restarted agent's convergence.
	convergeTimeout = 90 * time.Second
)

// runSpec is one run: the point and the pass at which the agent is killed (randomPoint: after
// killAfter), and whether the plugin is killed and restarted too while the agent is down (S5).
type runSpec struct {
	point         string
	n             int
	killAfter     time.Duration
	restartPlugin bool
}

func (r runSpec) String() string {
	s := fmt.Sprintf("%s:%d", r.point, r.n)
	if r.point == randomPoint {
		s = fmt.Sprintf("%s:%v", r.point, r.killAfter.Round(time.Millisecond))
	}
	if r.restartPlugin {
		s += "+plugin-restart"
	}
	return s
}

// tally counts the outcomes of one point.
type tally struct {
	runs, killedAtPoint, killedOutside, pluginRestarts, converged int
	// allocationsSeen counts the pods seen holding devices in the run.
	allocationsSeen int
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func TestCrashConvergence(t *testing.T) {
	if testing.Short() {
		t.Skip("starts envtest and real processes")
	}
	runs := envInt("KUBEDEVICE_CRASH_RUNS", 1)
	seed := uint64(time.Now().UnixNano())
	if v, err := strconv.ParseUint(os.Getenv("KUBEDEVICE_CRASH_SEED"), 10, 64); err == nil {
		seed = v
	}
	t.Logf("KUBEDEVICE_CRASH_SEED=%d, %d runs per point", seed, runs)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))

	h := newHarness(t, rng)
	var schedule []runSpec
	for _, p := range append(slices.Clone(crashpoint.Points), randomPoint) {
		for range runs {
			r := runSpec{point: p, n: 1 + rng.IntN(3), restartPlugin: rng.IntN(4) == 0}
			switch p {
			case randomPoint:
				r.n, r.killAfter = 0, time.Duration(rng.Int64N(int64(3*time.Second)))
			case crashpoint.SnapshotBeforeRename:
				// A snapshot is written at each start (the restore) and at compaction.
				r.n = 1
			}
			schedule = append(schedule, r)
		}
	}
	rng.Shuffle(len(schedule), func(i, j int) { schedule[i], schedule[j] = schedule[j], schedule[i] })

	tallies := map[string]*tally{}
	start := time.Now()
	for i, r := range schedule {
		tl := tallies[r.point]
		if tl == nil {
			tl = &tally{}
			tallies[r.point] = tl
		}
		tl.runs++
		if !h.run(i, r, tl) {
			break
		}
	}
	report := h.report(tallies, time.Since(start), seed)
	t.Log("\n" + report)
	if path := os.Getenv("KUBEDEVICE_CRASH_REPORT"); path != "" {
		if err := os.WriteFile(path, []byte(report), 0o644); err != nil {
			t.Errorf("writing the report: %v", err)
		}
	}
}

// report is the table of outcomes per point.
func (h *harness) report(tallies map[string]*tally, took time.Duration, seed uint64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "crash runs (seed %d, %v):\n", seed, took.Round(time.Second))
	fmt.Fprintf(&b, "%-26s %5s %10s %10s %10s %10s %12s\n", "point", "runs", "at point", "outside", "+plugin", "converged", "allocations")
	for _, p := range append(slices.Clone(crashpoint.Points), randomPoint) {
		tl := tallies[p]
		if tl == nil {
			continue
		}
		fmt.Fprintf(&b, "%-26s %5d %10d %10d %10d %10d %12d\n", p, tl.runs, tl.killedAtPoint, tl.killedOutside, tl.pluginRestarts, tl.converged, tl.allocationsSeen)
	}
	return b.String()
}

// harness holds the control plane, the node's directories and the processes.
type harness struct {
	t          *testing.T
	ctx        context.Context
	rng        *rand.Rand
	c          client.WithWatch
	dir        string
	binDir     string
	kubeconfig string

	agent, plugin *proc
	// active are the pods created and not ended yet, by UID.
	active map[string]*corev1.Pod
	podSeq int
	seen   *seenAllocations
}

func newHarness(t *testing.T, rng *rand.Rand) *harness {
	env, err := testutil.NewEnvironment()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("starting envtest: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stopping envtest: %v", err)
		}
	})
	// Cleanups run last first: the watch ends before envtest stops.
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "kdcrash")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("kept %s (agent and plugin logs in logs/)", dir)
			return
		}
		_ = os.RemoveAll(dir)
	})
	h := &harness{t: t, ctx: ctx, rng: rng, c: c, dir: dir, binDir: filepath.Join(dir, "bin"), active: map[string]*corev1.Pod{}}
	for _, d := range []string{"bin", "plugins", "state", "gophers", "logs"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o750); err != nil {
			t.Fatal(err)
		}
	}
	h.build()
	h.install(cfg)
	for i := range gophers {
		if err := os.WriteFile(filepath.Join(dir, "gophers", fmt.Sprintf("gopher-%d", i)), []byte("a gopher\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	h.seen = watchAllocations(ctx, t, c)
	h.plugin = h.startPlugin("plugin-0")
	t.Cleanup(func() {
		for _, p := range []*proc{h.agent, h.plugin} {
			if p != nil {
				p.kill()
			}
		}
	})
	// The first start, before any kill: the agent comes up and publishes the plugin.
	h.agent = h.startAgent("agent-initial", "")
	if err := h.agent.waitReady(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	h.agent.kill()
	return h
}

// build builds the agent with the crashpoint tag, and the Gopher plugin.
func (h *harness) build() {
	h.t.Helper()
	for _, b := range []struct{ pkg, tags string }{
		{"./cmd/kubedevice-agent", "crashpoint"},
		{"./cmd/gopher-device-plugin", ""},
	} {
		args := []string{"build", "-o", filepath.Join(h.binDir, filepath.Base(b.pkg))}
		if b.tags != "" {
			args = append(args, "-tags", b.tags)
		}
		cmd := exec.Command("go", append(args, b.pkg)...)
		cmd.Dir = testutil.RepoRoot()
		if out, err := cmd.CombinedOutput(); err != nil {
			h.t.Fatalf("go %s: %v\n%s", strings.Join(cmd.Args[1:], " "), err, out)
		}
	}
}

// install creates the agent's namespace, RBAC and admission policy, the Node, the pods'
// namespace, and a kubeconfig for the agent as its service account with the node's token claim.
func (h *harness) install(cfg *rest.Config) {
	h.t.Helper()
	for _, ns := range []string{agentNamespace, podNamespace} {
		if err := h.c.Create(h.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			h.t.Fatal(err)
		}
	}
	objs, err := testutil.LoadManifests(
		"config/rbac/agent/role.yaml",
		"config/rbac/agent_service_account.yaml",
		"config/rbac/agent_role_binding.yaml",
		"config/admission/agent_node_restriction.yaml",
	)
	if err != nil {
		h.t.Fatal(err)
	}
	for _, o := range objs {
		if err := h.c.Create(h.ctx, o); err != nil {
			h.t.Fatalf("creating %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
	if err := h.c.Create(h.ctx, testutil.MakeNode(nodeName).Obj()); err != nil {
		h.t.Fatal(err)
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["agent"] = &clientcmdapi.AuthInfo{
		ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData,
		Impersonate:          agentUser,
		ImpersonateGroups:    []string{"system:serviceaccounts", "system:serviceaccounts:" + agentNamespace, "system:authenticated"},
		ImpersonateUserExtra: map[string][]string{nodeNameExtra: {nodeName}},
	}
	kc.Contexts["agent"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "agent"}
	kc.CurrentContext = "agent"
	h.kubeconfig = filepath.Join(h.dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, h.kubeconfig); err != nil {
		h.t.Fatal(err)
	}
}

// proc is a process the harness runs: the agent or the plugin.
type proc struct {
	name   string
	cmd    *exec.Cmd
	log    string
	health string
	done   chan struct{}
	state  *os.ProcessState
}

func (h *harness) start(name, bin string, args, env []string, health string) *proc {
	h.t.Helper()
	log := filepath.Join(h.dir, "logs", name+".log")
	f, err := os.Create(log)
	if err != nil {
		h.t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(h.binDir, bin), args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = env
	// Should the test process die, its agent and plugin die with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		h.t.Fatalf("starting %s: %v", bin, err)
	}
	p := &proc{name: name, cmd: cmd, log: log, health: health, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		p.state = cmd.ProcessState
		_ = f.Close()
		close(p.done)
	}()
	return p
}

// startAgent starts the agent; crash, when not empty, arms a crash point (<name>:<n>).
func (h *harness) startAgent(name, crash string) *proc {
	return h.startAgentBinary(name, "kubedevice-agent", crash, "0")
}

// startAgentBinary starts the agent binary bin (built into binDir), armed with crash when not
// empty, serving plain-HTTP metrics on metrics ("0": none), with the flags extra appended.
func (h *harness) startAgentBinary(name, bin, crash, metrics string, extra ...string) *proc {
	health := freeAddr(h.t)
	env := slices.DeleteFunc(os.Environ(), func(s string) bool { return strings.HasPrefix(s, crashpoint.EnvVar+"=") })
	if crash != "" {
		env = append(env, crashpoint.EnvVar+"="+crash)
	}
	return h.start(name, bin, append([]string{
		"--kubeconfig=" + h.kubeconfig,
		"--node-name=" + nodeName,
		"--namespace=" + agentNamespace,
		"--plugin-dir=" + filepath.Join(h.dir, "plugins"),
		"--state-dir=" + filepath.Join(h.dir, "state"),
		"--plugins-registry-dir=",
		"--pod-resources-socket=",
		"--runtime-injection=none",
		"--metrics-bind-address=" + metrics,
		"--metrics-secure=false",
		"--health-probe-bind-address=" + health,
	}, extra...), env, health)
}

// startPlugin starts the Gopher plugin: it registers, and registers again whenever the agent
// creates kubelet.sock again, as a device plugin does.
func (h *harness) startPlugin(name string) *proc {
	return h.start(name, "gopher-device-plugin", []string{
		"--plugin-dir=" + filepath.Join(h.dir, "plugins"),
		"--gophers-dir=" + filepath.Join(h.dir, "gophers"),
		"--resource-name=" + resource,
	}, os.Environ(), "")
}

func (p *proc) alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// kill sends SIGKILL and waits for the process to end.
func (p *proc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// killedBySIGKILL reports whether the process ended by SIGKILL.
func (p *proc) killedBySIGKILL() bool {
	ws, ok := p.state.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// logTail returns the last lines of the process's log.
func (p *proc) logTail(n int) string {
	data, _ := os.ReadFile(p.log)
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// logHas reports whether the process logged s.
func (p *proc) logHas(s string) bool {
	f, err := os.Open(p.log)
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if strings.Contains(sc.Text(), s) {
			return true
		}
	}
	return false
}

// waitReady waits until the agent's /readyz answers 200.
func (p *proc) waitReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if !p.alive() {
			return fmt.Errorf("%s exited before it was ready (%v):\n%s", p.name, p.state, p.logTail(30))
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.health+"/readyz", nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("%s not ready after %v:\n%s", p.name, timeout, p.logTail(30))
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// run is one run: the armed agent under a pod workload until it is killed, a restart, the
// convergence, a kill of the converged agent and the checks of its checkpoint against the API.
// It returns false when the run failed (the test stops there, keeping the state for a look).
func (h *harness) run(i int, r runSpec, tl *tally) bool {
	t := h.t
	crash := ""
	if r.point != randomPoint {
		crash = fmt.Sprintf("%s:%d", r.point, r.n)
	}
	name := fmt.Sprintf("run-%03d-%s", i, strings.ReplaceAll(r.String(), ":", "-"))
	seenBefore := h.seen.count()
	h.agent = h.startAgent(name+"-armed", crash)
	begin := time.Now()
	for h.agent.alive() && time.Since(begin) < phase {
		if r.point == randomPoint && time.Since(begin) >= r.killAfter {
			break
		}
		if err := h.step(); err != nil {
			t.Errorf("run %d (%s): workload: %v", i, r, err)
			return false
		}
		time.Sleep(time.Duration(20+h.rng.IntN(200)) * time.Millisecond)
	}
	atPoint := false
	select {
	case <-h.agent.done:
		atPoint = crash != "" && h.agent.logHas("crashpoint: "+r.point+" hit")
	default:
	}
	h.agent.kill()
	if !h.agent.killedBySIGKILL() {
		t.Errorf("run %d (%s): the agent ended without SIGKILL (%v):\n%s", i, r, h.agent.state, h.agent.logTail(40))
		return false
	}
	if atPoint {
		tl.killedAtPoint++
	} else {
		tl.killedOutside++
	}
	if r.restartPlugin {
		tl.pluginRestarts++
		h.plugin.kill()
		h.plugin = h.startPlugin(name + "-plugin")
	}
	// Pods come and go while the agent is down, as on a node.
	for range h.rng.IntN(3) {
		if err := h.step(); err != nil {
			t.Errorf("run %d (%s): workload: %v", i, r, err)
			return false
		}
	}

	h.agent = h.startAgent(name+"-restarted", "")
	if err := h.agent.waitReady(h.ctx, time.Minute); err != nil {
		t.Errorf("run %d (%s): %v", i, r, err)
		return false
	}
	var last []string
	deadline := time.Now().Add(convergeTimeout)
	for {
		obs, err := h.observe()
		if err == nil {
			last = obs.converged(h.active)
		} else {
			last = []string{err.Error()}
		}
		if len(last) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("run %d (%s): no convergence within %v:\n  %s\nagent:\n%s", i, r, convergeTimeout, strings.Join(last, "\n  "), h.agent.logTail(40))
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Killed again once converged: what it left on disk must be what the cluster shows.
	h.agent.kill()
	obs, err := h.observe()
	if err != nil {
		t.Errorf("run %d (%s): %v", i, r, err)
		return false
	}
	ckpt, err := readCheckpoint(filepath.Join(h.dir, "state", checkpoint.DefaultFileName))
	if err != nil {
		t.Errorf("run %d (%s): %v", i, r, err)
		return false
	}
	if errs := obs.matches(ckpt, h.active, h.seen); len(errs) > 0 {
		t.Errorf("run %d (%s): the checkpoint and the cluster disagree:\n  %s", i, r, strings.Join(errs, "\n  "))
		return false
	}
	if errs := h.seen.violations(); len(errs) > 0 {
		t.Errorf("run %d (%s): allocations changed while their pods were active:\n  %s", i, r, strings.Join(errs, "\n  "))
		return false
	}
	tl.converged++
	tl.allocationsSeen += h.seen.count() - seenBefore
	h.cleanupEnded()
	// The next run's armed agent starts from this state; the converged agent's logs are no
	// longer needed.
	return true
}

// step changes the workload once: a pod is created, or an active pod ends (deleted at once,
// Succeeded or Failed).
func (h *harness) step() error {
	ctx, cancel := context.WithTimeout(h.ctx, 10*time.Second)
	defer cancel()
	if n := len(h.active); n < maxActive && (n < 2 || h.rng.IntN(100) < 55) {
		h.podSeq++
		pod := testutil.MakePod(fmt.Sprintf("p-%d", h.podSeq), podNamespace).Node(nodeName).Request(resource, 1).Obj()
		if err := h.c.Create(ctx, pod); err != nil {
			return err
		}
		h.active[string(pod.UID)] = pod
		return nil
	}
	uids := make([]string, 0, len(h.active))
	for uid := range h.active {
		uids = append(uids, uid)
	}
	slices.Sort(uids)
	uid := uids[h.rng.IntN(len(uids))]
	pod := h.active[uid]
	delete(h.active, uid)
	h.seen.ended(uid)
	switch h.rng.IntN(3) {
	case 0:
		return client.IgnoreNotFound(h.c.Delete(ctx, pod, client.GracePeriodSeconds(0)))
	case 1:
		pod.Status.Phase = corev1.PodSucceeded
	default:
		pod.Status.Phase = corev1.PodFailed
	}
	return h.c.Status().Update(ctx, pod)
}

// cleanupEnded deletes the terminal pods, so they do not pile up over the runs.
func (h *harness) cleanupEnded() {
	list := &corev1.PodList{}
	if err := h.c.List(h.ctx, list, client.InNamespace(podNamespace)); err != nil {
		h.t.Fatal(err)
	}
	for i := range list.Items {
		p := &list.Items[i]
		if _, ok := h.active[string(p.UID)]; !ok {
			if err := client.IgnoreNotFound(h.c.Delete(h.ctx, p, client.GracePeriodSeconds(0))); err != nil {
				h.t.Fatal(err)
			}
		}
	}
}

// observed is what the API server shows of the node.
type observed struct {
	pods        map[string]*corev1.Pod // active pods by UID
	allocations []kdv1alpha1.DeviceAllocation
	nodeDevices []kdv1alpha1.NodeDevice
}

func (h *harness) observe() (*observed, error) {
	ctx, cancel := context.WithTimeout(h.ctx, 10*time.Second)
	defer cancel()
	obs := &observed{pods: map[string]*corev1.Pod{}}
	pods := &corev1.PodList{}
	if err := h.c.List(ctx, pods, client.InNamespace(podNamespace)); err != nil {
		return nil, err
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			obs.pods[string(p.UID)] = p
		}
	}
	das := &kdv1alpha1.DeviceAllocationList{}
	if err := h.c.List(ctx, das, client.InNamespace(podNamespace)); err != nil {
		return nil, err
	}
	obs.allocations = das.Items
	nds := &kdv1alpha1.NodeDeviceList{}
	if err := h.c.List(ctx, nds); err != nil {
		return nil, err
	}
	for _, nd := range nds.Items {
		if nd.Spec.NodeName == nodeName && nd.Spec.ResourceName == resource {
			obs.nodeDevices = append(obs.nodeDevices, nd)
		}
	}
	return obs, nil
}

// allocatedDevices returns the devices of resource a DeviceAllocation says its pod holds (nil
// unless Allocated=True and not Released).
func allocatedDevices(da *kdv1alpha1.DeviceAllocation) []string {
	if !meta.IsStatusConditionTrue(da.Status.Conditions, kdv1alpha1.DeviceAllocationAllocated) ||
		meta.IsStatusConditionTrue(da.Status.Conditions, kdv1alpha1.DeviceAllocationReleased) {
		return nil
	}
	var ids []string
	for _, c := range da.Status.Containers {
		for _, r := range c.Resources {
			if r.ResourceName == resource {
				ids = append(ids, r.DeviceIDs...)
			}
		}
	}
	slices.Sort(ids)
	return ids
}

// held maps each pod UID to the devices its DeviceAllocation says it holds.
func (o *observed) held() (map[string][]string, []string) {
	var errs []string
	held := map[string][]string{}
	owner := map[string]string{}
	for i := range o.allocations {
		da := &o.allocations[i]
		ids := allocatedDevices(da)
		if len(ids) == 0 {
			continue
		}
		held[da.Spec.PodUID] = ids
		for _, id := range ids {
			if other, ok := owner[id]; ok {
				errs = append(errs, fmt.Sprintf("device %s shown held by pods %s and %s", id, other, da.Spec.PodUID))
			}
			owner[id] = da.Spec.PodUID
		}
	}
	return held, errs
}

// converged lists what keeps the cluster from the state the agent must reach: every active pod
// has a DeviceAllocation, as many as there are devices (or pods) are allocated, none of an ended
// pod remains, no device is shown twice, and the NodeDevice shows the plugin registered and the
// holders the DeviceAllocations say.
func (o *observed) converged(active map[string]*corev1.Pod) []string {
	var errs []string
	for uid := range active {
		if _, ok := o.pods[uid]; !ok {
			errs = append(errs, fmt.Sprintf("pod %s is not active in the API", uid))
		}
	}
	held, twice := o.held()
	errs = append(errs, twice...)
	withDA := map[string]bool{}
	for _, da := range o.allocations {
		if _, ok := o.pods[da.Spec.PodUID]; !ok {
			errs = append(errs, fmt.Sprintf("DeviceAllocation %s of ended pod %s/%s remains", da.Name, da.Spec.PodName, da.Spec.PodUID))
		}
		withDA[da.Spec.PodUID] = true
	}
	for uid, p := range o.pods {
		if !withDA[uid] {
			errs = append(errs, fmt.Sprintf("active pod %s (%s) has no DeviceAllocation", p.Name, uid))
		}
	}
	if want := min(len(o.pods), gophers); len(held) != want {
		errs = append(errs, fmt.Sprintf("%d pods hold devices, want %d of %d active pods", len(held), want, len(o.pods)))
	}
	if len(o.nodeDevices) != 1 {
		return append(errs, fmt.Sprintf("%d NodeDevices for %s, want 1", len(o.nodeDevices), resource))
	}
	nd := o.nodeDevices[0]
	if nd.Status.Plugin == nil || nd.Status.Plugin.State != kdv1alpha1.PluginStateRegistered {
		errs = append(errs, "the NodeDevice's plugin is not Registered")
	}
	if nd.Status.Capacity != gophers {
		errs = append(errs, fmt.Sprintf("NodeDevice capacity %d, want %d", nd.Status.Capacity, gophers))
	}
	errs = append(errs, nodeDeviceHolders(&nd, held)...)
	return errs
}

// nodeDeviceHolders compares the NodeDevice's holders with held.
func nodeDeviceHolders(nd *kdv1alpha1.NodeDevice, held map[string][]string) []string {
	var errs []string
	want := map[string]string{}
	for uid, ids := range held {
		for _, id := range ids {
			want[id] = uid
		}
	}
	count := 0
	for _, d := range nd.Status.Devices {
		got := ""
		if d.Holder != nil {
			got = d.Holder.PodUID
			count++
		}
		if got != want[d.ID] {
			errs = append(errs, fmt.Sprintf("NodeDevice shows %s held by %q, want %q", d.ID, got, want[d.ID]))
		}
	}
	if int(nd.Status.Allocated) != len(want) || count != len(want) {
		errs = append(errs, fmt.Sprintf("NodeDevice allocated %d (%d holders), want %d", nd.Status.Allocated, count, len(want)))
	}
	return errs
}

// readCheckpoint reads a copy of the checkpoint (reading may save or quarantine files next to
// it) and returns the devices of resource per pod UID, with an error for a device held twice.
func readCheckpoint(path string) (map[string][]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the checkpoint: %w", err)
	}
	dir, err := os.MkdirTemp("", "kdcrash-ckpt")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	cp := filepath.Join(dir, checkpoint.DefaultFileName)
	if err := os.WriteFile(cp, data, 0o600); err != nil {
		return nil, err
	}
	j, err := checkpoint.OpenJournal(cp, checkpoint.Options{})
	if err != nil {
		return nil, err
	}
	got, err := j.Read()
	if err != nil {
		return nil, fmt.Errorf("reading the checkpoint: %w", err)
	}
	if got.TornTail != nil {
		return nil, fmt.Errorf("the checkpoint of a converged agent ends in a torn frame (%+v)", *got.TornTail)
	}
	held := map[string][]string{}
	owner := map[string]string{}
	for _, e := range got.State.Entries {
		if e.ResourceName != resource {
			continue
		}
		for _, id := range e.DeviceIDs.Devices() {
			if other, ok := owner[id]; ok {
				return nil, fmt.Errorf("the checkpoint holds device %s for pods %s and %s", id, other, e.PodUID)
			}
			owner[id] = e.PodUID
			held[e.PodUID] = append(held[e.PodUID], id)
		}
	}
	for uid := range held {
		slices.Sort(held[uid])
	}
	return held, nil
}

// matches compares the checkpoint (devices per pod) with the cluster: the DeviceAllocations
// with devices are exactly the checkpoint's allocations, every allocated pod is active, the
// NodeDevice shows the same holders, and every active pod seen holding devices still holds them.
func (o *observed) matches(ckpt map[string][]string, active map[string]*corev1.Pod, seen *seenAllocations) []string {
	held, errs := o.held()
	for uid, ids := range ckpt {
		if _, ok := o.pods[uid]; !ok {
			errs = append(errs, fmt.Sprintf("the checkpoint holds %v for pod %s, which is not active", ids, uid))
		}
		if !slices.Equal(held[uid], ids) {
			errs = append(errs, fmt.Sprintf("pod %s: the checkpoint holds %v, its DeviceAllocation shows %v", uid, ids, held[uid]))
		}
	}
	for uid, ids := range held {
		if _, ok := ckpt[uid]; !ok {
			errs = append(errs, fmt.Sprintf("pod %s: its DeviceAllocation shows %v, the checkpoint holds nothing", uid, ids))
		}
	}
	if len(o.nodeDevices) == 1 {
		errs = append(errs, nodeDeviceHolders(&o.nodeDevices[0], ckpt)...)
	}
	for uid := range active {
		if ids, ok := seen.devices(uid); ok && !slices.Equal(ids, ckpt[uid]) {
			errs = append(errs, fmt.Sprintf("pod %s was seen holding %v and is active; the checkpoint holds %v (allocation lost)", uid, ids, ckpt[uid]))
		}
	}
	return errs
}

// seenAllocations records, from a watch of every version of every DeviceAllocation, the devices
// each pod was seen holding, and any change of them while the pod was active.
type seenAllocations struct {
	mu      sync.Mutex
	byPod   map[string][]string
	endedAt map[string]bool
	errs    []string
}

func watchAllocations(ctx context.Context, t *testing.T, c client.WithWatch) *seenAllocations {
	s := &seenAllocations{byPod: map[string][]string{}, endedAt: map[string]bool{}}
	ready := make(chan struct{})
	go func() {
		once := sync.OnceFunc(func() { close(ready) })
		rv := ""
		for ctx.Err() == nil {
			w, err := c.Watch(ctx, &kdv1alpha1.DeviceAllocationList{}, client.InNamespace(podNamespace), &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: rv}})
			if err != nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			once()
			for ev := range w.ResultChan() {
				if ev.Type == watch.Error {
					if st, ok := ev.Object.(*metav1.Status); ok && st.Code == http.StatusGone {
						rv = ""
					}
					break
				}
				da, ok := ev.Object.(*kdv1alpha1.DeviceAllocation)
				if !ok {
					continue
				}
				rv = da.ResourceVersion
				if ev.Type == watch.Added || ev.Type == watch.Modified {
					s.saw(da)
				}
			}
			w.Stop()
		}
	}()
	select {
	case <-ready:
	case <-time.After(30 * time.Second):
		t.Fatal("watching DeviceAllocations")
	}
	return s
}

func (s *seenAllocations) saw(da *kdv1alpha1.DeviceAllocation) {
	ids := allocatedDevices(da)
	if len(ids) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	uid := da.Spec.PodUID
	if prev, ok := s.byPod[uid]; ok && !slices.Equal(prev, ids) && !s.endedAt[uid] {
		s.errs = append(s.errs, fmt.Sprintf("pod %s/%s was shown holding %v, then %v", da.Spec.PodName, uid, prev, ids))
	}
	if _, ok := s.byPod[uid]; !ok {
		s.byPod[uid] = ids
	}
}

// ended records that the harness ended the pod: its devices may go.
func (s *seenAllocations) ended(uid string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.endedAt[uid] = true
}

func (s *seenAllocations) devices(uid string) ([]string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids, ok := s.byPod[uid]
	return ids, ok
}

func (s *seenAllocations) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.byPod)
}

func (s *seenAllocations) violations() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.errs)
}
