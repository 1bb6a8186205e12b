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

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
	"github.com/kubedevice/kubedevice/internal/testutil"
)

var _ = Describe("Agent liveness", func() {
	var node, ndName string

	BeforeEach(func() {
		node = uniqueName("live")
		ndName = node + "-gopher"
		createNode(testutil.MakeNode(node).Capacity(corev1.ResourceCPU, "4"))
	})

	It("marks NodeDevices AgentReady=False and leaves the node only the devices pods hold when the Lease expires, and restores both when it is renewed", func() {
		renewLease(node)
		held := testutil.MakeNodeDevice(ndName).Node(node).Devices("gopher", 4).Obj()
		held.Status.Allocated = 1
		applyAsAgent(held)
		Eventually(ndCondition(ndName, kdv1alpha1.NodeDeviceAgentReady)).Should(Equal("True/" + kdv1alpha1.ReasonAgentLeaseValid))
		Eventually(published(node, gopher)).Should(Equal("4/4"))

		By("letting the Lease reach its last valid instant")
		waitIdle()
		fakeClock.Step(leaseDuration - time.Second)
		waitIdle()
		Expect(ndCondition(ndName, kdv1alpha1.NodeDeviceAgentReady)()).To(Equal("True/" + kdv1alpha1.ReasonAgentLeaseValid))
		Expect(published(node, gopher)()).To(Equal("4/4"))

		By("letting it expire: only the requeue at the expiry can notice, nothing else changes")
		fakeClock.Step(2 * time.Second)
		Eventually(ndCondition(ndName, kdv1alpha1.NodeDeviceAgentReady)).Should(Equal("False/" + kdv1alpha1.ReasonAgentLeaseExpired))
		// The one device a pod holds, so a kubelet restarting meanwhile admits that pod again
		// (it re-admits every running pod against allocatable), while no new pod fits.
		Eventually(published(node, gopher)).Should(Equal("1/1"))
		nd, err := nodeDevice(ndName)()
		Expect(err).NotTo(HaveOccurred())
		Expect(meta.FindStatusCondition(nd.Status.Conditions, kdv1alpha1.NodeDeviceAgentReady).Message).
			To(ContainSubstring("more than 40s ago"))
		Eventually(eventsFor(nd.UID)).Should(ContainElement(And(
			HaveField("Type", corev1.EventTypeWarning),
			HaveField("Reason", kdv1alpha1.ReasonAgentLeaseExpired),
		)))

		By("renewing the Lease")
		renewLease(node)
		Eventually(ndCondition(ndName, kdv1alpha1.NodeDeviceAgentReady)).Should(Equal("True/" + kdv1alpha1.ReasonAgentLeaseValid))
		Eventually(published(node, gopher)).Should(Equal("4/4"))
	})

	It("reports a missing Lease as AgentLeaseMissing with the resource at 0, until the agent shows up", func() {
		applyAsAgent(testutil.MakeNodeDevice(ndName).Node(node).Devices("gopher", 4).Obj())
		Eventually(ndCondition(ndName, kdv1alpha1.NodeDeviceAgentReady)).Should(Equal("False/" + kdv1alpha1.ReasonAgentLeaseMissing))
		Eventually(published(node, gopher)).Should(Equal("0/0"))

		renewLease(node)
		Eventually(ndCondition(ndName, kdv1alpha1.NodeDeviceAgentReady)).Should(Equal("True/" + kdv1alpha1.ReasonAgentLeaseValid))
		Eventually(published(node, gopher)).Should(Equal("4/4"))
	})

	It("owns AgentReady under its own field manager, leaving the agent's conditions alone", func() {
		renewLease(node)
		nd := testutil.MakeNodeDevice(ndName).Node(node).Devices("gopher", 4).Obj()
		applyAsAgent(nd)
		Eventually(ndCondition(ndName, kdv1alpha1.NodeDeviceAgentReady)).Should(Equal("True/" + kdv1alpha1.ReasonAgentLeaseValid))

		By("the agent applying its own conditions")
		nd.Status.Conditions = append(nd.Status.Conditions, conditionAt(kdv1alpha1.NodeDeviceRegistered, kdv1alpha1.ReasonPluginRegistered))
		applyAsAgent(nd)
		Eventually(ndCondition(ndName, kdv1alpha1.NodeDeviceRegistered)).Should(Equal("True/" + kdv1alpha1.ReasonPluginRegistered))
		Expect(ndCondition(ndName, kdv1alpha1.NodeDeviceAgentReady)()).To(Equal("True/" + kdv1alpha1.ReasonAgentLeaseValid))

		got, err := nodeDevice(ndName)()
		Expect(err).NotTo(HaveOccurred())
		Expect(got.ManagedFields).To(ContainElement(And(
			HaveField("Manager", "kubedevice-controller"),
			HaveField("Subresource", "status"),
			HaveField("FieldsV1.Raw", ContainSubstring(`"k:{\"type\":\"AgentReady\"}"`)),
		)))
	})
})
