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
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
	kdcontroller "github.com/kubedevice/kubedevice/internal/controller"
	"github.com/kubedevice/kubedevice/internal/testutil"
)

// The suite's remediation policy (startManager): example.com/remedy after a minute unhealthy, one
// eviction per node every 2 minutes and one in the cluster every 30 seconds.
const (
	remedyResource        = "example.com/remedy"
	remedyGrace           = time.Minute
	remedyNodeInterval    = 2 * time.Minute
	remedyClusterInterval = 30 * time.Second
	// remedyBlockedRetry is the controller's wait before asking again for a refused eviction.
	remedyBlockedRetry = 30 * time.Second
)

var _ = Describe("Remediation of pods on unhealthy devices", func() {
	var (
		ns    string
		nodes []string
	)

	BeforeEach(func() {
		ns = newNamespace()
		nodes = nil
		// Earlier evictions' tokens are back: both limits allow the next eviction at once.
		stepClock(remedyNodeInterval)
	})

	// remedyNode creates a node, its agent's Lease and a NodeDevice of remedyResource listing the
	// healthy devices ids, and returns the node's and the NodeDevice's names.
	remedyNode := func(ids ...string) (string, string) {
		node := uniqueName("remedy")
		createNode(testutil.MakeNode(node))
		renewLease(node)
		nodes = append(nodes, node)
		w := testutil.MakeNodeDevice(node + "-remedy").Node(node).Resource(remedyResource).Plugin(kdv1alpha1.PluginStateRegistered)
		for _, id := range ids {
			w.Device(id, kdv1alpha1.DeviceHealthy)
		}
		applyAsAgent(w.Obj())
		return node, w.Name
	}
	// stepAll steps the fake clock once the reconcilers are idle, and renews the nodes' Leases.
	stepAll := func(d time.Duration) {
		stepClock(d)
		for _, n := range nodes {
			renewLease(n)
		}
	}
	gone := func(names ...string) func() int {
		return func() int {
			n := 0
			for _, name := range names {
				if isNotFound(func() (*corev1.Pod, error) { return getPod(ns, name) })() {
					n++
				}
			}
			return n
		}
	}

	It("evicts the holder of a device unhealthy past the grace period, and not that of a device healthy again within it", func() {
		node, nd := remedyNode("remedy-0", "remedy-1")
		sick := holdingPod(ns, node, "sick", "remedy-0", nil)
		holdingPod(ns, node, "recovered", "remedy-1", nil)
		evicted := metricValue("kubedevice_remediation_evictions_total", map[string]string{"node": node, "result": "evicted"})

		By("both devices unhealthy, for half the grace period")
		setHealth(nd, "remedy-0", kdv1alpha1.DeviceUnhealthy)
		setHealth(nd, "remedy-1", kdv1alpha1.DeviceUnhealthy)
		stepAll(remedyGrace / 2)
		Consistently(gone("sick", "recovered")).WithTimeout(time.Second).Should(BeZero())

		By("remedy-1 healthy again within the grace period; remedy-0 still unhealthy past it")
		setHealth(nd, "remedy-1", kdv1alpha1.DeviceHealthy)
		stepAll(remedyGrace/2 + time.Second)
		Eventually(gone("sick")).Should(Equal(1), "the holder of remedy-0, unhealthy past the grace period")
		Eventually(eventReasons(sick.UID)).Should(ContainElement(kdcontroller.EventReasonEvictedUnhealthyDevice))
		ndObj, err := nodeDevice(nd)()
		Expect(err).NotTo(HaveOccurred())
		Eventually(eventReasons(ndObj.UID)).Should(ContainElement(kdcontroller.EventReasonEvictedUnhealthyDevice))
		Expect(metricValue("kubedevice_remediation_evictions_total", map[string]string{"node": node, "result": "evicted"})).To(Equal(evicted + 1))

		By("long after, the holder of the recovered device still runs")
		stepAll(remedyNodeInterval)
		Consistently(gone("recovered")).WithTimeout(time.Second).Should(BeZero())
	})

	It("asks again for an eviction a PodDisruptionBudget refuses, and evicts once the budget allows", func() {
		node, nd := remedyNode("remedy-0")
		pod := holdingPod(ns, node, "guarded", "remedy-0", map[string]string{"app": "guarded"})
		pdb := &policyv1.PodDisruptionBudget{
			ObjectMeta: metav1.ObjectMeta{Name: "guarded", Namespace: ns},
			Spec: policyv1.PodDisruptionBudgetSpec{
				MinAvailable: ptr.To(intstr.FromInt32(1)),
				Selector:     &metav1.LabelSelector{MatchLabels: map[string]string{"app": "guarded"}},
			},
		}
		Expect(k8sClient.Create(ctx, pdb)).To(Succeed())
		Eventually(func() error { return testutil.AllowDisruptions(ctx, k8sClient, pdb, 0) }).Should(Succeed())
		blocked := func() float64 {
			return metricValue("kubedevice_remediation_evictions_total", map[string]string{"node": node, "result": "blocked"})
		}

		By("the device unhealthy past the grace period: the budget (no disruption allowed) refuses the eviction")
		setHealth(nd, "remedy-0", kdv1alpha1.DeviceUnhealthy)
		stepAll(remedyGrace + time.Second)
		Eventually(blocked).Should(BeNumerically(">=", 1))
		Eventually(eventReasons(pod.UID)).Should(ContainElement(kdcontroller.EventReasonRemediationBlocked))
		Consistently(gone("guarded")).WithTimeout(time.Second).Should(BeZero())

		By("the budget allowing one disruption: the next try evicts")
		Eventually(func() error { return testutil.AllowDisruptions(ctx, k8sClient, pdb, 1) }).Should(Succeed())
		stepAll(remedyBlockedRetry)
		Eventually(gone("guarded")).Should(Equal(1))
	})

	It("evicts at most one pod per node interval on a node", func() {
		node, nd := remedyNode("remedy-0", "remedy-1", "remedy-2")
		for i, name := range []string{"p0", "p1", "p2"} {
			holdingPod(ns, node, name, "remedy-"+string(rune('0'+i)), nil)
		}
		for _, id := range []string{"remedy-0", "remedy-1", "remedy-2"} {
			setHealth(nd, id, kdv1alpha1.DeviceUnhealthy)
		}
		all := gone("p0", "p1", "p2")

		stepAll(remedyGrace + time.Second)
		Eventually(all).Should(Equal(1))
		Consistently(all).WithTimeout(time.Second).Should(Equal(1))
		By("a cluster interval later: the node's interval has not passed")
		stepAll(remedyClusterInterval)
		Consistently(all).WithTimeout(time.Second).Should(Equal(1))
		By("one node interval after the first eviction")
		stepAll(remedyNodeInterval - remedyClusterInterval)
		Eventually(all).Should(Equal(2))
		Consistently(all).WithTimeout(time.Second).Should(Equal(2))
		stepAll(remedyNodeInterval)
		Eventually(all).Should(Equal(3))
	})

	It("evicts at most one pod per cluster interval in the cluster", func() {
		var names []string
		for _, name := range []string{"q0", "q1", "q2"} {
			node, nd := remedyNode("remedy-0")
			holdingPod(ns, node, name, "remedy-0", nil)
			setHealth(nd, "remedy-0", kdv1alpha1.DeviceUnhealthy)
			names = append(names, name)
		}
		all := gone(names...)

		stepAll(remedyGrace + time.Second)
		Eventually(all).Should(Equal(1))
		Consistently(all).WithTimeout(time.Second).Should(Equal(1))
		stepAll(remedyClusterInterval)
		Eventually(all).Should(Equal(2))
		Consistently(all).WithTimeout(time.Second).Should(Equal(2))
		stepAll(remedyClusterInterval)
		Eventually(all).Should(Equal(3))
	})
})

// stepClock steps the fake clock by d once every reconcile so far has finished.
func stepClock(d time.Duration) {
	GinkgoHelper()
	waitIdle()
	fakeClock.Step(d)
}

func getPod(ns, name string) (*corev1.Pod, error) {
	pod := &corev1.Pod{}
	err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, pod)
	return pod, err
}

// holdingPod creates a running pod (not bound to a node, so an eviction deletes it at once: envtest
// has no kubelet) and the DeviceAllocation of node recording that it holds device id.
func holdingPod(ns, node, name, id string, labels map[string]string) *corev1.Pod {
	GinkgoHelper()
	pod := testutil.MakePod(name, ns).Obj()
	pod.Labels = labels
	Expect(k8sClient.Create(ctx, pod)).To(Succeed())
	// A pending pod is evicted whatever the budgets say, and an unready one while its budget is
	// met: a running, ready one is not.
	pod.Status.Phase = corev1.PodRunning
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	Expect(k8sClient.Status().Update(ctx, pod)).To(Succeed())
	applyAsAgent(testutil.MakeDeviceAllocation(name, ns).Node(node).Pod(name, string(pod.UID)).Container("app", remedyResource, id).Obj())
	return pod
}

// setHealth writes the device's health with lastTransitionTime at the fake clock's now, as the
// agent does when the plugin reports a change.
func setHealth(ndName, id string, health kdv1alpha1.DeviceHealth) {
	GinkgoHelper()
	Eventually(func() error {
		nd, err := nodeDevice(ndName)()
		if err != nil {
			return err
		}
		for i := range nd.Status.Devices {
			if d := &nd.Status.Devices[i]; d.ID == id {
				d.Health, d.Reason = health, "PluginReported"+string(health)
				d.LastTransitionTime = &metav1.Time{Time: fakeClock.Now()}
			}
		}
		return k8sClient.Status().Update(ctx, nd)
	}).Should(Succeed())
}

// eventReasons lists the reasons of the events about the object with uid.
func eventReasons(uid types.UID) func() ([]string, error) {
	return func() ([]string, error) {
		events, err := eventsFor(uid)()
		var reasons []string
		for _, e := range events {
			reasons = append(reasons, e.Reason)
		}
		return reasons, err
	}
}
