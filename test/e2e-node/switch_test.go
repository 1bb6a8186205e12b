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
	"os"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
)

// kubeletGracePeriod is how long the kubelet keeps a stopped device plugin's resource
// (devicemanager's endpointStopGracePeriod).
const kubeletGracePeriod = 5 * time.Minute

// holdWatched is how long the move to kubedevice is watched while the kubelet holds the resource
// (its node status updates come every 10 s: six of them), unless E2E_NODE_SWITCH_GRACE=full waits
// out the kubelet's grace period and sees kubedevice publish (5 more minutes of CI; the end of the
// hold is also proven against the real API server in test/integration/controller).
const holdWatched = time.Minute

func waitOutGrace() bool { return os.Getenv("E2E_NODE_SWITCH_GRACE") == "full" }

// describeSwitch moves the node's gophers from the kubelet's own device manager to kubedevice as
// docs/install.md says ("Move a node from the kubelet to kubedevice (and back)"), and back: the kubelet
// keeps the resource through its grace period, and kubedevice must neither fight it over the Node
// nor let a pod be refused. It runs after the control, which leaves the kubelet managing gophers.
func describeSwitch() {
	Describe("moving the node's gophers from the kubelet's device manager to kubedevice and back", Ordered, Label("switch"), Offset(1), func() {
		const label = "switch: "
		var ns string
		BeforeAll(func(ctx context.Context) {
			buildImage(ctx)
			uninstall(ctx, "")
			DeferCleanup(func(ctx context.Context) { uninstall(ctx, "") }, NodeTimeout(5*time.Minute))
			forgetGopherCapacity(ctx)
			out, err := kubectl(ctx, "apply", "--server-side", "-k", overlay("kubedevice-observe"))
			Expect(err).NotTo(HaveOccurred(), out)
			waitForKubedevice(ctx)
			ns = newNamespace(ctx)
			installGophers(ctx, "gopher-kubelet")
			createPod(ctx, MakePod("kubelets", ns).Limits(gopherResource, 1).Obj())
			watchUntilRunning(ctx, ns, "kubelets", 2*time.Minute)
			gopherInside(ctx, ns, "kubelets")
		}, NodeTimeout(20*time.Minute))
		AfterEach(func(ctx context.Context) {
			if CurrentSpecReport().Failed() {
				dumpKubedevice(ctx)
			}
		})

		It("to kubedevice: holds the resource while the kubelet keeps it, no pod refused, no flap (then publishes it, with E2E_NODE_SWITCH_GRACE=full)", func(ctx context.Context) {
			toKubedevice(ctx, label, ns)
		}, SpecTimeout(12*time.Minute))

		It("back to the kubelet: writes nothing over the resource the kubelet publishes, no flap; uninstalled, the kubelet serves the pods", func(ctx context.Context) {
			backToKubelet(ctx, label, ns)
		}, SpecTimeout(5*time.Minute))
	})
}

// toKubedevice is docs/install.md's move: the pods holding the kubelet's gophers deleted, kubedevice
// reinstalled in manage mode and the plugin pointed at it; the kubelet then keeps the resource
// (all unhealthy, allocatable 0) for its grace period.
func toKubedevice(ctx context.Context, label, ns string) {
	deletePod(ctx, ns, "kubelets")
	series := sampleAllocatable(ctx)
	moved := time.Now()
	out, err := kubectl(ctx, "apply", "--server-side", "-k", overlay("kubedevice"))
	Expect(err).NotTo(HaveOccurred(), out)
	waitForKubedevice(ctx)
	installGophers(ctx, "gopher")
	// The kubelet notices its plugin left at its next node status update (up to 10 s): a pod
	// created before that can be bound against its stale count and refused by the kubelet, which
	// nothing but the kubelet can prevent (docs/install.md, "Move a node from the kubelet to kubedevice").
	Eventually(ctx, func() int { return offeredNow(ctx) }).WithTimeout(time.Minute).Should(BeZero())
	recordTiming(label+"plugin moved -> the kubelet's allocatable 0", time.Since(moved))
	createPod(ctx, MakePod("waits", ns).Limits(gopherResource, 1).Obj())

	Eventually(ctx, func(g Gomega) {
		nd, err := gopherNodeDevice(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		c := meta.FindStatusCondition(nd.Status.Conditions, kdv1alpha1.NodeDeviceNodeCapacityPublished)
		g.Expect(c).NotTo(BeNil(), "conditions: %+v", nd.Status.Conditions)
		g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(c.Reason).To(Equal(kdv1alpha1.ReasonKubeletDeviceManagerOwnsResource))
	}).Should(Succeed())
	recordTiming(label+"plugin moved -> NodeDevice NodeCapacityPublished=False (the kubelet's)", time.Since(moved))
	Consistently(ctx, func(g Gomega) {
		pod, err := getPod(ctx, ns, "waits")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(pod.Status.Phase).To(Equal(corev1.PodPending), "refused while the kubelet holds the resource: %s", describeStatus(pod))
		g.Expect(pod.Spec.NodeName).To(BeEmpty(), "bound while the kubelet offers 0: %s", describeStatus(pod))
	}, holdWatched, time.Second).Should(Succeed())
	if !waitOutGrace() {
		changes := series()
		GinkgoWriter.Printf("Node allocatable %s through the hold: %v\n", gopherResource, changes)
		Expect(risesFromZero(changes)).To(BeZero(), "the Node's allocatable flapped while the kubelet held it: %v", changes)
		return
	}

	ok, text := runningOrFailed(ctx, ns, "waits", kubeletGracePeriod+2*time.Minute)
	Expect(ok).To(BeTrue(), "waits: %s", text)
	gopherInside(ctx, ns, "waits")
	recordTiming(label+"plugin moved -> the waiting pod running with a kubedevice gopher", time.Since(moved))
	expectPublished(ctx)
	Consistently(ctx, func() int { return offeredNow(ctx) }, 15*time.Second, 250*time.Millisecond).Should(Equal(len(gopherIDs)))
	changes := series()
	GinkgoWriter.Printf("Node allocatable %s through the move: %v\n", gopherResource, changes)
	Expect(risesFromZero(changes)).To(BeNumerically("<=", 1), "the Node's allocatable flapped: %v", changes)
}

// backToKubelet is docs/install.md's way back, with the plugin moved first (the case where both have
// the resource): the kubelet publishes it and kubedevice writes nothing over it; then kubedevice is
// uninstalled (kubectl delete -k, kubedevice cleanup) and a device pod runs through the kubelet.
func backToKubelet(ctx context.Context, label, ns string) {
	deletePod(ctx, ns, "waits")
	series := sampleAllocatable(ctx)
	moved := time.Now()
	installGophers(ctx, "gopher-kubelet")
	recordTiming(label+"plugin moved back -> the kubelet's 3 gophers on the Node", time.Since(moved))
	Consistently(ctx, func() int { return offeredNow(ctx) }, 20*time.Second, 250*time.Millisecond).Should(Equal(len(gopherIDs)))
	changes := series()
	GinkgoWriter.Printf("Node allocatable %s through the move back: %v\n", gopherResource, changes)
	Expect(risesFromZero(changes)).To(BeNumerically("<=", 1), "the Node's allocatable flapped: %v", changes)

	uninstalled := time.Now()
	out, err := kubectl(ctx, "delete", "-k", overlay("kubedevice"), "--ignore-not-found", "--wait=false")
	Expect(err).NotTo(HaveOccurred(), out)
	_, err = kubectl(ctx, "wait", "--for=delete", "pod", "-n", kubedeviceNamespace, "-l", controllerSelector, "--timeout=2m")
	Expect(err).NotTo(HaveOccurred())
	cleanUp(ctx)
	Eventually(ctx, func() int { return offeredNow(ctx) }).Should(Equal(len(gopherIDs)), "the kubelet's gophers after kubedevice's uninstall")
	recordTiming(label+"kubedevice uninstalled -> the kubelet's gophers on the Node", time.Since(uninstalled))
	created := time.Now()
	createPod(ctx, MakePod("kubelets-again", ns).Limits(gopherResource, 1).Obj())
	ok, text := runningOrFailed(ctx, ns, "kubelets-again", 2*time.Minute)
	Expect(ok).To(BeTrue(), "kubelets-again: %s", text)
	gopherInside(ctx, ns, "kubelets-again")
	recordTiming(label+"a pod after the move back -> running with the kubelet's gopher", time.Since(created))
}

// expectPublished waits for the NodeDevice's NodeCapacityPublished=True (reason Published).
func expectPublished(ctx context.Context) {
	Eventually(ctx, func(g Gomega) {
		nd, err := gopherNodeDevice(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		c := meta.FindStatusCondition(nd.Status.Conditions, kdv1alpha1.NodeDeviceNodeCapacityPublished)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Status).To(Equal(metav1.ConditionTrue), "%s: %s", c.Reason, c.Message)
	}).Should(Succeed())
}

func offeredNow(ctx context.Context) int {
	n, err := offered(ctx, pathNRI)
	Expect(err).NotTo(HaveOccurred())
	return n
}

// sampleAllocatable reads the Node's allocatable gophers every 250 ms until the returned function
// is called, which returns the readings that differed from the one before.
func sampleAllocatable(ctx context.Context) func() []int {
	var changes []int
	stop := sampleEvery(ctx, pathNRI, func(n int, _ time.Duration) {
		if len(changes) == 0 || changes[len(changes)-1] != n {
			changes = append(changes, n)
		}
	})
	return func() []int {
		stop()
		return changes
	}
}

// risesFromZero counts the readings above 0 that follow a 0: a Node whose writers fight rises
// again every time the other writes 0.
func risesFromZero(changes []int) int {
	n := 0
	for i := 1; i < len(changes); i++ {
		if changes[i-1] == 0 && changes[i] > 0 {
			n++
		}
	}
	return n
}
