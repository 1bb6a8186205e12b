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
	"sync"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
	"github.com/kubedevice/kubedevice/internal/agent/dra"
	"github.com/kubedevice/kubedevice/internal/nodeagent/dptest"
	"github.com/kubedevice/kubedevice/internal/testutil"
)

// controlIDs are the device IDs of a widely deployed plugin for host device files: control
// characters, NUL included. The kubelet accepts them; so does the agent.
var controlIDs = []string{"\x00", "\x01", "\x02"}

func controlDevices() []*pluginapi.Device {
	devs := make([]*pluginapi.Device, len(controlIDs))
	for i, id := range controlIDs {
		devs[i] = dptest.Device(id, pluginapi.Healthy)
	}
	return devs
}

// recordingAllocator answers as envAllocator does and records the device IDs of each container
// request, as the plugin received them.
type recordingAllocator struct {
	mu    sync.Mutex
	asked [][]string
}

func (a *recordingAllocator) allocate(req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	a.mu.Lock()
	for _, cr := range req.GetContainerRequests() {
		a.asked = append(a.asked, append([]string(nil), cr.GetDevicesIds()...))
	}
	a.mu.Unlock()
	return envAllocator(req)
}

func (a *recordingAllocator) requests() [][]string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([][]string(nil), a.asked...)
}

var _ = Describe("Node agent with device IDs that are control characters", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	It("registers, publishes, allocates with the plugin's exact bytes and restores them from its checkpoint", func() {
		n := newNodeAgent(0)
		p := n.plugin(gopher, controlDevices())
		rec := &recordingAllocator{}
		p.SetAllocateFunc(rec.allocate)
		n.register(p)

		By("the NodeDevice listing every device with its exact ID, healthy")
		Eventually(n.nodeDevice(gopher, 0)).Should(And(
			HaveField("Status.Capacity", BeEquivalentTo(3)),
			HaveField("Status.Allocatable", BeEquivalentTo(3)),
		))
		nd, err := n.nodeDevice(gopher, 0)()
		Expect(err).NotTo(HaveOccurred())
		var listed []string
		for _, d := range nd.Status.Devices {
			listed = append(listed, d.ID)
		}
		Expect(listed).To(Equal(controlIDs))
		Expect(condition(nd.Status.Conditions, kdv1alpha1.NodeDeviceHealthy)).To(HaveValue(And(
			HaveField("Status", metav1.ConditionTrue), HaveField("Reason", kdv1alpha1.ReasonAllDevicesHealthy))))

		By("a pod's DeviceAllocation holding the IDs the plugin was asked to allocate, byte for byte")
		pod := createPod(testutil.MakePod("hostdev", ns).Node(n.name).Request(gopher, 2))
		ids := deviceIDs(allocated(pod), gopher)
		Expect(ids).To(HaveLen(2))
		Expect(controlIDs).To(ContainElements(ids))
		Expect(rec.requests()).To(ContainElement(ConsistOf(ids)))

		By("restarting the agent: the checkpoint gives back the held devices with their IDs")
		n.restart()
		Eventually(n.nodeDevice(gopher, 0)).Should(And(
			HaveField("Status.Plugin.State", kdv1alpha1.PluginStateDisconnected),
			HaveField("Status.Capacity", BeEquivalentTo(3)),
			HaveField("Status.Allocated", BeEquivalentTo(2)),
		))
		n.restartPlugin(p, controlDevices())
		Eventually(n.nodeDevice(gopher, 0)).Should(And(
			HaveField("Status.Plugin.State", kdv1alpha1.PluginStateRegistered),
			HaveField("Status.Allocatable", BeEquivalentTo(3)),
			HaveField("Status.Allocated", BeEquivalentTo(2)),
		))
		Expect(deviceIDs(allocated(pod), gopher)).To(Equal(ids))
	})

	It("publishes them in a ResourceSlice under hashed names, with the exact ID as an attribute", func() {
		n := newNodeAgent(0, withDRA("example.com/*"))
		n.register(n.plugin(gopher, controlDevices()))
		for _, id := range controlIDs {
			Eventually(deviceOf(n.name, string(gopher), dra.DeviceName(id))).Should(HaveField("Attributes",
				HaveKeyWithValue(dra.AttributeDeviceID, HaveField("StringValue", HaveValue(Equal(id))))))
		}
	})

	It("says on the NodeDevice why it refused a plugin's list, with the offending ID quoted", func() {
		n := newNodeAgent(0)
		p := n.plugin(gopher, []*pluginapi.Device{dptest.Device("\x00", pluginapi.Healthy), dptest.Device("\x00", pluginapi.Healthy)})
		n.register(p)
		Eventually(func() (*metav1.Condition, error) {
			nd, err := n.nodeDevice(gopher, 0)()
			if err != nil {
				return nil, err
			}
			return condition(nd.Status.Conditions, kdv1alpha1.NodeDeviceHealthy), nil
		}).Should(HaveValue(And(
			HaveField("Status", metav1.ConditionFalse),
			HaveField("Reason", kdv1alpha1.ReasonDeviceListRejected),
			HaveField("Message", ContainSubstring(`device ID "\x00" is listed more than once`)),
		)))
	})

	It("reports a refused list with a Warning event on the NodeDevice, once per distinct refusal", func() {
		n := newNodeAgent(0)
		dup := func(id string) []*pluginapi.Device {
			return []*pluginapi.Device{dptest.Device(id, pluginapi.Healthy), dptest.Device(id, pluginapi.Healthy)}
		}
		p := n.plugin(gopher, dup("\x00"))
		n.register(p)
		var nd *kdv1alpha1.NodeDevice
		Eventually(func() (err error) { nd, err = n.nodeDevice(gopher, 0)(); return err }).Should(Succeed())
		rejected := func(value string) OmegaMatcher {
			return And(
				HaveField("Type", corev1.EventTypeWarning),
				HaveField("Reason", kdv1alpha1.ReasonDeviceListRejected),
				HaveField("Note", ContainSubstring(`device ID %q is listed more than once`, value)),
			)
		}
		Eventually(eventsFor(nd.UID)).Should(ContainElement(rejected("\x00")))
		// The plugin sends the same bad list again and again: no more events.
		for range 5 {
			p.Update(dup("\x00"))
		}
		n.settle()
		Expect(eventsFor(nd.UID)()).To(ConsistOf(rejected("\x00")))
		// Another refusal is news.
		p.Update(dup("\x01"))
		Eventually(eventsFor(nd.UID)).Should(ConsistOf(rejected("\x00"), rejected("\x01")))
	})
})
