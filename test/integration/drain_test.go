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
	"bytes"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	cmdutil "k8s.io/kubectl/pkg/cmd/util"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
	"github.com/kubedevice/kubedevice/internal/remediation"
	"github.com/kubedevice/kubedevice/internal/testutil"
)

// kubedevice drain and uncordon against a real API server, with no agent, controller or kubelet:
// the NodeDevices and DeviceAllocations are written as the agent writes them, and the holders are
// running pods bound to no node, so an eviction deletes them at once.
var _ = Describe("kubedevice drain and uncordon", func() {
	const resource = "example.com/gopher"
	var (
		ns, node    string
		shard0      string
		shard1      string
		cs          kubernetes.Interface
		out, errOut *bytes.Buffer
	)

	BeforeEach(func() {
		ns = newNamespace()
		node = "drain-" + ns
		var err error
		cs, err = kubernetes.NewForConfig(cfg)
		Expect(err).NotTo(HaveOccurred())
		out, errOut = &bytes.Buffer{}, &bytes.Buffer{}
		// Two shards: gopher-0 in the first, gopher-1 in the second, which an earlier drain
		// cordoned in the first too (a cordon counts from any shard).
		shard0 = createShard(testutil.MakeNodeDevice(node+"-gopher").Node(node).Shard(0).Cordon("gopher-1", "earlier").
			Device("gopher-0", kdv1alpha1.DeviceHealthy))
		shard1 = createShard(testutil.MakeNodeDevice(node+"-gopher-1").Node(node).Shard(1).Device("gopher-1", kdv1alpha1.DeviceHealthy))
		drainHolder(ns, node, "holder-0", "gopher-0", map[string]string{"app": "guarded"})
		drainHolder(ns, node, "holder-1", "gopher-1", nil)
	})

	opts := func(devices ...string) remediation.DrainOptions {
		return remediation.DrainOptions{
			Target: remediation.Target{Node: node, Resource: resource, Devices: devices},
			Reason: "test", Timeout: 30 * time.Second, RetryDelay: 200 * time.Millisecond, Out: out, ErrOut: errOut,
		}
	}
	podExists := func(name string) bool {
		GinkgoHelper()
		_, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false
		}
		Expect(err).NotTo(HaveOccurred())
		return true
	}

	It("cordons a device, evicts its holder and leaves the others; uncordon takes the cordon off every shard", func() {
		Expect(remediation.Drain(ctx, k8sClient, cs, opts("gopher-0"))).To(Succeed())
		GinkgoWriter.Printf("kubedevice drain %s %s gopher-0\n%s", node, resource, out)
		Expect(out.String()).To(ContainSubstring("nodedevice/" + shard0 + " cordoned gopher-0\n"))
		Expect(out.String()).To(ContainSubstring("evicting pod " + ns + "/holder-0\n"))
		Expect(out.String()).To(ContainSubstring("pod/holder-0 evicted\n"))
		Expect(podExists("holder-0")).To(BeFalse())
		Expect(podExists("holder-1")).To(BeTrue())
		Expect(cordonsOf(shard0)).To(ConsistOf("gopher-0", "gopher-1"))

		out.Reset()
		Expect(remediation.Uncordon(ctx, k8sClient, opts("gopher-0", "gopher-1"))).To(Succeed())
		GinkgoWriter.Printf("kubedevice uncordon %s %s gopher-0 gopher-1\n%s", node, resource, out)
		Expect(out.String()).To(Equal("nodedevice/" + shard0 + " uncordoned gopher-0\nnodedevice/" + shard0 + " uncordoned gopher-1\n"))
		Expect(cordonsOf(shard0)).To(BeEmpty())
		Expect(cordonsOf(shard1)).To(BeEmpty())

		out.Reset()
		Expect(remediation.Uncordon(ctx, k8sClient, opts("gopher-0"))).To(Succeed())
		Expect(out.String()).To(Equal(resource + " gopher-0 already uncordoned\n"))
	})

	It("puts a new cordon on the shard that lists the device", func() {
		Expect(remediation.Uncordon(ctx, k8sClient, opts("gopher-1"))).To(Succeed())
		Expect(remediation.Drain(ctx, k8sClient, cs, opts("gopher-1"))).To(Succeed())
		Expect(cordonsOf(shard1)).To(ConsistOf("gopher-1"))
		Expect(cordonsOf(shard0)).To(BeEmpty())
		Expect(podExists("holder-1")).To(BeFalse())
	})

	It("waits while a PodDisruptionBudget refuses the eviction, and fails at --timeout saying the devices stay cordoned", func() {
		createBudget(ns, "guarded", 0)
		o := opts("gopher-0")
		o.Timeout = 2 * time.Second
		start := time.Now()
		err := remediation.Drain(ctx, k8sClient, cs, o)
		GinkgoWriter.Printf("kubedevice drain %s %s gopher-0 --timeout 2s\n%s%s%v\n", node, resource, out, errOut, err)
		Expect(err).To(MatchError(And(ContainSubstring("global timeout reached: 2s"),
			ContainSubstring("the devices stay cordoned: kubedevice uncordon "+node+" "+resource+" gopher-0"))))
		Expect(time.Since(start)).To(BeNumerically(">=", 2*time.Second))
		Expect(errOut.String()).To(ContainSubstring("would violate the pod's disruption budget"))
		Expect(podExists("holder-0")).To(BeTrue())
		Expect(cordonsOf(shard0)).To(ContainElement("gopher-0"))
	})

	It("evicts once the budget allows it, within the timeout", func() {
		budget := createBudget(ns, "guarded", 0)
		go func() {
			defer GinkgoRecover()
			time.Sleep(time.Second)
			Eventually(func() error { return testutil.AllowDisruptions(ctx, k8sClient, budget, 1) }).Should(Succeed())
		}()
		Expect(remediation.Drain(ctx, k8sClient, cs, opts("gopher-0"))).To(Succeed())
		Expect(errOut.String()).To(ContainSubstring("would violate the pod's disruption budget"))
		Expect(podExists("holder-0")).To(BeFalse())
	})

	DescribeTable("a dry run evicts nothing and cordons nothing",
		func(dryRun cmdutil.DryRunStrategy, suffix string) {
			o := opts("gopher-0")
			o.DryRun = dryRun
			Expect(remediation.Drain(ctx, k8sClient, cs, o)).To(Succeed())
			GinkgoWriter.Printf("kubedevice drain %s %s gopher-0 --dry-run\n%s", node, resource, out)
			Expect(out.String()).To(ContainSubstring("nodedevice/" + shard0 + " cordoned gopher-0" + suffix + "\n"))
			Expect(out.String()).To(ContainSubstring("evicting pod " + ns + "/holder-0" + suffix + "\n"))
			Expect(podExists("holder-0")).To(BeTrue())
			Expect(cordonsOf(shard0)).To(ConsistOf("gopher-1"))
		},
		Entry("client", cmdutil.DryRunClient, " (dry run)"),
		Entry("server", cmdutil.DryRunServer, " (server dry run)"),
	)

	It("refuses a device the node does not have, and a resource it does not serve", func() {
		err := remediation.Drain(ctx, k8sClient, cs, opts("gopher-7"))
		Expect(err).To(MatchError(ContainSubstring(`"gopher-7": not a device of the resource on the node (devices: gopher-0, gopher-1)`)))
		o := opts("gpu-0")
		o.Resource = "example.com/gpu"
		Expect(remediation.Drain(ctx, k8sClient, cs, o)).To(MatchError(ContainSubstring("no NodeDevice lists the resource on the node")))
		Expect(podExists("holder-0")).To(BeTrue())
		Expect(cordonsOf(shard0)).To(ConsistOf("gopher-1"))
	})
})

// createShard creates the NodeDevice and writes its status, as the agent does; it returns its name.
func createShard(w *testutil.NodeDeviceWrapper) string {
	GinkgoHelper()
	nd := w.Obj()
	status := *nd.Status.DeepCopy()
	Expect(k8sClient.Create(ctx, nd)).To(Succeed())
	DeferCleanup(func() { Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, nd))).To(Succeed()) })
	nd.Status = status
	Expect(k8sClient.Status().Update(ctx, nd)).To(Succeed())
	return nd.Name
}

func cordonsOf(name string) []string {
	GinkgoHelper()
	nd := &kdv1alpha1.NodeDevice{}
	Expect(k8sClient.Get(ctx, client.ObjectKey{Name: name}, nd)).To(Succeed())
	var ids []string
	for _, c := range nd.Spec.Cordons {
		ids = append(ids, c.DeviceID)
	}
	return ids
}

// drainHolder creates a running, ready pod bound to no node (an eviction deletes it at once) and
// the DeviceAllocation recording that it holds the gopher id on node.
func drainHolder(ns, node, name, id string, labels map[string]string) {
	GinkgoHelper()
	pod := testutil.MakePod(name, ns).Obj()
	pod.Labels = labels
	Expect(k8sClient.Create(ctx, pod)).To(Succeed())
	pod.Status.Phase = corev1.PodRunning
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	Expect(k8sClient.Status().Update(ctx, pod)).To(Succeed())
	da := testutil.MakeDeviceAllocation(name, ns).Node(node).Pod(name, string(pod.UID)).Container("app", "example.com/gopher", id).Obj()
	Expect(k8sClient.Create(ctx, da)).To(Succeed())
}

// createBudget creates a PodDisruptionBudget keeping the pods labelled app=name, with a status
// allowing allowed disruptions (envtest runs no disruption controller).
func createBudget(ns, name string, allowed int32) *policyv1.PodDisruptionBudget {
	GinkgoHelper()
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: ptr.To(intstr.FromInt32(1)),
			Selector:     &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
		},
	}
	Expect(k8sClient.Create(ctx, pdb)).To(Succeed())
	Eventually(func() error { return testutil.AllowDisruptions(ctx, k8sClient, pdb, allowed) }).Should(Succeed())
	return pdb
}
