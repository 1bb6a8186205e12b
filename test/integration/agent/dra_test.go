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
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/dynamic-resource-allocation/deviceattribute"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	drahealth "k8s.io/kubelet/pkg/apis/dra-health/v1"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
	"github.com/kubedevice/kubedevice/internal/agent"
	"github.com/kubedevice/kubedevice/internal/agent/dra"
	"github.com/kubedevice/kubedevice/internal/contract"
	"github.com/kubedevice/kubedevice/internal/nodeagent"
	"github.com/kubedevice/kubedevice/internal/nodeagent/dptest"
	"github.com/kubedevice/kubedevice/internal/testutil"
)

func withDRA(patterns ...string) func(*agent.Options) {
	return func(o *agent.Options) {
		r, err := dra.ParseResources(patterns)
		Expect(err).NotTo(HaveOccurred())
		o.DRAResources = r
	}
}

// slicesOf lists the node's ResourceSlices of the driver, by pool, devices in slice order.
func slicesOf(node string) func() (map[string][]resourceapi.ResourceSlice, error) {
	return func() (map[string][]resourceapi.ResourceSlice, error) {
		var list resourceapi.ResourceSliceList
		if err := k8sClient.List(ctx, &list, client.MatchingFields{"spec.nodeName": node}); err != nil {
			return nil, err
		}
		out := map[string][]resourceapi.ResourceSlice{}
		for _, s := range list.Items {
			if s.Spec.Driver == dra.DriverName {
				out[s.Spec.Pool.Name] = append(out[s.Spec.Pool.Name], s)
			}
		}
		for _, ss := range out {
			slices.SortFunc(ss, func(a, b resourceapi.ResourceSlice) int {
				if a.Name < b.Name {
					return -1
				}
				return 1
			})
		}
		return out, nil
	}
}

// deviceOf finds device name in the node's slices of pool.
func deviceOf(node, pool, name string) func() (*resourceapi.Device, error) { //nolint:unparam // the pool is named at every call, as the slice names it
	return func() (*resourceapi.Device, error) {
		all, err := slicesOf(node)()
		if err != nil {
			return nil, err
		}
		for _, s := range all[pool] {
			for i := range s.Spec.Devices {
				if s.Spec.Devices[i].Name == name {
					return &s.Spec.Devices[i], nil
				}
			}
		}
		return nil, fmt.Errorf("device %s/%s not published", pool, name)
	}
}

func taintKeys(d *resourceapi.Device) []string {
	if d == nil {
		return nil
	}
	var out []string
	for _, t := range d.Taints {
		out = append(out, t.Key+"="+t.Value)
	}
	return out
}

var _ = Describe("The DRA flow", func() {
	It("publishes a DRA-served resource's devices in ResourceSlices, taints them as they change, and splits large pools", func() {
		n := newNodeAgent(0, withDRA("example.com/*"))
		devs := []*pluginapi.Device{
			dptest.Device("gopher-0", pluginapi.Healthy, 0),
			dptest.Device("Gopher_1", pluginapi.Healthy, 1),
			dptest.Device("gopher-2", pluginapi.Healthy),
		}
		p := n.plugin(gopher, devs)
		n.register(p)

		By("the kubelet plugin registered in the registry directory and serves its socket")
		Eventually(func() error {
			_, err := os.Stat(filepath.Join(n.dir, "plugins_registry", dra.DriverName+"-reg.sock"))
			return err
		}).Should(Succeed())
		Expect(filepath.Join(n.dir, "plugins", dra.DriverName, "dra.sock")).To(BeAnExistingFile())

		By("one pool named after the resource, devices named by DeviceName with the plugin's ID")
		Eventually(func(g Gomega) {
			all, err := slicesOf(n.name)()
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(all).To(HaveKey(string(gopher)))
			g.Expect(all[string(gopher)]).To(HaveLen(1))
			var names []string
			for _, d := range all[string(gopher)][0].Spec.Devices {
				names = append(names, d.Name)
			}
			g.Expect(names).To(ConsistOf("gopher-0", dra.DeviceName("Gopher_1"), "gopher-2"))
		}).Should(Succeed())
		d, err := deviceOf(n.name, string(gopher), dra.DeviceName("Gopher_1"))()
		Expect(err).NotTo(HaveOccurred())
		Expect(*d.Attributes[dra.AttributeDeviceID].StringValue).To(Equal("Gopher_1"))
		Expect(*d.Attributes[dra.AttributeResourceName].StringValue).To(Equal(string(gopher)))
		Expect(*d.Attributes[deviceattribute.StandardDeviceAttributeNUMANode].IntValue).To(Equal(int64(1)))
		Expect(d.Taints).To(BeEmpty())
		d2, _ := deviceOf(n.name, string(gopher), "gopher-2")()
		Expect(d2.Attributes).NotTo(HaveKey(deviceattribute.StandardDeviceAttributeNUMANode))

		By("the NodeDevice says the path is DRA")
		Eventually(func() (kdv1alpha1.DevicePath, error) {
			nd, err := n.nodeDevice(gopher, 0)()
			if err != nil {
				return "", err
			}
			return nd.Status.Path, nil
		}).Should(Equal(kdv1alpha1.DevicePathDRA))

		By("an unhealthy device is tainted, with the reason")
		devs[0] = dptest.Device("gopher-0", pluginapi.Unhealthy, 0)
		start := time.Now()
		p.Update(devs)
		Eventually(func() ([]string, error) {
			d, err := deviceOf(n.name, string(gopher), "gopher-0")()
			return taintKeys(d), err
		}).WithPolling(20 * time.Millisecond).Should(ConsistOf(dra.TaintUnhealthy + "=PluginReportedUnhealthy"))
		GinkgoWriter.Printf("unhealthy taint visible after %s\n", time.Since(start))

		By("a cordoned device is tainted")
		Eventually(func() error {
			nd, err := n.nodeDevice(gopher, 0)()
			if err != nil {
				return err
			}
			patch := client.MergeFrom(nd.DeepCopy())
			nd.Spec.Cordons = []kdv1alpha1.DeviceCordon{{DeviceID: "gopher-2", Reason: "maintenance"}}
			return k8sClient.Patch(ctx, nd, patch)
		}).Should(Succeed())
		Eventually(func() ([]string, error) {
			d, err := deviceOf(n.name, string(gopher), "gopher-2")()
			return taintKeys(d), err
		}).Should(ConsistOf(dra.TaintCordoned + "="))

		By("healthy again: the taint goes")
		devs[0] = dptest.Device("gopher-0", pluginapi.Healthy, 0)
		p.Update(devs)
		Eventually(func() ([]string, error) {
			d, err := deviceOf(n.name, string(gopher), "gopher-0")()
			return taintKeys(d), err
		}).Should(BeEmpty())

		By("the plugin disconnects: every device is tainted")
		p.Stop()
		Eventually(func() ([]string, error) {
			d, err := deviceOf(n.name, string(gopher), "gopher-0")()
			return taintKeys(d), err
		}).Should(ConsistOf(dra.TaintPluginDisconnected + "=PluginDisconnected"))

		By("a pool of 130 devices is split into slices of 64")
		many := corev1.ResourceName("example.com/many")
		q := n.plugin(many, gophers("m", 130))
		n.register(q)
		Eventually(func(g Gomega) {
			all, err := slicesOf(n.name)()
			g.Expect(err).NotTo(HaveOccurred())
			var sizes []int
			for _, s := range all[string(many)] {
				sizes = append(sizes, len(s.Spec.Devices))
				g.Expect(s.Spec.Pool.ResourceSliceCount).To(Equal(int64(3)))
			}
			g.Expect(sizes).To(ConsistOf(64, 64, 2))
		}).Should(Succeed())
	})

	It("re-publishes the restored devices tainted when it restarts, before their plugin registers again", func() {
		proxy := newCutProxy()
		n := newNodeAgentWith(0, func(n *nodeAgent) { n.apiHost = proxy.host() }, withDRA(string(gopher)))
		p := n.plugin(gopher, gophers("g", 2))
		n.register(p)
		published := func() (map[string][]string, error) {
			out := map[string][]string{}
			for _, name := range []string{"g-0", "g-1"} {
				d, err := deviceOf(n.name, string(gopher), name)()
				if err != nil {
					return nil, err
				}
				out[name] = taintKeys(d)
			}
			return out, nil
		}
		Eventually(published).Should(Equal(map[string][]string{"g-0": nil, "g-1": nil}))

		By("the agent is killed (nothing it writes on its way out reaches the API server) and the plugin goes away")
		proxy.cut()
		n.stop()
		n.stop = nil
		p.Stop()
		proxy.restore()
		Expect(published()).To(Equal(map[string][]string{"g-0": nil, "g-1": nil}), "the dead agent's slices offer the devices untainted")

		By("a new agent starts: every device is tainted as awaiting its plugin, which has not registered")
		before := n.writes.slices()
		n.start()
		awaiting := []string{dra.TaintPluginDisconnected + "=" + nodeagent.ReasonAwaitingPlugin}
		Eventually(published).Should(Equal(map[string][]string{"g-0": awaiting, "g-1": awaiting}))
		s, ok := n.dm.Snapshot(string(gopher))
		Expect(ok).To(BeTrue())
		Expect(s.State).To(Equal(nodeagent.PluginDisconnected), "the plugin registered again")

		By("the start-up tainted them (the agent's field owner); the ResourceSlice controller, once synced, finds the slice as it would publish it: one write in all")
		Consistently(func() int { return n.writes.slices() - before }, "2s").Should(Equal(1))
		Expect(published()).To(Equal(map[string][]string{"g-0": awaiting, "g-1": awaiting}))
		all, err := slicesOf(n.name)()
		Expect(err).NotTo(HaveOccurred())
		Expect(all[string(gopher)]).To(HaveLen(1))
		Expect(all[string(gopher)][0].ManagedFields).To(ContainElement(And(
			HaveField("Manager", contract.AgentFieldOwner), HaveField("Operation", metav1.ManagedFieldsOperationUpdate))))

		By("the plugin registers again: the taints go")
		n.register(n.plugin(gopher, gophers("g", 2)))
		Eventually(published).Should(Equal(map[string][]string{"g-0": nil, "g-1": nil}))
	})

	It("publishes its node's slices again within seconds when the kubelet deletes them at its start", func() {
		n := newNodeAgent(0, withDRA(string(gopher)))
		n.register(n.plugin(gopher, gophers("g", 2)))
		Eventually(deviceOf(n.name, string(gopher), "g-1")).ShouldNot(BeNil())

		By("the kubelet starting: its DRA plugin manager deletes every ResourceSlice of the node")
		Expect(k8sClient.DeleteAllOf(ctx, &resourceapi.ResourceSlice{},
			client.MatchingFields{resourceapi.ResourceSliceSelectorNodeName: n.name})).To(Succeed())
		Eventually(func() (int, error) {
			all, err := slicesOf(n.name)()
			return len(all), err
		}).Should(BeZero())

		By("the slice controller publishes them again a sync delay later (the library's default was 30 s)")
		Eventually(deviceOf(n.name, string(gopher), "g-0")).WithTimeout(10 * time.Second).ShouldNot(BeNil())
		Eventually(deviceOf(n.name, string(gopher), "g-1")).WithTimeout(time.Second).ShouldNot(BeNil())
	})

	It("removes its node's slices when it restarts serving nothing through DRA", func() {
		n := newNodeAgent(0, withDRA(string(gopher)))
		p := n.plugin(gopher, gophers("g", 2))
		n.register(p)
		Eventually(deviceOf(n.name, string(gopher), "g-1")).ShouldNot(BeNil())
		n.options = nil
		n.restart()
		Eventually(func() (int, error) {
			all, err := slicesOf(n.name)()
			return len(all), err
		}).Should(BeZero())
	})

	It("publishes nothing for resources served through node capacity", func() {
		n := newNodeAgent(0, withDRA("other.example.com/*"))
		p := n.plugin(gopher, gophers("g", 2))
		n.register(p)
		Eventually(func() error { _, err := n.nodeDevice(gopher, 0)(); return err }).Should(Succeed())
		Consistently(func() (int, error) {
			all, err := slicesOf(n.name)()
			return len(all[string(gopher)]), err
		}, "1s").Should(BeZero())
		nd, err := n.nodeDevice(gopher, 0)()
		Expect(err).NotTo(HaveOccurred())
		Expect(nd.Status.EffectivePath()).To(Equal(kdv1alpha1.DevicePathNodeCapacity))
	})
})

// allocatedClaim creates a ResourceClaim in ns whose status says the scheduler allocated it the
// given devices of pool (request "g").
func allocatedClaim(ns, name, pool string, devices ...string) *resourceapi.ResourceClaim {
	GinkgoHelper()
	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "g", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "gopher", Count: int64(len(devices))},
		}}}},
	}
	Expect(k8sClient.Create(ctx, claim)).To(Succeed())
	claim.Status.Allocation = &resourceapi.AllocationResult{}
	for _, d := range devices {
		claim.Status.Allocation.Devices.Results = append(claim.Status.Allocation.Devices.Results,
			resourceapi.DeviceRequestAllocationResult{Request: "g", Driver: dra.DriverName, Pool: pool, Device: d})
	}
	Expect(k8sClient.Status().Update(ctx, claim)).To(Succeed())
	return claim
}

// draClient dials the node agent's DRA socket, as the kubelet does.
func (n *nodeAgent) draClient() drapb.DRAPluginClient {
	GinkgoHelper()
	conn, err := grpc.NewClient("unix://"+filepath.Join(n.dir, "plugins", dra.DriverName, "dra.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(conn.Close)
	return drapb.NewDRAPluginClient(conn)
}

// prepare calls NodePrepareResources for claim and returns its result.
func (n *nodeAgent) prepare(claim *resourceapi.ResourceClaim) *drapb.NodePrepareResourceResponse {
	GinkgoHelper()
	resp, err := n.draClient().NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{
		Claims: []*drapb.Claim{{Namespace: claim.Namespace, Name: claim.Name, Uid: string(claim.UID)}},
	})
	Expect(err).NotTo(HaveOccurred())
	return resp.GetClaims()[string(claim.UID)]
}

var _ = Describe("The DRA kubelet plugin", func() {
	It("prepares a claim over its gRPC socket, keeps it across an agent restart, and unprepares it", func() {
		n := newNodeAgent(0, withDRA(string(gopher)))
		devs := gophers("gopher", 2)
		p := n.plugin(gopher, devs)
		n.register(p)
		Eventually(deviceOf(n.name, string(gopher), "gopher-1")).ShouldNot(BeNil())

		By("a claim allocated gopher-1 by the scheduler")
		ns := newNamespace()
		claim := &resourceapi.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "one-gopher"},
			Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
				Name: "g", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "gopher"},
			}}}},
		}
		Expect(k8sClient.Create(ctx, claim)).To(Succeed())
		claim.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
			Results: []resourceapi.DeviceRequestAllocationResult{{Request: "g", Driver: dra.DriverName, Pool: string(gopher), Device: "gopher-1"}},
		}}
		Expect(k8sClient.Status().Update(ctx, claim)).To(Succeed())

		call := func() drapb.DRAPluginClient {
			conn, err := grpc.NewClient("unix://"+filepath.Join(n.dir, "plugins", dra.DriverName, "dra.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
			Expect(err).NotTo(HaveOccurred())
			DeferCleanup(conn.Close)
			return drapb.NewDRAPluginClient(conn)
		}
		ref := []*drapb.Claim{{Namespace: ns, Name: claim.Name, Uid: string(claim.UID)}}
		resp, err := call().NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{Claims: ref})
		Expect(err).NotTo(HaveOccurred())
		got := resp.GetClaims()[string(claim.UID)]
		Expect(got.GetError()).To(BeEmpty())
		Expect(got.GetDevices()).To(HaveLen(1))
		Expect(got.GetDevices()[0].GetDeviceName()).To(Equal("gopher-1"))
		Expect(got.GetDevices()[0].GetCdiDeviceIds()).To(Equal([]string{"kubedevice.io/device=" + string(claim.UID) + "-0"}))
		spec := filepath.Join(n.dir, "cdi", "kubedevice.io-device_"+string(claim.UID)+".json")
		Expect(spec).To(BeAnExistingFile())
		Expect(os.ReadFile(spec)).To(ContainSubstring("gopher-1"))

		By("the pod using the claim gets a DeviceAllocation naming its gopher once it runs")
		w := testutil.MakePod("claimant", ns).Node(n.name)
		pod := w.Obj()
		pod.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gopher", ResourceClaimName: ptr.To(claim.Name)}}
		pod.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "gopher"}}
		Expect(k8sClient.Create(ctx, pod)).To(Succeed())
		pod.Status.Phase = corev1.PodRunning
		Expect(k8sClient.Status().Update(ctx, pod)).To(Succeed())
		Eventually(func(g Gomega) {
			da := allocated(pod)
			g.Expect(da.Status.Summary).To(Equal(string(gopher) + "=gopher-1"))
			g.Expect(da.Status.Containers).To(HaveLen(1))
			g.Expect(da.Status.Containers[0].Name).To(Equal(pod.Spec.Containers[0].Name))
		}).Should(Succeed())

		By("the NodeDevice shows the claim holding the device; a second claim cannot have it")
		Eventually(func() (string, error) {
			nd, err := n.nodeDevice(gopher, 0)()
			if err != nil {
				return "", err
			}
			for _, d := range nd.Status.Devices {
				if d.ID == "gopher-1" && d.Holder != nil {
					return d.Holder.Namespace + "/" + d.Holder.ClaimName, nil
				}
			}
			return "", nil
		}).Should(Equal(ns + "/one-gopher"))

		other := claim.DeepCopy()
		other.ObjectMeta = metav1.ObjectMeta{Namespace: ns, Name: "same-gopher"}
		other.Status = resourceapi.ResourceClaimStatus{}
		Expect(k8sClient.Create(ctx, other)).To(Succeed())
		other.Status.Allocation = claim.Status.Allocation.DeepCopy()
		Expect(k8sClient.Status().Update(ctx, other)).To(Succeed())
		resp, err = call().NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{Claims: []*drapb.Claim{{Namespace: ns, Name: other.Name, Uid: string(other.UID)}}})
		Expect(err).NotTo(HaveOccurred())
		Expect(resp.GetClaims()[string(other.UID)].GetError()).To(ContainSubstring(`device "gopher-1" is held by ResourceClaim ` + ns + "/one-gopher"))

		By("the health service reports the devices' health, and a change at once")
		conn, err := grpc.NewClient("unix://"+filepath.Join(n.dir, "plugins", dra.DriverName, "dra.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(conn.Close)
		watchCtx, stopWatch := context.WithCancel(ctx)
		DeferCleanup(stopWatch)
		stream, err := drahealth.NewDRAResourceHealthClient(conn).NodeWatchResources(watchCtx, &drahealth.NodeWatchResourcesRequest{})
		Expect(err).NotTo(HaveOccurred())
		healthOf := func(name string) (drahealth.HealthStatus, string) {
			GinkgoHelper()
			msg, err := stream.Recv()
			Expect(err).NotTo(HaveOccurred())
			for _, d := range msg.GetDevices() {
				if d.GetDevice().GetPoolName() == string(gopher) && d.GetDevice().GetDeviceName() == name {
					return d.GetHealth(), d.GetMessage()
				}
			}
			return drahealth.HealthStatus_UNKNOWN, "not reported"
		}
		Expect(healthOf("gopher-1")).To(Equal(drahealth.HealthStatus_HEALTHY))
		sick := gophers("gopher", 2)
		sick[1] = dptest.Device("gopher-1", pluginapi.Unhealthy)
		p.Update(sick)
		Eventually(func() drahealth.HealthStatus { h, _ := healthOf("gopher-1"); return h }).Should(Equal(drahealth.HealthStatus_UNHEALTHY))
		stopWatch()
		p.Update(devs)

		By("the agent restarts: prepare again answers from the checkpoint, unprepare frees")
		n.restart()
		n.restartPlugin(p, devs)
		resp, err = call().NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{Claims: ref})
		Expect(err).NotTo(HaveOccurred())
		Expect(resp.GetClaims()[string(claim.UID)].GetError()).To(BeEmpty())
		un, err := call().NodeUnprepareResources(ctx, &drapb.NodeUnprepareResourcesRequest{Claims: ref})
		Expect(err).NotTo(HaveOccurred())
		Expect(un.GetClaims()[string(claim.UID)].GetError()).To(BeEmpty())
		Expect(spec).NotTo(BeAnExistingFile())
		Eventually(func() (bool, error) {
			nd, err := n.nodeDevice(gopher, 0)()
			if err != nil {
				return false, err
			}
			return nd.Status.Allocated == 0, nil
		}).Should(BeTrue())
	})
})

var _ = Describe("Switching a resource to DRA on a live node", func() {
	It("keeps a running pod's device, offers it to no claim until it is freed, and never lets both paths hold it", func() {
		n := newNodeAgent(0)
		devs := gophers("gopher", 2)
		p := n.plugin(gopher, devs)
		n.register(p)
		ns := newNamespace()
		pod := createPod(testutil.MakePod("old-path", ns).Node(n.name).Request(gopher, 1))
		held := deviceIDs(allocated(pod), gopher)
		Expect(held).To(HaveLen(1))
		free := "gopher-0"
		if held[0] == free {
			free = "gopher-1"
		}

		By("the agent restarts serving the resource through DRA")
		n.options = append(n.options, withDRA(string(gopher)))
		n.restart()
		n.restartPlugin(p, devs)
		Eventually(func() ([]string, error) {
			d, err := deviceOf(n.name, string(gopher), held[0])()
			return taintKeys(d), err
		}).Should(ConsistOf(dra.TaintDevicePluginPath + "="))
		free0, err := deviceOf(n.name, string(gopher), free)()
		Expect(err).NotTo(HaveOccurred())
		Expect(free0.Taints).To(BeEmpty())
		Expect(n.holds(pod)).To(BeTrue(), "the running pod lost its device")

		By("a claim for the pod's device is refused; one for the free device is prepared")
		stolen := allocatedClaim(ns, "stolen", string(gopher), held[0])
		Expect(n.prepare(stolen).GetError()).To(ContainSubstring("device plugin path"))
		ok := allocatedClaim(ns, "fine", string(gopher), free)
		Expect(n.prepare(ok).GetError()).To(BeEmpty())

		By("a new pod asking through the device plugin path is refused")
		late := createPod(testutil.MakePod("late", ns).Node(n.name).Request(gopher, 1))
		Eventually(func(g Gomega) {
			da, err := deviceAllocation(late)()
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(meta.IsStatusConditionFalse(da.Status.Conditions, kdv1alpha1.DeviceAllocationAllocated)).To(BeTrue())
		}).Should(Succeed())
		Expect(n.holds(late)).To(BeFalse())

		By("the pod ends: its device loses the taint and goes to the claim")
		deletePod(pod)
		Eventually(func() ([]string, error) {
			d, err := deviceOf(n.name, string(gopher), held[0])()
			return taintKeys(d), err
		}).Should(BeEmpty())
		Expect(n.prepare(stolen).GetError()).To(BeEmpty())
	})
})

// draLabel is the Node label the specs of --dra-node-selector choose DRA nodes by.
const draLabel = "kubedevice.io/dra"

// withDRANodeSelector limits the agent's DRA resources to the nodes whose labels match sel
// (--dra-node-selector).
func withDRANodeSelector(sel string) func(*agent.Options) {
	return func(o *agent.Options) {
		s, err := labels.Parse(sel)
		Expect(err).NotTo(HaveOccurred())
		o.DRANodeSelector = s
	}
}

// pathOf returns the path status of the node's gopher NodeDevice.
func (n *nodeAgent) pathOf() func() (kdv1alpha1.DevicePath, error) {
	return func() (kdv1alpha1.DevicePath, error) {
		nd, err := n.nodeDevice(gopher, 0)()
		if err != nil {
			return "", err
		}
		return nd.Status.EffectivePath(), nil
	}
}

// labelNode sets the node's draLabel to value.
func (n *nodeAgent) labelNode(value string) {
	GinkgoHelper()
	node := &corev1.Node{}
	Expect(k8sClient.Get(ctx, client.ObjectKey{Name: n.name}, node)).To(Succeed())
	patch := client.MergeFrom(node.DeepCopy())
	node.Labels[draLabel] = value
	Expect(k8sClient.Patch(ctx, node, patch)).To(Succeed())
}

var _ = Describe("Choosing the DRA path node by node (--dra-node-selector)", func() {
	// start runs an agent serving gopher through DRA on the nodes labelled draLabel=true, on a
	// node whose draLabel is value, with a gopher plugin of two devices registered.
	start := func(value string) (*nodeAgent, *dptest.Plugin) {
		GinkgoHelper()
		n := newNodeAgentWith(0, func(n *nodeAgent) { n.labels = map[string]string{draLabel: value} },
			withDRA(string(gopher)), withDRANodeSelector(draLabel+"=true"))
		p := n.plugin(gopher, gophers("g", 2))
		n.register(p)
		return n, p
	}

	It("publishes node capacity and no slices on a node whose labels do not match, and slices on one whose labels match", func() {
		chosen, _ := start("true")
		other, _ := start("false")

		By("the matching node: its devices in slices, the NodeDevice's path DRA, no node capacity")
		Eventually(deviceOf(chosen.name, string(gopher), "g-1")).ShouldNot(BeNil())
		Eventually(chosen.pathOf()).Should(Equal(kdv1alpha1.DevicePathDRA))
		Expect(nodeCapacity(chosen.name, gopher)()).To(BeEquivalentTo(-1))

		By("the other node: node capacity, the NodeDevice's path NodeCapacity, no slices, pods allocated through it")
		Eventually(nodeCapacity(other.name, gopher)).Should(BeEquivalentTo(2))
		Expect(other.pathOf()()).To(Equal(kdv1alpha1.DevicePathNodeCapacity))
		Consistently(slicesOf(other.name), "1s").Should(BeEmpty())
		pod := createPod(testutil.MakePod("capacity", newNamespace()).Node(other.name).Request(gopher, 1))
		Expect(deviceIDs(allocated(pod), gopher)).To(HaveLen(1))
	})

	It("takes a change of the node's labels at the agent's next start, either way", func() {
		n, p := start("true")
		devs := gophers("g", 2)
		Eventually(deviceOf(n.name, string(gopher), "g-1")).ShouldNot(BeNil())

		By("relabelled: nothing changes while the agent runs")
		n.labelNode("false")
		Consistently(func() (int, error) {
			all, err := slicesOf(n.name)()
			return len(all[string(gopher)]), err
		}, "1s").Should(Equal(1))
		Expect(n.pathOf()()).To(Equal(kdv1alpha1.DevicePathDRA))

		By("restarted: the node's slices are removed and the resource goes to node capacity")
		n.restart()
		p = n.restartPlugin(p, devs)
		Eventually(slicesOf(n.name)).Should(BeEmpty())
		Eventually(n.pathOf()).Should(Equal(kdv1alpha1.DevicePathNodeCapacity))
		Eventually(nodeCapacity(n.name, gopher)).Should(BeEquivalentTo(2))

		By("labelled back and restarted: DRA again")
		n.labelNode("true")
		n.restart()
		n.restartPlugin(p, devs)
		Eventually(deviceOf(n.name, string(gopher), "g-1")).ShouldNot(BeNil())
		Eventually(n.pathOf()).Should(Equal(kdv1alpha1.DevicePathDRA))
		Eventually(nodeCapacity(n.name, gopher)).Should(BeEquivalentTo(-1))
	})
})
