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
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
)

// draNodeLabel is the label the migration's install selects the DRA nodes by
// (agent.draNodeSelector).
const draNodeLabel = "kubedevice.io/dra"

// installWithHelmDRAByNode installs the chart with the gophers served through DRA on the nodes
// labelled kubedevice.io/dra=true and through node capacity on the others; the e2e kubelets'
// root dir is the suite's.
func installWithHelmDRAByNode(ctx context.Context) {
	kubeletRoot := filepath.Join(envOr("E2E_NODE_DIR", "/var/lib/kubedevice-e2e"), "kubelet")
	out, err := helm(ctx, append(append([]string{"install", helmRelease, filepath.Join(repoRoot, "charts", "kubedevice"),
		"--namespace", kubedeviceNamespace, "--create-namespace"}, helmValues(image)...),
		"--set", "agent.draResources=example.com/*", "--set", "agent.draNodeSelector="+draNodeLabel+"=true",
		"--set", "agent.kubeletRootDir="+kubeletRoot)...)
	Expect(err).NotTo(HaveOccurred())
	GinkgoWriter.Printf("helm install:\n%s", out)
}

// moveToDRA labels the node for DRA and deletes its agent pod, as docs/dra.md says, and waits
// until its NodeDevice says DRA and the Node no longer names the gophers.
func moveToDRA(ctx context.Context, label, nodeName string) {
	start := time.Now()
	_, err := kubectl(ctx, "label", "node", nodeName, draNodeLabel+"=true")
	Expect(err).NotTo(HaveOccurred())

	_, err = kubectl(ctx, "delete", "pod", "-n", kubedeviceNamespace, "-l", agentSelector, "--field-selector", "spec.nodeName="+nodeName)
	Expect(err).NotTo(HaveOccurred())
	agentPodOn(ctx, nodeName)
	Eventually(ctx, func(g Gomega) {
		g.Expect(pathOn(ctx, g, nodeName)).To(Equal(kdv1alpha1.DevicePathDRA))
		n, err := clientset.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(n.Status.Capacity).NotTo(HaveKey(corev1.ResourceName(gopherResource)))
		g.Expect(n.Status.Allocatable).NotTo(HaveKey(corev1.ResourceName(gopherResource)))
	}).WithTimeout(2 * time.Minute).Should(Succeed())
	recordTiming(label+"node "+nodeName+" labelled, its agent pod deleted -> NodeDevice path DRA, no node capacity", time.Since(start))
}

// pathOn returns the path the node's gopher NodeDevice says.
func pathOn(ctx context.Context, g Gomega, nodeName string) kdv1alpha1.DevicePath {
	nds := &kdv1alpha1.NodeDeviceList{}
	g.Expect(kd.List(ctx, nds, client.MatchingLabels{"kubedevice.io/node": nodeName})).To(Succeed())
	g.Expect(nds.Items).To(HaveLen(1), "gopher NodeDevices of %s", nodeName)
	return nds.Items[0].Status.EffectivePath()
}

// sliceGophersOn returns the gophers the node's kubedevice.io ResourceSlices list, with their
// taints' keys.
func sliceGophersOn(ctx context.Context, g Gomega, nodeName string) map[string][]string {
	out := map[string][]string{}
	for id, d := range gopherSliceDevicesOn(ctx, g, nodeName) {
		out[id] = taintKeys(d)
	}
	return out
}

// runPlainPodOn runs a pod with plain limits (one gopher) on the node and returns the gopher its
// container got, checked to be one of that node's; viaDRA says whether the scheduler served it
// through a DeviceClass's extendedResourceName (KEP-5004) rather than node capacity.
func runPlainPodOn(ctx context.Context, label, ns, name, nodeName string, viaDRA bool) string {
	createPod(ctx, MakePod(name, ns).Limits(gopherResource, 1).OnNode(nodeName).Obj())
	t := watchUntilRunning(ctx, ns, name, 3*time.Minute)
	recordTiming(label+name+" (plain limits) bound to "+nodeName+" -> running with a gopher", t.running.Sub(t.bound))
	Expect(t.pod.Status.ExtendedResourceClaimStatus != nil).To(Equal(viaDRA), "%s served through DRA", name)
	out, err := execIn(ctx, ns, name, "sh", "-c", `echo "$GOPHER"; ls /gophers; cat /gophers/*`)
	Expect(err).NotTo(HaveOccurred())
	id, rest, _ := strings.Cut(out, "\n")
	Expect(rest).To(Equal(id+"\n"+gopherContentOn(nodeName)), "%s's gopher", name)
	own := gophersA
	if nodeName == nodeBName() {
		own = gophersB
	}
	Expect(own).To(ContainElement(id), "%s on %s got a gopher of its node", name, nodeName)
	return id
}

// describeMigration installs kubedevice with Helm on two nodes with the gophers served through
// DRA only on the nodes labelled for it (agent.draNodeSelector): node A stays on the node-capacity
// path while node B moves to DRA, the same pod spec runs on either, then node A moves too with its
// pod running.
func describeMigration() {
	Describe("moving two nodes to DRA one at a time", Ordered, Label("two-nodes", "migration"), Offset(1), func() {
		const label = "migration: "
		var (
			ns      string
			heldOnA string
		)
		BeforeAll(func(ctx context.Context) {
			ns = setUpTwoNodes(ctx, label, installWithHelmDRAByNode)
			DeferCleanup(func(ctx context.Context) {
				_, err := kubectl(ctx, "label", "node", node.Name, draNodeLabel+"-")
				Expect(err).NotTo(HaveOccurred())
			})
		}, NodeTimeout(20*time.Minute))
		AfterEach(func(ctx context.Context) {
			if CurrentSpecReport().Failed() {
				dumpKubedevice(ctx)
				out, _ := kubectl(ctx, "get", "resourceslices,resourceclaims,deviceclasses", "-A", "-o", "yaml")
				GinkgoWriter.Printf("DRA objects:\n%s", out)
			}
		})

		It("1. serves node B through DRA and node A through node capacity, and runs the same plain-limits pod on either", func(ctx context.Context) {
			moveToDRA(ctx, label, nodeBName())
			Eventually(ctx, func(g Gomega) {
				g.Expect(pathOn(ctx, g, node.Name)).To(Equal(kdv1alpha1.DevicePathNodeCapacity))
				g.Expect(slices.Sorted(maps.Keys(sliceGophersOn(ctx, g, nodeBName())))).To(Equal(gophersB))
				g.Expect(sliceGophersOn(ctx, g, node.Name)).To(BeEmpty())
			}).Should(Succeed())
			expectOffered(ctx, node.Name, int64(len(gophersA)))
			dc := &resourcev1.DeviceClass{}
			Expect(kd.Get(ctx, client.ObjectKey{Name: gopherClass}, dc)).To(Succeed())
			Expect(ptr.Deref(dc.Spec.ExtendedResourceName, "")).To(Equal(gopherResource))
			heldOnA = runPlainPodOn(ctx, label, ns, "on-a", node.Name, false)
			runPlainPodOn(ctx, label, ns, "on-b", nodeBName(), true)
		}, SpecTimeout(6*time.Minute))

		It("2. moves node A to DRA with its pod running: the pod keeps its container and gopher, withheld from claims, and a new pod there runs through DRA", func(ctx context.Context) {
			before := map[string]string{}
			for _, name := range []string{"on-a", "on-b"} {
				pod, err := getPod(ctx, ns, name)
				Expect(err).NotTo(HaveOccurred())
				before[name] = pod.Status.ContainerStatuses[0].ContainerID
			}
			moveToDRA(ctx, label, node.Name)
			Eventually(ctx, func(g Gomega) {
				gophers := sliceGophersOn(ctx, g, node.Name)
				g.Expect(slices.Sorted(maps.Keys(gophers))).To(Equal(gophersA))
				g.Expect(gophers[heldOnA]).To(ContainElement(taintDevicePluginPath), "the gopher on-a holds through node capacity")
			}).Should(Succeed())
			for name, id := range before {
				pod, err := getPod(ctx, ns, name)
				Expect(err).NotTo(HaveOccurred())
				Expect(running(pod)).To(BeTrue(), "%s: %s", name, describeStatus(pod))
				Expect(pod.Status.ContainerStatuses[0].ContainerID).To(Equal(id), "%s's container", name)
				Expect(pod.Status.ContainerStatuses[0].RestartCount).To(BeZero(), name)
			}
			got := runPlainPodOn(ctx, label, ns, "on-a-dra", node.Name, true)
			Expect(got).NotTo(Equal(heldOnA), "the gopher on-a holds went to a claim")
		}, SpecTimeout(6*time.Minute))
	})
}
