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
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
	"github.com/kubedevice/kubedevice/internal/agent"
	"github.com/kubedevice/kubedevice/internal/contract"
	kdcontroller "github.com/kubedevice/kubedevice/internal/controller"
	"github.com/kubedevice/kubedevice/internal/testutil"
)

const (
	agentUser        = "system:serviceaccount:kubedevice-system:kubedevice-agent"
	nodeNameExtraKey = "authentication.kubernetes.io/node-name"
)

// agentClient returns a client that acts as the agent's service account with a token bound to a
// pod on node, or with no node claim when node is empty.
func agentClient(node string) client.Client {
	GinkgoHelper()
	var extra map[string][]string
	if node != "" {
		extra = map[string][]string{nodeNameExtraKey: {node}}
	}
	cl, err := client.New(serviceAccountConfig(agentUser, extra), client.Options{Scheme: testEnv.Scheme})
	Expect(err).NotTo(HaveOccurred())
	return cl
}

// expectForbidden asserts that err is the admission policy's refusal carrying message.
func expectForbidden(err error, message string) {
	GinkgoHelper()
	Expect(err).To(HaveOccurred())
	Expect(apierrors.IsForbidden(err) || apierrors.IsInvalid(err)).To(BeTrue(), "expected a refusal, got %v", err)
	Expect(err.Error()).To(ContainSubstring(message))
}

var _ = Describe("Agent admission policy", Ordered, func() {
	const ownWrite = "may only write objects of its own node"
	const ownName = "may only create objects named "
	var nodeA, nodeB, ns string
	var asA client.Client

	BeforeAll(func() {
		By("installing the agent's RBAC and the admission policies from config/")
		for _, obj := range loadManifests(
			"config/rbac/agent/role.yaml",
			"config/rbac/agent_service_account.yaml",
			"config/rbac/agent_role_binding.yaml",
			"config/admission/agent_node_restriction.yaml",
		) {
			Expect(k8sClient.Create(ctx, obj)).To(Succeed(), "creating %s %s", obj.GetKind(), obj.GetName())
			DeferCleanup(func() { Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, obj))).To(Succeed()) })
		}
		nodeA = uniqueName("adm-a")
		nodeB = uniqueName("adm-b")
		createNode(testutil.MakeNode(nodeA))
		createNode(testutil.MakeNode(nodeB))
		// Live agents, so the controller keeps the pod-less DeviceAllocations written below.
		renewLease(nodeA)
		renewLease(nodeB)
		ns = newNamespace()
		asA = agentClient(nodeA)

		By("waiting for the policies to be in force")
		Eventually(func() error {
			return asA.Create(ctx, testutil.MakeNodeDevice(nodeB+".probe").Node(nodeB).Obj(), client.DryRunAll)
		}).Should(MatchError(ContainSubstring(ownWrite)))
		Eventually(func() error {
			return asA.Create(ctx, testutil.MakeLease(kdcontroller.AgentLeaseName(nodeB), agentNamespace).Obj(), client.DryRunAll)
		}).Should(MatchError(ContainSubstring("may only write its own Lease")))
	})

	It("lets the agent create, update and delete its own node's NodeDevice", func() {
		nd := testutil.MakeNodeDevice(agent.NodeDeviceName(nodeA, "example.com/gopher", 0)).Node(nodeA).Resource("example.com/gopher").Devices("gopher", 2).Obj()
		applyAs(asA, nd)
		Eventually(func() (int32, error) {
			got, err := nodeDevice(nd.Name)()
			return got.Status.Capacity, err
		}).Should(BeEquivalentTo(2))
		applyAs(asA, testutil.MakeNodeDevice(nd.Name).Node(nodeA).Resource("example.com/gopher").Devices("gopher", 3).Obj())
		Expect(asA.Delete(ctx, testutil.MakeNodeDevice(nd.Name).Obj())).To(Succeed())
		Eventually(isNotFound(nodeDevice(nd.Name))).Should(BeTrue())
	})

	It("refuses the agent's writes to another node's NodeDevice", func() {
		By("create")
		expectForbidden(tryApplyAs(asA, testutil.MakeNodeDevice(nodeB+".gopher").Node(nodeB).Devices("gopher", 1).Obj()),
			"the kubedevice agent on node "+nodeA+" "+ownWrite+", not of node "+nodeB)

		theirs := testutil.MakeNodeDevice(nodeB+".theirs").Node(nodeB).Devices("gopher", 1).Obj()
		applyAsAgent(theirs) // as the cluster admin
		DeferCleanup(func() { Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, theirs))).To(Succeed()) })

		By("update of the status")
		expectForbidden(tryApplyStatusAs(asA, theirs, map[string]any{"capacity": 0}), ownWrite)
		By("update of the object")
		theirs.Labels = map[string]string{kdv1alpha1.LabelNodeName: nodeA}
		expectForbidden(tryApplyAs(asA, theirs), ownWrite)
		By("delete")
		expectForbidden(asA.Delete(ctx, testutil.MakeNodeDevice(theirs.Name).Obj()), ownWrite)
		_, err := nodeDevice(theirs.Name)()
		Expect(err).NotTo(HaveOccurred())
	})

	It("refuses an agent squatting the names another node's agent derives", func() {
		// Node A's agent creates, under the names node B's agent will use, objects that say
		// they are node A's, which node B's agent could then neither write nor delete.
		const gopher = "example.com/gopher"
		squatted := agent.NodeDeviceName(nodeB, gopher, 0)
		expectForbidden(tryApplyAs(asA, testutil.MakeNodeDevice(squatted).Node(nodeA).Resource(gopher).Obj()),
			"the kubedevice agent on node "+nodeA+" "+ownName+nodeA+".<name without dots>, not "+squatted)
		// Node names that prefix one another: node A's agent cannot take a name of node
		// "<A>.x" (whose part before the last dot is not A) nor of "<A>-x".
		for _, other := range []string{nodeA + ".x", nodeA + "-x"} {
			for _, name := range []string{agent.NodeDeviceName(other, gopher, 0), agent.NodeDeviceName(other, gopher, 1)} {
				expectForbidden(tryApplyAs(asA, testutil.MakeNodeDevice(name).Node(nodeA).Resource(gopher).Obj()), ownName)
			}
		}
		expectForbidden(tryApplyAs(asA, testutil.MakeNodeDevice(nodeA+"-gopher").Node(nodeA).Obj()), ownName)

		By("DeviceAllocations")
		squattedDA := agent.DeviceAllocationName(nodeB, "victim", "3c0b1f6e-0d6e-4c1a-9a43-5a3c7f1d2e4b")
		expectForbidden(tryApplyAs(asA, testutil.MakeDeviceAllocation(squattedDA, ns).Node(nodeA).Obj()), ownName)
		expectForbidden(tryApplyAs(asA, testutil.MakeDeviceAllocation(nodeA+"-x."+nodeB, ns).Node(nodeA).Obj()), ownName)
		Expect(isNotFound(deviceAllocation(ns, squattedDA))()).To(BeTrue())

		By("node B's agent can use its names")
		asB := agentClient(nodeB)
		applyAs(asB, testutil.MakeNodeDevice(squatted).Node(nodeB).Resource(gopher).Obj())
		Expect(asB.Delete(ctx, testutil.MakeNodeDevice(squatted).Obj())).To(Succeed())
		applyAs(asB, testutil.MakeDeviceAllocation(squattedDA, ns).Node(nodeB).Obj())
		Expect(asB.Delete(ctx, testutil.MakeDeviceAllocation(squattedDA, ns).Obj())).To(Succeed())
	})

	It("lets the agent update and delete its objects named before names were checked", func() {
		old := testutil.MakeNodeDevice(nodeA+"-example-com-gopher-0123456789").Node(nodeA).Devices("gopher", 1).Obj()
		applyAsAgent(old) // as the cluster admin: created by an agent before the upgrade
		applyAs(asA, testutil.MakeNodeDevice(old.Name).Node(nodeA).Devices("gopher", 2).Obj())
		Expect(asA.Delete(ctx, testutil.MakeNodeDevice(old.Name).Obj())).To(Succeed())
	})

	It("applies the same rule to DeviceAllocations", func() {
		mine := agent.DeviceAllocationName(nodeA, "mine", "uid-mine")
		applyAs(asA, testutil.MakeDeviceAllocation(mine, ns).Node(nodeA).Container("app", "example.com/gopher", "gopher-0").Obj())
		expectForbidden(tryApplyAs(asA, testutil.MakeDeviceAllocation(nodeB+".theirs", ns).Node(nodeB).Obj()), ownWrite)

		theirs := testutil.MakeDeviceAllocation("theirs-existing", ns).Node(nodeB).Obj()
		applyAsAgent(theirs)
		// No status subresource: a status change is a write of the resource, which the policy
		// holds to the agent's node whether it is an apply or a patch of the status alone.
		changed := theirs.DeepCopy()
		changed.Status.Summary = "x"
		expectForbidden(tryApplyAs(asA, changed), ownWrite)
		expectForbidden(asA.Patch(ctx, testutil.MakeDeviceAllocation("theirs-existing", ns).Obj(),
			client.RawPatch(types.MergePatchType, []byte(`{"status":{"summary":"x"}}`))), ownWrite)
		// Nor may it write a status subresource (there is none, and RBAC grants none).
		err := tryApplyStatusAs(asA, theirs, map[string]any{"summary": "x"})
		Expect(apierrors.IsForbidden(err) || apierrors.IsNotFound(err)).To(BeTrue(), "a status write got %v", err)
		expectForbidden(asA.Delete(ctx, testutil.MakeDeviceAllocation("theirs-existing", ns).Obj()), ownWrite)
		Expect(asA.Delete(ctx, testutil.MakeDeviceAllocation(mine, ns).Obj())).To(Succeed())
	})

	It("lets the agent write only its own node's ResourceSlices of kubedevice's driver", func() {
		const ownSlices = "may only write ResourceSlices of its own node"
		slice := func(name, node, driver string) *resourcev1.ResourceSlice {
			return &resourcev1.ResourceSlice{
				ObjectMeta: metav1.ObjectMeta{Name: name},
				Spec: resourcev1.ResourceSliceSpec{
					Driver:   driver,
					NodeName: ptr.To(node),
					Pool:     resourcev1.ResourcePool{Name: node + "/example.com/gopher", ResourceSliceCount: 1},
					Devices:  []resourcev1.Device{{Name: "gopher-0"}},
				},
			}
		}
		By("its own node's slice: create, update, delete")
		mine := slice(uniqueName("rs-mine"), nodeA, contract.DRADriverName)
		Expect(asA.Create(ctx, mine)).To(Succeed())
		mine.Spec.Devices = append(mine.Spec.Devices, resourcev1.Device{Name: "gopher-1"})
		Expect(asA.Update(ctx, mine)).To(Succeed())

		By("another node's slice: create, update, delete, and moving its own slice to the other node")
		expectForbidden(asA.Create(ctx, slice(uniqueName("rs-theirs"), nodeB, contract.DRADriverName)),
			"the kubedevice agent on node "+nodeA+" "+ownSlices+", not of node "+nodeB)
		theirs := slice(uniqueName("rs-theirs"), nodeB, contract.DRADriverName)
		Expect(k8sClient.Create(ctx, theirs)).To(Succeed())
		DeferCleanup(func() { Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, theirs))).To(Succeed()) })
		theirs.Spec.Devices = nil
		expectForbidden(asA.Update(ctx, theirs), ownSlices)
		expectForbidden(asA.Delete(ctx, theirs), ownSlices)
		moved := mine.DeepCopy()
		moved.Spec.NodeName = ptr.To(nodeB)
		err := asA.Update(ctx, moved)
		Expect(err).To(HaveOccurred(), "moving a slice to another node") // the API server refuses it too: nodeName is immutable

		By("a slice of another driver on its own node")
		expectForbidden(asA.Create(ctx, slice(uniqueName("rs-other"), nodeA, "gpu.example.com")),
			"may only write ResourceSlices of driver kubedevice.io, not gpu.example.com")

		By("a token without a node")
		expectForbidden(agentClient("").Create(ctx, slice(uniqueName("rs-nonode"), nodeA, contract.DRADriverName)),
			"no node association found for the kubedevice agent")

		Expect(asA.Delete(ctx, mine)).To(Succeed())
	})

	It("refuses every write of an agent whose token names no node", func() {
		noNode := agentClient("")
		expectForbidden(tryApplyAs(noNode, testutil.MakeNodeDevice(nodeA+".nonode").Node(nodeA).Obj()),
			"no node association found for the kubedevice agent")
		expectForbidden(tryApplyAs(noNode, testutil.MakeDeviceAllocation(nodeA+".nonode", ns).Node(nodeA).Obj()),
			"no node association found for the kubedevice agent")
		expectForbidden(noNode.Create(ctx, testutil.MakeLease(kdcontroller.AgentLeaseName(nodeA), agentNamespace).Obj(), client.DryRunAll),
			"no node association found for the kubedevice agent")
	})

	It("lets the agent create and renew its own node's Lease", func() {
		lease := testutil.MakeLease(agent.LeaseName(nodeA), agentNamespace).Obj()
		Expect(k8sClient.Delete(ctx, lease.DeepCopy())).To(Succeed()) // renewLease made it as the admin
		Expect(asA.Create(ctx, lease)).To(Succeed())
		lease.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Now()))
		Expect(asA.Update(ctx, lease)).To(Succeed())
		got := &coordinationv1.Lease{}
		Expect(asA.Get(ctx, client.ObjectKeyFromObject(lease), got)).To(Succeed())
	})

	It("refuses the agent's writes to any other Lease", func() {
		By("another node's agent Lease, in kubedevice's namespace")
		theirs := &coordinationv1.Lease{}
		Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: agentNamespace, Name: agent.LeaseName(nodeB)}, theirs)).To(Succeed())
		theirs.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Now().Add(time.Hour)))
		expectForbidden(asA.Update(ctx, theirs),
			"the kubedevice agent on node "+nodeA+" may only write its own Lease kubedevice-agent-"+nodeA+", not kubedevice-agent-"+nodeB)
		expectForbidden(asA.Delete(ctx, theirs), "") // RBAC: no delete at all
		expectForbidden(asA.Create(ctx, testutil.MakeLease("kubedevice-agent-"+uniqueName("unknown"), agentNamespace).Obj()), "may only write its own Lease")
		expectForbidden(asA.Create(ctx, testutil.MakeLease(kdcontroller.LeaderElectionID, agentNamespace).Obj()), "may only write its own Lease")

		By("kube-system's leader election and kube-node-lease's heartbeats")
		for _, key := range []client.ObjectKey{
			{Namespace: metav1.NamespaceSystem, Name: "kube-scheduler"},
			{Namespace: metav1.NamespaceSystem, Name: "kube-controller-manager"},
			{Namespace: corev1.NamespaceNodeLease, Name: nodeA},
			{Namespace: corev1.NamespaceNodeLease, Name: nodeB},
		} {
			lease := testutil.MakeLease(key.Name, key.Namespace).Obj()
			Expect(client.IgnoreAlreadyExists(k8sClient.Create(ctx, lease.DeepCopy()))).To(Succeed())
			// Even its own Lease name, and the Lease of its own node's heartbeat.
			expectForbidden(asA.Create(ctx, testutil.MakeLease(agent.LeaseName(nodeA), key.Namespace).Obj()), "")
			got := &coordinationv1.Lease{}
			err := asA.Get(ctx, key, got)
			Expect(apierrors.IsForbidden(err)).To(BeTrue(), "getting %s as the agent: %v", key, err)
			Expect(k8sClient.Get(ctx, key, got)).To(Succeed())
			got.Spec.HolderIdentity = ptr.To("agent-" + nodeA)
			expectForbidden(asA.Update(ctx, got), "")
		}
	})
})

var _ = Describe("Controller admission policy", func() {
	const capacityOnly = "the kubedevice controller may only change extended resources in a node's capacity and allocatable"
	const statusOnly = "the kubedevice controller may only change a node's capacity and allocatable"
	var node string
	var asController client.Client

	// patchStatus merge-patches the node's status subresource as the controller.
	patchStatus := func(patch string, opts ...client.SubResourcePatchOption) error {
		return asController.Status().Patch(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}},
			client.RawPatch(types.MergePatchType, []byte(patch)), opts...)
	}

	BeforeEach(func() {
		node = uniqueName("ctl")
		createNode(testutil.MakeNode(node).Capacity(corev1.ResourceCPU, "4").Capacity("example.org/other", "2"))
		var err error
		asController, err = client.New(serviceAccountConfig(controllerUser, nil), client.Options{Scheme: testEnv.Scheme})
		Expect(err).NotTo(HaveOccurred())
		Eventually(func() error {
			return patchStatus(`{"status":{"capacity":{"cpu":"8"}}}`, client.DryRunAll)
		}).Should(MatchError(ContainSubstring(capacityOnly)))
	})

	It("lets the controller set, change and zero extended resources", func() {
		Expect(patchStatus(`{"status":{"capacity":{"example.com/gopher":"4"},"allocatable":{"example.com/gopher":"4"}}}`)).To(Succeed())
		Expect(patchStatus(`{"status":{"capacity":{"example.com/gopher":"0"},"allocatable":{"example.com/gopher":"0"}}}`)).To(Succeed())
		Expect(published(node, gopher)()).To(Equal("0/0"))
	})

	It("refuses the controller's changes to anything else of the node", func() {
		for _, patch := range []string{
			`{"status":{"capacity":{"cpu":"8"}}}`,
			`{"status":{"allocatable":{"pods":"1"}}}`,
			`{"status":{"capacity":{"devices.kubernetes.io/gpu":"1"}}}`,
			`{"status":{"capacity":{"cpu":null},"allocatable":{"cpu":null}}}`,
		} {
			expectForbidden(patchStatus(patch), capacityOnly)
		}
		for _, patch := range []string{
			`{"metadata":{"labels":{"node-role.kubernetes.io/control-plane":""}}}`,
			`{"status":{"conditions":[{"type":"Ready","status":"False","reason":"Nope","message":"x"}]}}`,
			`{"status":{"addresses":[{"type":"InternalIP","address":"10.0.0.1"}]}}`,
		} {
			expectForbidden(patchStatus(patch), statusOnly)
		}
		got := &corev1.Node{}
		Expect(k8sClient.Get(ctx, client.ObjectKey{Name: node}, got)).To(Succeed())
		Expect(got.Labels).NotTo(HaveKey("node-role.kubernetes.io/control-plane"))
		Expect(got.Status.Capacity).To(HaveKeyWithValue(corev1.ResourceCPU, resource.MustParse("4")))
	})
})
