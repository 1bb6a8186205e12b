//go:build e2enode

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

package e2enode

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
	"github.com/kubedevice/kubedevice/internal/contract"
)

const (
	// controllerLeaseDuration and controllerRetryPeriod are controller-runtime's leader election
	// defaults, which the controller keeps. A standby judges the Lease from the moment it saw the
	// last renewal (at its next poll, one retry period later at most; client-go jitters the period
	// by up to 1.2 times), and takes it at its first poll after the duration: at most the Lease
	// duration and two retry periods after the leader's last renewal.
	controllerLeaseDuration = 15 * time.Second
	controllerRetryPeriod   = 2400 * time.Millisecond
	// agentLeaseDuration and agentRenewInterval are the agent's Lease defaults: a killed agent's
	// Lease expires between their difference and agentLeaseDuration after its death.
	agentLeaseDuration = 40 * time.Second
	agentRenewInterval = 10 * time.Second
)

// probeLabel is the patch the node-scoped write checks send: a label, harmless where it lands.
var probeLabel = client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"e2e.kubedevice.io/probe":"node-scope"}}}`))

// asAgentOf returns a client that authenticates with the service account token the kubelet
// projected into the node's agent pod, read inside the pod.
func asAgentOf(ctx context.Context, nodeName string) client.Client {
	agent := agentPodOn(ctx, nodeName)
	token, err := execIn(ctx, kubedeviceNamespace, agent.Name, "cat", "/var/run/secrets/kubernetes.io/serviceaccount/token")
	Expect(err).NotTo(HaveOccurred())
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	Expect(err).NotTo(HaveOccurred())
	cfg = rest.AnonymousClientConfig(cfg)
	cfg.BearerToken = strings.TrimSpace(token)
	c, err := client.New(cfg, client.Options{Scheme: kd.Scheme()})
	Expect(err).NotTo(HaveOccurred())
	review := &authenticationv1.SelfSubjectReview{}
	Expect(c.Create(ctx, review)).To(Succeed())
	Expect(review.Status.UserInfo.Username).To(Equal("system:serviceaccount:" + kubedeviceNamespace + ":kubedevice-agent"))
	Expect(review.Status.UserInfo.Extra).To(HaveKeyWithValue("authentication.kubernetes.io/node-name",
		BeEquivalentTo([]string{nodeName})), "the token is bound to the agent's pod on node %s", nodeName)
	return c
}

// expectRefused checks that err is the admission policy's refusal, not RBAC's or another error.
func expectRefused(err error, policy, message, what string) {
	Expect(err).To(HaveOccurred(), "%s was allowed", what)
	Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%s: %v", what, err)
	Expect(err.Error()).To(And(ContainSubstring("ValidatingAdmissionPolicy '"+policy+"'"), ContainSubstring(message)), what)
}

// expectNodeScopedWrites: node A's agent, with its real token, is refused node B's NodeDevice,
// DeviceAllocation, Lease and a ResourceSlice of node B, and may write its own (sent as dry runs:
// admission runs in full, nothing is stored).
func expectNodeScopedWrites(ctx context.Context, ns string, onB devicePod) {
	as := asAgentOf(ctx, node.Name)
	theirs := "may only write objects of its own node, not of node " + nodeBName()
	for _, nodeName := range []string{nodeBName(), node.Name} {
		nds := &kdv1alpha1.NodeDeviceList{}
		Expect(kd.List(ctx, nds, client.MatchingLabels{"kubedevice.io/node": nodeName})).To(Succeed())
		Expect(nds.Items).NotTo(BeEmpty(), "NodeDevices of %s", nodeName)
		err := as.Patch(ctx, &nds.Items[0], probeLabel, dryRunOn[client.PatchOption](nodeName, client.DryRunAll)...)
		if nodeName == node.Name {
			Expect(err).NotTo(HaveOccurred(), "node A's agent patching its own NodeDevice")
			continue
		}
		expectRefused(err, "kubedevice-agent-node-restriction", theirs, "node A's agent patching node B's NodeDevice")
	}

	pod, err := getPod(ctx, ns, onB.name)
	Expect(err).NotTo(HaveOccurred())
	da, err := deviceAllocationOf(ctx, pod)
	Expect(err).NotTo(HaveOccurred())
	Expect(da).NotTo(BeNil())
	expectRefused(as.Patch(ctx, da, probeLabel), "kubedevice-agent-node-restriction", theirs,
		"node A's agent patching the DeviceAllocation of a pod on node B")

	for _, nodeName := range []string{nodeBName(), node.Name} {
		lease := &coordinationv1.Lease{}
		Expect(kd.Get(ctx, types.NamespacedName{Namespace: kubedeviceNamespace, Name: contract.AgentLeaseName(nodeName)}, lease)).To(Succeed())
		err := as.Update(ctx, lease, dryRunOn[client.UpdateOption](nodeName, client.DryRunAll)...)
		if nodeName == node.Name {
			Expect(err).NotTo(HaveOccurred(), "node A's agent renewing its own Lease")
			continue
		}
		expectRefused(err, "kubedevice-agent-lease", "may only write its own Lease", "node A's agent writing node B's Lease")
	}

	for _, nodeName := range []string{nodeBName(), node.Name} {
		slice := &resourcev1.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-node-scope-"},
			Spec: resourcev1.ResourceSliceSpec{Driver: "kubedevice.io", NodeName: ptr.To(nodeName),
				Pool: resourcev1.ResourcePool{Name: nodeName, ResourceSliceCount: 1}},
		}
		err := as.Create(ctx, slice, dryRunOn[client.CreateOption](nodeName, client.DryRunAll)...)
		if nodeName == node.Name {
			Expect(err).NotTo(HaveOccurred(), "node A's agent creating a ResourceSlice of its own node")
			continue
		}
		expectRefused(err, "kubedevice-agent-resourceslices", "may only write ResourceSlices of its own node, not of node "+nodeBName(),
			"node A's agent creating a ResourceSlice of node B")
	}
}

// dryRunOn returns dryRun for the writes node A's agent may do (those of its own node), so the
// check changes nothing, and nothing for those it may not: they are sent for real, so a broken
// policy shows. dryRun is client.DryRunAll, as the option type of the call.
func dryRunOn[O any](nodeName string, dryRun O) []O {
	if nodeName == node.Name {
		return []O{dryRun}
	}
	return nil
}

// nodeBAway stops node B's kubelet and kills its agent (nothing restarts it), and checks while
// node B's free gophers are withdrawn at its agent's Lease expiry that node A's never move nor its pod;
// then starts the kubelet again, which restarts the agent, and checks node B is as it was.
func nodeBAway(ctx context.Context, label, ns string, onA, onB devicePod) {
	// While the agent is away, node B keeps offering the gophers its pod holds, so its kubelet,
	// when it starts again, admits that pod again; the free one is withdrawn.
	held := int64(len(onB.gophers))
	stopped := time.Now()
	nodeBStep(ctx, "kubelet-stop")
	nodeBStep(ctx, "agent-kill")
	var zeroed time.Time
	for zeroed.IsZero() {
		Expect(time.Since(stopped)).To(BeNumerically("<", 2*time.Minute), "node B's free gophers were never withdrawn")
		cA, aA := offeredOn(ctx, Default, node.Name)
		Expect([]int64{cA, aA}).To(Equal([]int64{int64(len(gophersA)), int64(len(gophersA))}), "node A's gophers while node B is away")
		if cB, aB := offeredOn(ctx, Default, nodeBName()); cB == held && aB == held {
			zeroed = time.Now()
		}
		time.Sleep(250 * time.Millisecond)
	}
	recordTiming(label+"3. node B's kubelet and agent stopped -> node B offers only the gophers its pod holds", zeroed.Sub(stopped))
	Expect(zeroed.Sub(stopped)).To(BeNumerically(">=", agentLeaseDuration-agentRenewInterval-time.Second),
		"node B's free gophers withdrawn before its agent's Lease could have expired")
	Eventually(ctx, func(g Gomega) {
		nds := &kdv1alpha1.NodeDeviceList{}
		g.Expect(kd.List(ctx, nds, client.MatchingLabels{"kubedevice.io/node": nodeBName()})).To(Succeed())
		g.Expect(nds.Items).NotTo(BeEmpty())
		for _, nd := range nds.Items {
			c := meta.FindStatusCondition(nd.Status.Conditions, kdv1alpha1.NodeDeviceAgentReady)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse), "%s: %+v", nd.Name, c)
		}
	}).Should(Succeed())
	expectUnchanged(ctx, ns, onA)

	back := time.Now()
	nodeBStep(ctx, "kubelet-start")
	expectOffered(ctx, nodeBName(), int64(len(gophersB)))
	recordTiming(label+"3. node B's kubelet started -> node B offers its gophers again", time.Since(back))
	agentPodOn(ctx, nodeBName())
	expectUnchanged(ctx, ns, onA, onB)
	cA, aA := offeredOn(ctx, Default, node.Name)
	Expect([]int64{cA, aA}).To(Equal([]int64{int64(len(gophersA)), int64(len(gophersA))}))
}

// nodeBRecreated deletes node B's Node while its agent runs. The kubelet (v1.37) registers its
// Node once per start (kubelet_node_status.go, registrationCompleted), so the Node comes back when
// the kubelet starts again, as after a reboot or an operator's restart; the controller has deleted
// node B's NodeDevices with the Node, the agent writes them again, and the capacity is re-asserted
// on the new Node.
func nodeBRecreated(ctx context.Context, label string) {
	expectOffered(ctx, nodeBName(), int64(len(gophersB)))
	Expect(clientset.CoreV1().Nodes().Delete(ctx, nodeBName(), metav1.DeleteOptions{})).To(Succeed())
	deleted := time.Now()
	Eventually(ctx, func(g Gomega) {
		_, err := clientset.CoreV1().Nodes().Get(ctx, nodeBName(), metav1.GetOptions{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "node B still there: %v", err)
	}).Should(Succeed())
	nodeBStep(ctx, "kubelet-stop")
	nodeBStep(ctx, "kubelet-start")
	var registered time.Time
	Eventually(ctx, func(g Gomega) {
		n, err := clientset.CoreV1().Nodes().Get(ctx, nodeBName(), metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		registered = n.CreationTimestamp.Time
	}).WithTimeout(2 * time.Minute).Should(Succeed())
	expectOffered(ctx, nodeBName(), int64(len(gophersB)))
	recordTiming(label+"4. node B's Node deleted -> registered again by its restarted kubelet", registered.Sub(deleted))
	recordTiming(label+"4. node B's Node registered again -> its gophers offered", time.Since(registered))
	cA, aA := offeredOn(ctx, Default, node.Name)
	Expect([]int64{cA, aA}).To(Equal([]int64{int64(len(gophersA)), int64(len(gophersA))}))
}

// rollAgents changes a flag of the agent DaemonSet (its default value, said explicitly) and, on
// each node as the rollout takes that node's agent away, creates a pod asking for a gopher there:
// it must wait (the NRI gate holds its container) and then run with the node's gopher, never fail.
func rollAgents(ctx context.Context, label, ns string) {
	nodes := []string{node.Name, nodeBName()}
	old := map[string]types.UID{}
	for _, n := range nodes {
		old[n] = agentPodOn(ctx, n).UID
	}
	_, err := kubectl(ctx, "patch", "daemonset", agentDaemonSet, "-n", kubedeviceNamespace, "--type=json",
		"-p", `[{"op":"add","path":"/spec/template/spec/containers/0/args/-","value":"--endpoint-grace-period=5m"}]`)
	Expect(err).NotTo(HaveOccurred())
	start := time.Now()
	waits := map[string]func() podTimes{}
	for len(waits) < len(nodes) {
		Expect(time.Since(start)).To(BeNumerically("<", 3*time.Minute), "the rollout took no agent away on some node")
		for i, n := range nodes {
			if waits[n] != nil || !agentLeaving(ctx, n, old[n]) {
				continue
			}
			recordTiming(fmt.Sprintf("%s5. rollout started -> the agent of node %d leaves", label, i+1), time.Since(start))
			name := fmt.Sprintf("during-rollout-%d", i+1)
			waits[n] = startWatchingPod(ctx, ns, name, 3*time.Minute)
			createPod(ctx, MakePod(name, ns).Limits(gopherResource, 1).OnNode(n).Obj())
		}
		time.Sleep(100 * time.Millisecond)
	}
	for i, n := range nodes {
		t := waits[n]()
		Expect(t.pod.Spec.NodeName).To(Equal(n))
		p := devicePodState(ctx, t.pod)
		Expect(p.gophers).To(HaveLen(1))
		recordTiming(fmt.Sprintf("%s5. pod created as the agent of node %d left -> running with a gopher (held: %t)", label, i+1,
			wasHeld(ctx, ns, t.pod.Name)), t.running.Sub(t.bound))
	}
	expectDaemonSetOnNodes(ctx, kubedeviceNamespace, agentDaemonSet, 2)
	recordTiming(label+"5. rollout started -> both agents updated and Ready", time.Since(start))
}

// agentLeaving: the node's agent pod uid is terminating or gone.
func agentLeaving(ctx context.Context, nodeName string, uid types.UID) bool {
	pods, err := clientset.CoreV1().Pods(kubedeviceNamespace).List(ctx, metav1.ListOptions{
		LabelSelector: agentSelector, FieldSelector: "spec.nodeName=" + nodeName})
	Expect(err).NotTo(HaveOccurred())
	for _, p := range pods.Items {
		if p.UID == uid {
			return p.DeletionTimestamp != nil
		}
	}
	return true
}

// wasHeld: the pod's container was held by containerd's NRI gate (the event the kubelet records
// when the runtime refuses to create it).
func wasHeld(ctx context.Context, ns, name string) bool {
	events, err := clientset.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	Expect(err).NotTo(HaveOccurred())
	for _, e := range events.Items {
		if strings.Contains(e.Message, gateRefusal) {
			return true
		}
	}
	return false
}

// controllerFailover runs the controller with two replicas, kills the leader's process (SIGKILL:
// its Lease is not released), and checks both nodes' capacity through the takeover, which comes
// within the leader election's Lease duration and two retry periods of the kill.
func controllerFailover(ctx context.Context, label string) {
	_, err := kubectl(ctx, "scale", "deployment", controllerName, "-n", kubedeviceNamespace, "--replicas=2")
	Expect(err).NotTo(HaveOccurred())
	waitForKubedeviceOnNodes(ctx, 2)
	before := map[string][]int64{}
	for _, n := range []string{node.Name, nodeBName()} {
		c, a := offeredOn(ctx, Default, n)
		before[n] = []int64{c, a}
	}
	holder := leaderOf(ctx)
	leader, _, _ := strings.Cut(holder, "_")
	pod, err := getPod(ctx, kubedeviceNamespace, leader)
	Expect(err).NotTo(HaveOccurred())
	pid := processOfPod(pod.UID, "kubedevice-controller")
	Expect(syscall.Kill(pid, syscall.SIGKILL)).To(Succeed())
	killed := time.Now()
	var tookOver time.Time
	for tookOver.IsZero() {
		Expect(time.Since(killed)).To(BeNumerically("<", time.Minute), "no new leader")
		for n, want := range before {
			c, a := offeredOn(ctx, Default, n)
			Expect([]int64{c, a}).To(Equal(want), "node %s's gophers during the failover", n)
		}
		if h := leaderOf(ctx); h != "" && h != holder {
			tookOver = time.Now()
		}
		time.Sleep(100 * time.Millisecond)
	}
	recordTiming(label+"6. controller leader killed -> a new leader", tookOver.Sub(killed))
	// Two seconds for the API server's answers and the sampling on a loaded machine.
	Expect(tookOver.Sub(killed)).To(BeNumerically("<=", controllerLeaseDuration+2*controllerRetryPeriod+2*time.Second))
	Consistently(ctx, func(g Gomega) {
		for n, want := range before {
			c, a := offeredOn(ctx, g, n)
			g.Expect([]int64{c, a}).To(Equal(want), "node %s's gophers after the failover", n)
		}
	}, 5*time.Second, 250*time.Millisecond).Should(Succeed())
}

// waitForKubedeviceOnNodes waits for the agent on n nodes and every controller replica available.
func waitForKubedeviceOnNodes(ctx context.Context, n int32) {
	expectDaemonSetOnNodes(ctx, kubedeviceNamespace, agentDaemonSet, n)
	_, err := kubectl(ctx, "rollout", "status", "deployment", controllerName, "-n", kubedeviceNamespace, "--timeout=3m")
	Expect(err).NotTo(HaveOccurred())
}

// leaderOf returns the holder of the controller's leader election Lease ("" when none).
func leaderOf(ctx context.Context) string {
	lease := &coordinationv1.Lease{}
	Expect(kd.Get(ctx, types.NamespacedName{Namespace: kubedeviceNamespace, Name: contract.LeaderElectionID}, lease)).To(Succeed())
	return ptr.Deref(lease.Spec.HolderIdentity, "")
}

// processOfPod returns the PID of the process named exe running in the pod's cgroup (either
// node's: the kubelets use cgroupfs, whose pod cgroups are named pod<uid>).
func processOfPod(uid types.UID, exe string) int {
	entries, err := os.ReadDir("/proc")
	Expect(err).NotTo(HaveOccurred())
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		path, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
		if err != nil || filepath.Base(path) != exe {
			continue
		}
		cgroups, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cgroup"))
		if err == nil && strings.Contains(string(cgroups), "/pod"+string(uid)+"/") {
			return pid
		}
	}
	Fail(fmt.Sprintf("no %s process in pod %s", exe, uid))
	return 0
}
