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
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
)

const (
	// gopherID is the one gopher of the scenario: a file of that name in the plugin's directory.
	gopherID = "gopher-0"
	// gopherContent is what the gopher file holds, and what a container that got it reads.
	gopherContent = "a gopher for the real-node scenario\n"
	// agentAwayLabel is a node label no node has: with it as the agent DaemonSet's node selector
	// the agent leaves the node.
	agentAwayLabel = "kubedevice.io/e2e-agent-away"
	// gateRefusal is containerd's default validator refusing a container of a pod whose
	// required-plugins annotation names kubedevice while kubedevice is not connected.
	gateRefusal = `required plugin "kubedevice" not present`
	// kubeletPluginDir is where the kubelet's own device manager takes registrations (whatever
	// its --root-dir): the Gopher plugin must not be there.
	kubeletPluginDir = "/var/lib/kubelet/device-plugins"
)

// The scenario of issue 7 on the real node: kubedevice installed with kustomize (config/default
// through hack/e2e-node/overlays/kubedevice), the Gopher sample plugin with one gopher, pods that
// ask for it, and the agent going away and coming back. The same install with the Helm chart is
// checked for the first two steps. Each container installs, and uninstalls when it ends, so the
// other specs of the suite see a node without kubedevice.
var _ = Describe("kubedevice on the real node", func() {
	Describe("installed with kustomize", Ordered, func() {
		const label = "kustomize: "
		var ns string

		BeforeAll(func(ctx context.Context) {
			setUp(ctx, label, installWithKustomize)
			ns = newNamespace(ctx)
		}, NodeTimeout(20*time.Minute))
		AfterEach(func(ctx context.Context) {
			if CurrentSpecReport().Failed() {
				dumpKubedevice(ctx)
			}
		})

		It("1. registers the one gopher of the Gopher DaemonSet with the agent: a NodeDevice, and example.com/gopher: 1 on the Node", func(ctx context.Context) {
			registersTheGopher(ctx, label)
		}, SpecTimeout(5*time.Minute))

		It("2. runs gopher-pod with the gopher: GOPHER=<id> and /gophers/<id> inside, a DeviceAllocation naming it", func(ctx context.Context) {
			runsAPodWithTheGopher(ctx, label, ns, "gopher-pod")
		}, SpecTimeout(5*time.Minute))

		It("3. keeps gopher-pod2 Pending with Insufficient example.com/gopher, and runs it with the gopher once gopher-pod is deleted", func(ctx context.Context) {
			createPod(ctx, MakePod("gopher-pod2", ns).Limits(gopherResource, 1).Obj())
			Eventually(ctx, func(g Gomega) {
				pod, err := getPod(ctx, ns, "gopher-pod2")
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(pod.Spec.NodeName).To(BeEmpty())
				cond := podCondition(pod, corev1.PodScheduled)
				g.Expect(cond).NotTo(BeNil())
				g.Expect(cond.Status).To(Equal(corev1.ConditionFalse))
				g.Expect(cond.Reason).To(Equal(corev1.PodReasonUnschedulable))
				g.Expect(cond.Message).To(ContainSubstring("Insufficient " + gopherResource))
			}).Should(Succeed())
			Consistently(ctx, func(g Gomega) {
				pod, err := getPod(ctx, ns, "gopher-pod2")
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(pod.Spec.NodeName).To(BeEmpty())
				g.Expect(pod.Status.Phase).To(Equal(corev1.PodPending))
			}, 3*time.Second, 250*time.Millisecond).Should(Succeed())

			first, err := getPod(ctx, ns, "gopher-pod")
			Expect(err).NotTo(HaveOccurred())
			second := startWatchingPod(ctx, ns, "gopher-pod2", 2*time.Minute)
			start := time.Now()
			deletePod(ctx, ns, "gopher-pod")
			gone := time.Now()
			t := second()
			// The scheduler counts a pod's devices until it has terminated, not until its object
			// is gone, so gopher-pod2 may be bound before gopher-pod is removed.
			recordTiming(label+"3. delete gopher-pod -> it is gone", gone.Sub(start))
			recordTiming(label+"3. delete gopher-pod -> gopher-pod2 bound", t.bound.Sub(start))
			recordTiming(label+"3. gopher-pod2 bound -> running with the gopher", t.running.Sub(t.bound))

			expectGopherInside(ctx, ns, "gopher-pod2")
			expectAllocation(ctx, t.pod)
			expectPodResources(ctx, ns, "gopher-pod2")
			Eventually(ctx, func(g Gomega) {
				da, err := deviceAllocationOf(ctx, first)
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(da).To(BeNil(), "the DeviceAllocation of the deleted gopher-pod")
			}).Should(Succeed())
		}, SpecTimeout(5*time.Minute))

		It("4. keeps running pods' devices and their DeviceAllocation untouched when the agent pod is deleted and the DaemonSet brings it back", func(ctx context.Context) {
			pod, err := getPod(ctx, ns, "gopher-pod2")
			Expect(err).NotTo(HaveOccurred())
			Expect(running(pod)).To(BeTrue(), describeStatus(pod))
			containerID := pod.Status.ContainerStatuses[0].ContainerID
			restarts := pod.Status.ContainerStatuses[0].RestartCount
			before := expectAllocation(ctx, pod)

			// Every change to the namespace's DeviceAllocations from now on.
			events := watchDeviceAllocations(ctx, ns)

			old := agentPod(ctx)
			start := time.Now()
			Expect(clientset.CoreV1().Pods(kubedeviceNamespace).Delete(ctx, old.Name, metav1.DeleteOptions{})).To(Succeed())
			// The DaemonSet's new agent pod: running, then registered again with the plugin and
			// containerd, then Ready (its readiness probe runs every 5 s).
			var agent *corev1.Pod
			Eventually(ctx, func(g Gomega) {
				pods, err := clientset.CoreV1().Pods(kubedeviceNamespace).List(ctx, metav1.ListOptions{LabelSelector: agentSelector})
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(pods.Items).To(HaveLen(1))
				agent = &pods.Items[0]
				g.Expect(agent.UID).NotTo(Equal(old.UID), "the deleted agent pod is still there")
				g.Expect(running(agent)).To(BeTrue(), describeStatus(agent))
			}).WithPolling(100 * time.Millisecond).Should(Succeed())
			started := time.Now()
			Expect(metav1.GetControllerOf(agent)).NotTo(BeNil())
			Expect(metav1.GetControllerOf(agent).Kind).To(Equal("DaemonSet"))
			registered, connected := waitForAgentMetrics(ctx, agent)
			Expect(agentPod(ctx).UID).To(Equal(agent.UID))
			ready := time.Now()
			recordTiming(label+"4. agent pod deleted -> new agent pod running", started.Sub(start))
			recordTiming(label+"4. agent pod deleted -> the Gopher plugin registered again", registered.Sub(start))
			recordTiming(label+"4. agent pod deleted -> NRI plugin connected again", connected.Sub(start))
			recordTiming(label+"4. agent pod deleted -> new agent pod Ready", ready.Sub(start))

			// The running pod kept its container and its devices.
			pod, err = getPod(ctx, ns, "gopher-pod2")
			Expect(err).NotTo(HaveOccurred())
			Expect(running(pod)).To(BeTrue(), describeStatus(pod))
			Expect(pod.Status.ContainerStatuses[0].ContainerID).To(Equal(containerID))
			Expect(pod.Status.ContainerStatuses[0].RestartCount).To(Equal(restarts))
			expectGopherInside(ctx, ns, "gopher-pod2")

			// Its DeviceAllocation is the same object, unwritten, through the restart and after
			// the new agent has caught up.
			Consistently(ctx, func(g Gomega) {
				da, err := deviceAllocationOf(ctx, pod)
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(da).NotTo(BeNil())
				g.Expect(da.UID).To(Equal(before.UID))
				g.Expect(da.ResourceVersion).To(Equal(before.ResourceVersion))
				g.Expect(allocatedDevices(da)).To(Equal(allocatedDevices(before)))
			}, 5*time.Second, 500*time.Millisecond).Should(Succeed())
			Expect(events()).To(BeEmpty(), "the DeviceAllocations of %s changed while the agent restarted", ns)

			expectHolder(ctx, ns, "gopher-pod2")
			expectNodeGophers(ctx, 1)
		}, SpecTimeout(5*time.Minute))

		It("5. holds a new gopher pod (CreateContainerError) while the agent is away, and starts it with its devices once the agent is back", func(ctx context.Context) {
			// The agent leaves the node: its DaemonSet selects no node.
			start := time.Now()
			patchAgentNodeSelector(ctx, fmt.Sprintf(`{"spec":{"template":{"spec":{"nodeSelector":{%q:"true"}}}}}`, agentAwayLabel), types.MergePatchType)
			waitForNoAgent(ctx)
			away := time.Now()
			recordTiming(label+"5. agent DaemonSet moved away -> agent pod gone", away.Sub(start))

			// The one gopher is freed while the agent is away, so the new pod is scheduled (the
			// Node still offers the gopher) and only the NRI gate can keep it from running without
			// it; and the returning agent has to release gopher-pod2's gopher before it can give it
			// to gopher-pod3.
			gone, err := getPod(ctx, ns, "gopher-pod2")
			Expect(err).NotTo(HaveOccurred())
			deletePod(ctx, ns, "gopher-pod2")

			created := time.Now()
			pod := createPod(ctx, MakePod("gopher-pod3", ns).Limits(gopherResource, 1).Obj())
			Expect(pod.Annotations).To(HaveKeyWithValue(requiredPluginsAnnotation, `["kubedevice"]`))
			var waiting *corev1.ContainerStateWaiting
			Eventually(ctx, func(g Gomega) {
				pod, err := getPod(ctx, ns, "gopher-pod3")
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(pod.Spec.NodeName).To(Equal(node.Name), "gopher-pod3 is scheduled: %s", describeStatus(pod))
				g.Expect(pod.Status.ContainerStatuses).To(HaveLen(1))
				waiting = pod.Status.ContainerStatuses[0].State.Waiting
				g.Expect(waiting).NotTo(BeNil(), describeStatus(pod))
				g.Expect(waiting.Reason).To(Equal("CreateContainerError"), describeStatus(pod))
			}).Should(Succeed())
			held := time.Now()
			Expect(waiting.Message).To(ContainSubstring(gateRefusal))
			recordTiming(label+"5. gopher-pod3 created (agent away) -> held in CreateContainerError", held.Sub(created))
			Consistently(ctx, func(g Gomega) {
				pod, err := getPod(ctx, ns, "gopher-pod3")
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(pod.Status.Phase).To(Equal(corev1.PodPending))
				g.Expect(pod.Status.ContainerStatuses[0].State.Running).To(BeNil())
			}, 3*time.Second, 250*time.Millisecond).Should(Succeed())
			da, err := deviceAllocationOf(ctx, pod)
			Expect(err).NotTo(HaveOccurred())
			Expect(da).To(BeNil(), "nobody allocates while the agent is away")

			// A pod without devices is not held (step 6 checks it further).
			plainCreated := time.Now()
			createPod(ctx, MakePod("plain-pod-agent-away", ns).Obj())
			t := watchUntilRunning(ctx, ns, "plain-pod-agent-away", 2*time.Minute)
			recordTiming(label+"5. plain pod created (agent away) -> running", t.running.Sub(plainCreated))

			// The agent comes back.
			third := startWatchingPod(ctx, ns, "gopher-pod3", 3*time.Minute)
			back := time.Now()
			patchAgentNodeSelector(ctx, `[{"op":"remove","path":"/spec/template/spec/nodeSelector"}]`, types.JSONPatchType)
			var agent *corev1.Pod
			Eventually(ctx, func(g Gomega) {
				pods, err := clientset.CoreV1().Pods(kubedeviceNamespace).List(ctx, metav1.ListOptions{LabelSelector: agentSelector})
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(pods.Items).To(HaveLen(1))
				agent = &pods.Items[0]
				g.Expect(running(agent)).To(BeTrue(), describeStatus(agent))
			}).WithPolling(100 * time.Millisecond).Should(Succeed())
			started := time.Now()
			_, connected := waitForAgentMetrics(ctx, agent)
			Expect(agentPod(ctx).UID).To(Equal(agent.UID))
			ready := time.Now()
			t = third()
			recordTiming(label+"5. agent away for", back.Sub(away))
			recordTiming(label+"5. agent DaemonSet back -> agent pod running", started.Sub(back))
			recordTiming(label+"5. agent DaemonSet back -> NRI plugin connected", connected.Sub(back))
			recordTiming(label+"5. agent DaemonSet back -> agent pod Ready", ready.Sub(back))
			recordTiming(label+"5. agent DaemonSet back -> held gopher-pod3 running with its gopher", t.running.Sub(back))

			expectGopherInside(ctx, ns, "gopher-pod3")
			expectAllocation(ctx, t.pod)
			Eventually(ctx, func(g Gomega) {
				da, err := deviceAllocationOf(ctx, gone)
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(da).To(BeNil(), "the DeviceAllocation of gopher-pod2, deleted while the agent was away")
			}).Should(Succeed())
			expectHolder(ctx, ns, "gopher-pod3")
		}, SpecTimeout(5*time.Minute))

		It("6. never touches a plain pod: no annotation, nothing injected, running whether the agent is there or away", func(ctx context.Context) {
			agent := agentPod(ctx)
			untouched := func() int {
				out, err := agentMetrics(ctx, agent)
				Expect(err).NotTo(HaveOccurred())
				return int(metricValue(out, `kubedevice_agent_nri_create_container_total{result="untouched"}`))
			}
			before := untouched()
			created := time.Now()
			createPod(ctx, MakePod("plain-pod", ns).Obj())
			t := watchUntilRunning(ctx, ns, "plain-pod", 2*time.Minute)
			recordTiming(label+"6. plain pod created (agent there) -> running", t.running.Sub(created))
			Expect(untouched()).To(BeNumerically(">", before), "the agent's NRI plugin saw the plain pod's container and left it untouched")

			for _, name := range []string{"plain-pod", "plain-pod-agent-away"} {
				pod, err := getPod(ctx, ns, name)
				Expect(err).NotTo(HaveOccurred())
				Expect(running(pod)).To(BeTrue(), "%s: %s", name, describeStatus(pod))
				Expect(pod.Status.ContainerStatuses[0].RestartCount).To(BeZero(), name)
				Expect(pod.Annotations).NotTo(HaveKey(requiredPluginsAnnotation), name)
				out, err := execIn(ctx, ns, name, "sh", "-c", `env | grep -c '^GOPHER=' ; ls -d /gophers 2>&1 || true`)
				Expect(err).NotTo(HaveOccurred())
				Expect(out).To(Equal("0\nls: /gophers: No such file or directory\n"), name)
				da, err := deviceAllocationOf(ctx, pod)
				Expect(err).NotTo(HaveOccurred())
				Expect(da).To(BeNil(), name)
			}
		}, SpecTimeout(5*time.Minute))
	})

	Describe("installed with Helm", Ordered, func() {
		const label = "helm: "
		var ns string

		BeforeAll(func(ctx context.Context) {
			setUp(ctx, label, installWithHelm)
			ns = newNamespace(ctx)
		}, NodeTimeout(20*time.Minute))
		AfterEach(func(ctx context.Context) {
			if CurrentSpecReport().Failed() {
				dumpKubedevice(ctx)
			}
		})

		It("1. registers the one gopher of the Gopher DaemonSet with the agent: a NodeDevice, and example.com/gopher: 1 on the Node", func(ctx context.Context) {
			registersTheGopher(ctx, label)
		}, SpecTimeout(5*time.Minute))

		It("2. runs gopher-pod with the gopher: GOPHER=<id> and /gophers/<id> inside, a DeviceAllocation naming it", func(ctx context.Context) {
			runsAPodWithTheGopher(ctx, label, ns, "gopher-pod")
		}, SpecTimeout(5*time.Minute))
	})

	// A real Prometheus scraping the install, its alerts and the dashboard (prometheus_test.go).
	describePrometheus()
	describeDRA()
	// kubectl kubedevice drain and uncordon (drain_test.go).
	describeDrain()
	describeNodeEvents()
	// A second node beside the first (twonodes_test.go, hack/e2e-node/node-b.sh).
	describeTwoNodes()
	describeMigration()

	// The previous release upgraded to this tree and rolled back (upgrade_test.go).
	describeUpgrade()

	// Last: the kubelet keeps the gophers it managed listed (unhealthy, then at 0) after the plugin
	// is gone, which the installs above must not meet (observe_test.go, nodeevents_test.go).
	describeObserveMode()
	describeNodeEventsControl()
	// The kubelet's gophers moved to kubedevice and back (switch_test.go): it waits out the
	// kubelet's 5-minute grace period.
	describeSwitch()
})

// setUp builds the image, removes what an interrupted run left, installs kubedevice and waits
// until its agent and controller are Ready; it uninstalls when the container ends.
func setUp(ctx context.Context, label string, install func(context.Context)) {
	buildImage(ctx)
	uninstall(ctx, "")
	DeferCleanup(func(ctx context.Context) { uninstall(ctx, label) }, NodeTimeout(5*time.Minute))
	forgetGopherCapacity(ctx)
	start := time.Now()
	install(ctx)
	waitForKubedevice(ctx)
	recordTiming(label+"install -> agent and controller Ready", time.Since(start))
}

// registersTheGopher is step 1: the Gopher DaemonSet registers its one gopher with the agent,
// the NodeDevice shows it, and the controller publishes it in the Node's capacity.
func registersTheGopher(ctx context.Context, label string) {
	start := time.Now()
	installGopher(ctx, gopherID, gopherContent)
	pluginReady := time.Now()

	var nd *kdv1alpha1.NodeDevice
	Eventually(ctx, func(g Gomega) {
		var err error
		nd, err = gopherNodeDevice(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(nd.Status.Plugin).NotTo(BeNil())
		g.Expect(nd.Status.Plugin.State).To(Equal(kdv1alpha1.PluginStateRegistered))
		g.Expect(nd.Status.Capacity).To(BeEquivalentTo(1))
		g.Expect(nd.Status.Allocatable).To(BeEquivalentTo(1))
		g.Expect(nd.Status.Allocated).To(BeEquivalentTo(0))
		g.Expect(nd.Status.Devices).To(HaveLen(1))
		g.Expect(nd.Status.Devices[0].ID).To(Equal(gopherID))
		g.Expect(nd.Status.Devices[0].Health).To(Equal(kdv1alpha1.DeviceHealthy))
	}).Should(Succeed())
	registered := time.Now()
	expectNodeGophers(ctx, 1)
	published := time.Now()
	recordTiming(label+"1. Gopher DaemonSet applied -> plugin pod Ready", pluginReady.Sub(start))
	recordTiming(label+"1. plugin pod Ready -> NodeDevice shows the gopher Registered", registered.Sub(pluginReady))
	recordTiming(label+"1. plugin pod Ready -> Node capacity example.com/gopher: 1", published.Sub(pluginReady))

	// The plugin registered with the agent, not with the kubelet: its socket is in kubedevice's
	// plugin directory, and not beside the kubelet's own registration socket.
	Expect(nd.Status.Plugin.Endpoint).To(HavePrefix("/var/lib/kubedevice/device-plugins/"))
	Expect(filepath.Join(kubeletPluginDir, "kubelet.sock")).To(BeAnExistingFile())
	Expect(filepath.Join(kubeletPluginDir, filepath.Base(nd.Status.Plugin.Endpoint))).NotTo(BeAnExistingFile())
	Expect(meta.IsStatusConditionTrue(nd.Status.Conditions, kdv1alpha1.NodeDeviceRuntimeInjectionReady)).To(BeTrue(),
		"RuntimeInjectionReady: %+v", nd.Status.Conditions)

	out, err := kubectl(ctx, "get", "nodedevices")
	Expect(err).NotTo(HaveOccurred())
	GinkgoWriter.Printf("kubectl get nodedevices:\n%s", out)
	Expect(rowsOf(out)).To(ContainElement(And(
		HaveKeyWithValue("NODE", node.Name), HaveKeyWithValue("RESOURCE", gopherResource),
		HaveKeyWithValue("CAPACITY", "1"), HaveKeyWithValue("ALLOCATABLE", "1"), HaveKeyWithValue("PLUGIN", "Registered"))))
}

// runsAPodWithTheGopher is step 2: a pod asking for one gopher is admitted with the injection
// gate, scheduled, runs with the gopher inside, and its DeviceAllocation says so.
func runsAPodWithTheGopher(ctx context.Context, label, ns, name string) {
	created := time.Now()
	pod := createPod(ctx, MakePod(name, ns).Limits(gopherResource, 1).Obj())
	Expect(pod.Annotations).To(HaveKeyWithValue(requiredPluginsAnnotation, `["kubedevice"]`),
		"kubedevice's admission policy gates pods that ask for its resources on its NRI plugin")
	t := watchUntilRunning(ctx, ns, name, 2*time.Minute)
	recordTiming(label+"2. "+name+" created -> bound", t.bound.Sub(created))
	recordTiming(label+"2. "+name+" bound -> running with the gopher", t.running.Sub(t.bound))

	expectGopherInside(ctx, ns, name)
	expectAllocation(ctx, t.pod)
	expectHolder(ctx, ns, name)
	expectPodResources(ctx, ns, name)

	out, err := kubectl(ctx, "get", "deviceallocations", "-A")
	Expect(err).NotTo(HaveOccurred())
	GinkgoWriter.Printf("kubectl get deviceallocations -A:\n%s", out)
	Expect(rowsOf(out)).To(ContainElement(And(
		HaveKeyWithValue("NAMESPACE", ns), HaveKeyWithValue("POD", name), HaveKeyWithValue("NODE", node.Name),
		HaveKeyWithValue("RESOURCES", gopherResource+"="+gopherID), HaveKeyWithValue("ALLOCATED", "True"))))
}

// expectGopherInside checks, with kubectl exec, that the pod's container got the gopher: the
// GOPHER env and the gopher's file at /gophers/<id>, and nothing else there.
func expectGopherInside(ctx context.Context, ns, name string) {
	out, err := execIn(ctx, ns, name, "sh", "-c", `echo "GOPHER=$GOPHER"; ls /gophers; cat /gophers/`+gopherID)
	Expect(err).NotTo(HaveOccurred())
	Expect(out).To(Equal("GOPHER=" + gopherID + "\n" + gopherID + "\n" + gopherContent))
}

// expectAllocation waits for the pod's DeviceAllocation to show the gopher allocated to its
// container and returns it.
func expectAllocation(ctx context.Context, pod *corev1.Pod) *kdv1alpha1.DeviceAllocation {
	var da *kdv1alpha1.DeviceAllocation
	Eventually(ctx, func(g Gomega) {
		var err error
		da, err = deviceAllocationOf(ctx, pod)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(da).NotTo(BeNil(), "no DeviceAllocation of pod %s/%s", pod.Namespace, pod.Name)
		g.Expect(da.Spec.NodeName).To(Equal(node.Name))
		g.Expect(da.Spec.PodName).To(Equal(pod.Name))
		g.Expect(allocatedDevices(da)).To(Equal([]string{"main/" + gopherResource + "=" + gopherID}))
		g.Expect(meta.IsStatusConditionTrue(da.Status.Conditions, kdv1alpha1.DeviceAllocationAllocated)).To(BeTrue(),
			"conditions: %+v", da.Status.Conditions)
	}).Should(Succeed())
	return da
}

// expectPodResources waits until the agent's PodResources API, read on the host as a monitoring
// agent reads it, lists the gopher in the pod's container and in no other pod.
func expectPodResources(ctx context.Context, ns, name string) {
	conn, err := grpc.NewClient("unix://"+podResourcesSocket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	Expect(err).NotTo(HaveOccurred())
	defer conn.Close()
	c := podresourcesapi.NewPodResourcesListerClient(conn)
	Eventually(ctx, func(g Gomega) {
		callCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		resp, err := c.List(callCtx, &podresourcesapi.ListPodResourcesRequest{})
		g.Expect(err).NotTo(HaveOccurred())
		var holders []string
		for _, pr := range resp.GetPodResources() {
			for _, cr := range pr.GetContainers() {
				for _, d := range cr.GetDevices() {
					if d.GetResourceName() == gopherResource {
						holders = append(holders, fmt.Sprintf("%s/%s/%s=%s", pr.GetNamespace(), pr.GetName(), cr.GetName(), strings.Join(d.GetDeviceIds(), ",")))
					}
				}
			}
		}
		g.Expect(holders).To(Equal([]string{ns + "/" + name + "/main=" + gopherID}))
	}).Should(Succeed())
}

// expectHolder waits for the NodeDevice to show the gopher held by the pod's container.
func expectHolder(ctx context.Context, ns, name string) {
	Eventually(ctx, func(g Gomega) {
		nd, err := gopherNodeDevice(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(nd.Status.Allocated).To(BeEquivalentTo(1))
		g.Expect(nd.Status.Devices).To(HaveLen(1))
		h := nd.Status.Devices[0].Holder
		g.Expect(h).NotTo(BeNil())
		g.Expect(*h).To(And(
			HaveField("Namespace", ns), HaveField("PodName", name), HaveField("ContainerName", "main")))
	}).Should(Succeed())
}

// expectNodeGophers waits for the Node to offer n gophers, in capacity and allocatable.
func expectNodeGophers(ctx context.Context, n int64) {
	Eventually(ctx, func(g Gomega) {
		got, err := clientset.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		for _, list := range []corev1.ResourceList{got.Status.Capacity, got.Status.Allocatable} {
			q, ok := list[gopherResource]
			g.Expect(ok).To(BeTrue(), "%s in %v", gopherResource, list)
			g.Expect(q.Value()).To(Equal(n))
		}
	}).Should(Succeed())
}

func podCondition(pod *corev1.Pod, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == t {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}

// patchAgentNodeSelector patches the agent DaemonSet (to send the agent away or bring it back).
func patchAgentNodeSelector(ctx context.Context, patch string, pt types.PatchType) {
	_, err := clientset.AppsV1().DaemonSets(kubedeviceNamespace).Patch(ctx, agentDaemonSet, pt, []byte(patch), metav1.PatchOptions{})
	Expect(err).NotTo(HaveOccurred())
}

// waitForAgentMetrics waits until the agent pod reports the Gopher plugin connected and itself
// connected to containerd's NRI socket, and returns when it saw each.
func waitForAgentMetrics(ctx context.Context, agent *corev1.Pod) (registered, connected time.Time) {
	Eventually(ctx, func(g Gomega) {
		out, err := agentMetrics(ctx, agent)
		g.Expect(err).NotTo(HaveOccurred())
		now := time.Now()
		if registered.IsZero() && metricValue(out, `kubedevice_device_plugin_connected{resource_name="`+gopherResource+`"}`) == 1 {
			registered = now
		}
		if connected.IsZero() && metricValue(out, "kubedevice_agent_nri_connected") == 1 {
			connected = now
		}
		g.Expect(registered).NotTo(BeZero(), "the Gopher plugin is not connected to agent %s", agent.Name)
		g.Expect(connected).NotTo(BeZero(), "agent %s is not connected to the NRI socket", agent.Name)
	}).WithPolling(100 * time.Millisecond).Should(Succeed())
	return registered, connected
}

// metricValue returns the value of the sample (name with its labels, as exposed) in a Prometheus
// text exposition, or -1 when there is none.
func metricValue(exposition, sample string) float64 {
	for _, line := range strings.Split(exposition, "\n") {
		if value, ok := strings.CutPrefix(line, sample+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
			if err == nil {
				return v
			}
		}
	}
	return -1
}

// watchDeviceAllocations watches the namespace's DeviceAllocations from now on until the spec
// ends; the returned function lists what changed so far.
func watchDeviceAllocations(ctx context.Context, ns string) func() []string {
	list := &kdv1alpha1.DeviceAllocationList{}
	Expect(kd.List(ctx, list, client.InNamespace(ns))).To(Succeed())
	w, err := kd.Watch(ctx, &kdv1alpha1.DeviceAllocationList{}, client.InNamespace(ns),
		&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: list.ResourceVersion}})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(w.Stop)
	var (
		mu      sync.Mutex
		changes []string
	)
	go func() {
		for ev := range w.ResultChan() {
			if ev.Type == watch.Bookmark {
				continue
			}
			what := string(ev.Type)
			if da, ok := ev.Object.(*kdv1alpha1.DeviceAllocation); ok {
				what += fmt.Sprintf(" %s (pod %s, resourceVersion %s, %v)", da.Name, da.Spec.PodName, da.ResourceVersion, allocatedDevices(da))
			} else {
				what += fmt.Sprintf(" %v", ev.Object)
			}
			mu.Lock()
			changes = append(changes, what)
			mu.Unlock()
		}
	}()
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), changes...)
	}
}

// rowsOf parses kubectl's table output into one map per row, by column header.
func rowsOf(table string) []map[string]string {
	lines := strings.Split(strings.TrimRight(table, "\n"), "\n")
	if len(lines) < 2 {
		return nil
	}
	space := regexp.MustCompile(`\s{2,}`)
	headers := space.Split(strings.TrimSpace(lines[0]), -1)
	var rows []map[string]string
	for _, l := range lines[1:] {
		cells := space.Split(strings.TrimSpace(l), -1)
		row := map[string]string{}
		for i, h := range headers {
			if i < len(cells) {
				row[h] = cells[i]
			}
		}
		rows = append(rows, row)
	}
	return rows
}
