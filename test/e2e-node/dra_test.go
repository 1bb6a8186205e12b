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

// The DRA scenario of issue 14 on the real node: the unmodified Gopher plugin with two gophers,
// first served through node capacity, then switched to DRA (hack/e2e-node/overlays/kubedevice-dra:
// config/default plus config/components/dra) with a pod still holding a gopher the old way.
const (
	draDriver      = "kubedevice.io"
	gopherClass    = "gopher.example.com"
	secondGopherID = "gopher-1"
	// cdiDir is where the agent writes a CDI spec per prepared claim and containerd reads them.
	cdiDir = "/var/run/cdi"
	// Taint keys of kubedevice's ResourceSlices (internal/agent/dra).
	taintUnhealthy        = draDriver + "/unhealthy"
	taintDevicePluginPath = draDriver + "/device-plugin-path"
)

// describeDRA is the DRA scenario, run inside "kubedevice on the real node" before observe mode's
// (kubedevice_test.go): top-level containers run in random order, and the kubelet keeps listing
// the gopher that observe mode's scenario let it manage.
func describeDRA() {
	Describe("kubedevice as the DRA driver of an unmodified device plugin", Ordered, func() {
		const label = "dra: "
		var ns, heldID, freeID string
		var plainClaimUID string

		BeforeAll(func(ctx context.Context) {
			setUp(ctx, label, installWithKustomize)
			ns = newNamespace(ctx)
		}, NodeTimeout(20*time.Minute))
		AfterEach(func(ctx context.Context) {
			if CurrentSpecReport().Failed() {
				dumpKubedevice(ctx)
				out, _ := kubectl(ctx, "get", "resourceslices,resourceclaims,deviceclasses", "-A", "-o", "yaml")
				GinkgoWriter.Printf("DRA objects:\n%s", out)
			}
		})

		It("1. serves two gophers through node capacity first, and a pod holds one of them", func(ctx context.Context) {
			installGopher(ctx, gopherID, gopherContent)
			dir := gophersDir(renderedGopherDaemonSet(ctx))
			Expect(os.WriteFile(filepath.Join(dir, secondGopherID), []byte(gopherContent), 0o644)).To(Succeed())
			expectNodeGophers(ctx, 2)

			created := time.Now()
			createPod(ctx, MakePod("held", ns).Limits(gopherResource, 1).Obj())
			t := watchUntilRunning(ctx, ns, "held", 2*time.Minute)
			recordTiming(label+"1. node-capacity path: held bound -> running with a gopher", t.running.Sub(t.bound))
			recordTiming(label+"1. node-capacity path: held created -> running", t.running.Sub(created))
			Eventually(ctx, func(g Gomega) {
				da, err := deviceAllocationOf(ctx, t.pod)
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(da).NotTo(BeNil())
				g.Expect(allocatedDevices(da)).To(HaveLen(1))
				heldID = da.Status.Containers[0].Resources[0].DeviceIDs[0]
			}).Should(Succeed())
			freeID = map[string]string{gopherID: secondGopherID, secondGopherID: gopherID}[heldID]
			Expect(freeID).NotTo(BeEmpty(), "held got %q", heldID)
			expectGopherIDInside(ctx, ns, "held", heldID)
		}, SpecTimeout(5*time.Minute))

		It("2. switches the resource to DRA: slices, a DeviceClass, no node capacity, and the held gopher kept and withheld", func(ctx context.Context) {
			before, err := getPod(ctx, ns, "held")
			Expect(err).NotTo(HaveOccurred())
			start := time.Now()
			out, err := kubectl(ctx, "apply", "--server-side", "-k", overlay("kubedevice-dra"))
			Expect(err).NotTo(HaveOccurred(), out)
			waitForKubedevice(ctx)

			Eventually(ctx, func(g Gomega) {
				nd, err := gopherNodeDevice(ctx)
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(nd.Status.Path).To(Equal(kdv1alpha1.DevicePathDRA))
				n, err := clientset.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(n.Status.Capacity).NotTo(HaveKey(corev1.ResourceName(gopherResource)))
				g.Expect(n.Status.Allocatable).NotTo(HaveKey(corev1.ResourceName(gopherResource)))
			}).WithTimeout(2 * time.Minute).Should(Succeed())
			recordTiming(label+"2. switch applied -> NodeDevice path DRA, no node capacity", time.Since(start))

			dc := &resourcev1.DeviceClass{}
			Eventually(ctx, func() error { return kd.Get(ctx, client.ObjectKey{Name: gopherClass}, dc) }).Should(Succeed())
			Expect(dc.Spec.ExtendedResourceName).To(HaveValue(Equal(gopherResource)))

			Eventually(ctx, func(g Gomega) {
				devices := gopherSliceDevices(ctx, g)
				g.Expect(devices).To(HaveKey(heldID))
				g.Expect(devices).To(HaveKey(freeID))
				g.Expect(taintKeys(devices[heldID])).To(ContainElement(taintDevicePluginPath), "the gopher held through node capacity")
				g.Expect(taintKeys(devices[freeID])).To(BeEmpty())
				attrs := devices[freeID].Attributes
				g.Expect(attrs).To(HaveKeyWithValue(resourcev1.QualifiedName(draDriver+"/resourceName"),
					HaveField("StringValue", HaveValue(Equal(gopherResource)))))
				g.Expect(attrs).To(HaveKeyWithValue(resourcev1.QualifiedName(draDriver+"/deviceID"),
					HaveField("StringValue", HaveValue(Equal(freeID)))))
			}).Should(Succeed())
			out, err = kubectl(ctx, "get", "resourceslices", "-o", "wide")
			Expect(err).NotTo(HaveOccurred())
			GinkgoWriter.Printf("kubectl get resourceslices -o wide:\n%s", out)

			after, err := getPod(ctx, ns, "held")
			Expect(err).NotTo(HaveOccurred())
			Expect(running(after)).To(BeTrue(), describeStatus(after))
			Expect(after.Status.ContainerStatuses[0].ContainerID).To(Equal(before.Status.ContainerStatuses[0].ContainerID))
			expectGopherIDInside(ctx, ns, "held", heldID)
		}, SpecTimeout(6*time.Minute))

		It("3. runs a pod with plain limits example.com/gopher: 1 through DRA (KEP-5004), with the free gopher", func(ctx context.Context) {
			created := time.Now()
			createPod(ctx, MakePod("plain", ns).Limits(gopherResource, 1).Obj())
			t := watchUntilRunning(ctx, ns, "plain", 2*time.Minute)
			recordTiming(label+"3. DRA path: plain bound -> running with a gopher", t.running.Sub(t.bound))
			recordTiming(label+"3. DRA path: plain created -> running", t.running.Sub(created))
			pod, err := getPod(ctx, ns, "plain")
			Expect(err).NotTo(HaveOccurred())
			Expect(pod.Status.ExtendedResourceClaimStatus).NotTo(BeNil(), "served by the device plugin path, not DRA")
			expectGopherIDInside(ctx, ns, "plain", freeID)

			claim := &resourcev1.ResourceClaim{}
			Expect(kd.Get(ctx, client.ObjectKey{Namespace: ns, Name: pod.Status.ExtendedResourceClaimStatus.ResourceClaimName}, claim)).To(Succeed())
			Expect(claim.Status.Allocation).NotTo(BeNil())
			Expect(claim.Status.Allocation.Devices.Results).To(ConsistOf(HaveField("Driver", draDriver)))
			plainClaimUID = string(claim.UID)
			Expect(cdiSpecsOf(plainClaimUID)).NotTo(BeEmpty(), "the claim's CDI spec in %s", cdiDir)
		}, SpecTimeout(5*time.Minute))

		It("4. offers the held gopher to claims once its pod is gone, and a claim selecting it by plugin ID gets exactly it", func(ctx context.Context) {
			deletePod(ctx, ns, "held")
			Eventually(ctx, func(g Gomega) {
				devices := gopherSliceDevices(ctx, g)
				g.Expect(devices).To(HaveKey(heldID))
				g.Expect(taintKeys(devices[heldID])).To(BeEmpty())
			}).Should(Succeed())

			tmpl := &resourcev1.ResourceClaimTemplate{
				ObjectMeta: metav1.ObjectMeta{Name: "by-id", Namespace: ns},
				Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{
					Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{
						Name: "gopher",
						Exactly: &resourcev1.ExactDeviceRequest{
							DeviceClassName: gopherClass,
							Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{
								Expression: `device.attributes["` + draDriver + `"].deviceID == "` + heldID + `"`,
							}}},
						},
					}}},
				}},
			}
			Expect(kd.Create(ctx, tmpl)).To(Succeed())
			pod := MakePod("claimed", ns).Obj()
			pod.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gopher", ResourceClaimTemplateName: ptr.To("by-id")}}
			pod.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "gopher"}}
			createPod(ctx, pod)
			t := watchUntilRunning(ctx, ns, "claimed", 2*time.Minute)
			recordTiming(label+"4. ResourceClaimTemplate: claimed bound -> running with its gopher", t.running.Sub(t.bound))
			expectGopherIDInside(ctx, ns, "claimed", heldID)
		}, SpecTimeout(5*time.Minute))

		It("5. taints an unhealthy gopher, places no new pod on it, and takes the taint away when it is healthy again", func(ctx context.Context) {
			deletePod(ctx, ns, "claimed")
			dir := gophersDir(renderedGopherDaemonSet(ctx))
			Eventually(ctx, func(g Gomega) {
				g.Expect(taintKeys(gopherSliceDevices(ctx, g)[heldID])).To(BeEmpty())
				nd, err := gopherNodeDevice(ctx)
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(nd.Status.Allocated).To(BeEquivalentTo(1), "only plain holds a gopher")
			}).Should(Succeed())

			marked := time.Now()
			Expect(os.WriteFile(filepath.Join(dir, heldID), []byte("unhealthy\n"), 0o644)).To(Succeed())
			Eventually(ctx, func(g Gomega) {
				g.Expect(taintKeys(gopherSliceDevices(ctx, g)[heldID])).To(ContainElement(taintUnhealthy))
			}).WithPolling(20 * time.Millisecond).Should(Succeed())
			recordTiming(label+"5. gopher file marked unhealthy -> its device tainted in the slice", time.Since(marked))

			createPod(ctx, MakePod("waits", ns).Limits(gopherResource, 1).Obj())
			Consistently(ctx, func(g Gomega) {
				pod, err := getPod(ctx, ns, "waits")
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(pod.Spec.NodeName).To(BeEmpty(), "placed on the unhealthy gopher")
			}, 5*time.Second, 250*time.Millisecond).Should(Succeed())

			second := startWatchingPod(ctx, ns, "waits", 2*time.Minute)
			healed := time.Now()
			Expect(os.WriteFile(filepath.Join(dir, heldID), []byte(gopherContent), 0o644)).To(Succeed())
			Eventually(ctx, func(g Gomega) {
				g.Expect(taintKeys(gopherSliceDevices(ctx, g)[heldID])).To(BeEmpty())
			}).WithPolling(20 * time.Millisecond).Should(Succeed())
			recordTiming(label+"5. gopher file healthy again -> its taint gone", time.Since(healed))
			second()
			expectGopherIDInside(ctx, ns, "waits", heldID)
		}, SpecTimeout(5*time.Minute))

		It("6. keeps running pods' gophers while the agent is away, and unprepares a pod deleted meanwhile once it is back", func(ctx context.Context) {
			waits, err := getPod(ctx, ns, "waits")
			Expect(err).NotTo(HaveOccurred())
			containerID := waits.Status.ContainerStatuses[0].ContainerID
			agent := agentPod(ctx)

			Expect(clientset.CoreV1().Pods(kubedeviceNamespace).Delete(ctx, agent.Name, metav1.DeleteOptions{})).To(Succeed())
			Eventually(ctx, func(g Gomega) {
				_, err := clientset.CoreV1().Pods(kubedeviceNamespace).Get(ctx, agent.Name, metav1.GetOptions{})
				g.Expect(err).To(HaveOccurred())
			}).Should(Succeed())
			// Deleted while no agent runs: the kubelet cannot unprepare its claim until one is back.
			Expect(clientset.CoreV1().Pods(ns).Delete(ctx, "plain", metav1.DeleteOptions{})).To(Succeed())

			back := time.Now()
			agentPod(ctx)
			Eventually(ctx, func(g Gomega) {
				g.Expect(cdiSpecsOf(plainClaimUID)).To(BeEmpty(), "the deleted pod's CDI spec")
				nd, err := gopherNodeDevice(ctx)
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(nd.Status.Allocated).To(BeEquivalentTo(1), "only waits holds a gopher")
			}).WithTimeout(3 * time.Minute).Should(Succeed())
			recordTiming(label+"6. agent back -> the claim of the pod deleted meanwhile unprepared", time.Since(back))

			after, err := getPod(ctx, ns, "waits")
			Expect(err).NotTo(HaveOccurred())
			Expect(running(after)).To(BeTrue(), describeStatus(after))
			Expect(after.Status.ContainerStatuses[0].ContainerID).To(Equal(containerID))
			expectGopherIDInside(ctx, ns, "waits", heldID)
		}, SpecTimeout(6*time.Minute))
	})
}

// expectGopherIDInside checks, with kubectl exec, that the pod's container got exactly the gopher
// id: the GOPHER env and the gopher's file at /gophers/<id>, and nothing else there.
func expectGopherIDInside(ctx context.Context, ns, name, id string) {
	out, err := execIn(ctx, ns, name, "sh", "-c", `echo "GOPHER=$GOPHER"; ls /gophers; cat /gophers/`+id)
	Expect(err).NotTo(HaveOccurred())
	Expect(out).To(Equal("GOPHER=" + id + "\n" + id + "\n" + gopherContent))
}

// gopherSliceDevices returns the gophers of the node's ResourceSlices of kubedevice's driver, by
// the plugin's device ID (the deviceID attribute).
func gopherSliceDevices(ctx context.Context, g Gomega) map[string]resourcev1.Device {
	return gopherSliceDevicesOn(ctx, g, node.Name)
}

// gopherSliceDevicesOn is gopherSliceDevices of the node named nodeName.
func gopherSliceDevicesOn(ctx context.Context, g Gomega, nodeName string) map[string]resourcev1.Device {
	list := &resourcev1.ResourceSliceList{}
	g.Expect(kd.List(ctx, list, client.MatchingFields{resourcev1.ResourceSliceSelectorNodeName: nodeName})).To(Succeed())
	out := map[string]resourcev1.Device{}
	for _, rs := range list.Items {
		if rs.Spec.Driver != draDriver {
			continue
		}
		for _, d := range rs.Spec.Devices {
			if a, ok := d.Attributes[resourcev1.QualifiedName(draDriver+"/resourceName")]; !ok || ptr.Deref(a.StringValue, "") != gopherResource {
				continue
			}
			if a, ok := d.Attributes[resourcev1.QualifiedName(draDriver+"/deviceID")]; ok && a.StringValue != nil {
				out[*a.StringValue] = d
			}
		}
	}
	return out
}

// taintKeys lists the keys of a device's taints, sorted.
func taintKeys(d resourcev1.Device) []string {
	keys := []string{}
	for _, t := range d.Taints {
		keys = append(keys, t.Key)
	}
	slices.Sort(keys)
	return keys
}

// cdiSpecsOf lists the CDI spec files in cdiDir that name the claim's UID.
func cdiSpecsOf(claimUID string) []string {
	matches, err := filepath.Glob(filepath.Join(cdiDir, "*"+claimUID+"*"))
	Expect(err).NotTo(HaveOccurred())
	return matches
}
