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
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
)

// held is a pod holding one gopher, as it was when the scenario recorded it (hold): what an
// upgrade or a rollback must leave as it is.
type held struct {
	namespace   string
	name        string
	uid         types.UID
	containerID string
	restarts    int32
	// allocation is its DeviceAllocation's UID; devices what that lists (container/resource=id).
	allocation types.UID
	devices    []string
	// gopher is the ID of the gopher it holds.
	gopher string
	// holder is what its NodeDevice names as the gopher's holder (holderOf).
	holder string
	// claimUID is the ResourceClaim it holds the gopher through, when DRA serves the gophers.
	claimUID types.UID
}

// hold waits until the pod runs holding one gopher, in its DeviceAllocation (Allocated) and as
// the NodeDevice's holder, and returns it as it is then.
func hold(ctx context.Context, ns, name string, dra bool) held {
	const prefix = "main/" + gopherResource + "="
	var h held
	Eventually(ctx, func(g Gomega) {
		pod, err := getPod(ctx, ns, name)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(running(pod)).To(BeTrue(), describeStatus(pod))
		da, err := deviceAllocationOf(ctx, pod)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(da).NotTo(BeNil(), "no DeviceAllocation of pod %s", name)
		g.Expect(meta.IsStatusConditionTrue(da.Status.Conditions, kdv1alpha1.DeviceAllocationAllocated)).To(BeTrue(),
			"conditions of %s's DeviceAllocation: %+v", name, da.Status.Conditions)
		devices := allocatedDevices(da)
		g.Expect(devices).To(ConsistOf(HavePrefix(prefix)), "the devices of %s's DeviceAllocation", name)
		cs := pod.Status.ContainerStatuses[0]
		h = held{namespace: ns, name: name, uid: pod.UID, containerID: cs.ContainerID, restarts: cs.RestartCount,
			allocation: da.UID, devices: devices, gopher: strings.TrimPrefix(devices[0], prefix)}
		h.holder = "pod " + ns + "/" + name + "/main"
		if dra {
			st := pod.Status.ExtendedResourceClaimStatus
			g.Expect(st).NotTo(BeNil(), "pod %s holds its gopher through node capacity, not DRA", name)
			claim := &resourcev1.ResourceClaim{}
			g.Expect(kd.Get(ctx, client.ObjectKey{Namespace: ns, Name: st.ResourceClaimName}, claim)).To(Succeed())
			h.holder, h.claimUID = "claim "+ns+"/"+claim.Name, claim.UID
		}
		holders, err := gopherHolders(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(holders).To(HaveKeyWithValue(h.gopher, h.holder), "the NodeDevices' holders")
	}).Should(Succeed())
	return h
}

// gopherHolders maps each gopher of the node's NodeDevices to its holder (holderOf), "" when free.
func gopherHolders(ctx context.Context) (map[string]string, error) {
	nds, err := gopherNodeDevices(ctx)
	if err != nil {
		return nil, err
	}
	holders := map[string]string{}
	for _, nd := range nds {
		for _, d := range nd.Status.Devices {
			holders[d.ID] = holderOf(d.Holder)
		}
	}
	return holders, nil
}

// holderOf says who holds a device: "pod <ns>/<pod>/<container>", "claim <ns>/<claim>", or "".
func holderOf(h *kdv1alpha1.DeviceHolder) string {
	switch {
	case h == nil:
		return ""
	case h.ClaimName != "":
		return "claim " + h.Namespace + "/" + h.ClaimName
	default:
		return "pod " + h.Namespace + "/" + h.PodName + "/" + h.ContainerName
	}
}

// gopherNodeDevices lists the node's NodeDevices of example.com/gopher (every shard).
func gopherNodeDevices(ctx context.Context) ([]kdv1alpha1.NodeDevice, error) {
	list := &kdv1alpha1.NodeDeviceList{}
	if err := kd.List(ctx, list, client.MatchingLabels{"kubedevice.io/node": node.Name}); err != nil {
		return nil, err
	}
	var out []kdv1alpha1.NodeDevice
	for _, nd := range list.Items {
		if nd.Spec.NodeName == node.Name && nd.Spec.ResourceName == gopherResource {
			out = append(out, nd)
		}
	}
	return out, nil
}

// expectConverged waits until the pods run as they were recorded, holding the same gophers in the
// same DeviceAllocations, and the NodeDevices say the same: both gophers Registered and healthy,
// each held by its pod and no other, the agent ready; and until the Node offers both gophers (or,
// through DRA, the ResourceSlices do).
func expectConverged(ctx context.Context, path upgradePath, pods ...held) {
	Expect(pods).NotTo(BeEmpty())
	Eventually(ctx, func(g Gomega) {
		list, err := clientset.CoreV1().Pods(pods[0].namespace).List(ctx, metav1.ListOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		das := &kdv1alpha1.DeviceAllocationList{}
		g.Expect(kd.List(ctx, das)).To(Succeed())
		g.Expect(podViolations(list.Items, pods)).To(BeEmpty())
		g.Expect(allocationViolations(das.Items, pods)).To(BeEmpty())

		want := map[string]string{gopherID: "", secondGopherID: ""}
		for _, h := range pods {
			want[h.gopher] = h.holder
		}
		g.Expect(gopherHolders(ctx)).To(Equal(want), "the NodeDevices' holders")
		nds, err := gopherNodeDevices(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		var capacity, allocatable, allocated int64
		for _, nd := range nds {
			g.Expect(nd.Status.Plugin).NotTo(BeNil(), "NodeDevice %s", nd.Name)
			g.Expect(nd.Status.Plugin.State).To(Equal(kdv1alpha1.PluginStateRegistered), "NodeDevice %s", nd.Name)
			g.Expect(meta.IsStatusConditionTrue(nd.Status.Conditions, kdv1alpha1.NodeDeviceAgentReady)).To(BeTrue(),
				"NodeDevice %s: %+v", nd.Name, nd.Status.Conditions)
			for _, d := range nd.Status.Devices {
				g.Expect(d.Health).To(Equal(kdv1alpha1.DeviceHealthy), "gopher %s", d.ID)
			}
			capacity += int64(nd.Status.Capacity)
			allocatable += int64(nd.Status.Allocatable)
			allocated += int64(nd.Status.Allocated)
		}
		g.Expect([]int64{capacity, allocatable, allocated}).To(Equal([]int64{2, 2, int64(len(pods))}),
			"the NodeDevices' capacity, allocatable and allocated gophers")
		if path.dra {
			devices := gopherSliceDevices(ctx, g)
			g.Expect(devices).To(And(HaveKey(gopherID), HaveKey(secondGopherID)), "the ResourceSlices")
			return
		}
		n, err := clientset.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		for _, l := range []corev1.ResourceList{n.Status.Capacity, n.Status.Allocatable} {
			q, ok := l[gopherResource]
			g.Expect(ok).To(BeTrue(), "%s in %v", gopherResource, l)
			g.Expect(q.Value()).To(BeEquivalentTo(2), "%s in %v", gopherResource, l)
		}
	}).WithTimeout(2 * time.Minute).Should(Succeed())
}

// podViolations: each held pod is there, the same object, running in the same container, never
// restarted; no pod of the namespace failed or restarted a container.
func podViolations(pods []corev1.Pod, want []held) []string {
	var out []string
	byName := map[string]*corev1.Pod{}
	for i := range pods {
		p := &pods[i]
		byName[p.Name] = p
		if p.Status.Phase == corev1.PodFailed {
			out = append(out, fmt.Sprintf("pod %s failed: %s %s", p.Name, p.Status.Reason, p.Status.Message))
		}
		for _, cs := range p.Status.ContainerStatuses {
			if cs.RestartCount > 0 {
				out = append(out, fmt.Sprintf("pod %s: container %s restarted %d times", p.Name, cs.Name, cs.RestartCount))
			}
		}
	}
	for _, h := range want {
		p, ok := byName[h.name]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("pod %s is gone", h.name))
		case p.UID != h.uid:
			out = append(out, fmt.Sprintf("pod %s is another pod (UID %s, was %s)", h.name, p.UID, h.uid))
		case p.DeletionTimestamp != nil || !running(p):
			out = append(out, fmt.Sprintf("pod %s is not running: %s", h.name, describeStatus(p)))
		case p.Status.ContainerStatuses[0].ContainerID != h.containerID:
			out = append(out, fmt.Sprintf("pod %s runs container %s, was %s", h.name, p.Status.ContainerStatuses[0].ContainerID, h.containerID))
		case p.Status.ContainerStatuses[0].RestartCount != h.restarts:
			out = append(out, fmt.Sprintf("pod %s restarted (%d, was %d)", h.name, p.Status.ContainerStatuses[0].RestartCount, h.restarts))
		}
	}
	return out
}

// allocationViolations: no gopher is in the DeviceAllocations of two pods, and each held pod's
// DeviceAllocation is the same object, naming the same devices.
func allocationViolations(das []kdv1alpha1.DeviceAllocation, want []held) []string {
	var out []string
	pods := map[string][]string{} // gopher → pods whose DeviceAllocations name it
	byPod := map[string]*kdv1alpha1.DeviceAllocation{}
	for i := range das {
		da := &das[i]
		byPod[da.Namespace+"/"+da.Spec.PodUID] = da
		for _, d := range allocatedDevices(da) {
			if id, ok := strings.CutPrefix(d, "main/"+gopherResource+"="); ok {
				pods[id] = append(pods[id], da.Namespace+"/"+da.Spec.PodName)
			}
		}
	}
	for _, id := range sortedKeys(pods) {
		if len(pods[id]) > 1 {
			out = append(out, fmt.Sprintf("gopher %s is in the DeviceAllocations of %v", id, pods[id]))
		}
	}
	for _, h := range want {
		da, ok := byPod[h.namespace+"/"+string(h.uid)]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("the DeviceAllocation of pod %s is gone", h.name))
		case da.UID != h.allocation:
			out = append(out, fmt.Sprintf("the DeviceAllocation of pod %s is another object (UID %s, was %s)", h.name, da.UID, h.allocation))
		case !slices.Equal(allocatedDevices(da), h.devices):
			out = append(out, fmt.Sprintf("the DeviceAllocation of pod %s names %v, was %v", h.name, allocatedDevices(da), h.devices))
		}
	}
	return out
}

// holderViolations: no NodeDevice names a holder of a gopher other than the held pod that holds
// it (a held gopher may show no holder for a moment while an agent starts: expectConverged
// checks it afterwards), and none names a holder of a gopher no held pod holds.
func holderViolations(holders map[string]string, want []held) []string {
	var out []string
	expected := map[string]string{}
	for _, h := range want {
		expected[h.gopher] = h.holder
	}
	for _, id := range sortedKeys(holders) {
		got := holders[id]
		if got == "" || got == expected[id] {
			continue
		}
		if expected[id] == "" {
			out = append(out, fmt.Sprintf("NodeDevice: gopher %s held by %s, which holds none", id, got))
		} else {
			out = append(out, fmt.Sprintf("NodeDevice: gopher %s held by %s, not %s", id, got, expected[id]))
		}
	}
	return out
}

// claimViolations: no device is in the allocation of two ResourceClaims.
func claimViolations(claims []resourcev1.ResourceClaim) []string {
	owners := map[string][]string{} // driver/pool/device → claims
	for _, c := range claims {
		if c.Status.Allocation == nil {
			continue
		}
		for _, r := range c.Status.Allocation.Devices.Results {
			key := r.Driver + "/" + r.Pool + "/" + r.Device
			owners[key] = append(owners[key], c.Namespace+"/"+c.Name)
		}
	}
	var out []string
	for _, key := range sortedKeys(owners) {
		if len(owners[key]) > 1 {
			out = append(out, fmt.Sprintf("device %s is allocated to the claims %v", key, owners[key]))
		}
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// watchdog samples the cluster every watchdogPeriod while an upgrade or a rollback runs, and
// keeps each violation it sees (the first time, with when).
type watchdog struct {
	ns    string
	dra   bool
	held  []held
	start time.Time
	stopC context.CancelFunc
	done  chan struct{}

	mu         sync.Mutex
	seen       map[string]bool
	found      []string
	samples    int
	lastFailed error
}

// startWatchdog starts sampling; stop ends it.
func startWatchdog(ctx context.Context, ns string, dra bool, pods []held) *watchdog {
	ctx, cancel := context.WithCancel(ctx)
	w := &watchdog{ns: ns, dra: dra, held: pods, start: time.Now(), stopC: cancel, done: make(chan struct{}), seen: map[string]bool{}}
	go func() {
		defer GinkgoRecover()
		defer close(w.done)
		tick := time.NewTicker(watchdogPeriod)
		defer tick.Stop()
		for {
			w.sample(ctx)
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	// Stopped at the latest when the spec ends; what it saw is printed when the spec failed before
	// it was looked at (a rollout that never became Ready, say).
	DeferCleanup(func() {
		if seen, _ := w.stop(); CurrentSpecReport().Failed() && len(seen) > 0 {
			GinkgoWriter.Printf("the watchdog saw:\n  %s\n", strings.Join(seen, "\n  "))
		}
	})
	return w
}

// stop stops sampling and returns what the watchdog saw and how many samples it took.
func (w *watchdog) stop() ([]string, int) {
	w.stopC()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.lastFailed != nil {
		GinkgoWriter.Printf("the watchdog's last failed sample: %v\n", w.lastFailed)
	}
	return slices.Clone(w.found), w.samples
}

// violations is what the watchdog saw so far.
func (w *watchdog) violations() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.found)
}

// sample reads the namespace's pods, the DeviceAllocations, the gophers' NodeDevices and the Node
// (or, through DRA, the ResourceClaims) once, and records what violates the invariants.
// A sample the API server does not answer is not counted.
func (w *watchdog) sample(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var violations []string
	err := func() error {
		pods, err := clientset.CoreV1().Pods(w.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		das := &kdv1alpha1.DeviceAllocationList{}
		if err := kd.List(ctx, das); err != nil {
			return err
		}
		holders, err := gopherHolders(ctx)
		if err != nil {
			return err
		}
		violations = append(podViolations(pods.Items, w.held), allocationViolations(das.Items, w.held)...)
		violations = append(violations, holderViolations(holders, w.held)...)
		more, err := w.pathViolations(ctx)
		violations = append(violations, more...)
		return err
	}()
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		if ctx.Err() == nil {
			w.lastFailed = err
		}
		return
	}
	w.samples++
	at := time.Since(w.start).Round(time.Millisecond)
	for _, v := range violations {
		if !w.seen[v] {
			w.seen[v] = true
			w.found = append(w.found, fmt.Sprintf("+%s: %s", at, v))
		}
	}
}

// pathViolations: through node capacity, the Node's allocatable never below the gophers the held
// pods hold; through DRA, no device in two claims.
func (w *watchdog) pathViolations(ctx context.Context) ([]string, error) {
	if w.dra {
		claims := &resourcev1.ResourceClaimList{}
		if err := kd.List(ctx, claims); err != nil {
			return nil, err
		}
		return claimViolations(claims.Items), nil
	}
	n, err := clientset.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	q := n.Status.Allocatable[gopherResource]
	if q.Value() < int64(len(w.held)) {
		return []string{fmt.Sprintf("the Node's allocatable %s is %s, below the %d held", gopherResource, q.String(), len(w.held))}, nil
	}
	return nil, nil
}

// warningsSince lists the Warning events of the namespace's objects since start (a pod refused
// its devices, a container that could not be created or started, ...), but the kubelet's
// MissingClusterDNS.
func warningsSince(ctx context.Context, ns string, start time.Time) []string {
	events, err := clientset.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "type=" + corev1.EventTypeWarning})
	Expect(err).NotTo(HaveOccurred())
	var out []string
	for _, e := range events.Items {
		// The e2e node runs no cluster DNS: the kubelet warns of it for pods it syncs (hack/e2e-node).
		if e.Reason == "MissingClusterDNS" {
			continue
		}
		if !eventTime(&e).Before(start.Truncate(time.Second)) {
			out = append(out, fmt.Sprintf("%s %s/%s: %s: %s", eventTime(&e).Format(time.RFC3339), e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, e.Message))
		}
	}
	return out
}

// reportCheckpointEvents reports the CheckpointCorrupt events of the node since start: an agent
// that could not read the checkpoint another version wrote, and rebuilt it from the
// DeviceAllocations. By design on a downgrade across checkpoint formats (docs/reliability.md, S19), so
// reported, not failed; the pods' checks say whether the rebuild kept their devices.
func reportCheckpointEvents(ctx context.Context, label string, start time.Time) {
	events, err := clientset.CoreV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: "reason=" + kdv1alpha1.EventReasonCheckpointCorrupt})
	Expect(err).NotTo(HaveOccurred())
	for _, e := range events.Items {
		if e.InvolvedObject.Name == node.Name && !eventTime(&e).Before(start.Truncate(time.Second)) {
			msg := fmt.Sprintf("%s: the agent found its checkpoint corrupt: %s", label, e.Message)
			GinkgoWriter.Println(msg)
			AddReportEntry("checkpoint: "+label, msg)
		}
	}
}

// eventTime is when an event last happened, whichever API wrote it.
func eventTime(e *corev1.Event) time.Time {
	switch {
	case e.Series != nil && !e.Series.LastObservedTime.IsZero():
		return e.Series.LastObservedTime.Time
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	default:
		return e.FirstTimestamp.Time
	}
}
