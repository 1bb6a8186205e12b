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

package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/containerd/nri/pkg/api"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
	"github.com/kubedevice/kubedevice/internal/agent"
	"github.com/kubedevice/kubedevice/internal/agent/injection/nri"
	"github.com/kubedevice/kubedevice/internal/agent/injection/nri/nritest"
	"github.com/kubedevice/kubedevice/internal/nodeagent"
	"github.com/kubedevice/kubedevice/internal/nodeagent/dptest"
	"github.com/kubedevice/kubedevice/internal/testutil"
)

// preStarts records the PreStartContainer calls a stub plugin gets, and fails them while told to.
type preStarts struct {
	mu    sync.Mutex
	calls [][]string
	fail  error
}

// serve makes p require PreStartContainer and answer it through ps.
func (ps *preStarts) serve(p *dptest.Plugin) {
	p.SetOptions(true, false)
	p.SetPreStartContainerFunc(func(r *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
		ps.mu.Lock()
		defer ps.mu.Unlock()
		ps.calls = append(ps.calls, slices.Sorted(slices.Values(r.GetDevicesIds())))
		if ps.fail != nil {
			return nil, ps.fail
		}
		return &pluginapi.PreStartContainerResponse{}, nil
	})
}

// count returns the number of calls so far.
func (ps *preStarts) count() int {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return len(ps.calls)
}

// all returns the device IDs of every call so far.
func (ps *preStarts) all() [][]string {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return slices.Clone(ps.calls)
}

func (ps *preStarts) failWith(err error) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.fail = err
}

// preStartFailures is the number of failed PreStartContainer calls the agents of this process
// made (kubedevice_agent_prestart_container_total{result="failure"}).
func preStartFailures() int {
	GinkgoHelper()
	families, err := metrics.Registry.Gather()
	Expect(err).NotTo(HaveOccurred())
	n := 0
	for _, f := range families {
		if f.GetName() != "kubedevice_agent_prestart_container_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			if labelsOf(m)["result"] == "failure" {
				n += int(m.GetCounter().GetValue())
			}
		}
	}
	return n
}

// createContainerID asks the runtime to create the container of pod whose runtime ID is id: each
// start of a container, and each retry of a failed creation, has an ID of its own.
func createContainerID(rt *nritest.Runtime, pod *corev1.Pod, container, id string) func() (*api.ContainerAdjustment, error) {
	return func() (*api.ContainerAdjustment, error) {
		c, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		return rt.CreateContainerWithID(c, sandboxOf(pod), container, id)
	}
}

// setContainerStatus writes the status the kubelet reports for the pod's container, as the API
// server has the pod.
func setContainerStatus(pod *corev1.Pod, st corev1.ContainerStatus) {
	GinkgoHelper()
	Eventually(func() error {
		fresh := &corev1.Pod{}
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(pod), fresh); err != nil {
			return err
		}
		fresh.Status.Phase = corev1.PodRunning
		fresh.Status.ContainerStatuses = []corev1.ContainerStatus{st}
		return k8sClient.Status().Update(ctx, fresh)
	}).Should(Succeed())
}

// ended is the status of the app container that ended (the runtime's container id, exit code 1)
// and waits to be restarted, after restarts restarts.
func ended(id string, restarts int32) corev1.ContainerStatus {
	return corev1.ContainerStatus{
		Name: "app", RestartCount: restarts, Image: "busybox", ImageID: "busybox",
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
		LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ContainerID: "containerd://" + id, ExitCode: 1, Reason: "Error",
		}},
	}
}

// runningStatus is the status of the app container that runs as the runtime's container id.
func runningStatus(id string, restarts int32) corev1.ContainerStatus {
	return corev1.ContainerStatus{
		Name: "app", RestartCount: restarts, Image: "busybox", ImageID: "busybox", ContainerID: "containerd://" + id, Started: ptr.To(true),
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}},
	}
}

// startRuntimeAndAgent starts an NRI runtime and an agent that injects through it.
func startRuntimeAndAgent() (*nritest.Runtime, *nodeAgent) {
	GinkgoHelper()
	dir, err := os.MkdirTemp("", "nri")
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(os.RemoveAll, dir)
	socket := filepath.Join(dir, "nri.sock")
	rt := nritest.New(socket)
	Expect(rt.Start()).To(Succeed())
	DeferCleanup(rt.Stop)
	n := newNodeAgent(0, func(o *agent.Options) {
		o.RuntimeInjection = agent.RuntimeInjectionNRI
		o.NRI = nri.Options{SocketPath: socket, InitialRetryDelay: 20 * time.Millisecond, MaxRetryDelay: 200 * time.Millisecond}
	})
	return rt, n
}

var _ = Describe("Node agent calling PreStartContainer before every container start", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	It("prepares each start of a container whose plugin requires it, refuses an unprepared one until it is, and reports failures", func() {
		rt, n := startRuntimeAndAgent()
		p := n.plugin(gopher, gophers("gopher", 2))
		p.SetAllocateFunc(deviceAllocator)
		ps := &preStarts{}
		ps.serve(p)
		n.register(p)
		Eventually(n.nodeDevice(gopher, 0)).Should(And(
			injectionCondition(metav1.ConditionTrue, kdv1alpha1.ReasonNRIConnected),
			HaveField("Status.Plugin.PreStartRequired", BeTrue()),
		))
		Expect(rt.WaitForPlugins(ctx, 1)).To(Succeed())

		By("allocation: one PreStartContainer with the container's devices, and the first creation is injected")
		pod := createPod(testutil.MakePod("trainer", ns).Node(n.name).Request(gopher, 1).Container("sidecar"))
		id := deviceIDs(allocated(pod), gopher)[0]
		Expect(ps.all()).To(Equal([][]string{{id}}))
		injected := HaveField("Env", ContainElement(HaveField("Value", id)))
		Expect(createContainerID(rt, pod, "app", "c1")()).To(injected)
		Expect(createContainerID(rt, pod, "app", "c1")()).To(injected, "the same creation asked again")
		Expect(createContainerID(rt, pod, "sidecar", "s1")()).To(untouched)
		Expect(ps.count()).To(Equal(1))

		By("a restart the agent did not see coming: refused until PreStartContainer ran again, then injected")
		_, err := createContainerID(rt, pod, "app", "c2")()
		Expect(err).To(MatchError(And(ContainSubstring(nri.ErrDevicesNotReady.Error()), ContainSubstring("PreStartContainer has not run for this start yet"))))
		Eventually(ps.all).Should(Equal([][]string{{id}, {id}}))
		// The kubelet's retries of the creation, each with an ID of its own: the grant is
		// recorded a moment after the plugin answered.
		attempt := 0
		retried := func(prefix string) func() (*api.ContainerAdjustment, error) {
			return func() (*api.ContainerAdjustment, error) {
				attempt++
				return createContainerID(rt, pod, "app", fmt.Sprintf("%s-%d", prefix, attempt))()
			}
		}
		Eventually(retried("c3")).Should(injected)
		running := fmt.Sprintf("c3-%d", attempt)
		Expect(ps.count()).To(Equal(2))

		By("the status showing the container ended with restartCount 1: PreStartContainer before the restart is created")
		setContainerStatus(pod, ended(running, 1))
		Eventually(ps.count).Should(Equal(3))
		Eventually(retried("c4")).Should(injected)
		Expect(ps.count()).To(Equal(3))
		running = fmt.Sprintf("c4-%d", attempt)
		setContainerStatus(pod, runningStatus(running, 1))
		Consistently(ps.count, time.Second).Should(Equal(3), "a running container must not be prepared again")

		By("a failing PreStartContainer: a Warning event with the kubelet's message, and the restart refused with it")
		ps.failWith(status.Error(codes.Unavailable, "gopher busy"))
		setContainerStatus(pod, ended(running, 2))
		const want = "device plugin PreStartContainer rpc failed with err: rpc error: code = Unavailable desc = gopher busy"
		Eventually(eventsFor(pod.UID)).Should(ContainElement(And(
			HaveField("Type", corev1.EventTypeWarning),
			HaveField("Reason", agent.EventReasonPreStartContainerFailed),
			HaveField("Note", And(ContainSubstring(`"app"`), ContainSubstring(want))),
			HaveField("ReportingController", agent.FieldOwner),
		)))
		_, err = createContainerID(rt, pod, "app", "c5")()
		Expect(err).To(MatchError(And(ContainSubstring(nri.ErrDevicesNotReady.Error()), ContainSubstring(want))))
		Expect(deviceAllocation(pod)()).To(HaveField("Status.Conditions", ContainElement(And(
			HaveField("Type", kdv1alpha1.DeviceAllocationAllocated), HaveField("Status", metav1.ConditionTrue)))),
			"the devices stay allocated")

		By("the plugin recovering: the retry with backoff prepares the restart")
		calls := ps.count()
		ps.failWith(nil)
		Eventually(retried("c6")).Should(injected)
		Expect(ps.count()).To(BeNumerically(">", calls))

		By("an agent restart: the running container is left alone; a creation waits until the plugin is back and PreStartContainer ran")
		setContainerStatus(pod, runningStatus(fmt.Sprintf("c6-%d", attempt), 2))
		n.restart()
		calls = ps.count()
		Consistently(ps.count, time.Second).Should(Equal(calls))
		_, err = createContainerID(rt, pod, "app", "c7")()
		Expect(err).To(MatchError(ContainSubstring(nri.ErrDevicesNotReady.Error())), "PreStartContainer is required before the plugin registers again")
		p.Stop()
		p = n.plugin(gopher, gophers("gopher", 2))
		p.SetAllocateFunc(deviceAllocator)
		ps.serve(p)
		n.register(p)
		Eventually(retried("c8")).Should(injected)
		Expect(ps.count()).To(Equal(calls + 1))
		Expect(createContainerID(rt, pod, "sidecar", "s2")()).To(untouched)
	})

	It("makes the call a restart waited for the moment its plugin registers again, however long the agent's backoff, so the kubelet's next creation is admitted", func() {
		rt, n := startRuntimeAndAgent()
		p := n.plugin(gopher, gophers("gopher", 1))
		p.SetAllocateFunc(deviceAllocator)
		ps := &preStarts{}
		ps.serve(p)
		n.register(p)
		Eventually(n.nodeDevice(gopher, 0)).Should(And(
			injectionCondition(metav1.ConditionTrue, kdv1alpha1.ReasonNRIConnected),
			HaveField("Status.Plugin.PreStartRequired", BeTrue()),
		))
		Expect(rt.WaitForPlugins(ctx, 1)).To(Succeed())
		pod := createPod(testutil.MakePod("waits-for-plugin", ns).Node(n.name).Request(gopher, 1))
		allocated(pod)
		injected := HaveField("Env", ContainElement(HaveField("Key", "GOPHER")))
		Expect(createContainerID(rt, pod, "app", "c1")()).To(injected)

		By("the plugin goes away and the container ends: the call fails at each of the kubelet's refused creations, and the agent's retries back off")
		p.Stop()
		Eventually(func() nodeagent.PluginState {
			s, _ := n.dm.Snapshot(string(gopher))
			return s.State
		}).Should(Equal(nodeagent.PluginDisconnected))
		failures := preStartFailures()
		setContainerStatus(pod, ended("c1", 1))
		Eventually(preStartFailures).Should(BeNumerically(">=", failures+1))
		// At least seven failed calls in a row (the agent's own retries add to those the creations
		// ask for): its next retry of its own is at least 2^6 s away, longer than any wait of this
		// spec, so only the registration can make the call in time.
		for i := 2; i <= 7; i++ {
			before := preStartFailures()
			_, err := createContainerID(rt, pod, "app", fmt.Sprintf("c%d", i))()
			Expect(err).To(MatchError(ContainSubstring(nri.ErrDevicesNotReady.Error())))
			Eventually(preStartFailures).Should(BeNumerically(">", before))
		}

		By("the plugin registers again: the call is made before any creation, and the kubelet's next creation is admitted")
		calls := ps.count()
		p = n.plugin(gopher, gophers("gopher", 1))
		p.SetAllocateFunc(deviceAllocator)
		ps.serve(p)
		n.register(p)
		Eventually(ps.count).Should(Equal(calls+1), "the registration made no PreStartContainer call")
		Expect(createContainerID(rt, pod, "app", "c8")()).To(injected)
		Expect(ps.count()).To(Equal(calls + 1))
	})

	It("with --runtime-injection=none, prepares the restarts the pod's status shows, once each", func() {
		n := newNodeAgent(0)
		p := n.plugin(gopher, gophers("gopher", 1))
		ps := &preStarts{}
		ps.serve(p)
		n.register(p)

		pod := createPod(testutil.MakePod("restarts", ns).Node(n.name).Request(gopher, 1))
		id := deviceIDs(allocated(pod), gopher)[0]
		Expect(ps.all()).To(Equal([][]string{{id}}))

		setContainerStatus(pod, runningStatus("c1", 0))
		setContainerStatus(pod, ended("c1", 1))
		Eventually(ps.count).Should(Equal(2))
		// The same ended container again (the kubelet rewrites the status): no second call.
		st := ended("c1", 1)
		st.State.Waiting.Message = "back-off 10s restarting failed container"
		setContainerStatus(pod, st)
		Consistently(ps.count, time.Second).Should(Equal(2))

		setContainerStatus(pod, runningStatus("c2", 1))
		setContainerStatus(pod, ended("c2", 2))
		Eventually(ps.all).Should(Equal([][]string{{id}, {id}, {id}}))
	})

	It("needs no PreStartContainer for a plugin that does not ask for it", func() {
		rt, n := startRuntimeAndAgent()
		p := n.plugin(gopher, gophers("gopher", 1))
		p.SetAllocateFunc(deviceAllocator)
		p.SetPreStartContainerFunc(func(*pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
			return nil, errors.New("PreStartContainer called on a plugin that does not ask for it")
		})
		n.register(p)
		Eventually(n.nodeDevice(gopher, 0)).Should(injectionCondition(metav1.ConditionTrue, kdv1alpha1.ReasonNRIConnected))
		Expect(rt.WaitForPlugins(ctx, 1)).To(Succeed())

		pod := createPod(testutil.MakePod("plain-gopher", ns).Node(n.name).Request(gopher, 1))
		allocated(pod)
		for i := range 3 {
			Expect(createContainerID(rt, pod, "app", fmt.Sprintf("c%d", i))()).To(HaveField("Env", ContainElement(HaveField("Key", "GOPHER"))))
		}
		Expect(slices.Contains(p.Calls(), dptest.CallPreStartContainer)).To(BeFalse())
	})
})
