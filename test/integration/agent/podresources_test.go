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

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/kubedevice/kubedevice/internal/agent"
	"github.com/kubedevice/kubedevice/internal/nodeagent/podresources"
	"github.com/kubedevice/kubedevice/internal/testutil"
)

// withPodResources serves the agent's PodResources API on socket, with a fresh metrics registry
// for each start of the agent.
func withPodResources(socket string) func(*agent.Options) {
	return func(o *agent.Options) {
		o.PodResources = podresources.Options{SocketPath: socket, Registerer: prometheus.NewRegistry()}
	}
}

// podResourcesClient dials the agent's PodResources socket as a monitoring agent does.
func podResourcesClient(socket string) podresourcesapi.PodResourcesListerClient {
	GinkgoHelper()
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(conn.Close)
	return podresourcesapi.NewPodResourcesListerClient(conn)
}

// listPods returns List's pods by namespace/name.
func listPods(c podresourcesapi.PodResourcesListerClient) func() (map[string]*podresourcesapi.PodResources, error) {
	return func() (map[string]*podresourcesapi.PodResources, error) {
		callCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		resp, err := c.List(callCtx, &podresourcesapi.ListPodResourcesRequest{})
		if err != nil {
			return nil, err
		}
		out := map[string]*podresourcesapi.PodResources{}
		for _, pr := range resp.GetPodResources() {
			out[pr.GetNamespace()+"/"+pr.GetName()] = pr
		}
		return out, nil
	}
}

// podDevices returns the device IDs of resource a PodResources entry lists, by container name.
func podDevices(pr *podresourcesapi.PodResources, resource corev1.ResourceName) map[string][]string {
	out := map[string][]string{}
	for _, c := range pr.GetContainers() {
		out[c.GetName()] = []string{}
		for _, d := range c.GetDevices() {
			if d.GetResourceName() == string(resource) {
				out[c.GetName()] = append(out[c.GetName()], d.GetDeviceIds()...)
			}
		}
	}
	return out
}

var _ = Describe("Node agent serving the PodResources API", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	It("lists the devices of the node's pods as their DeviceAllocations say, until the pods go", func() {
		dir, err := os.MkdirTemp("", "pr")
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(os.RemoveAll, dir)
		socket := filepath.Join(dir, "pod-resources", "kubelet.sock")
		n := newNodeAgent(0, withPodResources(socket))
		n.register(n.plugin(gopher, gophers("gopher", 3)))
		c := podResourcesClient(socket)

		By("a pod holding two gophers in its app container, beside a sidecar, and a plain pod")
		pod := createPod(testutil.MakePod("trainer", ns).Node(n.name).Request(gopher, 2).SidecarContainer("logger", "", 0))
		createPod(testutil.MakePod("plain", ns).Node(n.name))
		ids := deviceIDs(allocated(pod), gopher)
		Expect(ids).To(HaveLen(2))
		Eventually(listPods(c)).Should(And(
			HaveKeyWithValue(ns+"/trainer", WithTransform(func(pr *podresourcesapi.PodResources) map[string][]string {
				return podDevices(pr, gopher)
			}, Equal(map[string][]string{"logger": {}, "app": ids}))),
			HaveKeyWithValue(ns+"/plain", WithTransform(func(pr *podresourcesapi.PodResources) map[string][]string {
				return podDevices(pr, gopher)
			}, Equal(map[string][]string{"app": {}}))),
		))
		list, err := listPods(c)()
		Expect(err).NotTo(HaveOccurred())
		Expect(list[ns+"/trainer"].GetContainers()[0].GetName()).To(Equal("logger"), "sidecars come first")
		for _, d := range list[ns+"/trainer"].GetContainers()[1].GetDevices() {
			Expect(d.GetTopology()).To(BeNil(), "the gophers have no topology")
		}

		By("Get and GetAllocatableResources agreeing")
		got, err := c.Get(ctx, &podresourcesapi.GetPodResourcesRequest{PodNamespace: ns, PodName: "trainer"})
		Expect(err).NotTo(HaveOccurred())
		Expect(podDevices(got.GetPodResources(), gopher)).To(Equal(map[string][]string{"logger": {}, "app": ids}))
		alloc, err := c.GetAllocatableResources(ctx, &podresourcesapi.AllocatableResourcesRequest{})
		Expect(err).NotTo(HaveOccurred())
		Expect(alloc.GetDevices()).To(HaveLen(3))

		By("deleting the pod: gone from List, and Get does not find it")
		deletePod(pod)
		Eventually(listPods(c)).Should(And(Not(HaveKey(ns+"/trainer")), HaveKey(ns+"/plain")))
		_, err = c.Get(ctx, &podresourcesapi.GetPodResourcesRequest{PodNamespace: ns, PodName: "trainer"})
		Expect(status.Code(err)).To(Equal(codes.NotFound))
		Expect(status.Convert(err).Message()).To(Equal("pod trainer in namespace " + ns + " not found"))

		By("stopping the agent: the socket is removed")
		n.stop()
		n.stop = nil
		Expect(socket).NotTo(BeAnExistingFile())
	})
})
