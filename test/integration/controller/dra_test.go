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

package controller

import (
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
	"github.com/kubedevice/kubedevice/internal/contract"
	kdcontroller "github.com/kubedevice/kubedevice/internal/controller"
	"github.com/kubedevice/kubedevice/internal/testutil"
)

// deviceClass returns the DeviceClass of that name, or an error.
func deviceClass(name string) func() (*resourcev1.DeviceClass, error) {
	return func() (*resourcev1.DeviceClass, error) {
		dc := &resourcev1.DeviceClass{}
		err := k8sClient.Get(ctx, client.ObjectKey{Name: name}, dc)
		return dc, err
	}
}

var _ = Describe("Resources served through DRA", func() {
	var node, resourceName, className string

	BeforeEach(func() {
		node = uniqueName("dra")
		// A resource of its own per spec: DeviceClasses are cluster-scoped and shared.
		resourceName = "example.com/" + uniqueName("dragopher")
		className = strings.TrimPrefix(resourceName, "example.com/") + ".example.com"
		createNode(testutil.MakeNode(node).Capacity(corev1.ResourceCPU, "4"))
		renewLease(node)
	})

	It("keeps a DeviceClass with the resource as its extendedResourceName while a node serves it through DRA", func() {
		applyAsAgent(testutil.MakeNodeDevice(node+".dra").Node(node).Resource(resourceName).Devices("gopher", 2).
			Path(kdv1alpha1.DevicePathDRA).Obj())

		By("creating the DeviceClass")
		Eventually(func() (*string, error) {
			dc, err := deviceClass(className)()
			return dc.Spec.ExtendedResourceName, err
		}).Should(HaveValue(Equal(resourceName)))
		dc, err := deviceClass(className)()
		Expect(err).NotTo(HaveOccurred())
		Expect(dc.Labels).To(HaveKeyWithValue(contract.ManagedByLabel, contract.ManagedByValue))
		Expect(dc.Spec.Selectors).To(HaveLen(1))
		Expect(dc.Spec.Selectors[0].CEL.Expression).To(Equal(
			`device.driver == "kubedevice.io" && device.attributes["kubedevice.io"].resourceName == "` + resourceName + `"`))
		By("publishing no node capacity for it")
		waitIdle()
		Expect(published(node, corev1.ResourceName(resourceName))()).To(Equal("-/-"))

		By("restoring it when someone changes it")
		dc.Spec.ExtendedResourceName = ptr.To("example.com/other")
		Expect(k8sClient.Update(ctx, dc)).To(Succeed())
		Eventually(func() (*string, error) {
			dc, err := deviceClass(className)()
			return dc.Spec.ExtendedResourceName, err
		}).Should(HaveValue(Equal(resourceName)))

		By("deleting it once no node serves the resource through DRA")
		applyAsAgent(testutil.MakeNodeDevice(node+".dra").Node(node).Resource(resourceName).Devices("gopher", 2).
			Path(kdv1alpha1.DevicePathNodeCapacity).Obj())
		Eventually(isNotFound(deviceClass(className))).Should(BeTrue())
		Eventually(published(node, corev1.ResourceName(resourceName))).Should(Equal("2/2"))
	})

	It("withdraws the resource from the node when it switches to DRA, and publishes it again when it switches back", func() {
		nd := func(path kdv1alpha1.DevicePath) *kdv1alpha1.NodeDevice {
			return testutil.MakeNodeDevice(node+".sw").Node(node).Resource(resourceName).Devices("gopher", 3).Path(path).Obj()
		}
		applyAsAgent(nd(""))
		Eventually(published(node, corev1.ResourceName(resourceName))).Should(Equal("3/3"))

		applyAsAgent(nd(kdv1alpha1.DevicePathDRA))
		Eventually(published(node, corev1.ResourceName(resourceName))).Should(Equal("-/-"))
		got := &corev1.Node{}
		Expect(k8sClient.Get(ctx, client.ObjectKey{Name: node}, got)).To(Succeed())
		Expect(got.Status.Capacity).To(HaveKeyWithValue(corev1.ResourceCPU, resource.MustParse("4")), "other resources kept")
		Eventually(isNotFound(deviceClass(className))).Should(BeFalse())

		applyAsAgent(nd(kdv1alpha1.DevicePathNodeCapacity))
		Eventually(published(node, corev1.ResourceName(resourceName))).Should(Equal("3/3"))
	})

	It("never writes the capacity of a resource the kubelet manages (observed)", func() {
		createNode(testutil.MakeNode(node+"-obs").Capacity(corev1.ResourceName(resourceName), "5"))
		renewLease(node + "-obs")
		applyAsAgent(testutil.MakeNodeDevice(node+"-obs.obs").Node(node+"-obs").Resource(resourceName).Devices("gopher", 2).
			Path(kdv1alpha1.DevicePathObserved).Obj())
		Eventually(func() ([]string, error) {
			nd, err := nodeDevice(node + "-obs.obs")()
			return nd.Finalizers, err
		}).Should(ContainElement(kdcontroller.NodeCapacityFinalizer))
		waitIdle()
		Expect(published(node+"-obs", corev1.ResourceName(resourceName))()).To(Equal("5/5"))

		By("letting its NodeDevice go without zeroing the kubelet's count")
		Expect(k8sClient.Delete(ctx, testutil.MakeNodeDevice(node+"-obs.obs").Obj())).To(Succeed())
		Eventually(isNotFound(nodeDevice(node + "-obs.obs"))).Should(BeTrue())
		Expect(published(node+"-obs", corev1.ResourceName(resourceName))()).To(Equal("5/5"))
	})

	It("leaves an administrator's own DeviceClass for the resource alone, and says so on the NodeDevice", func() {
		theirs := &resourcev1.DeviceClass{
			ObjectMeta: metav1.ObjectMeta{Name: uniqueName("admin-class")},
			Spec:       resourcev1.DeviceClassSpec{ExtendedResourceName: ptr.To(resourceName)},
		}
		Expect(k8sClient.Create(ctx, theirs)).To(Succeed())
		DeferCleanup(func() { Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, theirs))).To(Succeed()) })
		applyAsAgent(testutil.MakeNodeDevice(node+".adm").Node(node).Resource(resourceName).Devices("gopher", 1).
			Path(kdv1alpha1.DevicePathDRA).Obj())
		ndObj, err := nodeDevice(node + ".adm")()
		Expect(err).NotTo(HaveOccurred())
		Eventually(eventsFor(ndObj.UID)).Should(ContainElement(HaveField("Reason", kdcontroller.EventReasonDeviceClassConflict)))
		Expect(isNotFound(deviceClass(className))()).To(BeTrue())
	})
})
