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

package integration

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
	"github.com/kubedevice/kubedevice/internal/testutil"
)

// expectInvalid asserts that err is the API server's Invalid error carrying message.
func expectInvalid(err error, message string) {
	GinkgoHelper()
	Expect(err).To(HaveOccurred())
	Expect(apierrors.IsInvalid(err)).To(BeTrue(), "expected an Invalid error, got %v", err)
	Expect(err.Error()).To(ContainSubstring(message))
}

// getTable lists path as kubectl does, asking the API server for a Table rendered from the CRD's
// printer columns.
func getTable(path string) *metav1.Table {
	GinkgoHelper()
	httpClient, err := rest.HTTPClientFor(cfg)
	Expect(err).NotTo(HaveOccurred())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(cfg.Host, "/")+path, nil)
	Expect(err).NotTo(HaveOccurred())
	req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
	resp, err := httpClient.Do(req)
	Expect(err).NotTo(HaveOccurred())
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	Expect(err).NotTo(HaveOccurred())
	Expect(resp.StatusCode).To(Equal(http.StatusOK), string(body))
	table := &metav1.Table{}
	Expect(json.Unmarshal(body, table)).To(Succeed())
	return table
}

func columnNames(t *metav1.Table) []string {
	names := make([]string, 0, len(t.ColumnDefinitions))
	for _, c := range t.ColumnDefinitions {
		names = append(names, c.Name)
	}
	return names
}

// rowFor returns the table row of the object named name, as strings.
func rowFor(t *metav1.Table, name string) []string {
	GinkgoHelper()
	for _, r := range t.Rows {
		if len(r.Cells) > 0 && r.Cells[0] == name {
			cells := make([]string, len(r.Cells))
			for i, c := range r.Cells {
				cells[i] = fmt.Sprint(c)
			}
			return cells
		}
	}
	Fail("no row for " + name)
	return nil
}

var _ = Describe("NodeDevice API", func() {
	It("creates, writes status and reads back", func() {
		nd := testutil.MakeNodeDevice("rt-node-1-gopher").Node("rt-node-1").Cordon("gopher-2", "maintenance").Obj()
		Expect(k8sClient.Create(ctx, nd)).To(Succeed())
		DeferCleanup(func() { Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, nd))).To(Succeed()) })

		nd.Status = testutil.MakeNodeDevice("").
			Device("gopher-0", kdv1alpha1.DeviceHealthy, 0).
			Device("gopher-1", kdv1alpha1.DeviceUnhealthy).
			Plugin(kdv1alpha1.PluginStateRegistered).Obj().Status
		nd.Status.Devices[0].Holder = &kdv1alpha1.DeviceHolder{Namespace: "default", PodName: "p", ContainerName: "app"}
		nd.Status.Allocated = 1
		Expect(k8sClient.Status().Update(ctx, nd)).To(Succeed())

		got := &kdv1alpha1.NodeDevice{}
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(nd), got)).To(Succeed())
		Expect(got.Spec).To(Equal(nd.Spec))
		Expect(got.Status.Devices).To(HaveLen(2))
		Expect(got.Status.Devices[0].Holder.PodName).To(Equal("p"))
		Expect(got.Status.Devices[0].NUMANodes).To(Equal([]int64{0}))
		Expect(got.Status.Capacity).To(Equal(int32(2)))
		Expect(got.Status.Plugin.State).To(Equal(kdv1alpha1.PluginStateRegistered))
	})

	DescribeTable("CEL and schema rules refuse bad objects on create",
		func(mutate func(*kdv1alpha1.NodeDevice), message string) {
			nd := testutil.MakeNodeDevice("bad-create").Obj()
			mutate(nd)
			expectInvalid(k8sClient.Create(ctx, nd), message)
		},
		Entry("resource name in the kubernetes.io namespace",
			func(nd *kdv1alpha1.NodeDevice) { nd.Spec.ResourceName = "devices.kubernetes.io/gpu" },
			"resourceName must not be in the kubernetes.io namespace"),
		Entry("resource name starting with requests.",
			func(nd *kdv1alpha1.NodeDevice) { nd.Spec.ResourceName = "requests.example.com/gpu" },
			"resourceName must not start with requests."),
		Entry("resource name prefix longer than 244 characters",
			func(nd *kdv1alpha1.NodeDevice) {
				nd.Spec.ResourceName = strings.Repeat("a", 60) + "." + strings.Repeat("b", 60) + "." +
					strings.Repeat("c", 60) + "." + strings.Repeat("d", 63) + "/gpu"
			},
			"resourceName prefix must be at most 244 characters"),
		Entry("resource name without a domain",
			func(nd *kdv1alpha1.NodeDevice) { nd.Spec.ResourceName = "gpu" },
			"spec.resourceName"),
		Entry("empty node name",
			func(nd *kdv1alpha1.NodeDevice) { nd.Spec.NodeName = "" },
			"spec.nodeName"),
		Entry("empty cordoned device ID",
			func(nd *kdv1alpha1.NodeDevice) {
				nd.Spec.Cordons = []kdv1alpha1.DeviceCordon{{DeviceID: ""}}
			},
			"spec.cordons[0].deviceID"),
	)

	DescribeTable("CEL rules refuse changes to immutable fields",
		func(name string, mutate func(*kdv1alpha1.NodeDevice), message string) {
			nd := testutil.MakeNodeDevice(name).Shard(0).Obj()
			Expect(k8sClient.Create(ctx, nd)).To(Succeed())
			DeferCleanup(func() { Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, nd))).To(Succeed()) })
			mutate(nd)
			expectInvalid(k8sClient.Update(ctx, nd), message)
		},
		Entry("spec.nodeName", "immutable-node", func(nd *kdv1alpha1.NodeDevice) { nd.Spec.NodeName = "node-2" },
			"nodeName is immutable"),
		Entry("spec.resourceName", "immutable-resource", func(nd *kdv1alpha1.NodeDevice) { nd.Spec.ResourceName = "example.com/other" },
			"resourceName is immutable"),
		Entry("spec.shard", "immutable-shard", func(nd *kdv1alpha1.NodeDevice) { one := int32(1); nd.Spec.Shard = &one },
			"shard is immutable"),
	)

	It("lets administrators change cordons", func() {
		nd := testutil.MakeNodeDevice("cordon-change").Obj()
		Expect(k8sClient.Create(ctx, nd)).To(Succeed())
		DeferCleanup(func() { Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, nd))).To(Succeed()) })
		nd.Spec.Cordons = []kdv1alpha1.DeviceCordon{{DeviceID: "gopher-1", Reason: "flaky"}}
		Expect(k8sClient.Update(ctx, nd)).To(Succeed())
		Expect(nd.Generation).To(Equal(int64(2)))
	})

	It("refuses new cordons on an Observed NodeDevice, and lets existing ones be removed", func() {
		nd := testutil.MakeNodeDevice("cordon-observed").Cordon("gopher-0", "set before observe mode").Obj()
		Expect(k8sClient.Create(ctx, nd)).To(Succeed())
		DeferCleanup(func() { Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, nd))).To(Succeed()) })
		nd.Status = testutil.MakeNodeDevice("").Device("gopher-0", kdv1alpha1.DeviceHealthy).Device("gopher-1", kdv1alpha1.DeviceHealthy).
			Plugin(kdv1alpha1.PluginStateRegistered).Obj().Status
		nd.Status.Path = kdv1alpha1.DevicePathObserved
		// The agent's status write goes through although a cordon from before is there.
		Expect(k8sClient.Status().Update(ctx, nd)).To(Succeed())

		added := nd.DeepCopy()
		added.Spec.Cordons = append(added.Spec.Cordons, kdv1alpha1.DeviceCordon{DeviceID: "gopher-1"})
		expectInvalid(k8sClient.Update(ctx, added), "spec.cordons cannot be added to an Observed NodeDevice")

		nd.Spec.Cordons = nil
		Expect(k8sClient.Update(ctx, nd)).To(Succeed())
		nd.Spec.Cordons = []kdv1alpha1.DeviceCordon{{DeviceID: "gopher-0"}}
		expectInvalid(k8sClient.Update(ctx, nd), "spec.cordons cannot be added to an Observed NodeDevice")

		// On a managed NodeDevice the same cordon is taken.
		nd.Status.Path = kdv1alpha1.DevicePathNodeCapacity
		nd.Spec.Cordons = nil
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(nd), nd)).To(Succeed())
		nd.Status.Path = kdv1alpha1.DevicePathNodeCapacity
		Expect(k8sClient.Status().Update(ctx, nd)).To(Succeed())
		nd.Spec.Cordons = []kdv1alpha1.DeviceCordon{{DeviceID: "gopher-0"}}
		Expect(k8sClient.Update(ctx, nd)).To(Succeed())
	})

	It("refuses a shard listing more than 128 devices", func() {
		nd := testutil.MakeNodeDevice("too-many").Obj()
		Expect(k8sClient.Create(ctx, nd)).To(Succeed())
		DeferCleanup(func() { Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, nd))).To(Succeed()) })
		w := testutil.MakeNodeDevice("")
		for i := range kdv1alpha1.MaxDevicesPerShard + 1 {
			w.Device(fmt.Sprintf("dev-%03d", i), kdv1alpha1.DeviceHealthy)
		}
		nd.Status = w.Obj().Status
		expectInvalid(k8sClient.Status().Update(ctx, nd), "status.devices")
	})

	It("selects NodeDevices by spec.nodeName and spec.resourceName", func() {
		for _, o := range []*kdv1alpha1.NodeDevice{
			testutil.MakeNodeDevice("sel-a-gopher").Node("sel-a").Obj(),
			testutil.MakeNodeDevice("sel-a-gpu").Node("sel-a").Resource("vendor.example/gpu").Obj(),
			testutil.MakeNodeDevice("sel-b-gopher").Node("sel-b").Obj(),
		} {
			Expect(k8sClient.Create(ctx, o)).To(Succeed())
			DeferCleanup(func() { Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, o))).To(Succeed()) })
		}
		names := func(opts ...client.ListOption) []string {
			list := &kdv1alpha1.NodeDeviceList{}
			Expect(k8sClient.List(ctx, list, opts...)).To(Succeed())
			var out []string
			for _, i := range list.Items {
				out = append(out, i.Name)
			}
			return out
		}
		Expect(names(client.MatchingFields{"spec.nodeName": "sel-a"})).To(ConsistOf("sel-a-gopher", "sel-a-gpu"))
		Expect(names(client.MatchingFields{"spec.nodeName": "sel-b"})).To(ConsistOf("sel-b-gopher"))
		Expect(names(client.MatchingFields{"spec.nodeName": "sel-a", "spec.resourceName": "vendor.example/gpu"})).
			To(ConsistOf("sel-a-gpu"))
	})

	It("prints the documented columns for kubectl get nodedevices", func() {
		nd := testutil.MakeNodeDevice("cols-node-1-gopher").Node("cols-node-1").Obj()
		Expect(k8sClient.Create(ctx, nd)).To(Succeed())
		DeferCleanup(func() { Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, nd))).To(Succeed()) })
		nd.Status = testutil.MakeNodeDevice("").
			Device("gopher-0", kdv1alpha1.DeviceHealthy).
			Device("gopher-1", kdv1alpha1.DeviceHealthy).
			Device("gopher-2", kdv1alpha1.DeviceUnhealthy).
			Plugin(kdv1alpha1.PluginStateRegistered).Obj().Status
		nd.Status.Allocated = 1
		Expect(k8sClient.Status().Update(ctx, nd)).To(Succeed())

		nd.Status.Path = kdv1alpha1.DevicePathObserved
		Expect(k8sClient.Status().Update(ctx, nd)).To(Succeed())

		table := getTable("/apis/kubedevice.io/v1alpha1/nodedevices")
		Expect(columnNames(table)).To(Equal([]string{
			"Name", "Node", "Resource", "Path", "Capacity", "Allocatable", "Allocated", "Unhealthy", "Plugin", "Age",
		}))
		Expect(rowFor(table, nd.Name)[1:9]).To(Equal([]string{
			"cols-node-1", "example.com/gopher", "Observed", "3", "2", "1", "1", "Registered",
		}))
	})
})

var _ = Describe("DeviceAllocation API", func() {
	It("creates with status in one request, has no status subresource, and reads back", func() {
		ns := newNamespace()
		da := testutil.MakeDeviceAllocation("gopher-pod", ns).
			Container("app", "example.com/gopher", "gopher-0", "gopher-2").
			Summary("example.com/gopher=gopher-0,gopher-2").
			Condition(metav1.Condition{
				Type: kdv1alpha1.DeviceAllocationAllocated, Status: metav1.ConditionTrue,
				Reason: kdv1alpha1.ReasonAllocated, LastTransitionTime: metav1.Now(),
			}).Obj()
		da.Status.Containers[0].RuntimeOptions = &kdv1alpha1.ContainerRuntimeOptions{
			Envs:   []kdv1alpha1.EnvVar{{Name: "GOPHER", Value: "gopher-0,gopher-2"}},
			Mounts: []kdv1alpha1.Mount{{ContainerPath: "/gophers/gopher-0", HostPath: "/etc/gophers/gopher-0", ReadOnly: true}},
		}
		Expect(k8sClient.Create(ctx, da)).To(Succeed())

		got := &kdv1alpha1.DeviceAllocation{}
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(da), got)).To(Succeed())
		Expect(got.Spec).To(Equal(da.Spec))
		Expect(got.Status.Containers).To(HaveLen(1), "the status given at creation was dropped")
		Expect(got.Status.Containers[0].Resources[0].DeviceIDs).To(Equal([]string{"gopher-0", "gopher-2"}))
		Expect(got.Status.Containers[0].RuntimeOptions.Envs).To(Equal(da.Status.Containers[0].RuntimeOptions.Envs))
		Expect(got.Generation).To(Equal(int64(1)))

		// No status subresource: a status write is a write of the object, and counts in its
		// generation.
		Expect(apierrors.IsNotFound(k8sClient.Status().Update(ctx, got.DeepCopy()))).To(BeTrue(), "the status subresource is served")
		got.Status.Summary = "example.com/gopher=gopher-0"
		Expect(k8sClient.Update(ctx, got)).To(Succeed())
		Expect(got.Status.Summary).To(Equal("example.com/gopher=gopher-0"))
		Expect(got.Generation).To(Equal(int64(2)))
	})

	DescribeTable("CEL rules refuse changes to immutable fields",
		func(mutate func(*kdv1alpha1.DeviceAllocation), message string) {
			ns := newNamespace()
			da := testutil.MakeDeviceAllocation("immutable", ns).Obj()
			Expect(k8sClient.Create(ctx, da)).To(Succeed())
			mutate(da)
			expectInvalid(k8sClient.Update(ctx, da), message)
		},
		Entry("spec.nodeName", func(da *kdv1alpha1.DeviceAllocation) { da.Spec.NodeName = "node-2" },
			"nodeName is immutable"),
		Entry("spec.podName", func(da *kdv1alpha1.DeviceAllocation) { da.Spec.PodName = "other" },
			"podName is immutable"),
		Entry("spec.podUID", func(da *kdv1alpha1.DeviceAllocation) { da.Spec.PodUID = "00000000-0000-0000-0000-000000000002" },
			"podUID is immutable"),
	)

	It("selects DeviceAllocations by spec.nodeName", func() {
		ns := newNamespace()
		Expect(k8sClient.Create(ctx, testutil.MakeDeviceAllocation("on-a", ns).Node("da-sel-a").Obj())).To(Succeed())
		Expect(k8sClient.Create(ctx, testutil.MakeDeviceAllocation("on-b", ns).Node("da-sel-b").Obj())).To(Succeed())
		list := &kdv1alpha1.DeviceAllocationList{}
		Expect(k8sClient.List(ctx, list, client.MatchingFields{"spec.nodeName": "da-sel-a"})).To(Succeed())
		Expect(list.Items).To(HaveLen(1))
		Expect(list.Items[0].Name).To(Equal("on-a"))
	})

	It("prints the documented columns for kubectl get deviceallocations -A", func() {
		ns := newNamespace()
		da := testutil.MakeDeviceAllocation("cols-gopher-pod", ns).Node("cols-node-1").Obj()
		da.Status.Summary = "example.com/gopher=gopher-0"
		da.Status.Conditions = []metav1.Condition{{
			Type: kdv1alpha1.DeviceAllocationAllocated, Status: metav1.ConditionTrue,
			Reason: kdv1alpha1.ReasonAllocated, LastTransitionTime: metav1.Now(),
		}, {
			Type: kdv1alpha1.DeviceAllocationHealthy, Status: metav1.ConditionFalse,
			Reason: kdv1alpha1.ReasonUnhealthyDevices, LastTransitionTime: metav1.Now(),
		}}
		da.Status.UnhealthyDevices = []kdv1alpha1.UnhealthyDevice{{ResourceName: "example.com/gopher", DeviceID: "gopher-0",
			Containers: []string{"app"}, Reason: kdv1alpha1.DeviceReasonPluginReportedUnhealthy}}
		Expect(k8sClient.Create(ctx, da)).To(Succeed())
		// One an agent of 0.1.0 wrote: no Healthy condition.
		old := testutil.MakeDeviceAllocation("cols-old-pod", ns).Node("cols-node-1").Obj()
		old.Status.Conditions = da.Status.Conditions[:1]
		Expect(k8sClient.Create(ctx, old)).To(Succeed())

		table := getTable("/apis/kubedevice.io/v1alpha1/deviceallocations")
		Expect(columnNames(table)).To(Equal([]string{"Name", "Pod", "Node", "Resources", "Allocated", "Healthy", "Age"}))
		Expect(rowFor(table, da.Name)[1:6]).To(Equal([]string{
			"cols-gopher-pod", "cols-node-1", "example.com/gopher=gopher-0", "True", "False",
		}))
		Expect(rowFor(table, old.Name)[4:6]).To(Equal([]string{"True", "<nil>"}), "no cell: kubectl prints it empty")
	})
})
