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
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
	"github.com/kubedevice/kubedevice/internal/version"
)

// How kubedevice and the Gopher plugin are installed on the e2e node (hack/e2e-node/overlays, the
// Helm chart) and the names the manifests give their objects.
const (
	kubedeviceNamespace = "kubedevice-system"
	agentDaemonSet      = "kubedevice-agent"
	controllerName      = "kubedevice-controller"
	gopherNamespace     = "gopher-device-plugin"
	gopherDaemonSet     = "gopher-device-plugin"
	gopherResource      = "example.com/gopher"
	helmRelease         = "kubedevice"
	// agentSelector selects the agent's pods (config/agent, the chart).
	agentSelector = "app.kubernetes.io/name=kubedevice,app.kubernetes.io/component=agent"
	// controllerSelector selects the controller's pods (config/controller, the chart).
	controllerSelector = "app.kubernetes.io/name=kubedevice,app.kubernetes.io/component=controller"
)

// kubedeviceCRDs are the CustomResourceDefinitions both installs create.
var kubedeviceCRDs = []string{"nodedevices.kubedevice.io", "deviceallocations.kubedevice.io"}

// imageBinaries are the commands the manifests run from the image, built from cmd/: the chart's
// post-delete hook runs kubedevice cleanup, which the suite also runs itself after a kustomize
// uninstall. hack/e2e-node/e2e.sh builds the same list, with the same flags, before the suite.
var imageBinaries = []string{"kubedevice-agent", "kubedevice-controller", "gopher-device-plugin", "kubedevice"}

// cleanupJob is the chart's post-delete hook Job.
const cleanupJob = "kubedevice-cleanup"

// imageBin is where buildImage puts the static binaries.
func imageBin(name string) string {
	return filepath.Join(repoRoot, "bin", "e2e-node", "image-bin", name)
}

func overlay(name string) string {
	return filepath.Join(repoRoot, "hack", "e2e-node", "overlays", name)
}

var (
	// imageBuilt is set once the kubedevice binaries are in the node's image.
	imageBuilt bool
	// built is the version and commit the image's binaries say (kubedevice version), once built.
	built version.Info
)

// buildImage builds the static binaries the manifests run (CGO_ENABLED=0) into
// bin/e2e-node/image-bin, stamped with the version and commit as every build path stamps them
// (hack/version.sh), and has hack/e2e-node/image.sh put them into the node's image
// (docker.io/local/kubedevice:e2e, imported into containerd; also the sandbox image). Once per
// run: a re-run of the suite against a running cluster picks up changed code.
func buildImage(ctx context.Context) {
	if imageBuilt {
		return
	}
	start := time.Now()
	dir := imageBin("")
	Expect(os.MkdirAll(dir, 0o755)).To(Succeed())
	ldflags, err := run(ctx, nil, filepath.Join(repoRoot, "hack", "version.sh"))
	Expect(err).NotTo(HaveOccurred())
	// As hack/e2e-node/e2e.sh builds them before the suite, so that this build is a cache hit.
	args := []string{"build", "-trimpath", "-ldflags", "-s -w " + strings.TrimSpace(ldflags), "-o", dir + string(filepath.Separator)}
	var bins []string
	for _, b := range imageBinaries {
		args = append(args, "./cmd/"+b)
		bins = append(bins, filepath.Join(dir, b))
	}
	build := exec.CommandContext(ctx, "go", args...)
	build.Dir = repoRoot
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := build.CombinedOutput()
	Expect(err).NotTo(HaveOccurred(), "go %s:\n%s", strings.Join(args, " "), out)
	took := time.Since(start)
	out, err = exec.CommandContext(ctx, imageBin("kubedevice"), "version", "-o", "json").Output()
	Expect(err).NotTo(HaveOccurred(), "kubedevice version")
	Expect(json.Unmarshal(out, &built)).To(Succeed())
	GinkgoWriter.Printf("built kubedevice %s\n", built)

	imp := exec.CommandContext(ctx, filepath.Join(repoRoot, "hack", "e2e-node", "image.sh"), bins...)
	imp.Env = append(os.Environ(), "E2E_IMAGE="+image)
	out, err = imp.CombinedOutput()
	Expect(err).NotTo(HaveOccurred(), "hack/e2e-node/image.sh:\n%s", out)
	GinkgoWriter.Printf("%s", out)
	recordTiming("build the binaries (go build, CGO_ENABLED=0)", took)
	recordTiming("build the image and import it into containerd", time.Since(start)-took)
	imageBuilt = true
}

// run runs a command and returns its standard output; the error carries its standard error.
func run(ctx context.Context, env []string, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %w: %s%s", filepath.Base(name), strings.Join(args, " "), err, stderr.String(), stdout.String())
	}
	return stdout.String(), nil
}

// helm runs bin/helm against the e2e cluster, with its caches and configuration in a temporary
// directory rather than the user's home.
func helm(ctx context.Context, args ...string) (string, error) {
	home := filepath.Join(kubectlCacheDir, "helm")
	env := []string{
		"KUBECONFIG=" + kubeconfig,
		"HELM_CACHE_HOME=" + filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME=" + filepath.Join(home, "config"),
		"HELM_DATA_HOME=" + filepath.Join(home, "data"),
	}
	return run(ctx, env, helmPath, args...)
}

// renderedGopherDaemonSet renders the Gopher overlay as kubectl would apply it and returns its
// DaemonSet, so the suite writes gophers where the plugin really looks.
func renderedGopherDaemonSet(ctx context.Context) *appsv1.DaemonSet {
	out, err := kubectl(ctx, "kustomize", overlay("gopher"))
	Expect(err).NotTo(HaveOccurred())
	docs := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(out)))
	for {
		doc, err := docs.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		Expect(err).NotTo(HaveOccurred())
		var meta metav1.TypeMeta
		Expect(yaml.Unmarshal(doc, &meta)).To(Succeed())
		if meta.Kind != "DaemonSet" {
			continue
		}
		ds := &appsv1.DaemonSet{}
		Expect(yaml.Unmarshal(doc, ds)).To(Succeed())
		return ds
	}
	Fail("the Gopher overlay renders no DaemonSet")
	return nil
}

// gophersDir is the host directory the Gopher overlay's plugin advertises the files of.
func gophersDir(ds *appsv1.DaemonSet) string {
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.Name == "gophers" && v.HostPath != nil {
			return v.HostPath.Path
		}
	}
	Fail("the Gopher DaemonSet has no hostPath volume named gophers")
	return ""
}

// installWithKustomize applies the e2e overlay of config/default.
func installWithKustomize(ctx context.Context) {
	out, err := kubectl(ctx, "kustomize", overlay("kubedevice"))
	Expect(err).NotTo(HaveOccurred())
	Expect(out).To(ContainSubstring("image: "+image+"\n"), "hack/e2e-node/overlays/kubedevice must deploy the image the suite builds")
	out, err = kubectl(ctx, "apply", "--server-side", "-k", overlay("kubedevice"))
	Expect(err).NotTo(HaveOccurred())
	GinkgoWriter.Printf("kubectl apply --server-side -k hack/e2e-node/overlays/kubedevice:\n%s", out)
}

// installWithHelm installs the chart with the suite's image, never pulled.
func installWithHelm(ctx context.Context) {
	out, err := helm(ctx, append([]string{"install", helmRelease, filepath.Join(repoRoot, "charts", "kubedevice"),
		"--namespace", kubedeviceNamespace, "--create-namespace"}, helmValues(image)...)...)
	Expect(err).NotTo(HaveOccurred())
	GinkgoWriter.Printf("helm install:\n%s", out)
}

// helmValues are the suite's values of the chart: the image img, never pulled, and plain HTTP
// metrics.
func helmValues(img string) []string {
	repo, tag, ok := strings.Cut(img, ":")
	Expect(ok).To(BeTrue(), "image %q has no tag", img)
	return []string{"--set", "image.repository=" + repo, "--set", "image.tag=" + tag, "--set", "image.pullPolicy=Never",
		// agentMetrics goes through the API server's pod proxy, which sends no credentials.
		"--set", "metrics.secure=false"}
}

// waitForKubedevice waits until the agent DaemonSet has its one pod Ready and the controller
// Deployment is available, both at their current generation.
func waitForKubedevice(ctx context.Context) {
	Eventually(ctx, func(g Gomega) {
		ds := &appsv1.DaemonSet{}
		g.Expect(kd.Get(ctx, types.NamespacedName{Namespace: kubedeviceNamespace, Name: agentDaemonSet}, ds)).To(Succeed())
		g.Expect(daemonSetReady(ds)).To(BeTrue(), "agent DaemonSet: %+v", ds.Status)
		d := &appsv1.Deployment{}
		g.Expect(kd.Get(ctx, types.NamespacedName{Namespace: kubedeviceNamespace, Name: controllerName}, d)).To(Succeed())
		g.Expect(d.Status.ObservedGeneration).To(Equal(d.Generation))
		g.Expect(d.Status.UpdatedReplicas).To(Equal(*d.Spec.Replicas))
		g.Expect(d.Status.AvailableReplicas).To(Equal(*d.Spec.Replicas), "controller Deployment: %+v", d.Status)
	}).WithTimeout(3 * time.Minute).Should(Succeed())
}

// daemonSetReady: the DaemonSet runs its one pod on the node, updated and Ready.
func daemonSetReady(ds *appsv1.DaemonSet) bool { return daemonSetReadyOn(ds, 1) }

// daemonSetReadyOn: the DaemonSet runs its pods on n nodes, updated and Ready.
func daemonSetReadyOn(ds *appsv1.DaemonSet, n int32) bool {
	s := ds.Status
	return s.ObservedGeneration == ds.Generation && s.DesiredNumberScheduled == n &&
		s.UpdatedNumberScheduled == n && s.NumberReady == n && s.NumberUnavailable == 0
}

// installGopher writes one gopher file on the node (uninstall removes it) and runs the Gopher
// plugin's overlay.
func installGopher(ctx context.Context, id, content string) {
	installGopherFrom(ctx, "gopher", id, content)
}

// installGopherFrom is installGopher with the plugin's overlay named gopherOverlay (the same
// DaemonSet, registering elsewhere).
func installGopherFrom(ctx context.Context, gopherOverlay, id, content string) {
	ds := renderedGopherDaemonSet(ctx)
	Expect(ds.Spec.Template.Spec.Containers[0].Image).To(Equal(image), "hack/e2e-node/overlays/gopher must deploy the image the suite builds")
	dir := gophersDir(ds)
	Expect(os.MkdirAll(dir, 0o755)).To(Succeed())
	entries, err := os.ReadDir(dir)
	Expect(err).NotTo(HaveOccurred())
	for _, e := range entries {
		Expect(os.RemoveAll(filepath.Join(dir, e.Name()))).To(Succeed(), "a gopher left by an earlier run")
	}
	Expect(os.WriteFile(filepath.Join(dir, id), []byte(content), 0o644)).To(Succeed())

	out, err := kubectl(ctx, "apply", "-k", overlay(gopherOverlay))
	Expect(err).NotTo(HaveOccurred())
	GinkgoWriter.Printf("kubectl apply -k hack/e2e-node/overlays/%s:\n%s", gopherOverlay, out)
	Eventually(ctx, func(g Gomega) {
		ds := &appsv1.DaemonSet{}
		g.Expect(kd.Get(ctx, types.NamespacedName{Namespace: gopherNamespace, Name: gopherDaemonSet}, ds)).To(Succeed())
		g.Expect(daemonSetReady(ds)).To(BeTrue(), "Gopher DaemonSet: %+v", ds.Status)
	}).Should(Succeed())
}

// uninstall removes kubedevice and the Gopher plugin, however they were installed (either
// install, or what an interrupted run left), the way docs/install.md says, with the Gopher plugin
// still registered: `helm uninstall`, whose post-delete hook runs `kubedevice cleanup`; or
// `kubectl delete -k --wait=false` and then `kubedevice cleanup`, after which the deletion of the
// CRDs completes. With a label (after an install, not for what an interrupted run left) it checks
// what each leaves: the Node offers no gopher (not even 0), no NodeDevice is left, the hook Job
// succeeded (Helm deletes it only then), and records how long it took. Then it removes the rest:
// the Gopher plugin, the CRDs (Helm keeps them), the namespace, the gopher files.
func uninstall(ctx context.Context, label string) {
	if _, err := helm(ctx, "status", helmRelease, "--namespace", kubedeviceNamespace); err == nil {
		start := time.Now()
		out, err := helm(ctx, "uninstall", helmRelease, "--namespace", kubedeviceNamespace, "--wait")
		if err != nil {
			// A failed hook Job stays: show what it said.
			logs, _ := kubectl(ctx, "logs", "-n", kubedeviceNamespace, "job/"+cleanupJob, "--all-containers", "--tail=50")
			GinkgoWriter.Printf("logs of the cleanup Job:\n%s", logs)
		}
		Expect(err).NotTo(HaveOccurred(), "helm uninstall (it fails when the post-delete cleanup Job fails)")
		GinkgoWriter.Printf("helm uninstall:\n%s", out)
		if label != "" {
			recordTiming(label+"helm uninstall, its post-delete cleanup Job included", time.Since(start))
			_, err := clientset.BatchV1().Jobs(kubedeviceNamespace).Get(ctx, cleanupJob, metav1.GetOptions{})
			Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the hook Job %s is left (Helm deletes it once it succeeded): %v", cleanupJob, err)
			expectNoKubedeviceTraces(ctx)
		}
	}
	if _, err := clientset.AppsV1().Deployments(kubedeviceNamespace).Get(ctx, controllerName, metav1.GetOptions{}); err == nil {
		start := time.Now()
		_, err := kubectl(ctx, "delete", "-k", overlay("kubedevice"), "--ignore-not-found", "--wait=false")
		Expect(err).NotTo(HaveOccurred())
		// The namespace's deletion may take the controller's Lease before the controller has
		// stopped, so docs/install.md waits for its pods to be gone first, as here.
		_, err = kubectl(ctx, "wait", "--for=delete", "pod", "-n", kubedeviceNamespace, "-l", controllerSelector, "--timeout=2m")
		Expect(err).NotTo(HaveOccurred())
		cleanUp(ctx)
		Eventually(ctx, func(g Gomega) {
			for _, crd := range kubedeviceCRDs {
				g.Expect(crdExists(ctx, crd)).To(BeFalse(), "CRD %s", crd)
			}
		}).Should(Succeed())
		if label != "" {
			recordTiming(label+"kubectl delete -k --wait=false, kubedevice cleanup, the CRDs gone", time.Since(start))
			expectNoKubedeviceTraces(ctx)
		}
	}

	start := time.Now()
	_, err := kubectl(ctx, "delete", "-k", overlay("gopher"), "--ignore-not-found", "--wait")
	Expect(err).NotTo(HaveOccurred())
	waitForNoAgent(ctx)
	if crdExists(ctx, kubedeviceCRDs[0]) {
		// What an interrupted run left, or the NodeDevices an agent wrote after the cleanup.
		cleanUp(ctx, "--force")
	}
	_, err = kubectl(ctx, "delete", "-k", overlay("kubedevice"), "--ignore-not-found", "--wait")
	Expect(err).NotTo(HaveOccurred())
	_, err = kubectl(ctx, append([]string{"delete", "customresourcedefinition", "--ignore-not-found", "--wait"}, kubedeviceCRDs...)...)
	Expect(err).NotTo(HaveOccurred())
	_, err = kubectl(ctx, "delete", "namespace", kubedeviceNamespace, "--ignore-not-found", "--wait")
	Expect(err).NotTo(HaveOccurred())

	Eventually(ctx, func(g Gomega) {
		for _, crd := range kubedeviceCRDs {
			g.Expect(crdExists(ctx, crd)).To(BeFalse(), "CRD %s", crd)
		}
		for _, ns := range []string{kubedeviceNamespace, gopherNamespace} {
			_, err := clientset.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "namespace %s: %v", ns, err)
		}
		policies, err := clientset.AdmissionregistrationV1().MutatingAdmissionPolicies().List(ctx, metav1.ListOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		for _, p := range policies.Items {
			g.Expect(p.Name).NotTo(HavePrefix("kubedevice"), "a mutating admission policy of kubedevice is left")
		}
	}).Should(Succeed())
	if label != "" {
		expectNoKubedeviceTraces(ctx)
	}
	Expect(os.RemoveAll(gophersDir(renderedGopherDaemonSet(ctx)))).To(Succeed())
	if label != "" {
		recordTiming(label+"then the Gopher plugin, the CRDs and the namespace", time.Since(start))
	}
}

// cleanUp runs `kubedevice cleanup` (the static binary built for the image) against the cluster.
func cleanUp(ctx context.Context, extra ...string) {
	out, err := run(ctx, nil, imageBin("kubedevice"), append([]string{"cleanup", "--kubeconfig", kubeconfig,
		"--lease-namespace", kubedeviceNamespace, "--timeout", "1m"}, extra...)...)
	Expect(err).NotTo(HaveOccurred())
	GinkgoWriter.Printf("kubedevice cleanup: %s", out)
}

// expectNoKubedeviceTraces checks what an uninstall must leave: the node offers no gopher, neither
// in its capacity nor in its allocatable (not even as 0), no NodeDevice is left, and neither are
// kubedevice's DeviceClasses nor its DRA driver's ResourceSlices.
func expectNoKubedeviceTraces(ctx context.Context) {
	n, err := clientset.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
	Expect(err).NotTo(HaveOccurred())
	Expect(n.Status.Capacity).NotTo(HaveKey(corev1.ResourceName(gopherResource)), "the node's capacity")
	Expect(n.Status.Allocatable).NotTo(HaveKey(corev1.ResourceName(gopherResource)), "the node's allocatable")
	classes := &resourcev1.DeviceClassList{}
	Expect(kd.List(ctx, classes, client.MatchingLabels{"app.kubernetes.io/managed-by": "kubedevice"})).To(Succeed())
	Expect(classes.Items).To(BeEmpty(), "kubedevice's DeviceClasses left")
	slices := &resourcev1.ResourceSliceList{}
	Expect(kd.List(ctx, slices, client.MatchingFields{resourcev1.ResourceSliceSelectorDriver: "kubedevice.io"})).To(Succeed())
	Expect(slices.Items).To(BeEmpty(), "ResourceSlices of kubedevice's DRA driver left")
	if crdExists(ctx, kubedeviceCRDs[0]) {
		list := &kdv1alpha1.NodeDeviceList{}
		Expect(kd.List(ctx, list)).To(Succeed())
		Expect(list.Items).To(BeEmpty(), "NodeDevices left")
	}
}

func crdExists(ctx context.Context, name string) bool {
	_, err := kubectl(ctx, "get", "customresourcedefinition", name, "-o", "name")
	return err == nil
}

// waitForNoAgent waits until no agent pod is left on the node.
func waitForNoAgent(ctx context.Context) {
	Eventually(ctx, func(g Gomega) {
		pods, err := clientset.CoreV1().Pods(kubedeviceNamespace).List(ctx, metav1.ListOptions{LabelSelector: agentSelector})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(pods.Items).To(BeEmpty(), "agent pods")
	}).Should(Succeed())
}

// forgetGopherCapacity removes example.com/gopher from the Node's capacity and allocatable, where
// an earlier install left it (the controller zeroes it on uninstall but cannot remove it), so that
// an install has to publish it again.
func forgetGopherCapacity(ctx context.Context) {
	n, err := clientset.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
	Expect(err).NotTo(HaveOccurred())
	escaped := strings.ReplaceAll(gopherResource, "/", "~1")
	var ops []string
	if _, ok := n.Status.Capacity[gopherResource]; ok {
		ops = append(ops, fmt.Sprintf(`{"op":"remove","path":"/status/capacity/%s"}`, escaped))
	}
	if _, ok := n.Status.Allocatable[gopherResource]; ok {
		ops = append(ops, fmt.Sprintf(`{"op":"remove","path":"/status/allocatable/%s"}`, escaped))
	}
	if len(ops) == 0 {
		return
	}
	_, err = clientset.CoreV1().Nodes().Patch(ctx, node.Name, types.JSONPatchType,
		[]byte("["+strings.Join(ops, ",")+"]"), metav1.PatchOptions{}, "status")
	Expect(err).NotTo(HaveOccurred())
}

// agentPod returns the agent's pod on the node, once there is exactly one and it is Ready.
func agentPod(ctx context.Context) *corev1.Pod { return agentPodOn(ctx, node.Name) }

func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// agentMetrics returns the agent pod's Prometheus metrics, through the API server's pod proxy
// (plain HTTP: both installs set --metrics-secure=false for the suite, as the proxy sends no
// credentials).
// The port goes by number: kube-apiserver v1.37.1 panics (nil location in the upgrade-aware
// proxy) on a pod proxy request that names the port.
func agentMetrics(ctx context.Context, pod *corev1.Pod) (string, error) {
	port := int32(0)
	for _, p := range pod.Spec.Containers[0].Ports {
		if p.Name == "metrics" {
			port = p.ContainerPort
		}
	}
	if port == 0 {
		return "", fmt.Errorf("agent pod %s has no port named metrics", pod.Name)
	}
	return kubectl(ctx, "get", "--raw", fmt.Sprintf("/api/v1/namespaces/%s/pods/%s:%d/proxy/metrics", kubedeviceNamespace, pod.Name, port))
}

// gopherNodeDevice returns the node's NodeDevice of example.com/gopher.
func gopherNodeDevice(ctx context.Context) (*kdv1alpha1.NodeDevice, error) {
	found, err := gopherNodeDevices(ctx)
	if err != nil {
		return nil, err
	}
	if len(found) != 1 {
		return nil, fmt.Errorf("%d NodeDevices of %s on node %s", len(found), gopherResource, node.Name)
	}
	return &found[0], nil
}

// deviceAllocationOf returns the DeviceAllocation of the pod (by its UID), or nil when there is none.
func deviceAllocationOf(ctx context.Context, pod *corev1.Pod) (*kdv1alpha1.DeviceAllocation, error) {
	list := &kdv1alpha1.DeviceAllocationList{}
	if err := kd.List(ctx, list, client.InNamespace(pod.Namespace)); err != nil {
		return nil, err
	}
	var found []kdv1alpha1.DeviceAllocation
	for _, da := range list.Items {
		if da.Spec.PodUID == string(pod.UID) {
			found = append(found, da)
		}
	}
	switch len(found) {
	case 0:
		return nil, nil
	case 1:
		return &found[0], nil
	default:
		return nil, fmt.Errorf("%d DeviceAllocations of pod %s/%s", len(found), pod.Namespace, pod.Name)
	}
}

// allocatedDevices lists a DeviceAllocation's devices as container/resource=id.
func allocatedDevices(da *kdv1alpha1.DeviceAllocation) []string {
	var ids []string
	for _, c := range da.Status.Containers {
		for _, r := range c.Resources {
			for _, id := range r.DeviceIDs {
				ids = append(ids, c.Name+"/"+r.ResourceName+"="+id)
			}
		}
	}
	return ids
}

// dumpKubedevice writes what a failed kubedevice spec leaves behind, before the container
// uninstalls it, to bin/e2e-node/logs/kubedevice-<time>.txt (the cluster's log directory, kept by
// down.sh): pods, kubedevice's objects, events, and the logs of the agent, controller and plugin.
func dumpKubedevice(ctx context.Context) {
	var b strings.Builder
	section := func(title string, args ...string) {
		out, err := kubectl(ctx, args...)
		fmt.Fprintf(&b, "=== %s (kubectl %s)\n%s", title, strings.Join(args, " "), out)
		if err != nil {
			fmt.Fprintf(&b, "error: %v\n", err)
		}
	}
	section("pods", "get", "pods", "-A", "-o", "wide")
	section("node", "get", "node", node.Name, "-o", "yaml")
	section("NodeDevices", "get", "nodedevices", "-o", "yaml")
	section("DeviceAllocations", "get", "deviceallocations", "-A", "-o", "yaml")
	section("events", "get", "events", "-A", "--sort-by=.lastTimestamp")
	for _, ns := range []string{kubedeviceNamespace, gopherNamespace} {
		pods, err := clientset.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			continue
		}
		for _, p := range pods.Items {
			section("logs of "+ns+"/"+p.Name, "logs", "-n", ns, p.Name, "--all-containers", "--timestamps")
		}
	}
	dir := filepath.Join(repoRoot, "bin", "e2e-node", "logs")
	file := filepath.Join(dir, "kubedevice-"+time.Now().Format("150405")+".txt")
	if err := os.WriteFile(file, []byte(b.String()), 0o644); err != nil {
		GinkgoWriter.Printf("could not write %s: %v\n%s", file, err, b.String())
		return
	}
	GinkgoWriter.Printf("kubedevice's state after the failure: %s\n", file)
}
