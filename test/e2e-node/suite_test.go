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

// Package e2enode holds the real-node end-to-end suite: it runs against the single-node cluster that
// hack/e2e-node/up.sh starts on this machine (kubelet, containerd 2.4 with NRI, CNI bridge) and talks
// to it as a user does, through the API and kubectl. Run it with `make e2e-node`, or against a
// cluster that is already up with `go test -tags e2enode ./test/e2e-node/`.
package e2enode

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
)

var (
	// kubeconfig is the admin kubeconfig of the e2e cluster ($KUBECONFIG, else bin/e2e-node/kubeconfig).
	kubeconfig string
	// kubectlPath is the kubectl built from source ($E2E_KUBECTL, else bin/k8s/kubectl).
	kubectlPath string
	// helmPath is the pinned helm that `make helm` installs ($E2E_HELM, else bin/helm).
	helmPath string
	// repoRoot is the repository: the binaries, config/, charts/ and hack/e2e-node/ are there.
	repoRoot string
	// image is the node's image: busybox and /pause as up.sh imports it, and the kubedevice
	// binaries once the kubedevice specs have built them (buildImage).
	image string
	// nriSocket is containerd's NRI socket, where kubedevice connects as an NRI plugin.
	nriSocket string
	// podResourcesSocket is the agent's PodResources API socket on the host, where monitoring
	// agents read which pod holds which device.
	podResourcesSocket string
	// kubectlCacheDir keeps kubectl's discovery cache out of ~/.kube for the suite's run.
	kubectlCacheDir string
	// clientset talks to the cluster as its admin.
	clientset kubernetes.Interface
	// kd reads and watches kubedevice's objects (and the built-in ones) with their Go types.
	kd   client.WithWatch
	node *corev1.Node
)

func TestE2ENode(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Real Node E2E Suite")
}

func envOr(key, fallback string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return fallback
}

var _ = BeforeSuite(func(ctx context.Context) {
	// controller-runtime's clients log through its logger: the spec's output.
	logf.SetLogger(GinkgoLogr)
	SetDefaultEventuallyTimeout(90 * time.Second)
	SetDefaultEventuallyPollingInterval(250 * time.Millisecond)
	// Eventually(ctx, ...) gives up after the default timeout too, not only when the spec's
	// context ends: a failure then says what it waited for.
	EnforceDefaultTimeoutsWhenUsingContexts()

	root, err := filepath.Abs(filepath.Join("..", ".."))
	Expect(err).NotTo(HaveOccurred())
	repoRoot = root
	kubeconfig = envOr("KUBECONFIG", filepath.Join(root, "bin", "e2e-node", "kubeconfig"))
	kubectlPath = envOr("E2E_KUBECTL", filepath.Join(root, "bin", "k8s", "kubectl"))
	helmPath = envOr("E2E_HELM", filepath.Join(root, "bin", "helm"))
	image = envOr("E2E_IMAGE", "docker.io/local/kubedevice:e2e")
	nriSocket = envOr("E2E_NRI_SOCKET", "/var/run/nri/nri.sock")
	podResourcesSocket = envOr("E2E_POD_RESOURCES_SOCKET", "/var/lib/kubedevice/pod-resources/kubelet.sock")
	Expect(kubeconfig).To(BeAnExistingFile(), "no cluster: run hack/e2e-node/up.sh (or make e2e-node-up) first")
	Expect(kubectlPath).To(BeAnExistingFile(), "no kubectl: run hack/e2e-node/install.sh first")
	kubectlCacheDir = GinkgoT().TempDir()

	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	Expect(err).NotTo(HaveOccurred())
	clientset, err = kubernetes.NewForConfig(cfg)
	Expect(err).NotTo(HaveOccurred())
	scheme := runtime.NewScheme()
	Expect(clientgoscheme.AddToScheme(scheme)).To(Succeed())
	Expect(kdv1alpha1.AddToScheme(scheme)).To(Succeed())
	kd, err = client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())

	nodes, err := clientset.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	Expect(err).NotTo(HaveOccurred())
	Expect(nodes.Items).To(HaveLen(1), "the e2e cluster has one node")
	node = &nodes.Items[0]
	Expect(isReady(node)).To(BeTrue(), "node %s is not Ready", node.Name)
}, NodeTimeout(time.Minute))

func isReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// The suite's timings (recordTiming), in the order they were taken, after all specs.
var _ = ReportAfterSuite("timings", func(report Report) {
	var lines []string
	for _, spec := range report.SpecReports {
		for _, e := range spec.ReportEntries {
			if name, ok := strings.CutPrefix(e.Name, timingPrefix); ok {
				lines = append(lines, fmt.Sprintf("  %-70s %s", name, e.StringRepresentation()))
			}
		}
	}
	if len(lines) > 0 {
		fmt.Printf("\nTimings of the real-node scenario:\n%s\n", strings.Join(lines, "\n"))
	}
})
