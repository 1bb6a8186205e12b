//go:build e2enode

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

package e2enode

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The node's whole life (issue 23): the kubelet restarting while the plugin is late, containerd
// restarting, and a power-loss reboot, applied by hack/e2e-node/node-event.sh to the real node with
// device pods running, on three paths in turn: kubedevice's node-capacity path (NRI), kubedevice's
// DRA path (plain limits, KEP-5004), and the kubelet's own device manager managing the same
// unmodified Gopher plugin (observe mode: kubedevice only watches). kubedevice's outcomes are
// asserted; the kubelet's are recorded, not asserted (its failures are upstream bugs: kubernetes
// #138446, #125579), and the suite prints both side by side.
const (
	// kubeletDown is how long the kubelet stays stopped in a restart.
	kubeletDown = 20 * time.Second
	// pluginLate is how long the Gopher plugin stays frozen (SIGSTOP) after the kubelet is back:
	// a plugin that re-registers late, as after kubernetes#138446's restart.
	pluginLate = 10 * time.Second
	// latencyPods is how many pods the start-up latency of each path is measured over.
	latencyPods = 10
	// settleTime is how long after an event a pod is watched for the kubelet's verdict.
	settleTime = 20 * time.Second
)

// lifePath is one way the node's gophers are managed.
type lifePath struct {
	// name is the path's column in the side-by-side table.
	name string
	// control: the kubelet's own device manager; outcomes are recorded, not asserted.
	control bool
	// dra: served through kubedevice's DRA driver, no node capacity.
	dra bool
}

var (
	pathNRI     = lifePath{name: "kubedevice, node capacity (NRI)"}
	pathDRA     = lifePath{name: "kubedevice, DRA (plain limits)", dra: true}
	pathKubelet = lifePath{name: "kubelet's device manager", control: true}
)

// devicePods are the pods every event meets: "single" has one container with a gopher; "init" has
// an init container and a main container with a gopher each (kubernetes#138446's shape).
var devicePods = []string{"single", "init"}

// gopherIDs are the node's three gophers: one for each device pod and one for the pod an event's
// spec starts afterwards.
var gopherIDs = []string{"gopher-0", "gopher-1", "gopher-2"}

func makeDevicePod(ns, name string) *corev1.Pod {
	b := MakePod(name, ns).Limits(gopherResource, 1)
	if name == "init" {
		b = b.InitContainer("init", gopherResource, 1, "sh", "-c", `test -n "$GOPHER" && cat "/gophers/$GOPHER"`)
	}
	return b.Obj()
}

// describeNodeEvents is the node's life on kubedevice's two paths, in one install: the
// node-capacity path, then the same gophers switched to DRA. It runs before anything lets the
// kubelet manage the gophers: Ginkgo orders containers by code location, so it takes its call
// site's in kubedevice_test.go (Offset).
func describeNodeEvents() {
	Describe("kubedevice through the node's life", Ordered, Label("node-events"), Offset(1), func() {
		var ns string
		BeforeAll(func(ctx context.Context) {
			setUp(ctx, "node events: ", installWithKustomize)
			ns = newNamespace(ctx)
			installGophers(ctx, "gopher")
		}, NodeTimeout(20*time.Minute))
		AfterEach(func(ctx context.Context) {
			if CurrentSpecReport().Failed() {
				dumpKubedevice(ctx)
			}
		})
		describeEvents(pathNRI, func() string { return ns })
		It("switches the gophers to DRA, with no device pod left", func(ctx context.Context) {
			deleteAll(ctx, ns)
			out, err := kubectl(ctx, "apply", "--server-side", "-k", overlay("kubedevice-dra"))
			Expect(err).NotTo(HaveOccurred(), out)
			waitForKubedevice(ctx)
			Eventually(ctx, func(g Gomega) {
				g.Expect(gopherSliceDevices(ctx, g)).To(HaveLen(len(gopherIDs)))
			}).WithTimeout(2 * time.Minute).Should(Succeed())
		}, SpecTimeout(5*time.Minute))
		describeEvents(pathDRA, func() string { return ns })
	})
}

// describeNodeEventsControl is the control: the same events with the kubelet's own device manager
// managing the same Gopher plugin (observe mode). It runs last: the kubelet keeps the gophers it
// managed listed after their plugin is gone.
func describeNodeEventsControl() {
	Describe("the kubelet's own device manager through the node's life (the control)", Ordered, Label("node-events"), Offset(1), func() {
		var ns string
		BeforeAll(func(ctx context.Context) {
			buildImage(ctx)
			uninstall(ctx, "")
			DeferCleanup(func(ctx context.Context) { uninstallObserving(ctx, "", len(gopherIDs)) }, NodeTimeout(5*time.Minute))
			forgetGopherCapacity(ctx)
			out, err := kubectl(ctx, "apply", "--server-side", "-k", overlay("kubedevice-observe"))
			Expect(err).NotTo(HaveOccurred(), out)
			waitForKubedevice(ctx)
			ns = newNamespace(ctx)
			installGophers(ctx, "gopher-kubelet")
		}, NodeTimeout(20*time.Minute))
		describeEvents(pathKubelet, func() string { return ns })
	})
}

// installGophers runs the Gopher plugin's overlay with the three gophers and waits until the node
// offers them (node capacity: kubedevice's controller, or the kubelet).
func installGophers(ctx context.Context, gopherOverlay string) {
	installGopherFrom(ctx, gopherOverlay, gopherIDs[0], gopherContent)
	dir := gophersDir(renderedGopherDaemonSet(ctx))
	for _, id := range gopherIDs[1:] {
		Expect(os.WriteFile(filepath.Join(dir, id), []byte(gopherContent), 0o644)).To(Succeed())
	}
	expectNodeGophers(ctx, int64(len(gopherIDs)))
}

// describeEvents is one path's specs: start-up latency, then each event with the device pods
// running.
func describeEvents(p lifePath, namespace func() string) {
	It(p.name+": start-up latency, bound -> running with a gopher, over 10 pods", func(ctx context.Context) {
		measureStartUp(ctx, p, namespace())
	}, SpecTimeout(5*time.Minute))
	It(p.name+": the kubelet restarts (20 s down) while the plugin is frozen", func(ctx context.Context) {
		nodeEventSpec(ctx, p, namespace(), "kubelet restart, plugin late", restartKubelet)
	}, SpecTimeout(5*time.Minute))
	It(p.name+": containerd restarts", func(ctx context.Context) {
		nodeEventSpec(ctx, p, namespace(), "containerd restart", func(ctx context.Context) { nodeEvent(ctx, "containerd-restart") })
	}, SpecTimeout(5*time.Minute))
	It(p.name+": the node loses power and boots again", func(ctx context.Context) {
		rebootSpec(ctx, p, namespace())
	}, SpecTimeout(6*time.Minute))
}

// nodeEvent runs a step of hack/e2e-node/node-event.sh.
func nodeEvent(ctx context.Context, step string) {
	out, err := run(ctx, nil, filepath.Join(repoRoot, "hack", "e2e-node", "node-event.sh"), step)
	Expect(err).NotTo(HaveOccurred(), "node-event.sh %s: %s", step, out)
}

// restartKubelet stops the kubelet for kubeletDown with the Gopher plugin frozen, starts it, and
// thaws the plugin pluginLate later.
func restartKubelet(ctx context.Context) {
	signalPlugin(syscall.SIGSTOP)
	defer signalPlugin(syscall.SIGCONT)
	nodeEvent(ctx, "kubelet-stop")
	time.Sleep(kubeletDown)
	nodeEvent(ctx, "kubelet-start")
	time.Sleep(pluginLate)
}

// signalPlugin sends sig to every Gopher plugin process on the node.
func signalPlugin(sig syscall.Signal) {
	entries, err := os.ReadDir("/proc")
	Expect(err).NotTo(HaveOccurred())
	found := 0
	for _, e := range entries {
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !strings.HasSuffix(strings.SplitN(string(cmdline), "\x00", 2)[0], "gopher-device-plugin") {
			continue
		}
		var pid int
		if _, err := fmt.Sscan(e.Name(), &pid); err == nil && syscall.Kill(pid, sig) == nil {
			found++
		}
	}
	Expect(found).To(BeNumerically(">", 0), "no Gopher plugin process to send %v", sig)
}

// podState is what an event must not change in a running device pod.
type podState struct {
	uid types.UID
	// containers are its init and main containers as "name id restarts".
	containers []string
	// gopher is the gopher its main container got (GOPHER, and the file it names).
	gopher string
}

// podStateOf reads the pod's containers and, with kubectl exec, the gopher it got.
func podStateOf(ctx context.Context, ns, name string) podState {
	pod, err := getPod(ctx, ns, name)
	Expect(err).NotTo(HaveOccurred())
	Expect(running(pod)).To(BeTrue(), "%s: %s", name, describeStatus(pod))
	return podState{uid: pod.UID, containers: containersOf(pod), gopher: gopherInside(ctx, ns, name)}
}

func containersOf(pod *corev1.Pod) []string {
	var out []string
	for _, s := range append(slices.Clone(pod.Status.InitContainerStatuses), pod.Status.ContainerStatuses...) {
		id := s.ContainerID
		if id == "" {
			id = "-"
		}
		out = append(out, fmt.Sprintf("%s %s %d", s.Name, id, s.RestartCount))
	}
	return out
}

// gopherInside returns the gopher the pod's main container got: GOPHER names a gopher whose file,
// at /gophers/<id>, holds what the gopher's file on the node holds.
func gopherInside(ctx context.Context, ns, name string) string {
	out, err := execIn(ctx, ns, name, "sh", "-c", `echo "$GOPHER"; cat "/gophers/$GOPHER"`)
	Expect(err).NotTo(HaveOccurred(), "%s has no gopher: %s", name, out)
	id, content, _ := strings.Cut(out, "\n")
	Expect(gopherIDs).To(ContainElement(id), "%s: GOPHER=%q", name, id)
	Expect(content).To(Equal(gopherContent), "%s: /gophers/%s", name, id)
	return id
}

// ensureDevicePods (re)creates the device pods that are not running (the kubelet's own manager
// leaves some Failed) and returns their states.
func ensureDevicePods(ctx context.Context, ns string) map[string]podState {
	states := map[string]podState{}
	for _, name := range devicePods {
		if pod, err := getPod(ctx, ns, name); err == nil && !running(pod) {
			deletePod(ctx, ns, name)
		}
		if _, err := getPod(ctx, ns, name); err != nil {
			createPod(ctx, makeDevicePod(ns, name))
			watchUntilRunning(ctx, ns, name, 3*time.Minute)
		}
		states[name] = podStateOf(ctx, ns, name)
	}
	expectDistinctGophers(states)
	return states
}

func expectDistinctGophers(states map[string]podState) {
	held := map[string]string{}
	for name, s := range states {
		Expect(held).NotTo(HaveKey(s.gopher), "%s and %s hold the same gopher", name, held[s.gopher])
		held[s.gopher] = name
	}
}

// verdict is what happened to a device pod through an event.
type verdict struct {
	kept bool
	text string
}

// settle watches the pod after an event until the deadline: kept (running, the same containers and
// restart counts) unless it fails or its containers change meanwhile.
func settle(ctx context.Context, ns, name string, before podState, deadline time.Time) verdict {
	for {
		pod, err := getPod(ctx, ns, name)
		switch {
		case err != nil:
			return verdict{text: err.Error()}
		case pod.Status.Phase == corev1.PodFailed:
			return verdict{text: fmt.Sprintf("Failed: %s: %s", pod.Status.Reason, pod.Status.Message)}
		case pod.UID != before.uid || !slices.Equal(containersOf(pod), before.containers):
			if time.Now().After(deadline) || running(pod) {
				return verdict{text: "containers restarted: " + describeStatus(pod)}
			}
		case time.Now().After(deadline):
			if !running(pod) {
				return verdict{text: "not running: " + describeStatus(pod)}
			}
			if g := gopherInside(ctx, ns, name); g != before.gopher {
				return verdict{text: fmt.Sprintf("running with %s instead of %s", g, before.gopher)}
			}
			return verdict{kept: true, text: "kept its containers and its gopher"}
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// nodeEventSpec applies an event to the node with the device pods running, then judges each pod
// (asserted on kubedevice's paths, recorded on the kubelet's), the gophers the node offered
// throughout, and a device pod started afterwards.
func nodeEventSpec(ctx context.Context, p lifePath, ns, event string, apply func(context.Context)) {
	before := ensureDevicePods(ctx, ns)
	allocations := watchDeviceAllocations(ctx, ns)
	specs := cdiSpecs()
	// Through node capacity the Node must offer at least what pods hold. Through DRA the slices
	// list every gopher, held or not; the kubelet deletes the node's slices when it starts
	// (upstream, dra_plugin_manager.go: "better to not advertise any local resources" until the
	// driver registers again), so there they are judged by how soon they are all back.
	floor := len(devicePods)
	if p.dra {
		floor = len(gopherIDs)
	}
	reading := sampleOffered(ctx, p, floor)
	start := time.Now()
	apply(ctx)
	recordTiming(p.name+": "+event+": the event took", time.Since(start))
	var texts []string
	// One window for all pods: the second is judged at once when the first's ends.
	deadline := time.Now().Add(settleTime)
	for _, name := range devicePods {
		v := settle(ctx, ns, name, before[name], deadline)
		texts = append(texts, name+": "+v.text)
		if !p.control {
			Expect(v.kept).To(BeTrue(), "%s through the %s: %s", name, event, v.text)
		}
	}
	r := reading()
	texts = append(texts, fmt.Sprintf("gophers offered: lowest %d (%d held), below %d for %s", r.lowest, len(devicePods), floor, r.below.Round(100*time.Millisecond)))
	switch {
	case p.control:
	case p.dra:
		Eventually(ctx, func() (int, error) { return offered(ctx, p) }).Should(Equal(floor), "every gopher back in the slices")
		// About a second after the kubelet's wipe (the slice controller's sync delay); with the
		// library's 30 s the node offered none for 30 s.
		Expect(r.below).To(BeNumerically("<", 10*time.Second), "the slices the kubelet deleted came back late")
	default:
		Expect(r.lowest).To(BeNumerically(">=", floor), "the gophers offered dropped below what pods hold")
	}
	if !p.control {
		Expect(allocations()).To(BeEmpty(), "DeviceAllocations were written through the %s", event)
		Expect(cdiSpecs()).To(Equal(specs), "the prepared claims' CDI specs changed through the %s", event)
	}
	texts = append(texts, startAfter(ctx, p, ns, event))
	recordOutcome(event, p, strings.Join(texts, "; "))
}

// startAfter runs a new device pod after an event and returns how it went; on kubedevice's paths
// it must run with the free gopher.
func startAfter(ctx context.Context, p lifePath, ns, event string) string {
	name := "after-" + slug(event)
	created := time.Now()
	createPod(ctx, MakePod(name, ns).Limits(gopherResource, 1).Obj())
	defer deletePod(ctx, ns, name)
	ok, text := runningOrFailed(ctx, ns, name, 2*time.Minute)
	if !p.control {
		Expect(ok).To(BeTrue(), "%s: %s", name, text)
	}
	if ok {
		gopherInside(ctx, ns, name)
		recordTiming(p.name+": "+event+": a new device pod created -> running with a gopher", time.Since(created))
		return fmt.Sprintf("a new device pod ran in %s", time.Since(created).Round(100*time.Millisecond))
	}
	return "a new device pod: " + text
}

// slug makes a name of an event's: lower-case letters and digits, dashes between words.
func slug(event string) string {
	return strings.Join(strings.FieldsFunc(strings.ToLower(event), func(r rune) bool {
		return (r < 'a' || r > 'z') && (r < '0' || r > '9')
	}), "-")
}

// runningOrFailed waits until the pod runs (true) or has failed or the timeout passed (false,
// why).
func runningOrFailed(ctx context.Context, ns, name string, timeout time.Duration) (bool, string) {
	deadline := time.Now().Add(timeout)
	for {
		pod, err := getPod(ctx, ns, name)
		switch {
		case err != nil:
			return false, err.Error()
		case running(pod) && (len(pod.Spec.InitContainers) == 0 || initDone(pod)):
			return true, "running"
		case pod.Status.Phase == corev1.PodFailed:
			return false, fmt.Sprintf("Failed: %s: %s", pod.Status.Reason, pod.Status.Message)
		case time.Now().After(deadline):
			return false, "not running after " + timeout.String() + ": " + describeStatus(pod)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// runningAgain waits until the pod runs again after a reboot: all its containers new (the status
// the kubelet wrote before the power loss still says Running until it writes another), or until
// it has failed or the timeout passed.
func runningAgain(ctx context.Context, ns, name string, before podState, timeout time.Duration) (bool, string) {
	deadline := time.Now().Add(timeout)
	for {
		ok, text := runningOrFailed(ctx, ns, name, time.Until(deadline))
		if !ok {
			return false, text
		}
		pod, err := getPod(ctx, ns, name)
		if err != nil {
			return false, err.Error()
		}
		if renewed(before.containers, containersOf(pod)) {
			return true, "running"
		}
		if time.Now().After(deadline) {
			return false, "still shows the containers from before the reboot: " + describeStatus(pod)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// renewed: every container of after has another ID than it had before.
func renewed(before, after []string) bool {
	ids := map[string]bool{}
	for _, c := range before {
		ids[strings.Fields(c)[1]] = true
	}
	for _, c := range after {
		if f := strings.Fields(c); len(f) < 2 || f[1] == "-" || ids[f[1]] {
			return false
		}
	}
	return len(after) > 0
}

func initDone(pod *corev1.Pod) bool {
	for _, s := range pod.Status.InitContainerStatuses {
		if s.State.Terminated == nil || s.State.Terminated.ExitCode != 0 {
			return false
		}
	}
	return true
}

// rebootSpec is the power loss: the device pods running, a third pod holding the third gopher and
// deleted while the node is off, then the boot. On kubedevice's paths every device pod runs again
// with the gopher it had, the deleted pod's gopher is free for a new pod, and nothing is held
// twice; the agent's and plugin's own pods start at the same time as the device pods.
func rebootSpec(ctx context.Context, p lifePath, ns string) {
	const event = "reboot (power loss)"
	before := ensureDevicePods(ctx, ns)
	createPod(ctx, makeDevicePod(ns, "ended"))
	watchUntilRunning(ctx, ns, "ended", 2*time.Minute)
	endedGopher := gopherInside(ctx, ns, "ended")

	nodeEvent(ctx, "power-off")
	Expect(clientset.CoreV1().Pods(ns).Delete(ctx, "ended", metav1.DeleteOptions{})).To(Succeed())
	on := time.Now()
	nodeEvent(ctx, "power-on")
	recordTiming(p.name+": "+event+": power-on -> the kubelet's healthz answers", time.Since(on))

	var texts []string
	after := map[string]podState{}
	for _, name := range devicePods {
		ok, text := runningAgain(ctx, ns, name, before[name], 3*time.Minute)
		if !p.control {
			Expect(ok).To(BeTrue(), "%s after the reboot: %s", name, text)
		}
		if !ok {
			texts = append(texts, name+": "+text)
			continue
		}
		after[name] = podStateOf(ctx, ns, name)
		recordTiming(p.name+": "+event+": power-on -> "+name+" running with a gopher", time.Since(on))
		texts = append(texts, fmt.Sprintf("%s: running again in %s with %s (before: %s)", name,
			time.Since(on).Round(100*time.Millisecond), after[name].gopher, before[name].gopher))
		if !p.control {
			Expect(after[name].gopher).To(Equal(before[name].gopher), "%s got another gopher after the reboot", name)
		}
	}
	expectDistinctGophers(after)
	Eventually(ctx, func() bool { _, err := getPod(ctx, ns, "ended"); return err != nil }).
		WithTimeout(2*time.Minute).Should(BeTrue(), "the pod deleted while the node was off is gone")
	if !p.control {
		expectHeld(ctx, p, len(devicePods))
		texts = append(texts, "the deleted pod's "+endedGopher+" freed")
	}
	texts = append(texts, startAfter(ctx, p, ns, event))
	recordOutcome(event, p, strings.Join(texts, "; "))
}

// expectHeld waits until the NodeDevice shows n gophers held, each by one container.
func expectHeld(ctx context.Context, p lifePath, n int) {
	Eventually(ctx, func(g Gomega) {
		nd, err := gopherNodeDevice(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(nd.Status.Allocated).To(BeEquivalentTo(n), "gophers held on the %s", p.name)
	}).Should(Succeed())
}

// measureStartUp creates latencyPods device pods one after the other and reports bound -> running
// with a gopher: its median and maximum.
func measureStartUp(ctx context.Context, p lifePath, ns string) {
	var took []time.Duration
	for i := range latencyPods {
		name := fmt.Sprintf("latency-%d", i)
		createPod(ctx, MakePod(name, ns).Limits(gopherResource, 1).Obj())
		t := watchUntilRunning(ctx, ns, name, 2*time.Minute)
		took = append(took, t.running.Sub(t.bound))
		gopherInside(ctx, ns, name)
		deletePod(ctx, ns, name)
	}
	sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
	p50, highest := took[len(took)/2], took[len(took)-1]
	recordTiming(p.name+": start-up, bound -> running with a gopher, p50", p50)
	recordTiming(p.name+": start-up, bound -> running with a gopher, max", highest)
	AddReportEntry(latencyPrefix+p.name, fmt.Sprintf("p50 %s, max %s over %d pods", p50.Round(time.Millisecond), highest.Round(time.Millisecond), len(took)))
}

// offeredReading is what sampleOffered saw: the lowest number of gophers offered, and for how
// long fewer than the floor were.
type offeredReading struct {
	lowest int
	below  time.Duration
}

// sampleOffered reads, every 250 ms until the returned function is called, how many gophers the
// node offers: the Node's allocatable on the node-capacity paths, the untainted gophers in the
// node's ResourceSlices on the DRA path.
func sampleOffered(ctx context.Context, p lifePath, floor int) func() offeredReading {
	r := offeredReading{lowest: -1}
	stop := sampleEvery(ctx, p, func(n int, since time.Duration) {
		if r.lowest < 0 || n < r.lowest {
			r.lowest = n
		}
		if n < floor {
			r.below += since
		}
	})
	return func() offeredReading {
		stop()
		return r
	}
}

// sampleEvery calls observe, from one goroutine, with each reading of offered(p) every 250 ms
// and the time since the reading before, until the returned function is called; it returns once
// observe is no longer called.
func sampleEvery(ctx context.Context, p lifePath, observe func(n int, since time.Duration)) func() {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer GinkgoRecover()
		defer close(done)
		last := time.Now()
		for ctx.Err() == nil {
			if n, err := offered(ctx, p); err == nil {
				observe(n, time.Since(last))
			}
			last = time.Now()
			select {
			case <-ctx.Done():
			case <-time.After(250 * time.Millisecond):
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

func offered(ctx context.Context, p lifePath) (int, error) {
	if !p.dra {
		n, err := clientset.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
		if err != nil {
			return 0, err
		}
		q := n.Status.Allocatable[gopherResource]
		return int(q.Value()), nil
	}
	list := &resourcev1.ResourceSliceList{}
	if err := kd.List(ctx, list, client.MatchingFields{resourcev1.ResourceSliceSelectorNodeName: node.Name}); err != nil {
		return 0, err
	}
	count := 0
	for _, rs := range list.Items {
		for _, d := range rs.Spec.Devices {
			if rs.Spec.Driver == draDriver && len(d.Taints) == 0 {
				count++
			}
		}
	}
	return count, nil
}

// cdiSpecs returns the CDI specs in cdiDir, by file name.
func cdiSpecs() map[string]string {
	out := map[string]string{}
	entries, err := os.ReadDir(cdiDir)
	if os.IsNotExist(err) {
		return out
	}
	Expect(err).NotTo(HaveOccurred())
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(cdiDir, e.Name()))
		Expect(err).NotTo(HaveOccurred())
		out[e.Name()] = string(b)
	}
	return out
}

// deleteAll deletes every pod in the namespace and waits until they are gone.
func deleteAll(ctx context.Context, ns string) {
	pods, err := clientset.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	Expect(err).NotTo(HaveOccurred())
	for _, pod := range pods.Items {
		deletePod(ctx, ns, pod.Name)
	}
}

// The side-by-side tables: an outcome per event and path, a start-up latency per path.
const (
	outcomePrefix = "outcome: "
	latencyPrefix = "start-up latency: "
)

// recordOutcome reports what an event did on a path, for the suite's side-by-side table.
func recordOutcome(event string, p lifePath, text string) {
	GinkgoWriter.Printf("%s%s | %s: %s\n", outcomePrefix, event, p.name, text)
	AddReportEntry(outcomePrefix+event+" | "+p.name, text)
}

// The node events side by side, after all specs.
var _ = ReportAfterSuite("node events", func(report Report) {
	var outcomes, latencies []string
	for _, spec := range report.SpecReports {
		for _, e := range spec.ReportEntries {
			if name, ok := strings.CutPrefix(e.Name, outcomePrefix); ok {
				outcomes = append(outcomes, fmt.Sprintf("  %s\n      %s", name, e.StringRepresentation()))
			}
			if name, ok := strings.CutPrefix(e.Name, latencyPrefix); ok {
				latencies = append(latencies, fmt.Sprintf("  %-40s %s", name, e.StringRepresentation()))
			}
		}
	}
	sort.Strings(outcomes)
	if len(outcomes) > 0 {
		fmt.Printf("\nNode events, side by side (event | path):\n%s\n", strings.Join(outcomes, "\n"))
	}
	if len(latencies) > 0 {
		fmt.Printf("\nStart-up latency, bound -> running with a gopher:\n%s\n", strings.Join(latencies, "\n"))
	}
})
