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
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
	"github.com/kubedevice/kubedevice/internal/nodeagent/dptest"
	"github.com/kubedevice/kubedevice/internal/testutil"
)

// The health of the devices a pod holds, where the pod's owner looks: the Healthy column of
// kubectl get deviceallocations, the DeviceAllocation's unhealthyDevices, and the pod's events.

// healthCell returns the Healthy cell of the pod's DeviceAllocation in the table the API server
// prints for kubectl get deviceallocations.
func healthCell(pod *corev1.Pod) func() (string, error) {
	return func() (string, error) {
		da, err := deviceAllocation(pod)()
		if err != nil {
			return "", err
		}
		httpClient, err := rest.HTTPClientFor(cfg)
		if err != nil {
			return "", err
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(cfg.Host, "/")+"/apis/kubedevice.io/v1alpha1/namespaces/"+pod.Namespace+"/deviceallocations/"+da.Name, nil)
		if err != nil {
			return "", err
		}
		req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
		resp, err := httpClient.Do(req)
		if err != nil {
			return "", err
		}
		defer func() { _ = resp.Body.Close() }()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			return "", err
		}
		table := &metav1.Table{}
		if err := json.Unmarshal(body, table); err != nil {
			return "", err
		}
		col := slices.IndexFunc(table.ColumnDefinitions, func(c metav1.TableColumnDefinition) bool { return c.Name == "Healthy" })
		if col < 0 || len(table.Rows) != 1 {
			return "", fmt.Errorf("no Healthy column or not one row: %+v", table)
		}
		return fmt.Sprint(table.Rows[0].Cells[col]), nil
	}
}

// unhealthyDevices returns the unhealthy devices the pod's DeviceAllocation lists.
func unhealthyDevices(pod *corev1.Pod) func() ([]kdv1alpha1.UnhealthyDevice, error) {
	return func() ([]kdv1alpha1.UnhealthyDevice, error) {
		da, err := deviceAllocation(pod)()
		if err != nil {
			return nil, err
		}
		return da.Status.UnhealthyDevices, nil
	}
}

// healthEvents returns the notes of the pod's events of reason.
func healthEvents(pod *corev1.Pod, reason string) func() ([]string, error) {
	return func() ([]string, error) {
		evs, err := eventsFor(pod.UID)()
		if err != nil {
			return nil, err
		}
		var notes []string
		for _, e := range evs {
			if e.Reason == reason {
				notes = append(notes, e.Type+": "+e.Note)
			}
		}
		return notes, nil
	}
}

// withUnhealthy returns devs with device id unhealthy.
func withUnhealthy(devs []*pluginapi.Device, id string) []*pluginapi.Device {
	out := make([]*pluginapi.Device, len(devs))
	for i, d := range devs {
		out[i] = d
		if d.GetID() == id {
			out[i] = dptest.Device(id, pluginapi.Unhealthy)
		}
	}
	return out
}

// unheld returns a device of devs none of ids names.
func unheld(devs []*pluginapi.Device, ids ...string) string {
	GinkgoHelper()
	for _, d := range devs {
		if !slices.Contains(ids, d.GetID()) {
			return d.GetID()
		}
	}
	Fail("every device is held")
	return ""
}

// holding matches an unhealthy device entry.
func holding(id, reason string, containers ...string) OmegaMatcher {
	return And(HaveField("ResourceName", string(gopher)), HaveField("DeviceID", id), HaveField("Reason", reason),
		HaveField("Containers", Equal(containers)), HaveField("LastTransitionTime", Not(BeNil())))
}

// sameAllocation matches a DeviceAllocation that lists what da lists, with the same Allocated
// condition: only its devices' health may have changed.
func sameAllocation(da *kdv1alpha1.DeviceAllocation) OmegaMatcher {
	return And(HaveField("Status.Summary", da.Status.Summary), HaveField("Status.Containers", Equal(da.Status.Containers)),
		WithTransform(func(got *kdv1alpha1.DeviceAllocation) *metav1.Condition {
			return condition(got.Status.Conditions, kdv1alpha1.DeviceAllocationAllocated)
		}, Equal(condition(da.Status.Conditions, kdv1alpha1.DeviceAllocationAllocated))))
}

var _ = Describe("Device health where the pod's owner looks", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	It("shows a held device turning unhealthy and healthy again in the DeviceAllocation and the pod's events, one write per affected DeviceAllocation", func() {
		n := newNodeAgent(0)
		devs := gophers("gopher", 4)
		p := n.plugin(gopher, devs)
		n.register(p)
		Eventually(n.nodeDevice(gopher, 0)).Should(HaveField("Status.Allocatable", BeEquivalentTo(4)))
		trainer := createPod(testutil.MakePod("trainer", ns).Node(n.name).Request(gopher, 2))
		server := createPod(testutil.MakePod("server", ns).Node(n.name).Request(gopher, 1))
		trainerIDs, serverIDs := deviceIDs(allocated(trainer), gopher), deviceIDs(allocated(server), gopher)

		By("every device healthy: Healthy True, none listed")
		for _, pod := range []*corev1.Pod{trainer, server} {
			Eventually(healthCell(pod)).Should(Equal("True"))
			da, err := deviceAllocation(pod)()
			Expect(err).NotTo(HaveOccurred())
			Expect(condition(da.Status.Conditions, kdv1alpha1.DeviceAllocationHealthy)).To(HaveValue(And(
				HaveField("Status", metav1.ConditionTrue), HaveField("Reason", kdv1alpha1.ReasonAllDevicesHealthy))))
			Expect(da.Status.UnhealthyDevices).To(BeEmpty())
		}
		n.settle()
		before := n.writes.allocations()

		By("a device no pod holds turning unhealthy: no DeviceAllocation is written")
		free := unheld(devs, append(trainerIDs, serverIDs...)...)
		p.Update(withUnhealthy(devs, free))
		Eventually(func() (kdv1alpha1.DeviceHealth, error) {
			nd, err := n.nodeDevice(gopher, 0)()
			if err != nil || deviceStatus(nd, free) == nil {
				return "", err
			}
			return deviceStatus(nd, free).Health, nil
		}).Should(Equal(kdv1alpha1.DeviceUnhealthy))
		n.settle()
		Expect(n.writes.allocations() - before).To(BeZero())
		p.Update(devs)
		n.settle()
		Expect(n.writes.allocations() - before).To(BeZero())

		By("a device the trainer holds turning unhealthy: its DeviceAllocation says which and why, the pod gets a Warning")
		sick := trainerIDs[0]
		serverDA, err := deviceAllocation(server)()
		Expect(err).NotTo(HaveOccurred())
		before = n.writes.allocations()
		flipped := time.Now()
		p.Update(withUnhealthy(devs, sick))
		Eventually(healthCell(trainer)).WithPolling(time.Millisecond).Should(Equal("False"))
		AddReportEntry("The plugin reports a held device Unhealthy → kubectl get da shows Healthy False", time.Since(flipped).String())
		Expect(unhealthyDevices(trainer)()).To(ConsistOf(holding(sick, kdv1alpha1.DeviceReasonPluginReportedUnhealthy, "app")))
		da, err := deviceAllocation(trainer)()
		Expect(err).NotTo(HaveOccurred())
		Expect(condition(da.Status.Conditions, kdv1alpha1.DeviceAllocationHealthy)).To(HaveValue(And(
			HaveField("Status", metav1.ConditionFalse), HaveField("Reason", kdv1alpha1.ReasonUnhealthyDevices),
			HaveField("Message", ContainSubstring(sick)))))
		Eventually(healthEvents(trainer, kdv1alpha1.EventReasonDeviceUnhealthy)).WithPolling(time.Millisecond).Should(ConsistOf(
			"Warning: Container app: device " + sick + " of example.com/gopher is unhealthy: PluginReportedUnhealthy: The device plugin reports the device as \"Unhealthy\"."))
		AddReportEntry("The plugin reports a held device Unhealthy → the pod's Warning event", time.Since(flipped).String())
		n.settle()
		Expect(n.writes.allocations()-before).To(Equal(1), "DeviceAllocation writes for a flip of a device one pod holds")
		Expect(deviceAllocation(server)()).To(HaveField("ResourceVersion", serverDA.ResourceVersion), "the other pod's DeviceAllocation is not written")
		Expect(healthCell(server)()).To(Equal("True"))

		By("healthy again: True, none listed, a Normal event")
		before = n.writes.allocations()
		flipped = time.Now()
		p.Update(devs)
		Eventually(healthCell(trainer)).WithPolling(time.Millisecond).Should(Equal("True"))
		AddReportEntry("The plugin reports it Healthy again → kubectl get da shows Healthy True", time.Since(flipped).String())
		Expect(unhealthyDevices(trainer)()).To(BeEmpty())
		Eventually(healthEvents(trainer, kdv1alpha1.EventReasonDeviceHealthy)).Should(ConsistOf(
			"Normal: Container app: device " + sick + " of example.com/gopher is healthy again (it was PluginReportedUnhealthy)."))
		n.settle()
		Expect(n.writes.allocations()-before).To(Equal(1), "DeviceAllocation writes for the flip back")

		By("a device of each pod turning unhealthy in one update: two writes, one per DeviceAllocation")
		before = n.writes.allocations()
		p.Update(withUnhealthy(withUnhealthy(devs, trainerIDs[1]), serverIDs[0]))
		Eventually(unhealthyDevices(trainer)).Should(ConsistOf(holding(trainerIDs[1], kdv1alpha1.DeviceReasonPluginReportedUnhealthy, "app")))
		Eventually(unhealthyDevices(server)).Should(ConsistOf(holding(serverIDs[0], kdv1alpha1.DeviceReasonPluginReportedUnhealthy, "app")))
		Eventually(healthEvents(server, kdv1alpha1.EventReasonDeviceUnhealthy)).Should(HaveLen(1))
		n.settle()
		Expect(n.writes.allocations()-before).To(Equal(2), "DeviceAllocation writes for a flip of devices two pods hold")

		By("the plugin restarting: nothing new is known of the devices, no DeviceAllocation is written")
		before = n.writes.allocations()
		sickDevs := withUnhealthy(withUnhealthy(devs, trainerIDs[1]), serverIDs[0])
		p.Stop()
		Eventually(n.nodeDevice(gopher, 0)).Should(HaveField("Status.Plugin.State", kdv1alpha1.PluginStateDisconnected))
		n.settle()
		Expect(n.writes.allocations() - before).To(BeZero())
		p = n.plugin(gopher, sickDevs)
		n.register(p)
		Eventually(n.nodeDevice(gopher, 0)).Should(HaveField("Status.Plugin.State", kdv1alpha1.PluginStateRegistered))
		n.settle()
		Expect(n.writes.allocations() - before).To(BeZero())
		Expect(healthCell(trainer)()).To(Equal("False"))

		By("the plugin no longer listing a held device: NotReportedByPlugin")
		before = n.writes.allocations()
		p.Update(without(sickDevs, trainerIDs[0]))
		Eventually(unhealthyDevices(trainer)).Should(ConsistOf(
			holding(trainerIDs[0], kdv1alpha1.DeviceReasonNotReported, "app"),
			holding(trainerIDs[1], kdv1alpha1.DeviceReasonPluginReportedUnhealthy, "app")))
		n.settle()
		Expect(n.writes.allocations()-before).To(Equal(1), "DeviceAllocation writes for a held device dropped by its plugin")
		AddReportEntry("Events of the trainer pod", eventNotes(trainer))
	})

	It("says a held device's resource was removed once no plugin registered within the grace period, and healthy when one does", func() {
		const grace = 2 * time.Second
		n := newNodeAgent(grace)
		devs := gophers("gopher", 2)
		p := n.plugin(gopher, devs)
		n.register(p)
		pod := createPod(testutil.MakePod("holder", ns).Node(n.name).Request(gopher, 1))
		id := deviceIDs(allocated(pod), gopher)[0]
		Eventually(healthCell(pod)).Should(Equal("True"))

		p.Stop()
		Eventually(gone(n.nodeDevice(gopher, 0))).WithTimeout(grace + 20*time.Second).Should(BeTrue())
		Eventually(unhealthyDevices(pod)).Should(ConsistOf(holding(id, kdv1alpha1.DeviceReasonResourceRemoved, "app")))
		Expect(healthCell(pod)()).To(Equal("False"))
		Eventually(healthEvents(pod, kdv1alpha1.EventReasonDeviceUnhealthy)).Should(ConsistOf(ContainSubstring("ResourceRemoved")))

		n.register(n.plugin(gopher, devs))
		Eventually(healthCell(pod)).Should(Equal("True"))
		Eventually(healthEvents(pod, kdv1alpha1.EventReasonDeviceHealthy)).Should(HaveLen(1))
	})
})

// eventNotes lists the pod's events as kubectl describe pod shows them: type, reason, note.
func eventNotes(pod *corev1.Pod) string {
	GinkgoHelper()
	evs, err := eventsFor(pod.UID)()
	Expect(err).NotTo(HaveOccurred())
	slices.SortFunc(evs, func(a, b eventsv1.Event) int { return a.EventTime.Compare(b.EventTime.Time) })
	var lines []string
	for _, e := range evs {
		lines = append(lines, fmt.Sprintf("%s  %s  %s", e.Type, e.Reason, e.Note))
	}
	return strings.Join(lines, "\n")
}
