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
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
	"github.com/kubedevice/kubedevice/internal/agent"
	"github.com/kubedevice/kubedevice/internal/agent/kube"
	"github.com/kubedevice/kubedevice/internal/agent/mirror"
	"github.com/kubedevice/kubedevice/internal/nodeagent"
	"github.com/kubedevice/kubedevice/internal/nodeagent/checkpoint"
	"github.com/kubedevice/kubedevice/internal/nodeagent/poddevices"
	"github.com/kubedevice/kubedevice/internal/nodeagent/podresources"
	"github.com/kubedevice/kubedevice/internal/testutil"
)

// fakeKubelet is the kubelet's device manager as observe mode reads it. Its state changes as the
// kubelet's does (devicemanager/manager.go, v1.37): a device list from a plugin replaces the
// resource's healthy and unhealthy sets and writes the checkpoint, whose RegisteredDevices are the
// healthy devices only (writeCheckpoint); an allocation writes the checkpoint; a plugin that goes
// away makes every device unhealthy without a write (markResourceUnhealthy); the end of its grace
// period removes the resource and writes the checkpoint (GetCapacity). The Node's capacity and
// allocatable are written as the kubelet's node status sets them (healthy + unhealthy, healthy;
// 0 for a removed resource). The PodResources v1 API is served by kubedevice's own implementation
// of the kubelet's server (internal/nodeagent/podresources) over a real unix socket, its pods'
// devices read from the checkpoint file written with the kubelet-format writer.
type fakeKubelet struct {
	node       string
	socket     string
	checkpoint string

	mu        sync.Mutex
	healthy   map[string]map[string]int64
	unhealthy map[string]map[string]int64
	entries   []checkpoint.Entry
}

func newFakeKubelet(node, dir string) *fakeKubelet {
	GinkgoHelper()
	k := &fakeKubelet{
		node:       node,
		socket:     filepath.Join(dir, "pod-resources", "kubelet.sock"),
		checkpoint: filepath.Join(dir, checkpoint.KubeletFileName),
		healthy:    map[string]map[string]int64{},
		unhealthy:  map[string]map[string]int64{},
	}
	srv, err := podresources.New(k, k, podresources.Options{SocketPath: k.socket, Registerer: prometheus.NewRegistry()})
	Expect(err).NotTo(HaveOccurred())
	Expect(srv.Start(ctx)).To(Succeed())
	DeferCleanup(srv.Stop)
	k.mu.Lock()
	defer k.mu.Unlock()
	k.writeCheckpointLocked()
	return k
}

// device is one device a plugin lists: its NUMA node and health.
type device struct {
	numa    int64
	healthy bool
}

// listAndWatch is a plugin's device list for resource (genericDeviceUpdateCallback).
func (k *fakeKubelet) listAndWatch(resource string, devs map[string]device) {
	GinkgoHelper()
	k.mu.Lock()
	defer k.mu.Unlock()
	k.healthy[resource], k.unhealthy[resource] = map[string]int64{}, map[string]int64{}
	for id, d := range devs {
		if d.healthy {
			k.healthy[resource][id] = d.numa
		} else {
			k.unhealthy[resource][id] = d.numa
		}
	}
	k.writeCheckpointLocked()
	k.publishLocked(resource, false)
}

// pluginGone is the resource's last plugin disconnecting (PluginDisconnected).
func (k *fakeKubelet) pluginGone(resource string) {
	GinkgoHelper()
	k.mu.Lock()
	defer k.mu.Unlock()
	for id, n := range k.healthy[resource] {
		k.unhealthy[resource][id] = n
	}
	k.healthy[resource] = map[string]int64{}
	k.publishLocked(resource, false)
}

// graceOver is the end of the resource's grace period (GetCapacity's deletedResources).
func (k *fakeKubelet) graceOver(resource string) {
	GinkgoHelper()
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.healthy, resource)
	delete(k.unhealthy, resource)
	k.writeCheckpointLocked()
	k.publishLocked(resource, true)
}

// allocate records the devices of a pod's container, with the plugin's Allocate response.
func (k *fakeKubelet) allocate(pod *corev1.Pod, container, resource string, ids ...string) {
	GinkgoHelper()
	k.mu.Lock()
	defer k.mu.Unlock()
	resp, err := proto.Marshal(&pluginapi.ContainerAllocateResponse{Envs: map[string]string{"GOPHERS": ids[0]}})
	Expect(err).NotTo(HaveOccurred())
	perNUMA := checkpoint.DevicesPerNUMA{}
	for _, id := range ids {
		n, ok := k.healthy[resource][id]
		if !ok {
			n = k.unhealthy[resource][id]
		}
		perNUMA[n] = append(perNUMA[n], id)
	}
	k.entries = append(k.entries, checkpoint.Entry{PodUID: string(pod.UID), ContainerName: container, ResourceName: resource, DeviceIDs: perNUMA, AllocResp: resp})
	k.writeCheckpointLocked()
}

// free drops a pod's devices, as the kubelet's next Allocate does (UpdateAllocatedDevices).
func (k *fakeKubelet) free(pod *corev1.Pod) {
	GinkgoHelper()
	k.mu.Lock()
	defer k.mu.Unlock()
	k.entries = slices.DeleteFunc(k.entries, func(e checkpoint.Entry) bool { return e.PodUID == string(pod.UID) })
	k.writeCheckpointLocked()
}

func (k *fakeKubelet) writeCheckpointLocked() {
	GinkgoHelper()
	registered := map[string][]string{}
	for res, devs := range k.healthy {
		registered[res] = []string{}
		for id := range devs {
			registered[res] = append(registered[res], id)
		}
		slices.Sort(registered[res])
	}
	Expect(checkpoint.WriteKubeletFile(k.checkpoint, checkpoint.State{Entries: slices.Clone(k.entries), RegisteredDevices: registered})).To(Succeed())
}

// publishLocked writes the Node's capacity and allocatable of resource as the kubelet's node
// status does.
func (k *fakeKubelet) publishLocked(res string, removed bool) {
	GinkgoHelper()
	node := &corev1.Node{}
	Expect(k8sClient.Get(ctx, client.ObjectKey{Name: k.node}, node)).To(Succeed())
	if node.Status.Capacity == nil {
		node.Status.Capacity, node.Status.Allocatable = corev1.ResourceList{}, corev1.ResourceList{}
	}
	h, u := int64(len(k.healthy[res])), int64(len(k.unhealthy[res]))
	if removed {
		h, u = 0, 0
	}
	node.Status.Capacity[corev1.ResourceName(res)] = *resource.NewQuantity(h+u, resource.DecimalSI)
	node.Status.Allocatable[corev1.ResourceName(res)] = *resource.NewQuantity(h, resource.DecimalSI)
	Expect(k8sClient.Status().Update(ctx, node)).To(Succeed())
}

// ActivePods is the kubelet's pod manager: the node's pods that have not ended.
func (k *fakeKubelet) ActivePods(ctx context.Context) ([]*corev1.Pod, error) {
	list := &corev1.PodList{}
	if err := k8sClient.List(ctx, list); err != nil {
		return nil, err
	}
	var out []*corev1.Pod
	for i := range list.Items {
		p := &list.Items[i]
		if p.Spec.NodeName == k.node && !kube.IsTerminal(p) {
			out = append(out, p)
		}
	}
	return out, nil
}

// Pod returns a pod of the node.
func (k *fakeKubelet) Pod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	p := &corev1.Pod{}
	if err := k8sClient.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, p); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	if p.Spec.NodeName != k.node {
		return nil, nil
	}
	return p, nil
}

// GetDevices reads a container's devices from the checkpoint file, as the kubelet's podDevices
// (restored from that file) answer.
func (k *fakeKubelet) GetDevices(podUID, container string) []poddevices.ContainerDevice {
	st, err := checkpoint.ReadKubeletFile(k.checkpoint)
	if err != nil {
		return nil
	}
	var out []poddevices.ContainerDevice
	for _, e := range st.Entries {
		if e.PodUID != podUID || e.ContainerName != container {
			continue
		}
		for n, ids := range e.DeviceIDs {
			for _, id := range ids {
				out = append(out, poddevices.ContainerDevice{ResourceName: e.ResourceName, DeviceID: id, NUMANode: n})
			}
		}
	}
	return out
}

// GetAllocatableDevices is the kubelet's healthy devices with their topology.
func (k *fakeKubelet) GetAllocatableDevices() nodeagent.ResourceDeviceInstances {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := nodeagent.ResourceDeviceInstances{}
	for res, devs := range k.healthy {
		out[res] = nodeagent.DeviceInstances{}
		for id, n := range devs {
			out[res][id] = &pluginapi.Device{ID: id, Health: pluginapi.Healthy,
				Topology: &pluginapi.TopologyInfo{Nodes: []*pluginapi.NUMANode{{ID: n}}}}
		}
	}
	return out
}

// newObservedNode creates a Node whose kubelet (a fakeKubelet) manages the gopher plugin, and
// starts its agent in observe mode once the kubelet has listed devs.
func newObservedNode(devs map[string]device, options ...func(*agent.Options)) (*nodeAgent, *fakeKubelet) {
	GinkgoHelper()
	dir, err := os.MkdirTemp("", "kd")
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(os.RemoveAll, dir)
	n := &nodeAgent{name: uniqueName("observed"), dir: dir, writes: &writeCounter{counts: map[string]int{}}, logs: &logBuffer{}}
	n.node = testutil.MakeNode(n.name).Obj()
	Expect(k8sClient.Create(ctx, n.node)).To(Succeed())
	DeferCleanup(func() { Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, n.node))).To(Succeed()) })
	k := newFakeKubelet(n.name, dir)
	k.listAndWatch(gopherResource, devs)
	n.options = append([]func(*agent.Options){func(o *agent.Options) {
		o.Mode = agent.ModeObserve
		o.Observe.PodResourcesSocket, o.Observe.CheckpointPath = k.socket, k.checkpoint
	}}, options...)
	n.start()
	DeferCleanup(func() {
		if n.stop != nil {
			n.stop()
		}
	})
	return n, k
}

const gopherResource = "example.com/gopher"

// devicesOf returns the NodeDevice's devices by ID.
func devicesOf(nd *kdv1alpha1.NodeDevice) map[string]kdv1alpha1.DeviceStatus {
	out := map[string]kdv1alpha1.DeviceStatus{}
	for _, d := range nd.Status.Devices {
		out[d.ID] = d
	}
	return out
}

// deviceInfo returns the kubedevice_agent_device_info series of node, by device ID.
func deviceInfo(node string) map[string]map[string]string {
	GinkgoHelper()
	families, err := metrics.Registry.Gather()
	Expect(err).NotTo(HaveOccurred())
	out := map[string]map[string]string{}
	for _, f := range families {
		if f.GetName() != mirror.DeviceInfoMetric {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := labelsOf(m)
			if labels["node"] == node {
				out[labels["device_id"]] = labels
			}
		}
	}
	return out
}

func labelsOf(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

var _ = Describe("Observe mode", func() {
	It("mirrors the kubelet's healthy, unhealthy, allocated and freed devices and a plugin gone, read-only", func() {
		ns := newNamespace()
		n, k := newObservedNode(map[string]device{
			"gopher-0": {numa: 0, healthy: true}, "gopher-1": {numa: 1, healthy: true}, "gopher-2": {numa: 0, healthy: true},
		}, func(o *agent.Options) { o.Observe.Resources = []string{gopherResource} })
		// A resource the allow list leaves out is never mirrored.
		k.listAndWatch("example.com/ignored", map[string]device{"x": {healthy: true}})
		get := n.nodeDevice(gopherResource, 0)

		By("healthy devices")
		Eventually(func(g Gomega) {
			nd, err := get()
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(nd.Status.Path).To(Equal(kdv1alpha1.DevicePathObserved))
			g.Expect(nd.Status.Capacity).To(Equal(int32(3)))
			g.Expect(nd.Status.Allocatable).To(Equal(int32(3)))
			g.Expect(nd.Status.Plugin.State).To(Equal(kdv1alpha1.PluginStateRegistered))
			g.Expect(devicesOf(nd)["gopher-1"].NUMANodes).To(Equal([]int64{1}))
			g.Expect(meta.IsStatusConditionTrue(nd.Status.Conditions, kdv1alpha1.NodeDeviceHealthy)).To(BeTrue())
			g.Expect(nd.Status.Checkpoint).NotTo(BeNil(), "the kubelet's checkpoint's last write")
		}).Should(Succeed())
		Expect(n.nodeDevices()).To(HaveLen(1), "only the allowed resource")
		node := &corev1.Node{}
		Expect(k8sClient.Get(ctx, client.ObjectKey{Name: n.name}, node)).To(Succeed())
		Expect(node.Status.Capacity.Name(gopherResource, resource.DecimalSI).Value()).To(Equal(int64(3)))

		By("nothing written in a steady state")
		before := n.settle()
		Consistently(n.writes.mirror).WithTimeout(2 * time.Second).Should(Equal(before))

		By("a pod the kubelet allocates a device to")
		pod := createPod(testutil.MakePod("gpu", ns).Node(n.name).Request(gopherResource, 1))
		k.allocate(pod, "app", gopherResource, "gopher-2")
		start := time.Now()
		da := allocated(pod)
		GinkgoWriter.Printf("DeviceAllocation written %v after the kubelet's allocation\n", time.Since(start))
		Expect(deviceIDs(da, gopherResource)).To(Equal([]string{"gopher-2"}))
		Expect(da.Status.Containers[0].Resources[0].NUMANodes).To(Equal([]int64{0}))
		Expect(da.Status.Containers[0].RuntimeOptions).NotTo(BeNil(), "the Allocate response from the checkpoint")
		Expect(da.Status.Containers[0].RuntimeOptions.Envs).To(ContainElement(kdv1alpha1.EnvVar{Name: "GOPHERS", Value: "gopher-2"}))
		Eventually(func(g Gomega) {
			nd, err := get()
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(nd.Status.Allocated).To(Equal(int32(1)))
			h := devicesOf(nd)["gopher-2"].Holder
			g.Expect(h).NotTo(BeNil())
			g.Expect(*h).To(Equal(kdv1alpha1.DeviceHolder{Namespace: ns, PodName: "gpu", PodUID: string(pod.UID), ContainerName: "app"}))
		}).Should(Succeed())
		Eventually(func() map[string]string { return deviceInfo(n.name)["gopher-2"] }).Should(And(
			HaveKeyWithValue("pod", "gpu"), HaveKeyWithValue("namespace", ns), HaveKeyWithValue("container", "app"),
			HaveKeyWithValue("numa_node", "0"), HaveKeyWithValue("health", "Healthy"), HaveKeyWithValue("resource", gopherResource)))
		Expect(deviceInfo(n.name)).To(HaveLen(3), "one series per device")

		By("a device its plugin reports unhealthy")
		k.listAndWatch(gopherResource, map[string]device{
			"gopher-0": {numa: 0, healthy: true}, "gopher-1": {numa: 1, healthy: false}, "gopher-2": {numa: 0, healthy: true},
		})
		start = time.Now()
		Eventually(func(g Gomega) {
			nd, err := get()
			g.Expect(err).NotTo(HaveOccurred())
			d := devicesOf(nd)["gopher-1"]
			g.Expect(d.Health).To(Equal(kdv1alpha1.DeviceUnhealthy))
			g.Expect(d.Reason).To(Equal(kdv1alpha1.DeviceReasonKubeletNotAllocatable))
			g.Expect(nd.Status.Capacity).To(Equal(int32(3)))
			g.Expect(nd.Status.Allocatable).To(Equal(int32(2)))
			g.Expect(nd.Status.Unhealthy).To(Equal(int32(1)))
		}).WithTimeout(5 * time.Second).Should(Succeed())
		GinkgoWriter.Printf("Unhealthy device on the NodeDevice %v after the kubelet learnt it\n", time.Since(start))
		Eventually(func() map[string]string { return deviceInfo(n.name)["gopher-1"] }).Should(HaveKeyWithValue("health", "Unhealthy"))

		By("the pod ends and the kubelet frees its device")
		pod.Status.Phase = corev1.PodSucceeded
		Expect(k8sClient.Status().Update(ctx, pod)).To(Succeed())
		k.free(pod)
		Eventually(gone(deviceAllocation(pod))).Should(BeTrue(), "the DeviceAllocation is released and deleted")
		Eventually(func(g Gomega) {
			nd, err := get()
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(nd.Status.Allocated).To(BeZero())
			g.Expect(devicesOf(nd)["gopher-2"].Holder).To(BeNil())
		}).Should(Succeed())

		By("the plugin goes away")
		k.pluginGone(gopherResource)
		Eventually(func(g Gomega) {
			nd, err := get()
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(nd.Status.Capacity).To(Equal(int32(3)))
			g.Expect(nd.Status.Allocatable).To(BeZero())
			g.Expect(nd.Status.Unhealthy).To(Equal(int32(3)))
		}).Should(Succeed())
		k.graceOver(gopherResource)
		Eventually(gone(get)).Should(BeTrue(), "the resource's NodeDevice is deleted when the kubelet removes it")

		By("the Node's capacity stays the kubelet's")
		Expect(k8sClient.Get(ctx, client.ObjectKey{Name: n.name}, node)).To(Succeed())
		Expect(node.Status.Capacity.Name(gopherResource, resource.DecimalSI).Value()).To(BeZero())
		Expect(node.Status.Capacity.Name("example.com/ignored", resource.DecimalSI).Value()).To(Equal(int64(1)))
	})

	It("shows a held device the kubelet stops listing as allocatable in its DeviceAllocation's Healthy column, one write per affected DeviceAllocation, none otherwise", func() {
		ns := newNamespace()
		all := map[string]device{"gopher-0": {healthy: true}, "gopher-1": {healthy: true}, "gopher-2": {healthy: true}, "gopher-3": {healthy: true}}
		with := func(id string, healthy bool) map[string]device {
			devs := maps.Clone(all)
			devs[id] = device{healthy: healthy}
			return devs
		}
		n, k := newObservedNode(all)
		trainer := createPod(testutil.MakePod("trainer", ns).Node(n.name).Request(gopherResource, 2))
		server := createPod(testutil.MakePod("server", ns).Node(n.name).Request(gopherResource, 1))
		k.allocate(trainer, "app", gopherResource, "gopher-0", "gopher-1")
		k.allocate(server, "app", gopherResource, "gopher-2")

		By("every held device allocatable: Healthy True, none listed")
		for _, pod := range []*corev1.Pod{trainer, server} {
			allocated(pod)
			Eventually(healthCell(pod)).Should(Equal("True"))
			da, err := deviceAllocation(pod)()
			Expect(err).NotTo(HaveOccurred())
			Expect(condition(da.Status.Conditions, kdv1alpha1.DeviceAllocationHealthy)).To(HaveValue(And(
				HaveField("Status", metav1.ConditionTrue), HaveField("Reason", kdv1alpha1.ReasonAllDevicesHealthy))))
			Expect(da.Status.UnhealthyDevices).To(BeEmpty())
		}
		n.settle()
		before := n.writes.allocations()
		Consistently(n.writes.allocations).WithTimeout(2*time.Second).Should(Equal(before), "DeviceAllocation writes while nothing changes")

		By("a device no pod holds leaving the kubelet's allocatable: no DeviceAllocation is written")
		k.listAndWatch(gopherResource, with("gopher-3", false))
		Eventually(func() (kdv1alpha1.DeviceHealth, error) {
			nd, err := n.nodeDevice(gopherResource, 0)()
			return devicesOf(nd)["gopher-3"].Health, err
		}).WithTimeout(5 * time.Second).Should(Equal(kdv1alpha1.DeviceUnhealthy))
		k.listAndWatch(gopherResource, all)
		Eventually(func() (kdv1alpha1.DeviceHealth, error) {
			nd, err := n.nodeDevice(gopherResource, 0)()
			return devicesOf(nd)["gopher-3"].Health, err
		}).WithTimeout(5 * time.Second).Should(Equal(kdv1alpha1.DeviceHealthy))
		n.settle()
		Expect(n.writes.allocations() - before).To(BeZero())

		By("a device the trainer holds leaving the kubelet's allocatable: its DeviceAllocation says which and why, in one write")
		serverDA, err := deviceAllocation(server)()
		Expect(err).NotTo(HaveOccurred())
		flipped := time.Now()
		k.listAndWatch(gopherResource, with("gopher-1", false))
		Eventually(healthCell(trainer)).WithTimeout(5 * time.Second).WithPolling(10 * time.Millisecond).Should(Equal("False"))
		AddReportEntry("Observe mode: the kubelet stops listing a held device as allocatable → kubectl get da shows Healthy False", time.Since(flipped).String())
		Expect(unhealthyDevices(trainer)()).To(ConsistOf(And(holding("gopher-1", kdv1alpha1.DeviceReasonKubeletNotAllocatable, "app"),
			HaveField("Message", ContainSubstring("does not list the device as allocatable")))))
		da, err := deviceAllocation(trainer)()
		Expect(err).NotTo(HaveOccurred())
		Expect(condition(da.Status.Conditions, kdv1alpha1.DeviceAllocationHealthy)).To(HaveValue(And(
			HaveField("Status", metav1.ConditionFalse), HaveField("Reason", kdv1alpha1.ReasonUnhealthyDevices),
			HaveField("Message", "1 of 2 devices the pod holds are unhealthy: example.com/gopher gopher-1 (KubeletNotAllocatable)."))))
		n.settle()
		Expect(n.writes.allocations()-before).To(Equal(1), "DeviceAllocation writes for a held device turning unhealthy")
		Consistently(n.writes.allocations).WithTimeout(2*time.Second).Should(Equal(before+1), "DeviceAllocation writes while it stays unhealthy")
		Expect(deviceAllocation(server)()).To(HaveField("ResourceVersion", serverDA.ResourceVersion), "the other pod's DeviceAllocation is not written")
		Expect(healthCell(server)()).To(Equal("True"))

		By("allocatable again: Healthy True, none listed, in one write")
		before = n.writes.allocations()
		flipped = time.Now()
		k.listAndWatch(gopherResource, all)
		Eventually(healthCell(trainer)).WithTimeout(5 * time.Second).WithPolling(10 * time.Millisecond).Should(Equal("True"))
		AddReportEntry("Observe mode: the kubelet lists it allocatable again → kubectl get da shows Healthy True", time.Since(flipped).String())
		Expect(unhealthyDevices(trainer)()).To(BeEmpty())
		n.settle()
		Expect(n.writes.allocations()-before).To(Equal(1), "DeviceAllocation writes for the device recovering")

		By("no event on the pods: observe mode only looks")
		Expect(eventsFor(trainer.UID)()).To(BeEmpty())
	})

	It("keeps an unhealthy device across an agent restart, and forgets one the kubelet stops counting", func() {
		n, k := newObservedNode(map[string]device{"gopher-0": {healthy: true}, "gopher-1": {healthy: true}})
		get := n.nodeDevice(gopherResource, 0)
		Eventually(func() (int32, error) { nd, err := get(); return nd.Status.Allocatable, err }).Should(Equal(int32(2)))

		k.listAndWatch(gopherResource, map[string]device{"gopher-0": {healthy: true}, "gopher-1": {healthy: false}})
		Eventually(func() (int32, error) { nd, err := get(); return nd.Status.Unhealthy, err }).Should(Equal(int32(1)))
		before := n.settle()
		n.restart()
		// The kubelet names gopher-1 nowhere now (not allocatable, not in its checkpoint); the
		// restarted agent remembers it from its NodeDevice and writes nothing.
		Consistently(n.writes.mirror).WithTimeout(2 * time.Second).Should(Equal(before))
		nd, err := get()
		Expect(err).NotTo(HaveOccurred())
		Expect(devicesOf(nd)["gopher-1"].Health).To(Equal(kdv1alpha1.DeviceUnhealthy))

		// The plugin stops listing gopher-1: the Node's capacity drops, and so does the device.
		k.listAndWatch(gopherResource, map[string]device{"gopher-0": {healthy: true}})
		Eventually(func(g Gomega) {
			nd, err := get()
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(devicesOf(nd)).To(HaveLen(1))
			g.Expect(devicesOf(nd)).To(HaveKey("gopher-0"))
		}).Should(Succeed())
	})
})
