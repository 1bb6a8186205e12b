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
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
	kdcontroller "github.com/kubedevice/kubedevice/internal/controller"
	"github.com/kubedevice/kubedevice/internal/testutil"
)

// kubeletManager is the field manager of the kubelet's node status writes (its user agent's name).
const kubeletManager = "kubelet"

// holdFor is how long a spec watches the controller leave a claimed resource alone.
const holdFor = 3 * time.Second

var _ = Describe("Moving a resource from the kubelet's device manager to kubedevice", func() {
	var node string
	var nodeUID types.UID
	var name string

	BeforeEach(func() {
		node = uniqueName("switch")
		name = node + "-gopher"
		// Labelled as the kubelet registers it: the API server tracks no field ownership on an
		// object created without any field (status is not one on create), so a bare Node would
		// hide who writes its resources.
		nodeUID = createNode(testutil.MakeNode(node).Label(corev1.LabelHostname, node).Capacity(corev1.ResourceCPU, "4")).UID
		renewLease(node)
	})

	held := func() float64 {
		return metricValue("kubedevice_node_capacity_held", map[string]string{"node": node, "resource": string(gopher)})
	}

	It("leaves a resource the kubelet's device manager still publishes alone, says why, and publishes it once the kubelet sets it to 0", func() {
		By("the kubelet publishing the gopher its plugin registered with it (observe mode)")
		patchNodeStatusAs(kubeletManager, node, "2", "2")
		By("the plugin moving to kubedevice: the kubelet keeps its stopped endpoint, capacity 2 and allocatable 0")
		patchNodeStatusAs(kubeletManager, node, "2", "0")
		writes := controllerWrites.nodeStatus(node)

		applyAsAgent(testutil.MakeNodeDevice(name).Node(node).Devices("gopher", 2).Obj())
		Eventually(ndCondition(name, kdv1alpha1.NodeDeviceNodeCapacityPublished)).
			Should(Equal("False/" + kdv1alpha1.ReasonKubeletDeviceManagerOwnsResource))
		Consistently(published(node, gopher)).WithTimeout(holdFor).WithPolling(50 * time.Millisecond).Should(Equal("2/0"))
		Expect(controllerWrites.nodeStatus(node)).To(Equal(writes), "the controller wrote the status of node %s", node)
		Expect(capacityCondition(name)).To(HaveField("Message", And(ContainSubstring("kubelet's device manager owns "+string(gopher)),
			ContainSubstring("status.capacity 2, status.allocatable 0"), ContainSubstring("5 minutes"))))
		Expect(held()).To(BeEquivalentTo(1))
		Expect(metricValue("kubedevice_node_capacity_held", map[string]string{"node": node, "manager": kubeletManager,
			"reason": kdv1alpha1.ReasonKubeletDeviceManagerOwnsResource})).To(BeEquivalentTo(1))
		Eventually(eventsFor(nodeUID)).Should(ContainElement(And(HaveField("Type", corev1.EventTypeWarning),
			HaveField("Reason", kdv1alpha1.ReasonKubeletDeviceManagerOwnsResource))))

		By("the kubelet's grace period ending: it sets the capacity to 0 and never writes the resource again")
		start := time.Now()
		patchNodeStatusAs(kubeletManager, node, "0", "")
		Eventually(published(node, gopher)).WithPolling(2 * time.Millisecond).Should(Equal("2/2"))
		elapsed := time.Since(start)
		AddReportEntry("kubelet's 0 at the end of its grace period → count published", elapsed.String())
		GinkgoWriter.Printf("the kubelet's 0 -> count published in %s\n", elapsed)
		Eventually(ndCondition(name, kdv1alpha1.NodeDeviceNodeCapacityPublished)).Should(Equal("True/" + kdv1alpha1.ReasonNodeCapacityPublished))
		// The gauge follows the condition's write, in the same reconcile.
		Eventually(held).Should(BeZero())
		Eventually(eventsFor(nodeUID)).Should(ContainElement(And(HaveField("Type", corev1.EventTypeNormal),
			HaveField("Reason", kdv1alpha1.ReasonNodeCapacityPublished))))
		waitIdle()
		Expect(controllerWrites.nodeStatus(node)-writes).To(Equal(1), "node status writes")
	})

	It("publishes at once over a kubelet that set the resource to 0 when its grace period ended", func() {
		patchNodeStatusAs(kubeletManager, node, "0", "0")
		applyAsAgent(testutil.MakeNodeDevice(name).Node(node).Devices("gopher", 2).Obj())
		Eventually(published(node, gopher)).Should(Equal("2/2"))
		waitIdle()
		Expect(ndCondition(name, kdv1alpha1.NodeDeviceNodeCapacityPublished)()).To(Equal("absent"))
		Expect(held()).To(BeZero())
	})

	It("waits out the kubelet's grace period when the kubelet takes a published resource back (restarted within it)", func() {
		patchNodeStatusAs(kubeletManager, node, "0", "0")
		applyAsAgent(testutil.MakeNodeDevice(name).Node(node).Devices("gopher", 2).Obj())
		Eventually(published(node, gopher)).Should(Equal("2/2"))
		waitIdle()

		By("the kubelet, restarted, writing the 0 of the stopped endpoint its checkpoint restored")
		writes := controllerWrites.nodeStatus(node)
		patchNodeStatusAs(kubeletManager, node, "0", "0")
		Eventually(ndCondition(name, kdv1alpha1.NodeDeviceNodeCapacityPublished)).Should(Equal("False/" + kdv1alpha1.ReasonResourceTakenBack))
		Consistently(published(node, gopher)).WithTimeout(holdFor).WithPolling(50 * time.Millisecond).Should(Equal("0/0"))
		Expect(controllerWrites.nodeStatus(node)).To(Equal(writes), "the controller wrote the status of node %s", node)
		Expect(held()).To(BeEquivalentTo(1))

		By("the grace period running out")
		waitIdle()
		step := 5*time.Minute + 31*time.Second
		// The agent keeps renewing its Lease meanwhile.
		applyAsAgent(testutil.MakeLease(kdcontroller.AgentLeaseName(node), agentNamespace).RenewTime(fakeClock.Now().Add(step)).Obj())
		fakeClock.Step(step)
		Eventually(published(node, gopher)).Should(Equal("2/2"))
		Eventually(ndCondition(name, kdv1alpha1.NodeDeviceNodeCapacityPublished)).Should(Equal("True/" + kdv1alpha1.ReasonNodeCapacityPublished))
		// The gauge follows the condition's write, in the same reconcile.
		Eventually(held).Should(BeZero())
	})

	It("takes another field manager's count for a claim too, and publishes once it is removed", func() {
		applyAsAgent(testutil.MakeNodeDevice(name).Node(node).Devices("gopher", 2).Obj())
		Eventually(published(node, gopher)).Should(Equal("2/2"))
		waitIdle()

		By("an administrator writing a count of their own")
		writes := controllerWrites.nodeStatus(node)
		patchNodeStatusAs("ops-admin", node, "5", "5")
		Eventually(ndCondition(name, kdv1alpha1.NodeDeviceNodeCapacityPublished)).Should(Equal("False/" + kdv1alpha1.ReasonAnotherManagerOwnsResource))
		Expect(capacityCondition(name)).To(HaveField("Message", ContainSubstring(`Field manager "ops-admin" owns`)))
		Consistently(published(node, gopher)).WithTimeout(holdFor).WithPolling(50 * time.Millisecond).Should(Equal("5/5"))
		Expect(controllerWrites.nodeStatus(node)).To(Equal(writes), "the controller wrote the status of node %s", node)

		By("the administrator removing it")
		Expect(k8sClient.Status().Patch(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}},
			client.RawPatch(types.JSONPatchType, []byte(`[{"op":"remove","path":"/status/capacity/example.com~1gopher"},`+
				`{"op":"remove","path":"/status/allocatable/example.com~1gopher"}]`)), client.FieldOwner("ops-admin"))).To(Succeed())
		Eventually(published(node, gopher)).Should(Equal("2/2"))
		Eventually(ndCondition(name, kdv1alpha1.NodeDeviceNodeCapacityPublished)).Should(Equal("True/" + kdv1alpha1.ReasonNodeCapacityPublished))
	})

	It("leaves the resource to the kubelet when it moves back, without writing over it, and lets the NodeDevice go", func() {
		applyAsAgent(testutil.MakeNodeDevice(name).Node(node).Devices("gopher", 2).Obj())
		Eventually(published(node, gopher)).Should(Equal("2/2"))
		Eventually(func() ([]string, error) {
			nd, err := nodeDevice(name)()
			return nd.Finalizers, err
		}).Should(ContainElement(kdcontroller.NodeCapacityFinalizer))
		waitIdle()

		By("the plugin registering with the kubelet again, whose device manager publishes its 3 devices")
		writes := controllerWrites.nodeStatus(node)
		patchNodeStatusAs(kubeletManager, node, "3", "3")
		Eventually(ndCondition(name, kdv1alpha1.NodeDeviceNodeCapacityPublished)).Should(Equal("False/" + kdv1alpha1.ReasonKubeletDeviceManagerOwnsResource))
		By("the plugin leaving kubedevice meanwhile: its devices are gone from the NodeDevice")
		applyAsAgent(testutil.MakeNodeDevice(name).Node(node).Plugin(kdv1alpha1.PluginStateDisconnected).Obj())
		Consistently(published(node, gopher)).WithTimeout(holdFor).WithPolling(50 * time.Millisecond).Should(Equal("3/3"))

		By("kubedevice going (the agent deletes its NodeDevice, or cleanup does): nothing of the kubelet's to zero")
		Expect(k8sClient.Delete(ctx, testutil.MakeNodeDevice(name).Obj())).To(Succeed())
		Eventually(isNotFound(nodeDevice(name))).Should(BeTrue())
		waitIdle()
		Expect(published(node, gopher)()).To(Equal("3/3"))
		Expect(controllerWrites.nodeStatus(node)).To(Equal(writes), "the controller wrote the status of node %s", node)
		Expect(held()).To(BeZero())
	})

	It("neither holds nor reports a resource the kubelet manages in observe mode", func() {
		patchNodeStatusAs(kubeletManager, node, "2", "2")
		applyAsAgent(testutil.MakeNodeDevice(name).Node(node).Devices("gopher", 2).Path(kdv1alpha1.DevicePathObserved).Obj())
		Eventually(func() ([]string, error) {
			nd, err := nodeDevice(name)()
			return nd.Finalizers, err
		}).Should(ContainElement(kdcontroller.NodeCapacityFinalizer))
		patchNodeStatusAs(kubeletManager, node, "2", "0")
		Eventually(func() float64 { return reconciles("node-capacity") }).Should(BeNumerically(">", 0))
		waitIdle()
		Expect(ndCondition(name, kdv1alpha1.NodeDeviceNodeCapacityPublished)()).To(Equal("absent"))
		Expect(held()).To(BeZero())
		Expect(controllerWrites.nodeStatus(node)).To(BeZero())
		Expect(eventsFor(nodeUID)()).To(BeEmpty())
	})
})

// patchNodeStatusAs writes node's status.capacity and status.allocatable of the gopher resource as
// the field manager does, the kubelet's way: a strategic merge patch of nodes/status naming only
// what it sets ("" leaves a key out).
func patchNodeStatusAs(manager, node, capacity, allocatable string) {
	GinkgoHelper()
	status := map[string]any{}
	if capacity != "" {
		status["capacity"] = map[string]string{string(gopher): capacity}
	}
	if allocatable != "" {
		status["allocatable"] = map[string]string{string(gopher): allocatable}
	}
	body, err := json.Marshal(map[string]any{"status": status})
	Expect(err).NotTo(HaveOccurred())
	Expect(k8sClient.Status().Patch(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}},
		client.RawPatch(types.StrategicMergePatchType, body), client.FieldOwner(manager))).To(Succeed(), fmt.Sprintf("patching as %s", manager))
}

// capacityCondition returns the NodeCapacityPublished condition of the NodeDevice name.
func capacityCondition(name string) *metav1.Condition {
	GinkgoHelper()
	nd, err := nodeDevice(name)()
	Expect(err).NotTo(HaveOccurred())
	c := meta.FindStatusCondition(nd.Status.Conditions, kdv1alpha1.NodeDeviceNodeCapacityPublished)
	Expect(c).NotTo(BeNil())
	return c
}
