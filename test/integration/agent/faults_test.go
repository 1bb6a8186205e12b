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
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/onsi/gomega/types"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
	"github.com/kubedevice/kubedevice/internal/agent"
	"github.com/kubedevice/kubedevice/internal/nodeagent"
	"github.com/kubedevice/kubedevice/internal/nodeagent/checkpoint"
	"github.com/kubedevice/kubedevice/internal/nodeagent/dptest"
	"github.com/kubedevice/kubedevice/internal/testutil"
)

// The fault scenarios of the reliability matrix (docs/reliability.md, "The fault matrix") that run against
// the in-process agent; the SIGKILL ones are in test/crash.

// without returns devs without the device id.
func without(devs []*pluginapi.Device, id string) []*pluginapi.Device {
	return slices.DeleteFunc(slices.Clone(devs), func(d *pluginapi.Device) bool { return d.GetID() == id })
}

// deviceStatus returns the status of device id in nd, or nil.
func deviceStatus(nd *kdv1alpha1.NodeDevice, id string) *kdv1alpha1.DeviceStatus {
	for i := range nd.Status.Devices {
		if nd.Status.Devices[i].ID == id {
			return &nd.Status.Devices[i]
		}
	}
	return nil
}

// haveDevice matches a NodeDevice whose device id (nil when it lists none) matches m.
func haveDevice(id string, m types.GomegaMatcher) types.GomegaMatcher {
	return WithTransform(func(nd *kdv1alpha1.NodeDevice) *kdv1alpha1.DeviceStatus { return deviceStatus(nd, id) }, m)
}

// allocateCalls is the number of Allocate calls p received.
func allocateCalls(p *dptest.Plugin) int {
	n := 0
	for _, c := range p.Calls() {
		if c == dptest.CallAllocate {
			n++
		}
	}
	return n
}

// setPhase sets the pod's phase, as the kubelet does when its containers end.
func setPhase(pod *corev1.Pod, phase corev1.PodPhase) {
	GinkgoHelper()
	got := &corev1.Pod{}
	Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(pod), got)).To(Succeed())
	got.Status.Phase = phase
	Expect(k8sClient.Status().Update(ctx, got)).To(Succeed())
}

var _ = Describe("Node agent under faults", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	It("shows a held device its plugin stopped reporting as held and missing, never hands it out again while held, and drops it once freed (S20)", func() {
		n := newNodeAgent(0)
		devs := gophers("gopher", 3)
		p := n.plugin(gopher, devs)
		n.register(p)
		Eventually(n.nodeDevice(gopher, 0)).Should(HaveField("Status.Allocatable", BeEquivalentTo(3)))
		pod := createPod(testutil.MakePod("holder", ns).Node(n.name).Request(gopher, 1))
		da := allocated(pod)
		id := deviceIDs(da, gopher)[0]

		By("the plugin no longer reporting the held device")
		p.Update(without(devs, id))
		Eventually(n.nodeDevice(gopher, 0)).Should(And(
			haveDevice(id, And(
				Not(BeNil()),
				HaveField("Health", kdv1alpha1.DeviceUnhealthy),
				HaveField("Reason", kdv1alpha1.DeviceReasonNotReported),
				HaveField("Holder", HaveField("PodUID", string(pod.UID))),
				HaveField("LastTransitionTime", Not(BeNil())),
			)),
			HaveField("Status.Allocated", BeEquivalentTo(1)),
			HaveField("Status.Allocatable", BeEquivalentTo(2)),
		), "the held device is shown, held and missing, not hidden")
		Expect(n.holds(pod)).To(BeTrue(), "the pod keeps its device")
		// Its DeviceAllocation says so (issue 25), and nothing else of it changes.
		Eventually(unhealthyDevices(pod)).Should(ConsistOf(holding(id, kdv1alpha1.DeviceReasonNotReported, "app")))
		Consistently(deviceAllocation(pod), time.Second).Should(sameAllocation(da),
			"the pod's allocation is not touched")

		By("the device reported again while still held: never offered to another pod")
		p.Update(devs)
		Eventually(n.nodeDevice(gopher, 0)).Should(haveDevice(id, HaveField("Health", kdv1alpha1.DeviceHealthy)))
		other := createPod(testutil.MakePod("other", ns).Node(n.name).Request(gopher, 2))
		Expect(deviceIDs(allocated(other), gopher)).NotTo(ContainElement(id))

		By("the device dropped again and its pod gone: no longer shown")
		p.Update(without(devs, id))
		Eventually(n.nodeDevice(gopher, 0)).Should(haveDevice(id, HaveField("Reason", kdv1alpha1.DeviceReasonNotReported)))
		deletePod(pod)
		Eventually(n.nodeDevice(gopher, 0)).Should(And(
			haveDevice(id, BeNil()),
			HaveField("Status.Allocated", BeEquivalentTo(2)),
			HaveField("Status.Capacity", BeEquivalentTo(2)),
		))
	})
	It("keeps an allocated device that turns unhealthy held and shown Unhealthy with its holder, leaves the pod alone, and allocates it again only once healthy (S9)", func() {
		n := newNodeAgent(0)
		devs := gophers("gopher", 2)
		p := n.plugin(gopher, devs)
		n.register(p)
		Eventually(n.nodeDevice(gopher, 0)).Should(HaveField("Status.Allocatable", BeEquivalentTo(2)))
		pod := createPod(testutil.MakePod("user", ns).Node(n.name).Request(gopher, 1))
		da := allocated(pod)
		id := deviceIDs(da, gopher)[0]
		allocates := allocateCalls(p)

		By("the plugin reporting the held device unhealthy")
		sick := slices.Clone(devs)
		for i, d := range sick {
			if d.GetID() == id {
				sick[i] = dptest.Device(id, pluginapi.Unhealthy)
			}
		}
		p.Update(sick)
		Eventually(n.nodeDevice(gopher, 0)).WithTimeout(5 * time.Second).Should(And(
			haveDevice(id, And(
				HaveField("Health", kdv1alpha1.DeviceUnhealthy),
				HaveField("Reason", kdv1alpha1.DeviceReasonPluginReportedUnhealthy),
				HaveField("Holder", HaveField("PodUID", string(pod.UID))),
			)),
			HaveField("Status.Allocated", BeEquivalentTo(1)),
			HaveField("Status.Unhealthy", BeEquivalentTo(1)),
			HaveField("Status.Allocatable", BeEquivalentTo(1)),
			HaveField("Status.Capacity", BeEquivalentTo(2)),
		))
		// Its DeviceAllocation says so (issue 25), and nothing else of it changes.
		Eventually(unhealthyDevices(pod)).Should(ConsistOf(holding(id, kdv1alpha1.DeviceReasonPluginReportedUnhealthy, "app")))
		Consistently(deviceAllocation(pod), time.Second).Should(sameAllocation(da),
			"the running pod is not disturbed: its allocation is not rewritten")
		Expect(n.holds(pod)).To(BeTrue())
		Expect(allocateCalls(p)).To(Equal(allocates), "no Allocate for the pod holding the unhealthy device")

		By("the pod gone: the unhealthy device stays unallocatable, as the kubelet keeps allocatable 0")
		deletePod(pod)
		Eventually(n.nodeDevice(gopher, 0)).Should(And(
			HaveField("Status.Allocated", BeEquivalentTo(0)),
			HaveField("Status.Allocatable", BeEquivalentTo(1)),
		))
		first := createPod(testutil.MakePod("first", ns).Node(n.name).Request(gopher, 1))
		Expect(deviceIDs(allocated(first), gopher)).NotTo(ContainElement(id))
		waiting := createPod(testutil.MakePod("waiting", ns).Node(n.name).Request(gopher, 1))
		Eventually(deviceAllocation(waiting)).Should(HaveField("Status.Conditions", ContainElement(And(
			HaveField("Type", kdv1alpha1.DeviceAllocationAllocated), HaveField("Status", metav1.ConditionFalse),
			HaveField("Reason", kdv1alpha1.ReasonInsufficientDevices)))))

		By("healthy again: the waiting pod gets it")
		p.Update(devs)
		Expect(deviceIDs(allocated(waiting), gopher)).To(Equal([]string{id}))
	})

	It("frees the devices of pods that ended while the agent was down, releases their DeviceAllocations, leaves their phase alone and never allocates to an ended pod (S8)", func() {
		n := newNodeAgent(0)
		p := n.plugin(gopher, gophers("gopher", 3))
		n.register(p)
		done := createPod(testutil.MakePod("done", ns).Node(n.name).Request(gopher, 1))
		failed := createPod(testutil.MakePod("failed", ns).Node(n.name).Request(gopher, 1))
		allocated(done)
		allocated(failed)

		By("the pods ending, and one created and ended, while the agent is down")
		n.stop()
		n.stop = nil
		setPhase(done, corev1.PodSucceeded)
		setPhase(failed, corev1.PodFailed)
		late := createPod(testutil.MakePod("late", ns).Node(n.name).Request(gopher, 1))
		setPhase(late, corev1.PodSucceeded)

		n.start()
		p = n.restartPlugin(p, gophers("gopher", 3))
		Expect(n.holds(done)).To(BeFalse(), "freed before the agent is ready")
		Expect(n.holds(failed)).To(BeFalse(), "freed before the agent is ready")
		Eventually(gone(deviceAllocation(done))).Should(BeTrue())
		Eventually(gone(deviceAllocation(failed))).Should(BeTrue())
		Eventually(n.nodeDevice(gopher, 0)).Should(And(
			HaveField("Status.Allocated", BeEquivalentTo(0)),
			HaveField("Status.Allocatable", BeEquivalentTo(3)),
		))
		Consistently(func(g Gomega) {
			for pod, phase := range map[*corev1.Pod]corev1.PodPhase{done: corev1.PodSucceeded, failed: corev1.PodFailed, late: corev1.PodSucceeded} {
				got := &corev1.Pod{}
				g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(pod), got)).To(Succeed())
				g.Expect(got.Status.Phase).To(Equal(phase), "pod %s", pod.Name)
			}
			g.Expect(gone(deviceAllocation(late))()).To(BeTrue(), "no DeviceAllocation for a pod that ended before it was allocated")
		}, 2*time.Second).Should(Succeed())
		Expect(n.holds(late)).To(BeFalse())
		Expect(allocateCalls(p)).To(BeZero(), "no admission attempt for an ended pod")
	})

	It("after a node reboot keeps a pod's devices for it, refuses it with PluginUnavailable while its plugin is away, then runs the plugin's Allocate again for the same devices (S6)", func() {
		n := newNodeAgent(0)
		p := n.plugin(gopher, gophers("gopher", 3))
		n.register(p)
		pod := createPod(testutil.MakePod("survivor", ns).Node(n.name).Request(gopher, 2))
		held := deviceIDs(allocated(pod), gopher)

		By("a reboot: a new boot ID, and the plugin not back yet")
		n.stop()
		n.stop = nil
		p.Stop()
		Expect(os.WriteFile(filepath.Join(n.dir, "boot_id"), []byte("9b6b1b32-0000-4000-8000-00000000b007\n"), 0o600)).To(Succeed())
		n.start()
		Expect(n.holds(pod)).To(BeTrue(), "the pod's devices are kept for it across the reboot")
		Eventually(deviceAllocation(pod)).Should(HaveField("Status.Conditions", ContainElement(And(
			HaveField("Type", kdv1alpha1.DeviceAllocationAllocated), HaveField("Status", metav1.ConditionFalse),
			HaveField("Reason", kdv1alpha1.ReasonPluginUnavailable)))),
			"never shown holding devices the plugin has not prepared since the reboot")
		other := createPod(testutil.MakePod("other", ns).Node(n.name).Request(gopher, 1))
		Eventually(deviceAllocation(other)).Should(HaveField("Status.Conditions", ContainElement(And(
			HaveField("Type", kdv1alpha1.DeviceAllocationAllocated), HaveField("Status", metav1.ConditionFalse)))))

		By("the plugin registering late: Allocate runs again with the same devices")
		p = n.plugin(gopher, gophers("gopher", 3))
		n.register(p)
		da := allocated(pod)
		Expect(deviceIDs(da, gopher)).To(Equal(held))
		Expect(allocateCalls(p)).To(BeNumerically(">=", 1))
		Expect(deviceIDs(allocated(other), gopher)).NotTo(ContainElements(held[0]))
		Expect(deviceIDs(allocated(other), gopher)).NotTo(ContainElements(held[1]))
	})

	It("upgrades a checkpoint of the previous on-disk format in place, keeping every allocation (S19, N-1 to N)", func() {
		n := newNodeAgent(0)
		p := n.plugin(gopher, gophers("gopher", 3))
		n.register(p)
		pod := createPod(testutil.MakePod("kept", ns).Node(n.name).Request(gopher, 2))
		da := allocated(pod)
		held := deviceIDs(da, gopher)

		By("rewriting the checkpoint in format 1, as the previous agent wrote it")
		n.stop()
		n.stop = nil
		j, err := checkpoint.OpenJournal(n.checkpointPath(), checkpoint.Options{BootIDPath: filepath.Join(n.dir, "boot_id")})
		Expect(err).NotTo(HaveOccurred())
		cp, err := j.Read()
		Expect(err).NotTo(HaveOccurred())
		Expect(cp.Format).To(Equal(checkpoint.JournalVersion))
		v1, err := checkpoint.New(n.checkpointPath(), checkpoint.Options{BootIDPath: filepath.Join(n.dir, "boot_id")})
		Expect(err).NotTo(HaveOccurred())
		Expect(v1.Write(cp.State)).To(Succeed())

		n.start()
		p = n.restartPlugin(p, gophers("gopher", 3))
		alloc, ok := n.dm.PodAllocation(string(pod.UID))
		Expect(ok).To(BeTrue())
		Expect(alloc.Containers[0].Resources[0].DeviceIDs).To(Equal(held))
		Consistently(deviceAllocation(pod), time.Second).Should(HaveField("ResourceVersion", da.ResourceVersion))
		Expect(eventsFor(n.node.UID)()).NotTo(ContainElement(HaveField("Reason", kdv1alpha1.EventReasonCheckpointCorrupt)))
		Expect(allocateCalls(p)).To(BeZero())
		data, err := os.ReadFile(n.checkpointPath())
		Expect(err).NotTo(HaveOccurred())
		Expect(string(data)).To(HavePrefix("KDVCKPT\x02"), "written back in the current format")
	})

	It("fails closed on a checkpoint of an on-disk format it does not know, rebuilding from the DeviceAllocations (S19, N+1 read by N: a downgrade)", func() {
		n := newNodeAgent(0)
		p := n.plugin(gopher, gophers("gopher", 3))
		n.register(p)
		pod := createPod(testutil.MakePod("kept", ns).Node(n.name).Request(gopher, 2))
		held := deviceIDs(allocated(pod), gopher)

		By("the previous version's reader (format 1) refusing the current format: it never starts empty")
		cur, err := os.ReadFile(n.checkpointPath())
		Expect(err).NotTo(HaveOccurred())
		older := filepath.Join(GinkgoT().TempDir(), checkpoint.DefaultFileName)
		Expect(os.WriteFile(older, cur, 0o600)).To(Succeed())
		v1, err := checkpoint.New(older, checkpoint.Options{BootIDPath: filepath.Join(n.dir, "boot_id")})
		Expect(err).NotTo(HaveOccurred())
		_, err = v1.Read()
		var corrupt *checkpoint.CorruptError
		Expect(errors.As(err, &corrupt)).To(BeTrue(), "format 1 reader on a format 2 file: %v", err)
		Expect(corrupt.QuarantinedPath).NotTo(BeEmpty())

		By("this agent finding a checkpoint of a later format (version 3)")
		n.stop()
		n.stop = nil
		future := append([]byte("KDVCKPT\x03"), cur[len("KDVCKPT\x02"):]...)
		Expect(os.WriteFile(n.checkpointPath(), future, 0o600)).To(Succeed())
		n.start()
		n.restartPlugin(p, gophers("gopher", 3))
		Eventually(eventsFor(n.node.UID)).Should(ContainElement(And(
			HaveField("Reason", kdv1alpha1.EventReasonCheckpointCorrupt),
			HaveField("Note", ContainSubstring("version 3 is not supported")),
		)))
		alloc, ok := n.dm.PodAllocation(string(pod.UID))
		Expect(ok).To(BeTrue(), "rebuilt from the DeviceAllocation")
		Expect(alloc.Containers[0].Resources[0].DeviceIDs).To(Equal(held))
		quarantined, err := filepath.Glob(n.checkpointPath() + ".corrupt-*")
		Expect(err).NotTo(HaveOccurred())
		Expect(quarantined).To(HaveLen(1), "the unknown file is kept aside for the later version")
		other := createPod(testutil.MakePod("other", ns).Node(n.name).Request(gopher, 1))
		Expect(deviceIDs(allocated(other), gopher)).NotTo(ContainElements(held[0]))
		Expect(deviceIDs(allocated(other), gopher)).NotTo(ContainElements(held[1]))
	})
	It("re-asserts the capacity of a Node recreated with its extended resources zeroed within 15 s (S18)", func() {
		n := newNodeAgent(0)
		n.register(n.plugin(gopher, gophers("gopher", 2)))
		Eventually(nodeCapacity(n.name, gopher)).Should(BeEquivalentTo(2))

		By("the kubelet zeroing the extended resources of its Node")
		node := &corev1.Node{}
		Expect(k8sClient.Get(ctx, client.ObjectKey{Name: n.name}, node)).To(Succeed())
		node.Status.Capacity[gopher] = resource.MustParse("0")
		node.Status.Allocatable[gopher] = resource.MustParse("0")
		Expect(k8sClient.Status().Update(ctx, node)).To(Succeed())
		zeroed := time.Now()
		Eventually(nodeCapacity(n.name, gopher)).WithTimeout(15 * time.Second).Should(BeEquivalentTo(2))
		AddReportEntry("Node zeroed → capacity restored", time.Since(zeroed).String())

		By("the Node deleted and created again, without the resource")
		Expect(k8sClient.Delete(ctx, node)).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKey{Name: n.name}, &corev1.Node{}))
		}).Should(BeTrue())
		Expect(k8sClient.Create(ctx, testutil.MakeNode(n.name).Obj())).To(Succeed())
		recreated := time.Now()
		Eventually(nodeCapacity(n.name, gopher)).WithTimeout(15 * time.Second).Should(BeEquivalentTo(2))
		Eventually(func() (int64, error) {
			got := &corev1.Node{}
			err := k8sClient.Get(ctx, client.ObjectKey{Name: n.name}, got)
			q := got.Status.Allocatable[gopher]
			return q.Value(), err
		}).WithTimeout(15*time.Second - time.Since(recreated)).Should(BeEquivalentTo(2))
		AddReportEntry("Node recreated → capacity restored", time.Since(recreated).String())
	})

	It("serves from the node's state while the API server is unreachable, and catches up within 60 s without a write storm (S17)", func() {
		const outage = 10 * time.Second
		proxy := newCutProxy()
		n := newNodeAgentWith(0, func(n *nodeAgent) { n.apiHost = proxy.host() })
		devs := gophers("gopher", 3)
		p := n.plugin(gopher, devs)
		n.register(p)
		running := createPod(testutil.MakePod("running", ns).Node(n.name).Request(gopher, 1))
		held := deviceIDs(allocated(running), gopher)[0]
		n.settle()

		By("cutting the agent off the API server")
		proxy.cut()
		before := n.writes.mirror()
		sick := ""
		for i, d := range devs {
			if d.GetID() != held && sick == "" {
				sick = d.GetID()
				devs[i] = dptest.Device(sick, pluginapi.Unhealthy)
			}
		}
		p.Update(devs)
		Eventually(func() string {
			s, _ := n.dm.Snapshot(string(gopher))
			for _, d := range s.Devices {
				if d.ID == sick {
					return string(d.Health)
				}
			}
			return ""
		}).Should(Equal(string(nodeagent.Unhealthy)), "the core follows the plugin while the API is away")
		waiting := createPod(testutil.MakePod("waiting", ns).Node(n.name).Request(gopher, 1))
		deletePod(running)
		Consistently(func() bool {
			alloc, ok := n.dm.PodAllocation(string(running.UID))
			return ok && slices.Equal(alloc.Containers[0].Resources[0].DeviceIDs, []string{held})
		}, outage).Should(BeTrue(), "the running pod keeps its devices while the agent cannot see it")
		during := n.writes.mirror() - before
		AddReportEntry("Write attempts while the API server was unreachable", during)

		By("the API server back")
		proxy.restore()
		restored := time.Now()
		Eventually(deviceAllocation(waiting)).WithTimeout(60 * time.Second).Should(HaveField("Status.Conditions", ContainElement(And(
			HaveField("Type", kdv1alpha1.DeviceAllocationAllocated), HaveField("Status", metav1.ConditionTrue)))))
		Eventually(gone(deviceAllocation(running))).WithTimeout(60*time.Second - time.Since(restored)).Should(BeTrue())
		Eventually(n.nodeDevice(gopher, 0)).WithTimeout(60*time.Second - time.Since(restored)).Should(And(
			WithTransform(func(nd *kdv1alpha1.NodeDevice) *kdv1alpha1.DeviceStatus { return deviceStatus(nd, sick) },
				HaveField("Health", kdv1alpha1.DeviceUnhealthy)),
			HaveField("Status.Allocated", BeEquivalentTo(1)),
			HaveField("Status.Unhealthy", BeEquivalentTo(1)),
		))
		AddReportEntry("API server back → caught up", time.Since(restored).String())
		after := n.settle() - before - during
		AddReportEntry("Writes to catch up", after)
		// The catch-up is the changes, each written once: the NodeDevice (health, holders), the
		// waiting pod's DeviceAllocation (object and status), the ended pod's (Released, delete),
		// with room for a NodeDevice write per settle interval; no storm.
		Expect(after).To(BeNumerically("<=", 10))
		Expect(during).To(BeNumerically("<=", 30), "write attempts against an unreachable API server are paced")
		list := &kdv1alpha1.DeviceAllocationList{}
		Expect(k8sClient.List(ctx, list, client.InNamespace(ns))).To(Succeed())
		Expect(list.Items).To(HaveLen(1), "no duplicate DeviceAllocation")
	})
	It("allocates another resource's pod within a second while four pods' PreStartContainer hangs, and retries the hung calls (PreStartContainer hung, S15)", func() {
		const deadline = 4 * time.Second
		n := newNodeAgentWith(0, func(n *nodeAgent) {
			n.core = func(c *nodeagent.Config) { c.PreStartTimeout = deadline }
		})
		const slow corev1.ResourceName = "example.com/slow"
		hung := n.plugin(slow, gophers("slow", 4))
		hung.SetOptions(true, false)
		release := make(chan struct{})
		var once sync.Once
		DeferCleanup(func() { once.Do(func() { close(release) }) })
		hung.SetPreStartContainerFunc(func(*pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
			<-release
			return &pluginapi.PreStartContainerResponse{}, nil
		})
		n.register(hung)
		n.register(n.plugin(gopher, gophers("gopher", 1)))
		Eventually(n.nodeDevice(slow, 0)).Should(HaveField("Status.Allocatable", BeEquivalentTo(4)))
		Eventually(n.nodeDevice(gopher, 0)).Should(HaveField("Status.Allocatable", BeEquivalentTo(1)))

		var waiting []*corev1.Pod
		for i := range 4 {
			waiting = append(waiting, createPod(testutil.MakePod(fmt.Sprintf("waiting-%d", i), ns).Node(n.name).Request(slow, 1)))
		}
		Eventually(func() int {
			calls := 0
			for _, c := range hung.Calls() {
				if c == dptest.CallPreStartContainer {
					calls++
				}
			}
			return calls
		}).Should(Equal(4), "every waiting pod's first PreStartContainer is in flight")

		By("a pod of another resource")
		created := time.Now()
		other := createPod(testutil.MakePod("other", ns).Node(n.name).Request(gopher, 1))
		Eventually(deviceAllocation(other)).WithTimeout(time.Until(created.Add(time.Second))).Should(HaveField("Status.Conditions", ContainElement(And(
			HaveField("Type", kdv1alpha1.DeviceAllocationAllocated), HaveField("Status", metav1.ConditionTrue)))))
		AddReportEntry("Other resource's pod allocated after", time.Since(created).String())

		By("the hung calls timing out: the devices stay allocated, each pod is told, and the call is retried")
		for _, pod := range waiting {
			Expect(deviceIDs(allocated(pod), slow)).To(HaveLen(1))
			Eventually(eventsFor(pod.UID)).Should(ContainElement(And(
				HaveField("Reason", agent.EventReasonPreStartContainerFailed),
				HaveField("Note", ContainSubstring("DeadlineExceeded")),
			)))
		}
		once.Do(func() { close(release) })
		Eventually(func() int {
			calls := 0
			for _, c := range hung.Calls() {
				if c == dptest.CallPreStartContainer {
					calls++
				}
			}
			return calls
		}).WithTimeout(30*time.Second).Should(BeNumerically(">=", 8), "each failed call is retried")
	})
})
