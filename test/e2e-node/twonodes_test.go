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
	"path/filepath"
	"slices"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
)

// The two nodes' gophers: node A (the suite's node) has three, node B two, each file saying whose
// it is, so a container's /gophers shows which node's file system its devices came from.
var (
	gophersA = []string{"gopher-a0", "gopher-a1", "gopher-a2"}
	gophersB = []string{"gopher-b0", "gopher-b1"}
)

// nodeBName is the second node's name: node-b.sh's NODE_B_NAME, the first node's with "-b".
func nodeBName() string { return node.Name + "-b" }

// gopherContentOn is what each gopher file of the node holds.
func gopherContentOn(nodeName string) string { return "a gopher of node " + nodeName + "\n" }

// nodeBStep runs a step of hack/e2e-node/node-b.sh.
func nodeBStep(ctx context.Context, step string) {
	out, err := run(ctx, nil, filepath.Join(repoRoot, "hack", "e2e-node", "node-b.sh"), step)
	Expect(err).NotTo(HaveOccurred(), "node-b.sh %s: %s", step, out)
}

// nodeBPath is where node B's own copy of the host path p lives, seen from the host (node-b.sh
// binds NODE_B_DIR/root/<p> over p in node B's mount namespace).
func nodeBPath(p string) string {
	return filepath.Join(envOr("E2E_NODE_DIR", "/var/lib/kubedevice-e2e"), "node-b", "root", p)
}

// upNodeB starts node B and, at the end of the container (before the install's uninstall, which
// was deferred first), takes it down again: node-b.sh down, its pods and its Node deleted.
func upNodeB(ctx context.Context, label string) {
	start := time.Now()
	nodeBStep(ctx, "up")
	recordTiming(label+"node-b.sh up -> node B Ready", time.Since(start))
	DeferCleanup(func(ctx context.Context) {
		nodeBStep(ctx, "down")
		// The Node first: the DaemonSets would otherwise put their pods on it again.
		err := clientset.CoreV1().Nodes().Delete(ctx, nodeBName(), metav1.DeleteOptions{})
		Expect(client.IgnoreNotFound(err)).To(Succeed())
		Eventually(ctx, func(g Gomega) {
			pods, err := clientset.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + nodeBName()})
			g.Expect(err).NotTo(HaveOccurred())
			for _, p := range pods.Items {
				err := clientset.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
				g.Expect(client.IgnoreNotFound(err)).To(Succeed())
			}
			g.Expect(pods.Items).To(BeEmpty(), "pods left on node %s", nodeBName())
		}).Should(Succeed())
	}, NodeTimeout(3*time.Minute))
}

// setUpTwoNodes installs kubedevice as setUp does, starts node B, waits for the agent on both
// nodes, runs the Gopher DaemonSet with each node's gophers, and returns a new namespace. The
// namespace is made before node B, so that node B goes first at the end (its pods cannot end
// while its kubelet is down) and the namespace's deletion finds them gone.
func setUpTwoNodes(ctx context.Context, label string, install func(context.Context)) string {
	setUp(ctx, label, install)
	ns := newNamespace(ctx)
	upNodeB(ctx, label)
	expectDaemonSetOnNodes(ctx, kubedeviceNamespace, agentDaemonSet, 2)
	installTwoNodeGophers(ctx)
	expectOffered(ctx, node.Name, int64(len(gophersA)))
	expectOffered(ctx, nodeBName(), int64(len(gophersB)))
	return ns
}

// expectDaemonSetOnNodes waits until the DaemonSet runs its pods on n nodes, updated and Ready.
func expectDaemonSetOnNodes(ctx context.Context, namespace, name string, n int32) {
	Eventually(ctx, func(g Gomega) {
		ds := &appsv1.DaemonSet{}
		g.Expect(kd.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, ds)).To(Succeed())
		g.Expect(daemonSetReadyOn(ds, n)).To(BeTrue(), "DaemonSet %s/%s on %d nodes: %+v", namespace, name, n, ds.Status)
	}).WithTimeout(3 * time.Minute).Should(Succeed())
}

// installTwoNodeGophers writes each node's gopher files (node B's in its own directory) and runs
// the Gopher DaemonSet, which then has a plugin on each node.
func installTwoNodeGophers(ctx context.Context) {
	dir := gophersDir(renderedGopherDaemonSet(ctx))
	for nodeDir, ids := range map[string][]string{dir: gophersA, nodeBPath(dir): gophersB} {
		Expect(os.MkdirAll(nodeDir, 0o755)).To(Succeed())
		entries, err := os.ReadDir(nodeDir)
		Expect(err).NotTo(HaveOccurred())
		for _, e := range entries {
			Expect(os.RemoveAll(filepath.Join(nodeDir, e.Name()))).To(Succeed())
		}
		owner := node.Name
		if nodeDir != dir {
			owner = nodeBName()
		}
		for _, id := range ids {
			Expect(os.WriteFile(filepath.Join(nodeDir, id), []byte(gopherContentOn(owner)), 0o644)).To(Succeed())
		}
	}
	_, err := kubectl(ctx, "apply", "-k", overlay("gopher"))
	Expect(err).NotTo(HaveOccurred())
	expectDaemonSetOnNodes(ctx, gopherNamespace, gopherDaemonSet, 2)
}

// offeredOn returns the gophers the Node offers: status.capacity and status.allocatable.
func offeredOn(ctx context.Context, g Gomega, nodeName string) (capacity, allocatable int64) {
	n, err := clientset.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	c, a := n.Status.Capacity[gopherResource], n.Status.Allocatable[gopherResource]
	return c.Value(), a.Value()
}

// expectOffered waits until the Node offers n gophers in capacity and allocatable.
func expectOffered(ctx context.Context, nodeName string, n int64) {
	Eventually(ctx, func(g Gomega) {
		c, a := offeredOn(ctx, g, nodeName)
		g.Expect([]int64{c, a}).To(Equal([]int64{n, n}), "node %s: capacity, allocatable", nodeName)
	}).WithTimeout(2 * time.Minute).Should(Succeed())
}

// agentPodOn returns the agent's pod on the node, once there is exactly one and it is Ready.
func agentPodOn(ctx context.Context, nodeName string) *corev1.Pod {
	var pod *corev1.Pod
	Eventually(ctx, func(g Gomega) {
		pods, err := clientset.CoreV1().Pods(kubedeviceNamespace).List(ctx, metav1.ListOptions{
			LabelSelector: agentSelector, FieldSelector: "spec.nodeName=" + nodeName})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(pods.Items).To(HaveLen(1), "agent pods on %s", nodeName)
		pod = &pods.Items[0]
		g.Expect(pod.DeletionTimestamp).To(BeNil())
		g.Expect(podReady(pod)).To(BeTrue(), "agent pod %s: %s", pod.Name, describeStatus(pod))
	}).Should(Succeed())
	return pod
}

// devicePod is what a running device pod is: where, which container, which gophers (as its
// DeviceAllocation says and as its container sees them), and the DeviceAllocation's version.
type devicePod struct {
	name, nodeName, containerID string
	restarts                    int32
	gophers                     []string
	daVersion                   string
}

// runDevicePod creates a pod asking for n gophers (on nodeName, when set) and waits until it runs;
// it returns what it holds, checked against the node it landed on.
func runDevicePod(ctx context.Context, ns, name string, n int64, nodeName string) devicePod {
	b := MakePod(name, ns).Limits(gopherResource, n)
	if nodeName != "" {
		b.OnNode(nodeName)
	}
	createPod(ctx, b.Obj())
	t := watchUntilRunning(ctx, ns, name, 3*time.Minute)
	return devicePodState(ctx, t.pod)
}

// devicePodState reads a running device pod: its DeviceAllocation names its node and the gophers
// of that node, and its container sees exactly those, each file saying the node.
func devicePodState(ctx context.Context, pod *corev1.Pod) devicePod {
	p := devicePod{name: pod.Name, nodeName: pod.Spec.NodeName}
	Expect(pod.Status.ContainerStatuses).To(HaveLen(1))
	p.containerID, p.restarts = pod.Status.ContainerStatuses[0].ContainerID, pod.Status.ContainerStatuses[0].RestartCount
	var da *kdv1alpha1.DeviceAllocation
	Eventually(ctx, func(g Gomega) {
		var err error
		da, err = deviceAllocationOf(ctx, pod)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(da).NotTo(BeNil(), "no DeviceAllocation of %s", pod.Name)
		g.Expect(da.Status.Containers).NotTo(BeEmpty())
	}).Should(Succeed())
	Expect(da.Spec.NodeName).To(Equal(pod.Spec.NodeName), "the DeviceAllocation of %s names the pod's node", pod.Name)
	p.daVersion = da.ResourceVersion
	for _, d := range allocatedDevices(da) {
		p.gophers = append(p.gophers, d[strings.LastIndex(d, "=")+1:])
	}
	slices.Sort(p.gophers)
	own := gophersA
	if p.nodeName == nodeBName() {
		own = gophersB
	}
	Expect(own).To(ContainElements(p.gophers), "%s on %s holds gophers of its node", pod.Name, p.nodeName)
	out, err := execIn(ctx, pod.Namespace, pod.Name, "sh", "-c", `ls /gophers; cat /gophers/* | sort -u`)
	Expect(err).NotTo(HaveOccurred())
	Expect(out).To(Equal(strings.Join(p.gophers, "\n")+"\n"+gopherContentOn(p.nodeName)), "%s's /gophers", pod.Name)
	return p
}

// expectUnchanged checks that the device pods run as recorded: the same container, not
// restarted, the same gophers, their DeviceAllocations not written.
func expectUnchanged(ctx context.Context, ns string, pods ...devicePod) {
	for _, want := range pods {
		pod, err := getPod(ctx, ns, want.name)
		Expect(err).NotTo(HaveOccurred())
		Expect(running(pod)).To(BeTrue(), "%s: %s", want.name, describeStatus(pod))
		got := devicePodState(ctx, pod)
		Expect(got).To(Equal(want), "device pod %s", want.name)
	}
}

// describeTwoNodes is a second node beside the first (hack/e2e-node/node-b.sh: its own kubelet,
// containerd and mount namespace) with the same kubedevice install and Gopher DaemonSet on both:
// what only several nodes can show.
func describeTwoNodes() {
	Describe("on two nodes", Ordered, Label("two-nodes"), Offset(1), func() {
		const label = "two nodes: "
		var (
			ns         string
			three, one devicePod
		)
		BeforeAll(func(ctx context.Context) {
			ns = setUpTwoNodes(ctx, label, installWithKustomize)
		}, NodeTimeout(20*time.Minute))
		AfterEach(func(ctx context.Context) {
			if CurrentSpecReport().Failed() {
				dumpKubedevice(ctx)
			}
		})

		It("1. places each pod where its gophers are free, keeps one that fits nowhere Pending with the scheduler's reason, and each node's capacity its own", func(ctx context.Context) {
			three = runDevicePod(ctx, ns, "three", 3, "")
			Expect(three.nodeName).To(Equal(node.Name), "only node A has three gophers")
			one = runDevicePod(ctx, ns, "one", 1, "")
			Expect(one.nodeName).To(Equal(nodeBName()), "node A has none free")
			createPod(ctx, MakePod("two", ns).Limits(gopherResource, 2).Obj())
			Eventually(ctx, func(g Gomega) {
				pod, err := getPod(ctx, ns, "two")
				g.Expect(err).NotTo(HaveOccurred())
				c := podCondition(pod, corev1.PodScheduled)
				g.Expect(c).NotTo(BeNil())
				g.Expect(c.Reason).To(Equal(corev1.PodReasonUnschedulable))
				g.Expect(c.Message).To(And(ContainSubstring("0/2 nodes are available"), ContainSubstring("2 Insufficient "+gopherResource)))
			}).Should(Succeed())
			Consistently(ctx, func(g Gomega) {
				pod, err := getPod(ctx, ns, "two")
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(pod.Spec.NodeName).To(BeEmpty())
			}, 3*time.Second, 250*time.Millisecond).Should(Succeed())
			deletePod(ctx, ns, "two")
			expectOffered(ctx, node.Name, 3)
			expectOffered(ctx, nodeBName(), 2)
		}, SpecTimeout(5*time.Minute))

		It("2. lets node A's agent, with the token its kubelet projected, write its own node's objects and refuses it node B's", func(ctx context.Context) {
			expectNodeScopedWrites(ctx, ns, one)
		}, SpecTimeout(3*time.Minute))

		It("3. keeps node A's pods and capacity while node B's kubelet and agent are gone, withdraws node B's free gophers at the Lease's expiry, and has node B back as it was", func(ctx context.Context) {
			nodeBAway(ctx, label, ns, three, one)
		}, SpecTimeout(6*time.Minute))

		It("4. re-asserts node B's capacity on the Node its kubelet registers again after the Node object was deleted", func(ctx context.Context) {
			nodeBRecreated(ctx, label)
		}, SpecTimeout(5*time.Minute))

		It("5. rolls the agent DaemonSet node by node: device pods keep their containers and gophers, a new pod waits for the restarting agent and then runs", func(ctx context.Context) {
			deletePod(ctx, ns, three.name)
			two := runDevicePod(ctx, ns, "two-a", 2, node.Name)
			one = refresh(ctx, ns, one)
			rollAgents(ctx, label, ns)
			expectUnchanged(ctx, ns, two, one)
		}, SpecTimeout(8*time.Minute))

		It("6. keeps both nodes' capacity through the controller leader's death, and a new leader takes over within the Lease's duration", func(ctx context.Context) {
			controllerFailover(ctx, label)
		}, SpecTimeout(5*time.Minute))
	})
}

// refresh reads a device pod again (after the node events of earlier specs).
func refresh(ctx context.Context, ns string, p devicePod) devicePod {
	pod, err := getPod(ctx, ns, p.name)
	Expect(err).NotTo(HaveOccurred())
	Expect(running(pod)).To(BeTrue(), "%s: %s", p.name, describeStatus(pod))
	return devicePodState(ctx, pod)
}
