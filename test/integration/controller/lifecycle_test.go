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
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
	"github.com/kubedevice/kubedevice/internal/agent"
	kdcontroller "github.com/kubedevice/kubedevice/internal/controller"
	"github.com/kubedevice/kubedevice/internal/testutil"
)

var _ = Describe("NodeDevice lifecycle", func() {
	It("deletes the NodeDevices of a deleted Node", func() {
		node := uniqueName("gone")
		other := uniqueName("stays")
		n := createNode(testutil.MakeNode(node))
		createNode(testutil.MakeNode(other))
		renewLease(node)
		renewLease(other)
		applyAsAgent(testutil.MakeNodeDevice(node+"-gopher-0").Node(node).Shard(0).Devices("a", 2).Obj())
		applyAsAgent(testutil.MakeNodeDevice(node+"-gopher-1").Node(node).Shard(1).Devices("b", 2).Obj())
		applyAsAgent(testutil.MakeNodeDevice(other+"-gopher").Node(other).Devices("c", 2).Obj())
		for _, name := range []string{node + "-gopher-0", node + "-gopher-1"} {
			Eventually(func() ([]string, error) {
				nd, err := nodeDevice(name)()
				return nd.Finalizers, err
			}).Should(ContainElement(kdcontroller.NodeCapacityFinalizer))
		}

		Expect(k8sClient.Delete(ctx, n)).To(Succeed())
		Eventually(isNotFound(nodeDevice(node + "-gopher-0"))).Should(BeTrue())
		Eventually(isNotFound(nodeDevice(node + "-gopher-1"))).Should(BeTrue())
		waitIdle()
		_, err := nodeDevice(other + "-gopher")()
		Expect(err).NotTo(HaveOccurred(), "another node's NodeDevice was deleted")
	})
})

var _ = Describe("DeviceAllocation audit", func() {
	var ns, node string

	BeforeEach(func() {
		ns = newNamespace()
		node = uniqueName("da")
	})

	It("deletes an allocation whose pod and agent are both gone", func() {
		// No status: the controller may delete it before the agent would have written one.
		applyAsAgent(testutil.MakeDeviceAllocation("orphan", ns).Node(node).Pod("orphan", "5f0c4b4e-0000-4000-8000-000000000001").Obj())
		Eventually(isNotFound(deviceAllocation(ns, "orphan"))).Should(BeTrue())
	})

	It("keeps an allocation whose pod is gone while the agent lives, and deletes it once the Lease expires", func() {
		renewLease(node)
		runs := reconciles("deviceallocation")
		applyAsAgent(testutil.MakeDeviceAllocation("releasing", ns).Node(node).Pod("releasing", "5f0c4b4e-0000-4000-8000-000000000002").
			Container("app", string(gopher), "gopher-0").Obj())
		Eventually(func() float64 { return reconciles("deviceallocation") }).Should(BeNumerically(">", runs))
		waitIdle()
		_, err := deviceAllocation(ns, "releasing")()
		Expect(err).NotTo(HaveOccurred(), "deleted while the agent can still release it")

		fakeClock.Step(leaseDuration + time.Second)
		Eventually(isNotFound(deviceAllocation(ns, "releasing"))).Should(BeTrue())
	})

	It("keeps an allocation whose pod exists even without an agent, but not one naming an older pod of the same name", func() {
		pod := testutil.MakePod("p", ns).Node(node).Request(gopher, 1).Obj()
		Expect(k8sClient.Create(ctx, pod)).To(Succeed())
		runs := reconciles("deviceallocation")
		applyAsAgent(testutil.MakeDeviceAllocation("p", ns).Node(node).Pod("p", string(pod.UID)).
			Container("app", string(gopher), "gopher-0").Obj())
		applyAsAgent(testutil.MakeDeviceAllocation("p-old", ns).Node(node).Pod("p", "5f0c4b4e-0000-4000-8000-000000000003").Obj())

		Eventually(isNotFound(deviceAllocation(ns, "p-old"))).Should(BeTrue())
		Eventually(func() float64 { return reconciles("deviceallocation") }).Should(BeNumerically(">=", runs+2))
		waitIdle()
		_, err := deviceAllocation(ns, "p")()
		Expect(err).NotTo(HaveOccurred(), "deleted although its pod exists")
	})

	It("deletes an allocation named before names started with the node once its agent rewrote it under the new name", func() {
		renewLease(node)
		pod := testutil.MakePod("upgraded", ns).Node(node).Request(gopher, 1).Obj()
		Expect(k8sClient.Create(ctx, pod)).To(Succeed())
		oldName := "upgraded-0123456789" // <pod>-<hash of the UID>, as agents named it before
		applyAsAgent(testutil.MakeDeviceAllocation(oldName, ns).Node(node).Pod(pod.Name, string(pod.UID)).
			Container("app", string(gopher), "gopher-0").Obj())
		waitIdle()
		_, err := deviceAllocation(ns, oldName)()
		Expect(err).NotTo(HaveOccurred(), "deleted while it is the pod's only allocation")

		By("the upgraded agent writing the pod's allocation under its new name")
		newName := agent.DeviceAllocationName(node, pod.Name, string(pod.UID))
		applyAsAgent(testutil.MakeDeviceAllocation(newName, ns).Node(node).Pod(pod.Name, string(pod.UID)).
			Container("app", string(gopher), "gopher-0").Obj())
		Eventually(isNotFound(deviceAllocation(ns, oldName))).Should(BeTrue())
		Eventually(daCondition(ns, newName, kdv1alpha1.DeviceAllocationConflict)).Should(Equal("absent"))
		waitIdle()
		_, err = deviceAllocation(ns, newName)()
		Expect(err).NotTo(HaveOccurred())
	})

	It("marks two live allocations holding the same device with Conflict and a Warning event, and clears it when one is released", func() {
		ns2 := newNamespace()
		renewLease(node)
		p1 := testutil.MakePod("p1", ns).Node(node).Request(gopher, 2).Obj()
		p2 := testutil.MakePod("p2", ns2).Node(node).Request(gopher, 1).Obj()
		Expect(k8sClient.Create(ctx, p1)).To(Succeed())
		Expect(k8sClient.Create(ctx, p2)).To(Succeed())

		da1 := testutil.MakeDeviceAllocation("p1", ns).Node(node).Pod("p1", string(p1.UID)).
			Container("app", string(gopher), "gopher-0", "gopher-1")
		da2 := testutil.MakeDeviceAllocation("p2", ns2).Node(node).Pod("p2", string(p2.UID)).
			Container("app", string(gopher), "gopher-1")
		applyAsAgent(da1.Obj())
		waitIdle()
		Expect(daCondition(ns, "p1", kdv1alpha1.DeviceAllocationConflict)()).To(Equal("absent"))

		applyAsAgent(da2.Obj())
		for _, key := range []types.NamespacedName{{Namespace: ns, Name: "p1"}, {Namespace: ns2, Name: "p2"}} {
			Eventually(daCondition(key.Namespace, key.Name, kdv1alpha1.DeviceAllocationConflict)).
				Should(Equal("True/" + kdv1alpha1.ReasonDeviceHeldTwice))
			da, err := deviceAllocation(key.Namespace, key.Name)()
			Expect(err).NotTo(HaveOccurred())
			Expect(meta.FindStatusCondition(da.Status.Conditions, kdv1alpha1.DeviceAllocationConflict).Message).
				To(ContainSubstring("example.com/gopher gopher-1 is also held by"))
			Eventually(eventsFor(da.UID)).Should(ContainElement(And(
				HaveField("Type", corev1.EventTypeWarning),
				HaveField("Reason", kdv1alpha1.ReasonDeviceHeldTwice),
			)))
		}
		da1Obj, err := deviceAllocation(ns, "p1")()
		Expect(err).NotTo(HaveOccurred())
		Expect(meta.FindStatusCondition(da1Obj.Status.Conditions, kdv1alpha1.DeviceAllocationConflict).Message).
			To(ContainSubstring(ns2 + "/p2"))

		By("the agent and the controller writing the same object without a status subresource, each keeping the other's condition")
		// Each write counts in the generation: a condition stamped with it would make the other
		// writer's next look differ, one more write per write. Nothing is written once it settled.
		generation := da1Obj.Generation
		Consistently(func() (int64, error) {
			da, err := deviceAllocation(ns, "p1")()
			return da.Generation, err
		}).WithTimeout(2*time.Second).Should(Equal(generation), "DeviceAllocation p1 rewritten after its conflict was recorded")
		Expect(meta.FindStatusCondition(da1Obj.Status.Conditions, kdv1alpha1.DeviceAllocationConflict).ObservedGeneration).To(BeZero())
		allocated := metav1.Condition{Type: kdv1alpha1.DeviceAllocationAllocated, Status: metav1.ConditionTrue,
			Reason: kdv1alpha1.ReasonAllocated, Message: "allocated", LastTransitionTime: metav1.Now()}
		applyAsAgent(da1.Condition(allocated).Obj())
		Expect(daCondition(ns, "p1", kdv1alpha1.DeviceAllocationAllocated)()).To(Equal("True/" + kdv1alpha1.ReasonAllocated))
		Expect(daCondition(ns, "p1", kdv1alpha1.DeviceAllocationConflict)()).To(Equal("True/"+kdv1alpha1.ReasonDeviceHeldTwice),
			"the agent's apply removed the controller's condition")

		By("releasing one of them")
		applyAsAgent(da2.Released(kdv1alpha1.ReasonPodTerminated).Obj())
		Eventually(daCondition(ns, "p1", kdv1alpha1.DeviceAllocationConflict)).Should(Equal("absent"))
		Eventually(daCondition(ns2, "p2", kdv1alpha1.DeviceAllocationConflict)).Should(Equal("absent"))
		Expect(daCondition(ns2, "p2", kdv1alpha1.DeviceAllocationReleased)()).To(Equal("True/" + kdv1alpha1.ReasonPodTerminated))
		Expect(daCondition(ns, "p1", kdv1alpha1.DeviceAllocationAllocated)()).To(Equal("True/"+kdv1alpha1.ReasonAllocated),
			"the controller's removal of its condition removed the agent's")
	})
})
