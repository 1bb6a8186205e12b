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
	"context"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
	"github.com/kubedevice/kubedevice/internal/cleanup"
	kdcontroller "github.com/kubedevice/kubedevice/internal/controller"
	"github.com/kubedevice/kubedevice/internal/testutil"
)

// cleanupUser is the service account the Helm chart's post-delete hook runs `kubedevice cleanup` as.
const cleanupUser = "system:serviceaccount:kubedevice-system:kubedevice-cleanup"

// adminGadget is an extended resource an administrator publishes on a node, under a field manager
// of its own: the cleanup must leave it.
const adminGadget corev1.ResourceName = "example.org/admin-gadget"

var _ = Describe("Uninstall cleanup", Ordered, func() {
	var node, ns string

	BeforeAll(func() {
		By("granting the cleanup's service account exactly config/rbac/cleanup")
		for _, obj := range loadManifests("config/rbac/cleanup/role.yaml") {
			Expect(k8sClient.Create(ctx, obj)).To(Succeed(), "creating %s %s", obj.GetKind(), obj.GetName())
			DeferCleanup(func() { Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, obj))).To(Succeed()) })
		}
		subjects := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "kubedevice-cleanup", Namespace: agentNamespace}}
		roleRef := func(kind string) rbacv1.RoleRef {
			return rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: kind, Name: "kubedevice-cleanup"}
		}
		for _, obj := range []client.Object{
			&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "kubedevice-cleanup"}, Subjects: subjects, RoleRef: roleRef("ClusterRole")},
			&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "kubedevice-cleanup", Namespace: agentNamespace}, Subjects: subjects, RoleRef: roleRef("Role")},
		} {
			Expect(k8sClient.Create(ctx, obj)).To(Succeed())
			DeferCleanup(func() { Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, obj))).To(Succeed()) })
		}
	})

	BeforeEach(func() {
		node = uniqueName("clean")
		ns = newNamespace()
		// Labelled as the kubelet registers it: the API server tracks no field ownership on an
		// object created without any field, so a bare Node would hide what the controller owns.
		createNode(testutil.MakeNode(node).Label(corev1.LabelHostname, node).
			Capacity(corev1.ResourceCPU, "4").Capacity(corev1.ResourceMemory, "8Gi"))
		renewLease(node)

		By("publishing an administrator's extended resource under another field manager")
		Expect(k8sClient.Status().Patch(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}},
			client.RawPatch(types.MergePatchType, []byte(`{"status":{"capacity":{"`+adminGadget+`":"3"},"allocatable":{"`+adminGadget+`":"3"}}}`)),
			client.FieldOwner("node-admin"))).To(Succeed())

		By("letting the controller publish example.com/gopher from a NodeDevice")
		applyAsAgent(testutil.MakeNodeDevice(node+"-gopher").Node(node).Devices("gopher", 4).Cordon("gopher-3", "flaky").Obj())
		Eventually(published(node, gopher)).Should(Equal("4/4"))
		expectFinalizer(node + "-gopher")
		applyAsAgent(testutil.MakeDeviceAllocation("p", ns).Node(node).Pod("p", "5f0c4b4e-0000-4000-8000-00000000c1ea").
			Container("app", string(gopher), "gopher-0").Obj())
	})

	It("removes the resources the controller published once it stopped, and the NodeDevices and DeviceAllocations, and nothing else", func() {
		stopController()
		Expect(controllerLease()).To(HaveField("Spec.HolderIdentity", HaveValue(BeEmpty())), "a stopped controller releases its Lease")

		res, err := runCleanup(cleanup.Options{LeaseNamespace: agentNamespace})
		Expect(err).NotTo(HaveOccurred())
		GinkgoWriter.Println(res)
		Expect(res.Controller).To(Equal(cleanup.ControllerReleased))
		Expect(res.Nodes).To(HaveKeyWithValue(node, []corev1.ResourceName{gopher}))
		Expect(res.NodeDevices).To(BeNumerically(">=", 1))
		Expect(res.FinalizersRemoved).To(BeNumerically(">=", 1))
		Expect(res.DeviceAllocations).To(BeNumerically(">=", 1))
		expectCleaned(node, ns)

		By("running it again: nothing left to do")
		res, err = runCleanup(cleanup.Options{LeaseNamespace: agentNamespace})
		Expect(err).NotTo(HaveOccurred())
		Expect(res).To(Equal(cleanup.Result{Controller: cleanup.ControllerReleased, Nodes: map[string][]corev1.ResourceName{}}))
		expectCleaned(node, ns)
	})

	It("deletes the DeviceClasses the controller kept and its DRA driver's ResourceSlices, and no one else's", func() {
		draResource := "example.com/" + uniqueName("cleangopher")
		applyAsAgent(testutil.MakeNodeDevice(node+".dra").Node(node).Resource(draResource).Devices("gopher", 1).
			Path(kdv1alpha1.DevicePathDRA).Obj())
		ours := strings.TrimPrefix(draResource, "example.com/") + ".example.com"
		Eventually(func() error {
			return k8sClient.Get(ctx, client.ObjectKey{Name: ours}, &resourcev1.DeviceClass{})
		}).Should(Succeed())
		theirClass := &resourcev1.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: uniqueName("their-class")}}
		Expect(k8sClient.Create(ctx, theirClass)).To(Succeed())
		DeferCleanup(func() { Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, theirClass))).To(Succeed()) })
		slice := func(driver string) *resourcev1.ResourceSlice {
			return &resourcev1.ResourceSlice{
				ObjectMeta: metav1.ObjectMeta{Name: uniqueName("slice")},
				Spec: resourcev1.ResourceSliceSpec{
					Driver: driver, NodeName: ptr.To(node),
					Pool:    resourcev1.ResourcePool{Name: "p", ResourceSliceCount: 1},
					Devices: []resourcev1.Device{{Name: "d0"}},
				},
			}
		}
		ourSlice, theirSlice := slice(kdcontroller.DRADriverName), slice("gpu.example.com")
		Expect(k8sClient.Create(ctx, ourSlice)).To(Succeed())
		Expect(k8sClient.Create(ctx, theirSlice)).To(Succeed())
		DeferCleanup(func() { Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, theirSlice))).To(Succeed()) })

		stopController()
		res, err := runCleanup(cleanup.Options{LeaseNamespace: agentNamespace})
		Expect(err).NotTo(HaveOccurred())
		Expect(res.DeviceClasses).To(Equal(1))
		Expect(res.ResourceSlices).To(Equal(1))
		Expect(apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKey{Name: ours}, &resourcev1.DeviceClass{}))).To(BeTrue())
		Expect(apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKeyFromObject(ourSlice), &resourcev1.ResourceSlice{}))).To(BeTrue())
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(theirClass), &resourcev1.DeviceClass{})).To(Succeed())
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(theirSlice), &resourcev1.ResourceSlice{})).To(Succeed())
	})

	It("finds a resource the controller left at zero after its NodeDevices went, by the controller's field ownership", func() {
		By("deleting the NodeDevice while the controller runs: the resource stays on the node at 0")
		Expect(k8sClient.Delete(ctx, &kdv1alpha1.NodeDevice{ObjectMeta: metav1.ObjectMeta{Name: node + "-gopher"}})).To(Succeed())
		Eventually(published(node, gopher)).Should(Equal("0/0"))
		Eventually(func() error {
			return k8sClient.Get(ctx, client.ObjectKey{Name: node + "-gopher"}, &kdv1alpha1.NodeDevice{})
		}).Should(Satisfy(apierrors.IsNotFound))

		stopController()
		res, err := runCleanup(cleanup.Options{LeaseNamespace: agentNamespace})
		Expect(err).NotTo(HaveOccurred())
		Expect(res.Nodes).To(HaveKeyWithValue(node, []corev1.ResourceName{gopher}))
		expectCleaned(node, ns)
	})

	It("waits for a Lease a controller left held, proceeds once it expires, and gives up after the timeout", func() {
		stopController()
		setControllerLease("kubedevice-controller-7d9f8_3b1e", 15)
		clk := clocktesting.NewFakeClock(time.Now())

		By("giving up after the timeout, having changed nothing")
		done := goCleanup(cleanup.Options{LeaseNamespace: agentNamespace, Timeout: 10 * time.Second, Clock: clk})
		Eventually(clk.HasWaiters).Should(BeTrue())
		clk.Step(10 * time.Second)
		var r cleanupReturn
		Eventually(done).Should(Receive(&r))
		Expect(r.err).To(MatchError(cleanup.ErrControllerRunning))
		Expect(r.err).To(MatchError(ContainSubstring("kubedevice-controller-7d9f8_3b1e")))
		Expect(published(node, gopher)()).To(Equal("4/4"))
		Expect(nodeDevice(node + "-gopher")()).To(HaveField("Finalizers", ContainElement(kdcontroller.NodeCapacityFinalizer)))

		By("waiting while the Lease is renewed, and going on once it was not for its duration")
		done = goCleanup(cleanup.Options{LeaseNamespace: agentNamespace, Clock: clk})
		Eventually(clk.HasWaiters).Should(BeTrue())
		clk.Step(10 * time.Second)
		Eventually(clk.HasWaiters).Should(BeTrue())
		setControllerLease("kubedevice-controller-7d9f8_3b1e", 15) // a renewal
		clk.Step(10 * time.Second)
		Eventually(clk.HasWaiters).Should(BeTrue())
		clk.Step(10 * time.Second) // 30 s since the first read, but only 10 s since the renewal was seen
		Eventually(clk.HasWaiters).Should(BeTrue())
		Expect(done).NotTo(Receive(), "the cleanup went on while the Lease was renewed")
		Expect(published(node, gopher)()).To(Equal("4/4"))
		clk.Step(6 * time.Second)
		Eventually(done).Should(Receive(&r))
		Expect(r.err).NotTo(HaveOccurred())
		Expect(r.res.Controller).To(Equal(cleanup.ControllerExpired))
		Expect(r.res.Nodes).To(HaveKeyWithValue(node, []corev1.ResourceName{gopher}))
		expectCleaned(node, ns)
	})

	It("does not wait when forced, and goes on without a Lease when the controller runs without leader election", func() {
		stopController()
		setControllerLease("kubedevice-controller-7d9f8_3b1e", 15)
		res, err := runCleanup(cleanup.Options{LeaseNamespace: agentNamespace, Force: true})
		Expect(err).NotTo(HaveOccurred())
		Expect(res.Controller).To(Equal(cleanup.ControllerNotWaited))
		expectCleaned(node, ns)

		deleteControllerLease()
		res, err = runCleanup(cleanup.Options{LeaseNamespace: agentNamespace})
		Expect(err).NotTo(HaveOccurred())
		Expect(res.Controller).To(Equal(cleanup.ControllerNoLease))
	})

	It("lets a CRD deletion that waits for the node-capacity finalizer complete, and runs again without the CRDs", func() {
		stopController()
		DeferCleanup(reinstallCRDs)
		crds := []string{"nodedevices.kubedevice.io", "deviceallocations.kubedevice.io"}
		for _, name := range crds {
			Expect(crdClient().Delete(ctx, &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: name}})).To(Succeed())
		}
		By("the NodeDevices CRD waits in its deletion for the NodeDevice, which the finalizer holds")
		Eventually(func() (*apiextensionsv1.CustomResourceDefinition, error) { return getCRD(crds[0]) }).
			Should(HaveField("Status.Conditions", ContainElement(And(
				HaveField("Type", apiextensionsv1.Terminating), HaveField("Status", apiextensionsv1.ConditionTrue)))))
		Eventually(nodeDevice(node + "-gopher")).Should(HaveField("DeletionTimestamp", Not(BeNil())))
		Expect(getCRD(crds[0])).To(HaveField("DeletionTimestamp", Not(BeNil())))

		res, err := runCleanup(cleanup.Options{LeaseNamespace: agentNamespace})
		Expect(err).NotTo(HaveOccurred())
		Expect(res.Nodes).To(HaveKeyWithValue(node, []corev1.ResourceName{gopher}))
		Expect(res.FinalizersRemoved).To(BeNumerically(">=", 1))
		expectNodeCleaned(node)
		for _, name := range crds {
			Eventually(func() error { _, err := getCRD(name); return err }).Should(Satisfy(apierrors.IsNotFound), name)
		}

		res, err = runCleanup(cleanup.Options{LeaseNamespace: agentNamespace})
		Expect(err).NotTo(HaveOccurred())
		Expect(res).To(Equal(cleanup.Result{Controller: cleanup.ControllerReleased, Nodes: map[string][]corev1.ResourceName{}}))
	})
})

// expectFinalizer waits until the NodeDevice holds the node-capacity finalizer.
func expectFinalizer(name string) {
	GinkgoHelper()
	Eventually(func() ([]string, error) {
		nd, err := nodeDevice(name)()
		return nd.Finalizers, err
	}).Should(ContainElement(kdcontroller.NodeCapacityFinalizer))
}

// stopController stops the suite's controller, as an uninstall does, and starts it again after
// the spec. Leases the spec left held are deleted first, so it leads at once.
func stopController() {
	GinkgoHelper()
	stopManager()
	DeferCleanup(func() {
		deleteControllerLease()
		stopManager = startManager()
	})
}

// runCleanup runs the cleanup as the chart's hook does: as its service account, with a client of
// its own (which discovers the API anew, as a new process would).
func runCleanup(opts cleanup.Options) (cleanup.Result, error) {
	GinkgoHelper()
	c, err := client.New(serviceAccountConfig(cleanupUser, nil), client.Options{Scheme: testEnv.Scheme})
	Expect(err).NotTo(HaveOccurred())
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return cleanup.Run(cctx, c, opts)
}

type cleanupReturn struct {
	res cleanup.Result
	err error
}

// goCleanup runs the cleanup in the background and returns where its result arrives.
func goCleanup(opts cleanup.Options) <-chan cleanupReturn {
	done := make(chan cleanupReturn, 1)
	go func() {
		defer GinkgoRecover()
		res, err := runCleanup(opts)
		done <- cleanupReturn{res, err}
	}()
	return done
}

// expectCleaned checks what the cleanup leaves of the spec's node and namespace: the node without
// kubedevice's resources but with the rest, no NodeDevice of the node, no DeviceAllocation.
func expectCleaned(node, ns string) {
	GinkgoHelper()
	expectNodeCleaned(node)
	nds := &kdv1alpha1.NodeDeviceList{}
	Expect(k8sClient.List(ctx, nds)).To(Succeed())
	for _, nd := range nds.Items {
		Expect(nd.Spec.NodeName).NotTo(Equal(node), "NodeDevice %s is left", nd.Name)
	}
	das := &kdv1alpha1.DeviceAllocationList{}
	Expect(k8sClient.List(ctx, das, client.InNamespace(ns))).To(Succeed())
	Expect(das.Items).To(BeEmpty())
}

func expectNodeCleaned(node string) {
	GinkgoHelper()
	Expect(published(node, gopher)()).To(Equal("-/-"))
	Expect(published(node, adminGadget)()).To(Equal("3/3"))
	Expect(published(node, corev1.ResourceCPU)()).To(Equal("4/4"))
	Expect(published(node, corev1.ResourceMemory)()).To(Equal("8Gi/8Gi"))
}

// controllerLease returns the controller's leader election Lease.
func controllerLease() (*coordinationv1.Lease, error) {
	lease := &coordinationv1.Lease{}
	return lease, k8sClient.Get(ctx, client.ObjectKey{Namespace: agentNamespace, Name: kdcontroller.LeaderElectionID}, lease)
}

// setControllerLease makes the controller's leader election Lease held by holder for seconds,
// renewed now, as a controller that is still running (or was killed) leaves it.
func setControllerLease(holder string, seconds int32) {
	GinkgoHelper()
	lease, err := controllerLease()
	want := testutil.MakeLease(kdcontroller.LeaderElectionID, agentNamespace).Holder(holder).RenewTime(time.Now()).Obj()
	want.Spec.LeaseDurationSeconds = ptr.To(seconds)
	switch {
	case apierrors.IsNotFound(err):
		Expect(k8sClient.Create(ctx, want)).To(Succeed())
	case err != nil:
		Fail(err.Error())
	default:
		lease.Spec = want.Spec
		Expect(k8sClient.Update(ctx, lease)).To(Succeed())
	}
}

func deleteControllerLease() {
	GinkgoHelper()
	Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: agentNamespace, Name: kdcontroller.LeaderElectionID},
	}))).To(Succeed())
}

// crdClient returns a client that knows CustomResourceDefinitions, as the suite's does not.
func crdClient() client.Client {
	GinkgoHelper()
	scheme := testutil.Scheme()
	Expect(apiextensionsv1.AddToScheme(scheme)).To(Succeed())
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
	return c
}

func getCRD(name string) (*apiextensionsv1.CustomResourceDefinition, error) {
	crd := &apiextensionsv1.CustomResourceDefinition{}
	return crd, crdClient().Get(ctx, client.ObjectKey{Name: name}, crd)
}

// reinstallCRDs installs the kubedevice CRDs again, once the deleted ones are gone, for the specs
// that follow.
func reinstallCRDs() {
	GinkgoHelper()
	for _, name := range []string{"nodedevices.kubedevice.io", "deviceallocations.kubedevice.io"} {
		Eventually(func() error { _, err := getCRD(name); return err }).Should(Satisfy(apierrors.IsNotFound), name)
	}
	_, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{
		Paths:              []string{filepath.Join(testutil.RepoRoot(), "config", "crd", "bases")},
		ErrorIfPathMissing: true,
	})
	Expect(err).NotTo(HaveOccurred())
}
