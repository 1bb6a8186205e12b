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
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
	"github.com/kubedevice/kubedevice/internal/contract"
)

// describeObserveMode is the observe-mode scenario (issue 17): kubedevice installed with
// hack/e2e-node/overlays/kubedevice-observe (config/observe), the unmodified Gopher plugin
// registering with the kubelet itself (hack/e2e-node/overlays/gopher-kubelet mounts the kubelet's
// own /var/lib/kubelet/device-plugins), and the agent only watching: the NodeDevice shows the
// gopher and its health, a pod holding it gets a DeviceAllocation, an unhealthy gopher shows
// Unhealthy, and the Node's capacity is the kubelet's throughout.
func describeObserveMode() {
	// Offset: ordered by its call site in kubedevice_test.go, before the node events' control.
	Describe("observing the kubelet, installed with kustomize", Ordered, Offset(1), func() {
		const label = "observe: "
		var ns string

		BeforeAll(func(ctx context.Context) {
			buildImage(ctx)
			uninstall(ctx, "")
			DeferCleanup(func(ctx context.Context) { uninstallObserving(ctx, label, 1) }, NodeTimeout(5*time.Minute))
			forgetGopherCapacity(ctx)
			start := time.Now()
			out, err := kubectl(ctx, "apply", "--server-side", "-k", overlay("kubedevice-observe"))
			Expect(err).NotTo(HaveOccurred())
			GinkgoWriter.Printf("kubectl apply --server-side -k hack/e2e-node/overlays/kubedevice-observe:\n%s", out)
			waitForKubedevice(ctx)
			recordTiming(label+"install -> agent and controller Ready", time.Since(start))
			ns = newNamespace(ctx)
		}, NodeTimeout(20*time.Minute))
		AfterEach(func(ctx context.Context) {
			if CurrentSpecReport().Failed() {
				dumpKubedevice(ctx)
			}
		})

		It("1. shows the gopher the kubelet registered in an Observed NodeDevice; the Node's capacity is the kubelet's", func(ctx context.Context) {
			start := time.Now()
			installGopherFrom(ctx, "gopher-kubelet", gopherID, gopherContent)
			pluginReady := time.Now()
			// The kubelet publishes it: nothing of kubedevice's runs its device path.
			expectNodeGophers(ctx, 1)
			published := time.Now()
			var nd *kdv1alpha1.NodeDevice
			Eventually(ctx, func(g Gomega) {
				var err error
				nd, err = gopherNodeDevice(ctx)
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(nd.Status.Path).To(Equal(kdv1alpha1.DevicePathObserved))
				g.Expect(nd.Status.Plugin).NotTo(BeNil())
				g.Expect(nd.Status.Plugin.State).To(Equal(kdv1alpha1.PluginStateRegistered))
				g.Expect(nd.Status.Capacity).To(BeEquivalentTo(1))
				g.Expect(nd.Status.Allocatable).To(BeEquivalentTo(1))
				g.Expect(nd.Status.Devices).To(HaveLen(1))
				g.Expect(nd.Status.Devices[0].ID).To(Equal(gopherID))
				g.Expect(nd.Status.Devices[0].Health).To(Equal(kdv1alpha1.DeviceHealthy))
			}).Should(Succeed())
			observed := time.Now()
			recordTiming(label+"1. Gopher DaemonSet applied -> plugin pod Ready", pluginReady.Sub(start))
			recordTiming(label+"1. plugin pod Ready -> Node capacity example.com/gopher: 1 (the kubelet's)", published.Sub(pluginReady))
			recordTiming(label+"1. plugin pod Ready -> NodeDevice shows the gopher (Observed)", observed.Sub(pluginReady))

			// The plugin registered with the kubelet: its socket is beside the kubelet's own.
			entries, err := os.ReadDir(kubeletPluginDir)
			Expect(err).NotTo(HaveOccurred())
			var sockets []string
			for _, e := range entries {
				sockets = append(sockets, e.Name())
			}
			Expect(sockets).To(ContainElement(HavePrefix("gopher")), "the Gopher plugin's socket in %s: %v", kubeletPluginDir, sockets)
			Expect(filepath.Join(kubeletPluginDir, "kubelet_internal_checkpoint")).To(BeAnExistingFile())
			expectNodeCapacityNotKubedevices(ctx)

			out, err := kubectl(ctx, "get", "nodedevices")
			Expect(err).NotTo(HaveOccurred())
			GinkgoWriter.Printf("kubectl get nodedevices:\n%s", out)
			Expect(rowsOf(out)).To(ContainElement(And(
				HaveKeyWithValue("NODE", node.Name), HaveKeyWithValue("RESOURCE", gopherResource), HaveKeyWithValue("PATH", "Observed"),
				HaveKeyWithValue("CAPACITY", "1"), HaveKeyWithValue("ALLOCATABLE", "1"), HaveKeyWithValue("PLUGIN", "Registered"))))
		}, SpecTimeout(5*time.Minute))

		It("2. gives a pod the kubelet runs with the gopher a DeviceAllocation, and shows it holding the gopher", func(ctx context.Context) {
			created := time.Now()
			pod := createPod(ctx, MakePod("gopher-pod", ns).Limits(gopherResource, 1).Obj())
			Expect(pod.Annotations).NotTo(HaveKey(requiredPluginsAnnotation), "observe mode installs no injection gate")
			t := watchUntilRunning(ctx, ns, "gopher-pod", 2*time.Minute)
			recordTiming(label+"2. gopher-pod created -> running with the gopher (the kubelet's allocation)", t.running.Sub(created))
			// The kubelet gave the container the gopher through the plugin's Allocate response.
			expectGopherInside(ctx, ns, "gopher-pod")
			da := expectAllocation(ctx, t.pod)
			recordTiming(label+"2. gopher-pod running -> its DeviceAllocation Allocated", time.Since(t.running))
			Expect(da.Status.Containers[0].RuntimeOptions).NotTo(BeNil(), "the Allocate response, from the kubelet's checkpoint")
			Expect(da.Status.Containers[0].RuntimeOptions.Envs).To(ContainElement(kdv1alpha1.EnvVar{Name: "GOPHER", Value: gopherID}))
			expectHolder(ctx, ns, "gopher-pod")

			out, err := kubectl(ctx, "get", "deviceallocations", "-A")
			Expect(err).NotTo(HaveOccurred())
			GinkgoWriter.Printf("kubectl get deviceallocations -A:\n%s", out)
			out, err = run(ctx, nil, imageBin("kubedevice"), "status", "--kubeconfig", kubeconfig)
			Expect(err).NotTo(HaveOccurred())
			GinkgoWriter.Printf("kubedevice status:\n%s", out)
			Expect(out).To(ContainSubstring(gopherResource))
			Expect(out).To(ContainSubstring("gopher-pod"))
		}, SpecTimeout(5*time.Minute))

		It("3. shows the gopher Unhealthy as soon as the kubelet stops offering it; the Node's capacity stays the kubelet's", func(ctx context.Context) {
			gopherFile := filepath.Join(gophersDir(renderedGopherDaemonSet(ctx)), gopherID)
			start := time.Now()
			Expect(os.WriteFile(gopherFile, []byte("unhealthy\n"), 0o644)).To(Succeed())
			var unhealthy, podStatus, nodeStatus time.Time
			Eventually(ctx, func(g Gomega) {
				now := time.Now()
				if unhealthy.IsZero() {
					if nd, err := gopherNodeDevice(ctx); err == nil && len(nd.Status.Devices) == 1 &&
						nd.Status.Devices[0].Health == kdv1alpha1.DeviceUnhealthy {
						unhealthy = now
						g.Expect(nd.Status.Devices[0].Reason).To(Equal(kdv1alpha1.DeviceReasonKubeletNotAllocatable))
						g.Expect(nd.Status.Allocatable).To(BeZero())
						g.Expect(meta.IsStatusConditionFalse(nd.Status.Conditions, kdv1alpha1.NodeDeviceHealthy)).To(BeTrue())
					}
				}
				if podStatus.IsZero() {
					if p, err := getPod(ctx, ns, "gopher-pod"); err == nil && reportsUnhealthy(p) {
						podStatus = now
					}
				}
				if nodeStatus.IsZero() {
					if n, err := clientset.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{}); err == nil {
						a := n.Status.Allocatable[gopherResource]
						c := n.Status.Capacity[gopherResource]
						if a.Value() == 0 && c.Value() == 1 {
							nodeStatus = now
						}
					}
				}
				g.Expect(unhealthy.IsZero() || podStatus.IsZero() || nodeStatus.IsZero()).To(BeFalse(),
					"NodeDevice Unhealthy at %v, pod's allocatedResourcesStatus at %v, Node allocatable 0 at %v", unhealthy, podStatus, nodeStatus)
			}).WithTimeout(2 * time.Minute).WithPolling(100 * time.Millisecond).Should(Succeed())
			recordTiming(label+"3. gopher file unhealthy -> NodeDevice shows it Unhealthy", unhealthy.Sub(start))
			recordTiming(label+"3. gopher file unhealthy -> the kubelet's pod status says Unhealthy", podStatus.Sub(start))
			recordTiming(label+"3. gopher file unhealthy -> the kubelet's Node allocatable 0 (capacity 1)", nodeStatus.Sub(start))
			Expect(unhealthy.Sub(start)).To(BeNumerically("<", nodeStatus.Sub(start)+2*time.Second),
				"the NodeDevice shows the unhealthy gopher within the kubelet's own reporting delay (its node status), give or take the 1 s reading")
			expectNodeCapacityNotKubedevices(ctx)
			Eventually(func() map[string]string { return deviceInfoMetric(ctx, gopherID) }).
				Should(And(HaveKeyWithValue("health", "Unhealthy"), HaveKeyWithValue("pod", "gopher-pod")))

			Expect(os.WriteFile(gopherFile, []byte(gopherContent), 0o644)).To(Succeed())
			start = time.Now()
			Eventually(ctx, func(g Gomega) {
				nd, err := gopherNodeDevice(ctx)
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(nd.Status.Devices).To(HaveLen(1))
				g.Expect(nd.Status.Devices[0].Health).To(Equal(kdv1alpha1.DeviceHealthy))
			}).Should(Succeed())
			recordTiming(label+"3. gopher file healthy again -> NodeDevice shows it Healthy", time.Since(start))
		}, SpecTimeout(5*time.Minute))
	})
}

// uninstallObserving uninstalls as docs/install.md says (kubectl delete -k --wait=false, then kubedevice
// cleanup once the controller is gone) and checks that the kubelet's gopher is still offered by
// the Node: observe mode never owned it. Then it removes the rest as uninstall does; the kubelet
// keeps listing the gopher (unhealthy, then 0) once its plugin is gone, which is the kubelet's.
// gophers is how many the kubelet offers.
func uninstallObserving(ctx context.Context, label string, gophers int) {
	start := time.Now()
	_, err := kubectl(ctx, "delete", "-k", overlay("kubedevice-observe"), "--ignore-not-found", "--wait=false")
	Expect(err).NotTo(HaveOccurred())
	_, err = kubectl(ctx, "wait", "--for=delete", "pod", "-n", kubedeviceNamespace, "-l", controllerSelector, "--timeout=2m")
	Expect(err).NotTo(HaveOccurred())
	cleanUp(ctx)
	Eventually(ctx, func(g Gomega) {
		for _, crd := range kubedeviceCRDs {
			g.Expect(crdExists(ctx, crd)).To(BeFalse(), "CRD %s", crd)
		}
	}).Should(Succeed())
	if label != "" {
		recordTiming(label+"kubectl delete -k --wait=false, kubedevice cleanup, the CRDs gone", time.Since(start))
	}
	n, err := clientset.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
	Expect(err).NotTo(HaveOccurred())
	c := n.Status.Capacity[gopherResource]
	Expect(c.Value()).To(BeEquivalentTo(gophers), "the kubelet's gophers, which kubedevice cleanup must leave")
	uninstall(ctx, "")
}

// reportsUnhealthy: the kubelet reports, in the pod's status, its gopher as not Healthy.
func reportsUnhealthy(pod *corev1.Pod) bool {
	for _, cs := range pod.Status.ContainerStatuses {
		for _, rs := range cs.AllocatedResourcesStatus {
			for _, r := range rs.Resources {
				if string(rs.Name) == gopherResource && string(r.ResourceID) == gopherID && r.Health != corev1.ResourceHealthStatusHealthy {
					return true
				}
			}
		}
	}
	return false
}

// expectNodeCapacityNotKubedevices checks that kubedevice's controller owns none of the Node's
// example.com/gopher capacity or allocatable: the kubelet writes them.
func expectNodeCapacityNotKubedevices(ctx context.Context) {
	n, err := clientset.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
	Expect(err).NotTo(HaveOccurred())
	for _, m := range n.ManagedFields {
		if m.Manager == contract.ControllerFieldOwner && m.FieldsV1 != nil {
			Expect(m.FieldsV1.GetRawString()).NotTo(ContainSubstring(gopherResource), "kubedevice's controller wrote the Node's %s", gopherResource)
		}
	}
}

// deviceInfoMetric returns the labels of the agent's kubedevice_agent_device_info series of the
// device, nil when there is none.
func deviceInfoMetric(ctx context.Context, id string) map[string]string {
	exposition, err := agentMetrics(ctx, agentPod(ctx))
	if err != nil {
		return nil
	}
	for _, line := range strings.Split(exposition, "\n") {
		if !strings.HasPrefix(line, "kubedevice_agent_device_info{") || !strings.Contains(line, `device_id="`+id+`"`) {
			continue
		}
		labels := map[string]string{}
		inner := line[strings.Index(line, "{")+1 : strings.LastIndex(line, "}")]
		for _, kv := range strings.Split(inner, `",`) {
			k, v, _ := strings.Cut(kv, `="`)
			labels[k] = strings.TrimSuffix(v, `"`)
		}
		return labels
	}
	return nil
}
