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
	"os"
	"path/filepath"
	"time"

	"github.com/containerd/nri/pkg/api"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/onsi/gomega/types"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
	"github.com/kubedevice/kubedevice/internal/agent"
	"github.com/kubedevice/kubedevice/internal/agent/injection/nri"
	"github.com/kubedevice/kubedevice/internal/agent/injection/nri/nritest"
	"github.com/kubedevice/kubedevice/internal/testutil"
)

// deviceAllocator answers Allocate with everything a device plugin can give a container: an env
// naming the devices, a read-only mount, a device node (the host's /dev/null), an annotation and
// a CDI device per device.
func deviceAllocator(req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for _, cr := range req.GetContainerRequests() {
		id := cr.GetDevicesIds()[0]
		r := &pluginapi.ContainerAllocateResponse{
			Envs:        map[string]string{"GOPHER": id},
			Mounts:      []*pluginapi.Mount{{ContainerPath: "/gophers/" + id, HostPath: "/var/lib/gophers/" + id, ReadOnly: true}},
			Devices:     []*pluginapi.DeviceSpec{{ContainerPath: "/dev/gopher0", HostPath: "/dev/null", Permissions: "rw"}},
			Annotations: map[string]string{"example.com/gopher": id},
		}
		for _, d := range cr.GetDevicesIds() {
			r.CdiDevices = append(r.CdiDevices, &pluginapi.CDIDevice{Name: "example.com/gopher=" + d})
		}
		resp.ContainerResponses = append(resp.ContainerResponses, r)
	}
	return resp, nil
}

// sandboxOf is the pod as containerd shows it to NRI plugins.
func sandboxOf(pod *corev1.Pod) *api.PodSandbox {
	return &api.PodSandbox{Id: "sandbox-" + string(pod.UID), Uid: string(pod.UID), Namespace: pod.Namespace, Name: pod.Name,
		Labels: pod.Labels, Annotations: pod.Annotations}
}

// createContainer asks the runtime to create a container of pod, as the kubelet does.
func createContainer(rt *nritest.Runtime, pod *corev1.Pod, container string) func() (*api.ContainerAdjustment, error) {
	return func() (*api.ContainerAdjustment, error) {
		c, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		return rt.CreateContainer(c, sandboxOf(pod), container)
	}
}

// injectionCondition matches a NodeDevice whose RuntimeInjectionReady condition has status and
// reason.
func injectionCondition(status metav1.ConditionStatus, reason string) types.GomegaMatcher {
	return HaveField("Status.Conditions", ContainElement(And(
		HaveField("Type", kdv1alpha1.NodeDeviceRuntimeInjectionReady),
		HaveField("Status", status),
		HaveField("Reason", reason),
	)))
}

// untouched matches an adjustment that changes nothing the agent can change.
var untouched = And(
	HaveField("Env", BeEmpty()), HaveField("Mounts", BeEmpty()), HaveField("CDIDevices", BeEmpty()),
	HaveField("Annotations", BeEmpty()), HaveField("Linux.Devices", BeEmpty()),
)

var _ = Describe("Node agent injecting devices through NRI", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	It("gives containers their devices at creation, holds pods whose devices are not ready, and survives runtime and agent restarts", func() {
		dir, err := os.MkdirTemp("", "nri")
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(os.RemoveAll, dir)
		socket := filepath.Join(dir, "nri.sock")
		n := newNodeAgent(0, func(o *agent.Options) {
			o.RuntimeInjection = agent.RuntimeInjectionNRI
			o.NRI = nri.Options{SocketPath: socket, InitialRetryDelay: 20 * time.Millisecond, MaxRetryDelay: 200 * time.Millisecond}
		})
		p := n.plugin(gopher, gophers("gopher", 1))
		p.SetAllocateFunc(deviceAllocator)
		n.register(p)

		By("starting without a runtime: the NodeDevice says the socket is missing")
		Eventually(n.nodeDevice(gopher, 0)).Should(injectionCondition(metav1.ConditionFalse, kdv1alpha1.ReasonNRISocketMissing))

		By("the runtime starting: the agent connects")
		rt := nritest.New(socket)
		Expect(rt.Start()).To(Succeed())
		DeferCleanup(rt.Stop)
		Eventually(n.nodeDevice(gopher, 0)).Should(injectionCondition(metav1.ConditionTrue, kdv1alpha1.ReasonNRIConnected))
		Expect(rt.WaitForPlugins(ctx, 1)).To(Succeed())

		By("a pod holding the gopher: its app container gets it, its sidecar nothing")
		pod := createPod(testutil.MakePod("trainer", ns).Node(n.name).Request(gopher, 1).Container("sidecar"))
		id := deviceIDs(allocated(pod), gopher)[0]
		adj, err := createContainer(rt, pod, "app")()
		Expect(err).NotTo(HaveOccurred())
		Expect(adj.GetEnv()).To(ConsistOf(HaveField("Key", "GOPHER")))
		Expect(adj.GetEnv()[0].GetValue()).To(Equal(id))
		Expect(adj.GetMounts()).To(ConsistOf(And(
			HaveField("Destination", "/gophers/"+id), HaveField("Source", "/var/lib/gophers/"+id),
			HaveField("Type", "bind"), HaveField("Options", Equal([]string{"rbind", "rprivate", "ro"})),
		)))
		Expect(adj.GetLinux().GetDevices()).To(ConsistOf(And(
			HaveField("Path", "/dev/gopher0"), HaveField("Type", "c"), HaveField("Major", BeEquivalentTo(1)), HaveField("Minor", BeEquivalentTo(3)),
		)))
		Expect(adj.GetLinux().GetResources().GetDevices()).To(ConsistOf(And(
			HaveField("Allow", BeTrue()), HaveField("Type", "c"), HaveField("Access", "rw"),
		)))
		Expect(adj.GetAnnotations()).To(HaveKeyWithValue("example.com/gopher", id))
		Expect(adj.GetCDIDevices()).To(ConsistOf(HaveField("Name", "example.com/gopher="+id)))
		Expect(createContainer(rt, pod, "sidecar")()).To(untouched)

		By("a plain pod: untouched")
		plain := createPod(testutil.MakePod("plain", ns).Node(n.name))
		Expect(createContainer(rt, plain, "app")()).To(untouched)

		By("a second pod while the only gopher is held: refused with the reason, so the kubelet retries")
		waiting := testutil.MakePod("waiting", ns).Node(n.name).Request(gopher, 1)
		waiting.Annotations = map[string]string{nri.RequiredPluginsAnnotation: `["kubedevice"]`}
		second := createPod(waiting)
		Eventually(func() error { _, err := createContainer(rt, second, "app")(); return err }).Should(
			MatchError(And(ContainSubstring(nri.ErrDevicesNotReady.Error()), ContainSubstring(string(kdv1alpha1.ReasonInsufficientDevices)))))

		By("the first pod going: the second gets the gopher at its next try")
		deletePod(pod)
		Eventually(createContainer(rt, second, "app")).Should(HaveField("Env", ContainElement(HaveField("Key", "GOPHER"))))

		By("the runtime restarting: the agent reconnects and injects again")
		rt.Stop()
		Eventually(n.nodeDevice(gopher, 0)).Should(HaveField("Status.Conditions", ContainElement(And(
			HaveField("Type", kdv1alpha1.NodeDeviceRuntimeInjectionReady), HaveField("Status", metav1.ConditionFalse)))))
		Expect(rt.Start()).To(Succeed())
		Eventually(n.nodeDevice(gopher, 0)).Should(injectionCondition(metav1.ConditionTrue, kdv1alpha1.ReasonNRIConnected))
		Eventually(createContainer(rt, second, "app")).Should(HaveField("Env", ContainElement(HaveField("Key", "GOPHER"))))

		By("steady state, then an agent restart: the restarted agent injects, and writes only the resource awaiting its plugin")
		before := n.settle()
		n.restart()
		Eventually(createContainer(rt, second, "app")).Should(HaveField("Env", ContainElement(HaveField("Key", "GOPHER"))))
		Expect(n.settle()).To(Equal(before+1), "writes after an agent restart: the NodeDevice awaiting its plugin, which is not restarted here")
		Expect(n.nodeDevice(gopher, 0)()).To(And(
			injectionCondition(metav1.ConditionTrue, kdv1alpha1.ReasonNRIConnected),
			HaveField("Status.Plugin.State", kdv1alpha1.PluginStateDisconnected),
		))
	})

	It("says on its NodeDevices that it injects nothing with --runtime-injection=none", func() {
		n := newNodeAgent(0)
		n.register(n.plugin(gopher, gophers("gopher", 1)))
		Eventually(n.nodeDevice(gopher, 0)).Should(injectionCondition(metav1.ConditionFalse, kdv1alpha1.ReasonInjectionDisabled))
	})
})
