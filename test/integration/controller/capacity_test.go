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

package controller

import (
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
	"github.com/kubedevice/kubedevice/internal/contract"
	kdcontroller "github.com/kubedevice/kubedevice/internal/controller"
	"github.com/kubedevice/kubedevice/internal/testutil"
)

var _ = Describe("Node capacity", func() {
	var node string

	BeforeEach(func() {
		node = uniqueName("cap")
		createNode(testutil.MakeNode(node).Capacity(corev1.ResourceCPU, "4").Capacity("example.org/other", "2"))
		renewLease(node)
	})

	It("publishes a NodeDevice's allocatable devices as the node's capacity and allocatable", func() {
		start := time.Now()
		applyAsAgent(testutil.MakeNodeDevice(node+"-gopher").Node(node).Devices("gopher", 4).Obj())
		Eventually(published(node, gopher)).WithPolling(2 * time.Millisecond).Should(Equal("4/4"))
		elapsed := time.Since(start)
		AddReportEntry("NodeDevice created → Node capacity visible", elapsed.String())
		GinkgoWriter.Printf("NodeDevice created -> node capacity visible in %s\n", elapsed)

		By("putting the node-capacity finalizer on the NodeDevice")
		Eventually(func() ([]string, error) {
			nd, err := nodeDevice(node + "-gopher")()
			return nd.Finalizers, err
		}).Should(ContainElement(kdcontroller.NodeCapacityFinalizer))
	})

	It("writes nothing to a NodeDevice the agent made whole, and lets it go though the agent holds the finalizer too", func() {
		name := node + "-gopher"
		nd := testutil.MakeNodeDevice(name).Node(node).Devices("gopher", 4).Obj()
		nd.Finalizers = []string{kdcontroller.NodeCapacityFinalizer}
		By("writing it as the agent does: the finalizer with the object, AgentReady with its first status")
		u := toApplyObject(nd)
		delete(u.Object, "status")
		Expect(k8sClient.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(agentFieldOwner), client.ForceOwnership)).To(Succeed())
		created, err := nodeDevice(name)()
		Expect(err).NotTo(HaveOccurred())
		nd.Status.Conditions = []metav1.Condition{
			{Type: kdv1alpha1.NodeDeviceRegistered, Status: metav1.ConditionTrue, Reason: kdv1alpha1.ReasonPluginRegistered,
				Message: "registered", ObservedGeneration: created.Generation, LastTransitionTime: metav1.Now()},
			agentReady(node, created.Generation),
		}
		Expect(tryApplyStatusAs(k8sClient, nd, toApplyObject(nd).Object["status"])).To(Succeed())
		Eventually(published(node, gopher)).Should(Equal("4/4"))
		waitIdle()
		Expect(controllerWrites.objectWrites(name)).To(BeZero(), "the controller put on a finalizer the object had")
		Expect(controllerWrites.of(name)).To(BeZero(), "the controller wrote the AgentReady condition the agent had written")
		Expect(ndCondition(name, kdv1alpha1.NodeDeviceAgentReady)()).To(Equal("True/AgentLeaseValid"))

		By("deleting it: the resource is withdrawn and the finalizer removed, though the agent's apply holds it too")
		Expect(k8sClient.Delete(ctx, testutil.MakeNodeDevice(name).Obj())).To(Succeed())
		Eventually(published(node, gopher)).Should(Equal("0/0"))
		Eventually(isNotFound(nodeDevice(name))).Should(BeTrue())
	})

	It("sets AgentReady on a NodeDevice an agent wrote without it (an earlier agent), once its status is there", func() {
		name := node + "-gopher"
		Expect(k8sClient.Create(ctx, testutil.MakeNodeDevice(name).Node(node).Obj())).To(Succeed())
		Eventually(func() ([]string, error) {
			nd, err := nodeDevice(name)()
			return nd.Finalizers, err
		}).Should(ContainElement(kdcontroller.NodeCapacityFinalizer))
		waitIdle()
		Expect(ndCondition(name, kdv1alpha1.NodeDeviceAgentReady)()).To(Equal("absent"), "AgentReady before the agent's first status write")

		applyAsAgent(testutil.MakeNodeDevice(name).Node(node).Devices("gopher", 2).Obj())
		Eventually(ndCondition(name, kdv1alpha1.NodeDeviceAgentReady)).Should(Equal("True/AgentLeaseValid"))
	})

	It("publishes a new resource once, at its count, not first as 0 before the agent wrote its status", func() {
		patches := capacityPatches()
		By("creating the NodeDevice as the agent does, without a status first")
		Expect(k8sClient.Create(ctx, testutil.MakeNodeDevice(node+"-gopher").Node(node).Obj())).To(Succeed())
		Eventually(func() ([]string, error) {
			nd, err := nodeDevice(node + "-gopher")()
			return nd.Finalizers, err
		}).Should(ContainElement(kdcontroller.NodeCapacityFinalizer))
		waitIdle()
		Expect(published(node, gopher)()).To(Equal("-/-"), "the node publishes the resource before its count is known")

		By("writing its status")
		applyAsAgent(testutil.MakeNodeDevice(node+"-gopher").Node(node).Devices("gopher", 4).Obj())
		Eventually(published(node, gopher)).Should(Equal("4/4"))
		waitIdle()
		Expect(capacityPatches()-patches).To(Equal(1.0), "patches of node %s", node)
	})

	It("sums the shards of a resource and follows each shard", func() {
		applyAsAgent(testutil.MakeNodeDevice(node+"-gopher-0").Node(node).Shard(0).Devices("a", 3).Obj())
		applyAsAgent(testutil.MakeNodeDevice(node+"-gopher-1").Node(node).Shard(1).Devices("b", 2).Obj())
		Eventually(published(node, gopher)).Should(Equal("5/5"))

		By("dropping a healthy device from shard 1")
		applyAsAgent(testutil.MakeNodeDevice(node+"-gopher-1").Node(node).Shard(1).
			Devices("b", 1).Device("b-1", kdv1alpha1.DeviceUnhealthy).Obj())
		Eventually(published(node, gopher)).Should(Equal("4/4"))

		By("deleting shard 1: shard 0 remains")
		Expect(k8sClient.Delete(ctx, testutil.MakeNodeDevice(node+"-gopher-1").Obj())).To(Succeed())
		Eventually(published(node, gopher)).Should(Equal("3/3"))
		Eventually(isNotFound(nodeDevice(node + "-gopher-1"))).Should(BeTrue())
	})

	It("publishes a resource once every shard counts, in one patch, not shard by shard", func() {
		By("stopping the controller while the agent writes two shards, one already holding the finalizer")
		stopManager()
		applyAsAgent(testutil.MakeNodeDevice(node+"-gopher-0").Node(node).Shard(0).Devices("a", 3).Obj())
		applyAsAgent(testutil.MakeNodeDevice(node+"-gopher-1").Node(node).Shard(1).Devices("b", 2).Obj())
		finalizer := toApplyObject(testutil.MakeNodeDevice(node + "-gopher-0").Obj())
		unstructured.RemoveNestedField(finalizer.Object, "spec")
		unstructured.RemoveNestedField(finalizer.Object, "status")
		finalizer.SetFinalizers([]string{kdcontroller.NodeCapacityFinalizer})
		Expect(k8sClient.Apply(ctx, client.ApplyConfigurationFromUnstructured(finalizer),
			client.FieldOwner(kdcontroller.FieldOwner), client.ForceOwnership)).To(Succeed())
		patches := capacityPatches()

		By("starting the controller: shard 0 alone is never published")
		stopManager = startManager()
		Eventually(published(node, gopher)).Should(Equal("5/5"))
		waitIdle()
		Expect(capacityPatches()-patches).To(Equal(1.0), "patches of node %s", node)
	})

	It("publishes a plugin registration's shards in one patch once the agent has created them all, not as each counts", func() {
		// Measured by test/scale (BenchmarkBinaries): an agent registering 10 000 devices
		// creates 79 shards one after another; the node was patched 66–87 times, its capacity
		// climbing by 128.
		By("publishing another resource first, so the controller's caches are warm")
		applyAsAgent(testutil.MakeNodeDevice(node+"-warmup").Node(node).Resource("example.com/warmup").Devices("w", 1).Obj())
		Eventually(published(node, "example.com/warmup")).Should(Equal("1/1"))
		waitIdle()
		patches := capacityPatches()
		const shards = 6
		for i := range shards {
			applyAsAgent(testutil.MakeNodeDevice(fmt.Sprintf("%s-gopher-%d", node, i)).Node(node).Shard(int32(i)).
				Devices(fmt.Sprintf("g%d", i), 4).Obj())
			// Time for the controller to put its finalizer on the shard, so that without the
			// settling every shard would count before the next one is created.
			Eventually(func() ([]string, error) {
				nd, err := nodeDevice(fmt.Sprintf("%s-gopher-%d", node, i))()
				return nd.Finalizers, err
			}).Should(ContainElement(kdcontroller.NodeCapacityFinalizer))
		}
		Eventually(published(node, gopher)).Should(Equal(fmt.Sprint(4*shards) + "/" + fmt.Sprint(4*shards)))
		waitIdle()
		Expect(capacityPatches()-patches).To(Equal(1.0), "patches of node %s", node)

		By("writing each shard's AgentReady condition once, whatever events came before the cache saw it")
		for i := range shards {
			Expect(controllerWrites.of(fmt.Sprintf("%s-gopher-%d", node, i))).To(Equal(1), "status writes of shard %d", i)
		}
	})

	It("runs several reconciles of each kind at once, so a first install is not one round trip after another", func() {
		// Measured by test/scale: with one worker a first install of 1 000 nodes wrote 27 times
		// a second whatever the client's rate limit.
		for _, c := range controllers {
			Expect(metricValue("controller_runtime_max_concurrent_reconciles", map[string]string{"controller": c})).
				To(BeEquivalentTo(kdcontroller.DefaultWorkers), c)
		}
	})

	It("follows allocatable changes with one patch each, never touching cpu or other extended resources", func() {
		applyAsAgent(testutil.MakeNodeDevice(node+"-gopher").Node(node).Devices("gopher", 4).Obj())
		Eventually(published(node, gopher)).Should(Equal("4/4"))
		waitIdle()

		for _, healthy := range []int{2, 3, 0, 4} {
			patches := capacityPatches()
			start := time.Now()
			nd := testutil.MakeNodeDevice(node+"-gopher").Node(node).Devices("gopher", healthy)
			for i := healthy; i < 4; i++ {
				nd.Device(fmt.Sprintf("gopher-%d", i), kdv1alpha1.DeviceUnhealthy)
			}
			applyAsAgent(nd.Obj())
			want := fmt.Sprintf("%d/%d", healthy, healthy)
			Eventually(published(node, gopher)).WithPolling(2 * time.Millisecond).Should(Equal(want))
			elapsed := time.Since(start)
			waitIdle()
			Expect(capacityPatches()-patches).To(Equal(1.0), "patches for allocatable %d", healthy)
			AddReportEntry(fmt.Sprintf("NodeDevice allocatable → %d visible on the Node", healthy), elapsed.String())
			GinkgoWriter.Printf("allocatable -> %d visible on the node in %s, 1 patch\n", healthy, elapsed)
		}

		Expect(published(node, corev1.ResourceCPU)()).To(Equal("4/4"))
		Expect(published(node, "example.org/other")()).To(Equal("2/2"))
	})

	It("does not patch the node when nothing changed", func() {
		applyAsAgent(testutil.MakeNodeDevice(node+"-gopher").Node(node).Devices("gopher", 4).Obj())
		Eventually(published(node, gopher)).Should(Equal("4/4"))
		waitIdle()
		patches := capacityPatches()
		runs := reconciles("node-capacity")

		By("changing another resource of the node, which makes the controller look again")
		got := &corev1.Node{}
		Expect(k8sClient.Get(ctx, client.ObjectKey{Name: node}, got)).To(Succeed())
		got.Status.Capacity["example.org/other"] = resource.MustParse("3")
		got.Status.Allocatable["example.org/other"] = resource.MustParse("3")
		Expect(k8sClient.Status().Update(ctx, got)).To(Succeed())
		rv := got.ResourceVersion

		Eventually(func() float64 { return reconciles("node-capacity") }).Should(BeNumerically(">", runs))
		waitIdle()
		Expect(capacityPatches()).To(Equal(patches))
		Expect(k8sClient.Get(ctx, client.ObjectKey{Name: node}, got)).To(Succeed())
		Expect(got.ResourceVersion).To(Equal(rv), "the node was written after our own update")
		Expect(published(node, "example.org/other")()).To(Equal("3/3"))

		By("rewriting the NodeDevice's status with a change that leaves allocatable alone")
		applyAsAgent(testutil.MakeNodeDevice(node+"-gopher").Node(node).Devices("gopher", 4).
			Device("gopher-4", kdv1alpha1.DeviceUnhealthy).Obj())
		Eventually(func() (int32, error) {
			nd, err := nodeDevice(node + "-gopher")()
			return nd.Status.Capacity, err
		}).Should(BeEquivalentTo(5))
		waitIdle()
		Expect(capacityPatches()).To(Equal(patches))
		Expect(published(node, gopher)()).To(Equal("4/4"))
	})

	It("sets a resource to 0, keeping its key, when its NodeDevices are deleted", func() {
		applyAsAgent(testutil.MakeNodeDevice(node+"-gopher").Node(node).Devices("gopher", 4).Obj())
		Eventually(published(node, gopher)).Should(Equal("4/4"))
		Eventually(func() ([]string, error) {
			nd, err := nodeDevice(node + "-gopher")()
			return nd.Finalizers, err
		}).Should(ContainElement(kdcontroller.NodeCapacityFinalizer))

		Expect(k8sClient.Delete(ctx, testutil.MakeNodeDevice(node+"-gopher").Obj())).To(Succeed())
		Eventually(published(node, gopher)).Should(Equal("0/0"))
		Eventually(isNotFound(nodeDevice(node + "-gopher"))).Should(BeTrue())
	})

	It("zeroes a resource whose NodeDevice was deleted while the controller was down", func() {
		applyAsAgent(testutil.MakeNodeDevice(node+"-gopher").Node(node).Devices("gopher", 4).Obj())
		Eventually(published(node, gopher)).Should(Equal("4/4"))
		Eventually(func() ([]string, error) {
			nd, err := nodeDevice(node + "-gopher")()
			return nd.Finalizers, err
		}).Should(ContainElement(kdcontroller.NodeCapacityFinalizer))

		By("stopping the controller and deleting the NodeDevice")
		stopManager()
		Expect(k8sClient.Delete(ctx, testutil.MakeNodeDevice(node+"-gopher").Obj())).To(Succeed())
		nd, err := nodeDevice(node + "-gopher")()
		Expect(err).NotTo(HaveOccurred(), "the finalizer holds the NodeDevice while the controller is away")
		Expect(nd.DeletionTimestamp).NotTo(BeNil())
		Expect(published(node, gopher)()).To(Equal("4/4"))

		By("starting the controller again")
		stopManager = startManager()
		Eventually(published(node, gopher)).Should(Equal("0/0"))
		Eventually(isNotFound(nodeDevice(node + "-gopher"))).Should(BeTrue())
	})
})

// agentReady is the AgentReady condition an agent of node seeds with its first status write.
func agentReady(node string, generation int64) metav1.Condition {
	c := contract.AgentReadyCondition(agentNamespace, node, generation)
	c.LastTransitionTime = metav1.Now()
	return c
}
