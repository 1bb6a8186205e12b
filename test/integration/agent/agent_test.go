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
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
	"github.com/kubedevice/kubedevice/internal/agent"
	kdcontroller "github.com/kubedevice/kubedevice/internal/controller"
	"github.com/kubedevice/kubedevice/internal/nodeagent"
	"github.com/kubedevice/kubedevice/internal/nodeagent/dptest"
	"github.com/kubedevice/kubedevice/internal/testutil"
)

func condition(conds []metav1.Condition, t string) *metav1.Condition {
	return meta.FindStatusCondition(conds, t)
}

func nodeCapacity(name string, res corev1.ResourceName) func() (int64, error) {
	return func() (int64, error) {
		node := &corev1.Node{}
		if err := k8sClient.Get(ctx, client.ObjectKey{Name: name}, node); err != nil {
			return 0, err
		}
		q, ok := node.Status.Capacity[res]
		if !ok {
			return -1, nil
		}
		return q.Value(), nil
	}
}

func nodeAllocatable(name string, res corev1.ResourceName) func() (int64, error) {
	return func() (int64, error) {
		node := &corev1.Node{}
		if err := k8sClient.Get(ctx, client.ObjectKey{Name: name}, node); err != nil {
			return 0, err
		}
		q, ok := node.Status.Allocatable[res]
		if !ok {
			return -1, nil
		}
		return q.Value(), nil
	}
}

// publishedCount is what one version of a Node publishes for a resource (-1: absent).
type publishedCount struct{ Capacity, Allocatable int64 }

// watchPublished watches the Node until the spec ends and returns a function that tells what
// every version seen so far published for res, in order.
func watchPublished(name string, res corev1.ResourceName) func() []publishedCount {
	GinkgoHelper()
	wc, err := client.NewWithWatch(cfg, client.Options{Scheme: testEnv.Scheme})
	Expect(err).NotTo(HaveOccurred())
	w, err := wc.Watch(ctx, &corev1.NodeList{}, client.MatchingFields{"metadata.name": name})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(w.Stop)
	var mu sync.Mutex
	var seen []publishedCount
	count := func(l corev1.ResourceList) int64 {
		if q, ok := l[res]; ok {
			return q.Value()
		}
		return -1
	}
	go func() {
		for ev := range w.ResultChan() {
			if node, ok := ev.Object.(*corev1.Node); ok {
				mu.Lock()
				seen = append(seen, publishedCount{count(node.Status.Capacity), count(node.Status.Allocatable)})
				mu.Unlock()
			}
		}
	}()
	return func() []publishedCount {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(seen)
	}
}

var _ = Describe("Node agent", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	It("publishes a plugin's devices, allocates a pod's and frees them when it goes", func() {
		n := newNodeAgent(0)
		p := n.plugin(gopher, gophers("gopher", 4))

		By("registering a plugin with 4 devices")
		registered := time.Now()
		n.register(p)
		Eventually(n.nodeDevice(gopher, 0)).Should(And(
			HaveField("Status.Capacity", BeEquivalentTo(4)),
			HaveField("Status.Allocatable", BeEquivalentTo(4)),
		))
		visible := time.Since(registered)
		AddReportEntry("Register → NodeDevice with 4 allocatable devices visible", visible.String())
		Expect(visible).To(BeNumerically("<", 2*time.Second), "the budget is 2 s")

		nd, err := n.nodeDevice(gopher, 0)()
		Expect(err).NotTo(HaveOccurred())
		Expect(nd.Spec.NodeName).To(Equal(n.name))
		Expect(nd.Spec.ResourceName).To(Equal(string(gopher)))
		Expect(nd.Labels).To(HaveKeyWithValue(kdv1alpha1.LabelNodeName, n.name))
		Expect(nd.Labels).To(HaveKeyWithValue(kdv1alpha1.LabelResourceName, agent.LabelValue(string(gopher))))
		Expect(nd.OwnerReferences).To(ContainElement(And(HaveField("Kind", "Node"), HaveField("UID", n.node.UID))))
		Expect(nd.Status.Plugin).To(HaveValue(HaveField("State", kdv1alpha1.PluginStateRegistered)))
		Expect(nd.Status.Plugin.Endpoint).To(Equal(p.SocketPath()))
		Expect(nd.Status.Devices).To(HaveLen(4))
		Expect(condition(nd.Status.Conditions, kdv1alpha1.NodeDeviceRegistered)).To(HaveValue(HaveField("Status", metav1.ConditionTrue)))
		Expect(condition(nd.Status.Conditions, kdv1alpha1.NodeDeviceHealthy)).To(HaveValue(HaveField("Status", metav1.ConditionTrue)))
		// The checkpoint's provenance comes with the core's first write of the resource, which may
		// land just after the status that first shows the devices.
		Eventually(n.nodeDevice(gopher, 0)).Should(HaveField("Status.Checkpoint", HaveValue(HaveField("BootID", "3d1c6a3e-6a5f-4f7e-9d2c-1b2a3c4d5e6f"))))

		By("the agent putting the controller's finalizer and AgentReady on with the shard")
		Expect(nd.Finalizers).To(ContainElement(kdcontroller.NodeCapacityFinalizer))
		Expect(condition(nd.Status.Conditions, kdv1alpha1.NodeDeviceAgentReady)).To(HaveValue(And(
			HaveField("Status", metav1.ConditionTrue), HaveField("Reason", kdv1alpha1.ReasonAgentLeaseValid))))

		By("the controller publishing the Node's capacity, without a write of the shard")
		Eventually(nodeCapacity(n.name, gopher)).Should(BeEquivalentTo(4))
		n.settle()
		nd, err = n.nodeDevice(gopher, 0)()
		Expect(err).NotTo(HaveOccurred())
		for _, mf := range nd.ManagedFields {
			Expect(mf.Manager).NotTo(Equal(kdcontroller.FieldOwner), "the controller wrote the shard (%s %s)", mf.Operation, mf.Subresource)
		}

		By("binding a pod that asks for 2")
		before := n.settle()
		beforeAllocations := n.writes.allocations()
		pod := createPod(testutil.MakePod("trainer", ns).Node(n.name).Request(gopher, 2))
		da := allocated(pod)
		ids := deviceIDs(da, gopher)
		Expect(ids).To(HaveLen(2))
		Expect(da.Spec).To(Equal(kdv1alpha1.DeviceAllocationSpec{NodeName: n.name, PodName: pod.Name, PodUID: string(pod.UID)}))
		Expect(da.Labels).To(HaveKeyWithValue(kdv1alpha1.LabelPodUID, string(pod.UID)))
		Expect(da.OwnerReferences).To(ContainElement(And(HaveField("Kind", "Pod"), HaveField("UID", pod.UID))))
		Expect(da.Status.Summary).To(Equal(string(gopher) + "=" + ids[0] + "," + ids[1]))
		Expect(da.Status.Containers).To(HaveLen(1))
		Expect(da.Status.Containers[0].RuntimeOptions).To(HaveValue(HaveField("Envs",
			ConsistOf(kdv1alpha1.EnvVar{Name: "GOPHER_VISIBLE_DEVICES", Value: ids[0] + "," + ids[1]}))))

		Eventually(n.nodeDevice(gopher, 0)).Should(HaveField("Status.Allocated", BeEquivalentTo(2)))
		nd, err = n.nodeDevice(gopher, 0)()
		Expect(err).NotTo(HaveOccurred())
		for _, d := range nd.Status.Devices {
			if slices.Contains(ids, d.ID) {
				Expect(d.Holder).To(HaveValue(Equal(kdv1alpha1.DeviceHolder{Namespace: ns, PodName: pod.Name, PodUID: string(pod.UID), ContainerName: "app"})))
			} else {
				Expect(d.Holder).To(BeNil())
			}
		}
		allocWrites := n.settle() - before
		AddReportEntry("API writes for one allocation (DeviceAllocation apply with its status, NodeDevice status)", allocWrites)
		// A DeviceAllocation has no status subresource: it is created with its status, in one write.
		Expect(n.writes.allocations()-beforeAllocations).To(Equal(1), "DeviceAllocation writes for one allocation")
		Expect(allocWrites).To(Equal(2))
		Expect(condition(da.Status.Conditions, kdv1alpha1.DeviceAllocationAllocated)).To(HaveValue(HaveField("ObservedGeneration", BeZero())),
			"a DeviceAllocation's generation counts its status writes: its conditions observe none")

		By("deleting the pod")
		w, err := k8sClient.Watch(ctx, &kdv1alpha1.DeviceAllocationList{}, client.InNamespace(ns))
		Expect(err).NotTo(HaveOccurred())
		defer w.Stop()
		before = n.writes.mirror()
		deletePod(pod)
		Eventually(gone(deviceAllocation(pod))).Should(BeTrue())
		Eventually(n.nodeDevice(gopher, 0)).Should(HaveField("Status.Allocated", BeEquivalentTo(0)))
		Expect(n.holds(pod)).To(BeFalse())

		By("the DeviceAllocation saying Released before it went")
		var released, deleted bool
		Eventually(func() bool {
			select {
			case ev := <-w.ResultChan():
				if da, ok := ev.Object.(*kdv1alpha1.DeviceAllocation); ok && da.Name == agent.DeviceAllocationName(pod.Spec.NodeName, pod.Name, string(pod.UID)) {
					c := condition(da.Status.Conditions, kdv1alpha1.DeviceAllocationReleased)
					if ev.Type == watch.Modified && c != nil && c.Status == metav1.ConditionTrue && c.Reason == kdv1alpha1.ReasonPodDeleted {
						released = true
					}
					deleted = deleted || ev.Type == watch.Deleted
				}
			default:
			}
			return released && deleted
		}).Should(BeTrue())
		releaseWrites := n.settle() - before
		AddReportEntry("API writes for one release (DeviceAllocation Released + delete, NodeDevice status)", releaseWrites)
		Expect(releaseWrites).To(Equal(3))
	})
})

var _ = Describe("Node agent with several resources", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	It("records an init container's and a container's devices of two resources, in the pod's order", func() {
		const fpga corev1.ResourceName = "acme.io/fpga"
		n := newNodeAgent(0)
		n.register(n.plugin(gopher, gophers("gopher", 4)))
		n.register(n.plugin(fpga, gophers("fpga", 2)))
		Eventually(n.nodeDevice(fpga, 0)).Should(HaveField("Status.Allocatable", BeEquivalentTo(2)))
		Eventually(nodeCapacity(n.name, fpga)).Should(BeEquivalentTo(2))

		pod := createPod(testutil.MakePod("pipeline", ns).Node(n.name).
			InitContainer("fetch", fpga, 1).
			Request(gopher, 2).Request(fpga, 1))
		da := allocated(pod)
		Expect(da.Status.Containers).To(HaveLen(2))
		Expect(da.Status.Containers[0].Name).To(Equal("fetch"), "init containers first")
		Expect(da.Status.Containers[1].Name).To(Equal("app"))
		Expect(da.Status.Containers[1].Resources).To(HaveLen(2))
		Expect(da.Status.Containers[1].Resources[0].ResourceName).To(Equal(string(fpga)), "resources sorted by name")
		// The regular init container's device is reused by the app container, as the kubelet does.
		Expect(deviceIDs(da, fpga)).To(HaveLen(2))
		Expect(da.Status.Containers[0].Resources[0].DeviceIDs).To(Equal(da.Status.Containers[1].Resources[0].DeviceIDs))
		Expect(da.Status.Summary).To(MatchRegexp(`^acme\.io/fpga=fpga-[01];example\.com/gopher=gopher-\d,gopher-\d$`))
		Eventually(n.nodeDevice(fpga, 0)).Should(HaveField("Status.Allocated", BeEquivalentTo(1)))
		Eventually(n.nodeDevice(gopher, 0)).Should(HaveField("Status.Allocated", BeEquivalentTo(2)))
	})
})

var _ = Describe("Node agent writes", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	It("writes nothing in steady state, and across an agent restart only the NodeDevice's two states", func() {
		n := newNodeAgent(0)
		p := n.plugin(gopher, gophers("gopher", 4))
		n.register(p)
		pod := createPod(testutil.MakePod("server", ns).Node(n.name).Request(gopher, 2))
		Eventually(n.nodeDevice(gopher, 0)).Should(HaveField("Status.Allocated", BeEquivalentTo(2)))
		da := allocated(pod)
		ids := deviceIDs(da, gopher)
		writes := n.settle()

		By("staying idle")
		leases := n.writes.leases()
		Consistently(n.writes.mirror).WithTimeout(3 * time.Second).Should(Equal(writes))
		Expect(n.writes.leases()-leases).To(BeNumerically("<=", 1), "the Lease is renewed every 10 s")

		By("restarting the agent")
		nd, err := n.nodeDevice(gopher, 0)()
		Expect(err).NotTo(HaveOccurred())
		n.restart()
		Eventually(n.nodeDevice(gopher, 0)).Should(HaveField("Status.Plugin.State", kdv1alpha1.PluginStateDisconnected))
		Expect(n.settle()).To(Equal(writes+1), "the restored resource is written once, awaiting its plugin")
		n.restartPlugin(p, gophers("gopher", 4))
		Eventually(func() nodeagent.PluginState {
			s, _ := n.dm.Snapshot(string(gopher))
			return s.State
		}).Should(Equal(nodeagent.PluginRegistered))
		held, ok := n.dm.PodAllocation(string(pod.UID))
		Expect(ok).To(BeTrue(), "the allocation is restored from the checkpoint")
		Expect(held.Containers).To(HaveLen(1))
		Expect(held.Containers[0].Resources[0].DeviceIDs).To(Equal(ids))
		Eventually(n.nodeDevice(gopher, 0)).Should(HaveField("Status.Plugin.State", kdv1alpha1.PluginStateRegistered))
		Expect(n.settle()).To(Equal(writes+2), "the registration again is one more write, and the last")
		Consistently(n.writes.mirror).WithTimeout(3*time.Second).Should(Equal(writes+2), "then nothing")
		Expect(n.nodeDevice(gopher, 0)()).NotTo(HaveField("ResourceVersion", nd.ResourceVersion))
		Expect(deviceAllocation(pod)()).To(HaveField("ResourceVersion", da.ResourceVersion), "the allocation is not rewritten")

		By("still freeing the devices when the pod goes")
		deletePod(pod)
		Eventually(n.nodeDevice(gopher, 0)).Should(HaveField("Status.Allocated", BeEquivalentTo(0)))
		Eventually(gone(deviceAllocation(pod))).Should(BeTrue())
	})
})

var _ = Describe("Node agent restart", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	// The kubelet's own stub plugin waits 10 s after kubelet.sock reappears before it registers
	// again; this one takes 12 s.
	It("tells the cluster what it knows while a restored resource's plugin is slow to register again", func() {
		n := newNodeAgent(0)
		p := n.plugin(gopher, gophers("gopher", 2))
		n.register(p)
		pod := createPod(testutil.MakePod("running", ns).Node(n.name).Request(gopher, 1))
		Eventually(n.nodeDevice(gopher, 0)).Should(HaveField("Status.Allocated", BeEquivalentTo(1)))
		Eventually(nodeCapacity(n.name, gopher)).Should(BeEquivalentTo(2))
		allocated(pod)
		before, err := n.nodeDevice(gopher, 0)()
		Expect(err).NotTo(HaveOccurred())
		writes := n.settle()

		By("watching every version of the Node from now on")
		published := watchPublished(n.name, gopher)

		By("restarting the agent; the plugin registers again only 12 s later")
		restarted := time.Now()
		n.restart()
		awaiting := And(
			HaveField("Status.Plugin.State", kdv1alpha1.PluginStateDisconnected),
			HaveField("Status.Conditions", ContainElement(And(
				HaveField("Type", kdv1alpha1.NodeDeviceRegistered),
				HaveField("Status", metav1.ConditionFalse),
				HaveField("Reason", kdv1alpha1.ReasonAwaitingPluginRegistration)))),
			HaveField("Status.Capacity", BeEquivalentTo(2)),
			HaveField("Status.Allocatable", BeEquivalentTo(0)),
			HaveField("Status.Allocated", BeEquivalentTo(1)),
		)
		Eventually(n.nodeDevice(gopher, 0)).WithTimeout(3 * time.Second).Should(awaiting)
		AddReportEntry("Agent restart → NodeDevice awaiting its plugin", time.Since(restarted).String())
		// The node keeps the running pod's device, and shows the scheduler nothing free.
		Eventually(nodeAllocatable(n.name, gopher)).Should(BeEquivalentTo(1))
		Expect(nodeCapacity(n.name, gopher)()).To(BeEquivalentTo(1))
		Consistently(n.nodeDevice(gopher, 0)).WithTimeout(time.Until(restarted.Add(12 * time.Second))).Should(awaiting)
		Expect(nodeAllocatable(n.name, gopher)()).To(BeEquivalentTo(1))

		By("the plugin registering again")
		registered := time.Now()
		n.restartPlugin(p, gophers("gopher", 2))
		Eventually(n.nodeDevice(gopher, 0)).Should(And(
			HaveField("Status.Plugin.State", kdv1alpha1.PluginStateRegistered),
			HaveField("Status.Plugin.Since.Time", BeTemporally(">", before.Status.Plugin.Since.Time)),
			HaveField("Status.Conditions", ContainElement(And(
				HaveField("Type", kdv1alpha1.NodeDeviceRegistered), HaveField("Status", metav1.ConditionTrue)))),
			HaveField("Status.Allocatable", BeEquivalentTo(2)),
			HaveField("Status.Allocated", BeEquivalentTo(1)),
		))
		Eventually(nodeAllocatable(n.name, gopher)).Should(BeEquivalentTo(2))
		AddReportEntry("Plugin re-registration → node allocatable back", time.Since(registered).String())
		Expect(n.settle()-writes).To(Equal(2), "a restart costs the NodeDevice two writes: awaiting, registered")

		seen := published()
		Expect(seen).NotTo(BeEmpty())
		for _, v := range seen {
			Expect(v).To(HaveField("Capacity", BeNumerically(">=", 1)), "the node never drops the running pod's device: %v", seen)
			Expect(v).To(HaveField("Allocatable", BeNumerically(">=", 1)), "the node never drops the running pod's device: %v", seen)
		}
		Expect(deviceAllocation(pod)()).To(HaveField("Status.Conditions", ContainElement(And(
			HaveField("Type", kdv1alpha1.DeviceAllocationAllocated), HaveField("Status", metav1.ConditionTrue)))))
	})
})

var _ = Describe("Node agent device state", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	It("shows a disconnected plugin's devices as unallocatable at once, and removes them after the grace period", func() {
		const grace = 3 * time.Second
		n := newNodeAgent(grace)
		p := n.plugin(gopher, gophers("gopher", 4))
		n.register(p)
		Eventually(nodeCapacity(n.name, gopher)).Should(BeEquivalentTo(4))

		stopped := time.Now()
		p.Stop()
		Eventually(n.nodeDevice(gopher, 0)).WithTimeout(5 * time.Second).Should(And(
			HaveField("Status.Allocatable", BeEquivalentTo(0)),
			HaveField("Status.Capacity", BeEquivalentTo(4)),
			HaveField("Status.Plugin.State", kdv1alpha1.PluginStateDisconnected),
		))
		AddReportEntry("Plugin stop → NodeDevice allocatable 0", time.Since(stopped).String())
		nd, err := n.nodeDevice(gopher, 0)()
		Expect(err).NotTo(HaveOccurred())
		Expect(condition(nd.Status.Conditions, kdv1alpha1.NodeDeviceRegistered)).To(HaveValue(And(
			HaveField("Status", metav1.ConditionFalse), HaveField("Reason", kdv1alpha1.ReasonPluginDisconnected))))
		Expect(condition(nd.Status.Conditions, kdv1alpha1.NodeDeviceHealthy)).To(HaveValue(HaveField("Status", metav1.ConditionFalse)))
		for _, d := range nd.Status.Devices {
			Expect(d.Health).To(Equal(kdv1alpha1.DeviceUnhealthy))
			Expect(d.Reason).To(Equal(kdv1alpha1.DeviceReasonPluginDisconnected))
		}

		By("removing the NodeDevice after the grace period")
		Eventually(gone(n.nodeDevice(gopher, 0))).Should(BeTrue())
		Expect(time.Since(stopped)).To(BeNumerically(">=", grace))
		Eventually(nodeCapacity(n.name, gopher)).Should(BeNumerically("<=", 0))
	})

	It("follows a device's health within 5 s", func() {
		n := newNodeAgent(0)
		devs := gophers("gopher", 4)
		p := n.plugin(gopher, devs)
		n.register(p)
		Eventually(n.nodeDevice(gopher, 0)).Should(HaveField("Status.Allocatable", BeEquivalentTo(4)))

		devs[1] = dptest.Device("gopher-1", pluginapi.Unhealthy)
		changed := time.Now()
		p.Update(devs)
		Eventually(n.nodeDevice(gopher, 0)).WithTimeout(5 * time.Second).Should(And(
			HaveField("Status.Unhealthy", BeEquivalentTo(1)),
			HaveField("Status.Allocatable", BeEquivalentTo(3)),
			HaveField("Status.Capacity", BeEquivalentTo(4)),
		))
		AddReportEntry("Device unhealthy → NodeDevice counts", time.Since(changed).String())
		nd, err := n.nodeDevice(gopher, 0)()
		Expect(err).NotTo(HaveOccurred())
		Expect(nd.Status.Devices).To(ContainElement(And(HaveField("ID", "gopher-1"), HaveField("Health", kdv1alpha1.DeviceUnhealthy),
			HaveField("Reason", kdv1alpha1.DeviceReasonPluginReportedUnhealthy))))
		Expect(condition(nd.Status.Conditions, kdv1alpha1.NodeDeviceHealthy)).To(HaveValue(And(
			HaveField("Status", metav1.ConditionFalse), HaveField("Reason", kdv1alpha1.ReasonUnhealthyDevices))))
		Eventually(func() (int64, error) {
			node := &corev1.Node{}
			err := k8sClient.Get(ctx, client.ObjectKey{Name: n.name}, node)
			q := node.Status.Allocatable[gopher]
			return q.Value(), err
		}).Should(BeEquivalentTo(3))

		devs[1] = dptest.Device("gopher-1", pluginapi.Healthy)
		p.Update(devs)
		Eventually(n.nodeDevice(gopher, 0)).WithTimeout(5 * time.Second).Should(And(
			HaveField("Status.Unhealthy", BeEquivalentTo(0)),
			HaveField("Status.Allocatable", BeEquivalentTo(4)),
		))
	})

	It("puts back what others change in the fields it owns", func() {
		n := newNodeAgent(0)
		n.register(n.plugin(gopher, gophers("gopher", 4)))
		Eventually(n.nodeDevice(gopher, 0)).Should(HaveField("Status.Allocatable", BeEquivalentTo(4)))
		pod := createPod(testutil.MakePod("steady", ns).Node(n.name).Request(gopher, 1))
		da := allocated(pod)

		By("someone rewriting the NodeDevice's counts and dropping a label")
		nd, err := n.nodeDevice(gopher, 0)()
		Expect(err).NotTo(HaveOccurred())
		patch := client.MergeFrom(nd.DeepCopy())
		nd.Status.Allocatable = 99
		Expect(k8sClient.Status().Patch(ctx, nd, patch, client.FieldOwner("someone"))).To(Succeed())
		patch = client.MergeFrom(nd.DeepCopy())
		delete(nd.Labels, kdv1alpha1.LabelResourceName)
		Expect(k8sClient.Patch(ctx, nd, patch, client.FieldOwner("someone"))).To(Succeed())
		Eventually(n.nodeDevice(gopher, 0)).Should(And(
			HaveField("Status.Allocatable", BeEquivalentTo(4)),
			HaveField("Labels", HaveKeyWithValue(kdv1alpha1.LabelResourceName, agent.LabelValue(string(gopher)))),
		))

		By("someone rewriting the DeviceAllocation's devices")
		patch = client.MergeFrom(da.DeepCopy())
		da.Status.Summary = "example.com/gopher=nonsense"
		Expect(k8sClient.Patch(ctx, da, patch, client.FieldOwner("someone"))).To(Succeed())
		Eventually(deviceAllocation(pod)).Should(HaveField("Status.Summary", Not(ContainSubstring("nonsense"))))
	})

	It("writes a flapping device's NodeDevice at most once a second", func() {
		n := newNodeAgent(0)
		devs := gophers("gopher", 4)
		p := n.plugin(gopher, devs)
		n.register(p)
		Eventually(n.nodeDevice(gopher, 0)).Should(HaveField("Status.Allocatable", BeEquivalentTo(4)))
		before := n.settle()

		// The plugin flips gopher-1 every 50 ms for 2 s: 40 changes.
		const flips, every = 40, 50 * time.Millisecond
		start := time.Now()
		ticker := time.NewTicker(every)
		defer ticker.Stop()
		for i := range flips {
			<-ticker.C
			health := pluginapi.Unhealthy
			if i%2 == 1 {
				health = pluginapi.Healthy
			}
			devs[1] = dptest.Device("gopher-1", health)
			p.Update(devs)
		}
		Eventually(n.nodeDevice(gopher, 0)).Should(HaveField("Status.Allocatable", BeEquivalentTo(4)))
		writes := n.settle() - before
		elapsed := time.Since(start)
		AddReportEntry("NodeDevice writes for 40 health flips over 2 s", writes)
		// One write per started second of flapping, plus the final state.
		Expect(writes).To(BeNumerically("<=", int(elapsed/time.Second)+2))
		Expect(writes).To(BeNumerically(">=", 2), "the flapping is published, coalesced")
	})

	It("never allocates a cordoned device, from any shard, and counts it", func() {
		n := newNodeAgent(0)
		p := n.plugin(gopher, gophers("gopher", 4))
		n.register(p)
		Eventually(n.nodeDevice(gopher, 0)).Should(HaveField("Status.Allocatable", BeEquivalentTo(4)))

		By("an administrator cordoning gopher-0")
		nd, err := n.nodeDevice(gopher, 0)()
		Expect(err).NotTo(HaveOccurred())
		patch := client.MergeFrom(nd.DeepCopy())
		nd.Spec.Cordons = []kdv1alpha1.DeviceCordon{{DeviceID: "gopher-0", Reason: "fan failure"}}
		Expect(k8sClient.Patch(ctx, nd, patch, client.FieldOwner("admin"))).To(Succeed())
		Eventually(n.nodeDevice(gopher, 0)).Should(And(
			HaveField("Status.Cordoned", BeEquivalentTo(1)),
			HaveField("Status.Allocatable", BeEquivalentTo(3)),
			HaveField("Status.ObservedGeneration", nd.Generation),
			HaveField("Status.Devices", ContainElement(And(HaveField("ID", "gopher-0"), HaveField("Cordoned", true)))),
		))
		Expect(n.nodeDevice(gopher, 0)()).To(HaveField("Spec.Cordons", HaveLen(1)), "the agent's writes keep the administrator's cordons")

		By("a pod asking for 3 getting the 3 others")
		big := createPod(testutil.MakePod("big", ns).Node(n.name).Request(gopher, 3))
		Eventually(deviceAllocation(big)).Should(HaveField("Status.Summary", string(gopher)+"=gopher-1,gopher-2,gopher-3"))

		By("a pod asking for 1 waiting, then getting gopher-0 once uncordoned")
		small := createPod(testutil.MakePod("small", ns).Node(n.name).Request(gopher, 1))
		Eventually(deviceAllocation(small)).Should(HaveField("Status.Conditions", ContainElement(And(
			HaveField("Type", kdv1alpha1.DeviceAllocationAllocated), HaveField("Status", metav1.ConditionFalse),
			HaveField("Reason", kdv1alpha1.ReasonInsufficientDevices)))))
		nd, err = n.nodeDevice(gopher, 0)()
		Expect(err).NotTo(HaveOccurred())
		patch = client.MergeFrom(nd.DeepCopy())
		nd.Spec.Cordons = nil
		Expect(k8sClient.Patch(ctx, nd, patch, client.FieldOwner("admin"))).To(Succeed())
		Eventually(deviceAllocation(small)).Should(HaveField("Status.Summary", string(gopher)+"=gopher-0"))
		Eventually(n.nodeDevice(gopher, 0)).Should(And(
			HaveField("Status.Cordoned", BeEquivalentTo(0)),
			HaveField("Status.Allocated", BeEquivalentTo(4)),
		))
	})

	It("splits 300 devices into 3 shards, and keeps a surplus shard only while it holds cordons", func() {
		n := newNodeAgent(0)
		devs := make([]*pluginapi.Device, 300)
		for i := range devs {
			devs[i] = dptest.Device(fmtID(i), pluginapi.Healthy)
		}
		p := n.plugin(gopher, devs)
		registered := time.Now()
		n.register(p)
		Eventually(n.nodeDevices).Should(HaveLen(3))
		for shard, want := range []int32{128, 128, 44} {
			Eventually(n.nodeDevice(gopher, shard)).Should(And(
				HaveField("Spec.Shard", HaveValue(BeEquivalentTo(shard))),
				HaveField("Status.Capacity", want),
				HaveField("Status.Allocatable", want),
				HaveField("Status.Devices", HaveLen(int(want))),
			))
		}
		AddReportEntry("Register → 3 NodeDevice shards of 300 devices visible", time.Since(registered).String())
		Eventually(nodeCapacity(n.name, gopher)).Should(BeEquivalentTo(300))
		last, err := n.nodeDevice(gopher, 2)()
		Expect(err).NotTo(HaveOccurred())
		Expect(last.Status.Devices[0].ID).To(Equal(fmtID(256)))

		By("cordoning a device of shard 2, then shrinking to 100 devices")
		patch := client.MergeFrom(last.DeepCopy())
		last.Spec.Cordons = []kdv1alpha1.DeviceCordon{{DeviceID: fmtID(50), Reason: "moved"}}
		Expect(k8sClient.Patch(ctx, last, patch, client.FieldOwner("admin"))).To(Succeed())
		Eventually(n.nodeDevice(gopher, 0)).Should(HaveField("Status.Cordoned", BeEquivalentTo(1)),
			"a cordon on any shard applies to the device wherever it is listed")
		p.Update(devs[:100])
		Eventually(gone(n.nodeDevice(gopher, 1))).Should(BeTrue())
		Eventually(n.nodeDevice(gopher, 0)).Should(And(HaveField("Status.Capacity", BeEquivalentTo(100)), HaveField("Status.Allocatable", BeEquivalentTo(99))))
		Eventually(n.nodeDevice(gopher, 2)).Should(And(HaveField("Status.Capacity", BeEquivalentTo(0)), HaveField("Status.Devices", BeEmpty())))
	})
})

func fmtID(i int) string { return fmt.Sprintf("dev-%03d", i) }

var _ = Describe("Node agent allocation failures", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	It("reports a pod asking for more devices than exist with a Warning event and a condition", func() {
		n := newNodeAgent(0)
		p := n.plugin(gopher, gophers("gopher", 4))
		n.register(p)
		Eventually(n.nodeDevice(gopher, 0)).Should(HaveField("Status.Allocatable", BeEquivalentTo(4)))

		pod := createPod(testutil.MakePod("greedy", ns).Node(n.name).Request(gopher, 5))
		Eventually(deviceAllocation(pod)).Should(HaveField("Status.Conditions", ContainElement(And(
			HaveField("Type", kdv1alpha1.DeviceAllocationAllocated),
			HaveField("Status", metav1.ConditionFalse),
			HaveField("Reason", kdv1alpha1.ReasonInsufficientDevices),
			HaveField("Message", ContainSubstring("Requested: 5, Available: 4")),
		))))
		Eventually(eventsFor(pod.UID)).Should(ContainElement(And(
			HaveField("Type", corev1.EventTypeWarning),
			HaveField("Reason", kdv1alpha1.EventReasonDeviceAllocationFailed),
			HaveField("Note", ContainSubstring("requested number of devices unavailable for example.com/gopher")),
			HaveField("ReportingController", agent.FieldOwner),
		)))
		Expect(n.holds(pod)).To(BeFalse())
		Expect(n.nodeDevice(gopher, 0)()).To(HaveField("Status.Allocated", BeEquivalentTo(0)))

		By("reporting it once, not at every retry")
		n.settle()
		Expect(eventsFor(pod.UID)()).To(HaveLen(1))
	})

	It("shows each distinct refusal of a pod as an event of its own", func() {
		n := newNodeAgent(0)
		p := n.plugin(gopher, gophers("gopher", 4))
		n.register(p)
		Eventually(n.nodeDevice(gopher, 0)).Should(HaveField("Status.Allocatable", BeEquivalentTo(4)))
		pod := createPod(testutil.MakePod("greedy", ns).Node(n.name).Request(gopher, 5))
		Eventually(eventsFor(pod.UID)).Should(ContainElement(HaveField("Note", ContainSubstring("Available: 4"))))

		By("the plugin losing a device: the pod is refused again, for another count")
		p.Update(gophers("gopher", 3))
		Eventually(deviceAllocation(pod)).Should(HaveField("Status.Conditions", ContainElement(
			HaveField("Message", ContainSubstring("Available: 3")))))
		Eventually(eventsFor(pod.UID)).Should(ContainElements(
			HaveField("Note", ContainSubstring("Available: 4")),
			HaveField("Note", ContainSubstring("Available: 3")),
		), "the second refusal is not counted under the first one's event")
	})

	It("rewrites a refused pod's DeviceAllocation a bounded number of times while its plugin flaps", func() {
		n := newNodeAgent(0)
		p := n.plugin(gopher, gophers("gopher", 4))
		n.register(p)
		Eventually(n.nodeDevice(gopher, 0)).Should(HaveField("Status.Allocatable", BeEquivalentTo(4)))
		pod := createPod(testutil.MakePod("greedy", ns).Node(n.name).Request(gopher, 5))
		Eventually(deviceAllocation(pod)).Should(HaveField("Status.Conditions", ContainElement(And(
			HaveField("Reason", kdv1alpha1.ReasonInsufficientDevices),
			HaveField("Message", ContainSubstring("Available: 4")),
		))))
		n.settle()
		before := n.writes.allocations()

		By("restarting the plugin every 300 ms, ten times, with 3 and 4 devices in turn: every restart refuses the pod anew")
		const restarts, every = 10, 300 * time.Millisecond
		start := time.Now()
		for i := range restarts {
			// A plugin flapping at its own pace: the restarts are the stimulus, not a wait.
			<-time.After(time.Until(start.Add(time.Duration(i) * every)))
			p = n.restartPlugin(p, gophers("gopher", 3+i%2))
			Eventually(func() int {
				s, _ := n.dm.Snapshot(string(gopher))
				return s.Allocatable
			}).Should(Equal(3+i%2), "the agent sees the restarted plugin's devices")
		}
		flapped := time.Since(start)
		// The last restart offers 4 devices: the DeviceAllocation ends up saying so.
		Eventually(deviceAllocation(pod)).WithTimeout(40 * time.Second).Should(HaveField("Status.Conditions", ContainElement(And(
			HaveField("Reason", kdv1alpha1.ReasonInsufficientDevices),
			HaveField("Message", ContainSubstring("Available: 4")),
		))))
		n.settle()
		writes := n.writes.allocations() - before
		AddReportEntry("DeviceAllocation writes of a refused pod across plugin restarts",
			fmt.Sprintf("%d writes for %d restarts in %s", writes, restarts, flapped))
		// A refusal is rewritten no sooner than 1 s after the first, then 2 s, 4 s, ... after the
		// one before: three seconds of flapping and the final state cost at most three writes.
		Expect(writes).To(BeNumerically("<=", 3), "status writes of the refused pod's DeviceAllocation")
		Expect(n.holds(pod)).To(BeFalse())
	})

	It("leaves alone a resource no plugin serves, and allocates as soon as a plugin registers it", func() {
		n := newNodeAgent(0)
		pod := createPod(testutil.MakePod("early", ns).Node(n.name).Request(gopher, 1))
		// As the kubelet, an extended resource no device plugin serves is not the agent's to
		// refuse; the pod waits for a plugin without a DeviceAllocation.
		Consistently(gone(deviceAllocation(pod))).WithTimeout(time.Second).Should(BeTrue())

		p := n.plugin(gopher, gophers("gopher", 2))
		registered := time.Now()
		n.register(p)
		Eventually(deviceAllocation(pod)).WithTimeout(5 * time.Second).Should(HaveField("Status.Conditions", ContainElement(And(
			HaveField("Type", kdv1alpha1.DeviceAllocationAllocated), HaveField("Status", metav1.ConditionTrue)))))
		AddReportEntry("Plugin registration → waiting pod allocated", time.Since(registered).String())
	})

	It("retries a pod refused because its restored resource's plugin has not registered again, and reports it", func() {
		n := newNodeAgent(0)
		p := n.plugin(gopher, gophers("gopher", 2))
		n.register(p)
		Eventually(n.nodeDevice(gopher, 0)).Should(HaveField("Status.Allocatable", BeEquivalentTo(2)))

		By("restarting the agent without the plugin")
		n.restart()
		pod := createPod(testutil.MakePod("early", ns).Node(n.name).Request(gopher, 1))
		Eventually(deviceAllocation(pod)).Should(HaveField("Status.Conditions", ContainElement(And(
			HaveField("Type", kdv1alpha1.DeviceAllocationAllocated),
			HaveField("Status", metav1.ConditionFalse),
			HaveField("Reason", kdv1alpha1.ReasonPluginUnavailable),
		))))
		Eventually(eventsFor(pod.UID)).Should(ContainElement(And(
			HaveField("Type", corev1.EventTypeWarning),
			HaveField("Reason", kdv1alpha1.EventReasonDeviceAllocationFailed),
		)))

		By("the plugin registering again")
		registered := time.Now()
		n.restartPlugin(p, gophers("gopher", 2))
		Eventually(deviceAllocation(pod)).WithTimeout(5 * time.Second).Should(HaveField("Status.Conditions", ContainElement(And(
			HaveField("Type", kdv1alpha1.DeviceAllocationAllocated), HaveField("Status", metav1.ConditionTrue)))))
		AddReportEntry("Plugin re-registration → refused pod allocated", time.Since(registered).String())
	})

	It("says why it refused a pod whose plugin answered Allocate without a response per container", func() {
		n := newNodeAgent(0)
		p := n.plugin(gopher, gophers("gopher", 2))
		p.SetAllocateFunc(func(*pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
			return &pluginapi.AllocateResponse{}, nil
		})
		n.register(p)
		pod := createPod(testutil.MakePod("unanswered", ns).Node(n.name).Request(gopher, 1))
		// The kubelet's words for it.
		why := ContainSubstring("no containers return in allocation response")
		Eventually(deviceAllocation(pod)).Should(HaveField("Status.Conditions", ContainElement(And(
			HaveField("Type", kdv1alpha1.DeviceAllocationAllocated),
			HaveField("Status", metav1.ConditionFalse),
			HaveField("Reason", kdv1alpha1.ReasonAllocateFailed),
			HaveField("Message", why),
		))))
		Eventually(eventsFor(pod.UID)).Should(ContainElement(And(
			HaveField("Reason", kdv1alpha1.EventReasonDeviceAllocationFailed),
			HaveField("Note", why),
		)))
		Expect(n.holds(pod)).To(BeFalse())
		Expect(n.logs.String()).To(MatchRegexp(`Recorded the pod's devices.*"allocated": false.*"reason": "AllocateFailed".*no containers return in allocation response`),
			"the log says why the pod was refused")
	})

	It("never allocates to a pod being deleted, even one it refused before", func() {
		n := newNodeAgent(0)
		p := n.plugin(gopher, gophers("gopher", 1))
		n.register(p)
		holder := createPod(testutil.MakePod("holder", ns).Node(n.name).Request(gopher, 1))
		Eventually(deviceAllocation(holder)).Should(HaveField("Status.Summary", string(gopher)+"=gopher-0"))
		refused := createPod(testutil.MakePod("refused", ns).Node(n.name).Request(gopher, 1))
		Eventually(deviceAllocation(refused)).Should(HaveField("Status.Conditions", ContainElement(And(
			HaveField("Type", kdv1alpha1.DeviceAllocationAllocated), HaveField("Status", metav1.ConditionFalse)))))

		By("deleting the refused pod with a grace period: it stays, being deleted, as no kubelet ends it")
		Expect(k8sClient.Delete(ctx, refused, client.GracePeriodSeconds(30))).To(Succeed())
		DeferCleanup(func() {
			Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, refused, client.GracePeriodSeconds(0)))).To(Succeed())
		})
		Eventually(func() (*corev1.Pod, error) {
			pod := &corev1.Pod{}
			return pod, k8sClient.Get(ctx, client.ObjectKeyFromObject(refused), pod)
		}).Should(HaveField("DeletionTimestamp", Not(BeNil())))
		n.settle()

		By("freeing the device it waited for")
		deletePod(holder)
		Eventually(n.nodeDevice(gopher, 0)).Should(HaveField("Status.Allocated", BeEquivalentTo(0)))
		// The kubelet admits no pod being deleted: the freed device stays free.
		Consistently(func() bool { return n.holds(refused) }).WithTimeout(2 * time.Second).Should(BeFalse())
		Expect(deviceAllocation(refused)()).To(HaveField("Status.Conditions", ContainElement(And(
			HaveField("Type", kdv1alpha1.DeviceAllocationAllocated), HaveField("Status", metav1.ConditionFalse)))))
		Expect(n.nodeDevice(gopher, 0)()).To(HaveField("Status.Allocated", BeEquivalentTo(0)))
	})

	It("releases a pod's devices when it ends, and keeps two pods of the same name apart", func() {
		n := newNodeAgent(0)
		p := n.plugin(gopher, gophers("gopher", 2))
		n.register(p)
		first := createPod(testutil.MakePod("job", ns).Node(n.name).Request(gopher, 2))
		Eventually(deviceAllocation(first)).Should(HaveField("Status.Summary", string(gopher)+"=gopher-0,gopher-1"))

		By("the pod succeeding")
		first.Status.Phase = corev1.PodSucceeded
		Expect(k8sClient.Status().Update(ctx, first)).To(Succeed())
		Eventually(gone(deviceAllocation(first))).Should(BeTrue())
		Eventually(n.nodeDevice(gopher, 0)).Should(HaveField("Status.Allocated", BeEquivalentTo(0)))

		By("a new pod of the same name getting its own DeviceAllocation")
		deletePod(first)
		second := createPod(testutil.MakePod("job", ns).Node(n.name).Request(gopher, 2))
		Expect(second.UID).NotTo(Equal(first.UID))
		Expect(agent.DeviceAllocationName(second.Spec.NodeName, second.Name, string(second.UID))).NotTo(Equal(agent.DeviceAllocationName(first.Spec.NodeName, first.Name, string(first.UID))))
		Eventually(deviceAllocation(second)).Should(HaveField("Status.Summary", string(gopher)+"=gopher-0,gopher-1"))
		list := &kdv1alpha1.DeviceAllocationList{}
		Expect(k8sClient.List(ctx, list, client.InNamespace(ns))).To(Succeed())
		Expect(list.Items).To(ConsistOf(HaveField("Spec.PodUID", string(second.UID))))
	})
})

var _ = Describe("Node agent checkpoint", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	It("rebuilds a corrupt checkpoint from the DeviceAllocations and reports it", func() {
		n := newNodeAgent(0)
		p := n.plugin(gopher, gophers("gopher", 4))
		n.register(p)
		pod := createPod(testutil.MakePod("keeper", ns).Node(n.name).Request(gopher, 2))
		Eventually(n.nodeDevice(gopher, 0)).Should(HaveField("Status.Allocated", BeEquivalentTo(2)))
		da := allocated(pod)
		held := deviceIDs(da, gopher)

		By("corrupting the checkpoint while the agent is down")
		n.stop()
		n.stop = nil
		Expect(os.WriteFile(n.checkpointPath(), []byte(`{"not": "a checkpoint"`), 0o600)).To(Succeed())
		n.start()
		n.restartPlugin(p, gophers("gopher", 4))

		Eventually(eventsFor(n.node.UID)).Should(ContainElement(And(
			HaveField("Type", corev1.EventTypeWarning),
			HaveField("Reason", kdv1alpha1.EventReasonCheckpointCorrupt),
			HaveField("Note", ContainSubstring("rebuilt the allocations of 1 pods")),
		)))
		alloc, ok := n.dm.PodAllocation(string(pod.UID))
		Expect(ok).To(BeTrue(), "the allocation is rebuilt from the DeviceAllocation")
		Expect(alloc.Containers[0].Resources[0].DeviceIDs).To(Equal(held))

		By("never handing the rebuilt devices to another pod")
		Eventually(func() nodeagent.PluginState {
			s, _ := n.dm.Snapshot(string(gopher))
			return s.State
		}).Should(Equal(nodeagent.PluginRegistered))
		other := createPod(testutil.MakePod("other", ns).Node(n.name).Request(gopher, 2))
		otherDA := allocated(other)
		Expect(deviceIDs(otherDA, gopher)).NotTo(ContainElements(held[0]))
		Expect(deviceIDs(otherDA, gopher)).NotTo(ContainElements(held[1]))
		Eventually(n.nodeDevice(gopher, 0)).Should(HaveField("Status.Allocated", BeEquivalentTo(4)))
	})
})

var _ = Describe("Node agent Lease", func() {
	It("renews its Lease in its namespace, held by its node, and writes nothing else when idle", func() {
		const renew = 500 * time.Millisecond
		n := newNodeAgent(0, func(o *agent.Options) { o.LeaseRenewInterval = renew })
		lease := &coordinationv1.Lease{}
		key := types.NamespacedName{Namespace: agentNamespace, Name: agent.LeaseName(n.name)}
		Eventually(func() error { return k8sClient.Get(ctx, key, lease) }).Should(Succeed())
		Expect(lease.Spec.HolderIdentity).To(HaveValue(Equal(n.name)))
		Expect(lease.Spec.LeaseDurationSeconds).To(HaveValue(BeEquivalentTo(40)))
		Expect(agent.LeaseName(n.name)).To(Equal(kdcontroller.AgentLeaseName(n.name)), "the controller reads the Lease the agent writes")

		first := lease.Spec.RenewTime.Time
		leases, mirror := n.writes.leases(), n.writes.mirror()
		Eventually(func() (time.Time, error) {
			err := k8sClient.Get(ctx, key, lease)
			return lease.Spec.RenewTime.Time, err
		}).Should(BeTemporally(">", first))
		Consistently(n.writes.mirror).WithTimeout(4 * renew).Should(Equal(mirror))
		Expect(n.writes.leases()-leases).To(BeNumerically("~", 6, 3), "one renewal per interval")
	})
})

var _ = Describe("Node agent start-up", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	It("reconciles the objects against its checkpoint: frees, recreates and deletes what changed while it was away", func() {
		n := newNodeAgent(0)
		p := n.plugin(gopher, gophers("gopher", 4))
		n.register(p)
		left := createPod(testutil.MakePod("left", ns).Node(n.name).Request(gopher, 2))
		kept := createPod(testutil.MakePod("kept", ns).Node(n.name).Request(gopher, 1))
		Eventually(n.nodeDevice(gopher, 0)).Should(HaveField("Status.Allocated", BeEquivalentTo(3)))
		keptDA := allocated(kept)

		By("deleting a pod and a DeviceAllocation, and adding a stale one, while the agent is down")
		n.stop()
		n.stop = nil
		deletePod(left)
		Expect(k8sClient.Delete(ctx, keptDA)).To(Succeed())
		ghost := testutil.MakeDeviceAllocation("ghost-0123456789", ns).Node(n.name).Pod("ghost", "5f0c7a0e-0000-4000-8000-000000000001").Obj()
		Expect(k8sClient.Create(ctx, ghost)).To(Succeed())

		n.start()
		n.restartPlugin(p, gophers("gopher", 4))
		Eventually(n.holds).WithArguments(left).Should(BeFalse(), "the devices of a pod deleted meanwhile are freed")
		Eventually(gone(deviceAllocation(left))).Should(BeTrue())
		Eventually(gone(func() (*kdv1alpha1.DeviceAllocation, error) {
			da := &kdv1alpha1.DeviceAllocation{}
			return da, k8sClient.Get(ctx, client.ObjectKeyFromObject(ghost), da)
		})).Should(BeTrue(), "a DeviceAllocation of no pod is deleted")
		Eventually(deviceAllocation(kept)).Should(And(
			HaveField("Status.Summary", keptDA.Status.Summary),
			HaveField("UID", Not(Equal(keptDA.UID))),
		), "a deleted DeviceAllocation of a live pod is recreated from the checkpoint")
		Eventually(n.nodeDevice(gopher, 0)).Should(HaveField("Status.Allocated", BeEquivalentTo(1)))
	})
})

var _ = Describe("Node agent with a hung plugin", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	It("allocates other pods while one plugin hangs in Allocate", func() {
		const fpga corev1.ResourceName = "acme.io/fpga"
		n := newNodeAgent(0)
		release := make(chan struct{})
		unblock := sync.OnceFunc(func() { close(release) })
		hung := n.plugin(fpga, gophers("fpga", 1))
		hung.SetAllocateFunc(func(req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
			<-release
			return envAllocator(req)
		})
		DeferCleanup(unblock)
		n.register(hung)
		n.register(n.plugin(gopher, gophers("gopher", 4)))
		Eventually(n.nodeDevice(fpga, 0)).Should(HaveField("Status.Allocatable", BeEquivalentTo(1)))
		Eventually(n.nodeDevice(gopher, 0)).Should(HaveField("Status.Allocatable", BeEquivalentTo(4)))

		stuck := createPod(testutil.MakePod("stuck", ns).Node(n.name).Request(fpga, 1))
		Eventually(hung.Calls).Should(ContainElement(dptest.CallAllocate))
		quick := createPod(testutil.MakePod("quick", ns).Node(n.name).Request(gopher, 1))
		created := time.Now()
		Eventually(deviceAllocation(quick)).WithTimeout(5 * time.Second).Should(HaveField("Status.Conditions", ContainElement(And(
			HaveField("Type", kdv1alpha1.DeviceAllocationAllocated), HaveField("Status", metav1.ConditionTrue)))))
		AddReportEntry("Pod allocated while another plugin hangs in Allocate", time.Since(created).String())
		Expect(gone(deviceAllocation(stuck))()).To(BeTrue(), "the hung allocation is still in flight")

		unblock()
		Eventually(deviceAllocation(stuck)).Should(HaveField("Status.Summary", string(fpga)+"=fpga-0"))
	})

	It("allocates another resource's pod within a second while 32 pods wait on a plugin hung in Allocate", func() {
		const fpga corev1.ResourceName = "acme.io/fpga"
		const waiting = 32
		n := newNodeAgent(0)
		release := make(chan struct{})
		unblock := sync.OnceFunc(func() { close(release) })
		hung := n.plugin(fpga, gophers("fpga", waiting))
		hung.SetAllocateFunc(func(req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
			<-release
			return envAllocator(req)
		})
		DeferCleanup(unblock)
		n.register(hung)
		n.register(n.plugin(gopher, gophers("gopher", 4)))
		Eventually(n.nodeDevice(fpga, 0)).Should(HaveField("Status.Allocatable", BeEquivalentTo(waiting)))
		Eventually(n.nodeDevice(gopher, 0)).Should(HaveField("Status.Allocatable", BeEquivalentTo(4)))

		stuck := make([]*corev1.Pod, waiting)
		for i := range stuck {
			stuck[i] = createPod(testutil.MakePod(fmt.Sprintf("stuck-%d", i), ns).Node(n.name).Request(fpga, 1))
		}
		Eventually(func() []string { return hung.Calls() }).Should(ContainElement(dptest.CallAllocate))
		// Every pod of the hung resource has been reconciled: the agent has seen them all.
		n.settle()

		quick := createPod(testutil.MakePod("quick", ns).Node(n.name).Request(gopher, 1))
		created := time.Now()
		Eventually(deviceAllocation(quick)).WithTimeout(time.Until(created.Add(time.Second))).Should(HaveField("Status.Conditions", ContainElement(And(
			HaveField("Type", kdv1alpha1.DeviceAllocationAllocated), HaveField("Status", metav1.ConditionTrue)))))
		AddReportEntry(fmt.Sprintf("Pod allocated while %d pods wait on a plugin hung in Allocate", waiting), time.Since(created).String())
		for _, pod := range stuck {
			Expect(gone(deviceAllocation(pod))()).To(BeTrue(), "the hung allocations are still in flight")
		}

		By("the plugin answering: every waiting pod gets its device")
		unblock()
		for _, pod := range stuck {
			Eventually(deviceAllocation(pod)).WithTimeout(time.Minute).Should(HaveField("Status.Conditions", ContainElement(And(
				HaveField("Type", kdv1alpha1.DeviceAllocationAllocated), HaveField("Status", metav1.ConditionTrue)))))
		}
		Eventually(n.nodeDevice(fpga, 0)).Should(HaveField("Status.Allocated", BeEquivalentTo(waiting)))
	})
})
