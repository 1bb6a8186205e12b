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
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

var (
	// kubeconfig is the admin kubeconfig of the e2e cluster ($KUBECONFIG, else bin/e2e-node/kubeconfig).
	kubeconfig string
	// kubectlPath is the kubectl built from source ($E2E_KUBECTL, else bin/k8s/kubectl).
	kubectlPath string
	// image is the image up.sh imported: busybox, /pause and the project's binaries.
	image string
	// nriSocket is containerd's NRI socket, where kubedevice connects as an NRI plugin.
	nriSocket string
	// kubectlCacheDir keeps kubectl's discovery cache out of ~/.kube for the suite's run.
	kubectlCacheDir string
	clientset kubernetes.Interface
	node      *corev1.Node
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
	SetDefaultEventuallyTimeout(90 * time.Second)
	SetDefaultEventuallyPollingInterval(250 * time.Millisecond)

	root, err := filepath.Abs(filepath.Join("..", ".."))
	Expect(err).NotTo(HaveOccurred())
	kubeconfig = envOr("KUBECONFIG", filepath.Join(root, "bin", "e2e-node", "kubeconfig"))
	kubectlPath = envOr("E2E_KUBECTL", filepath.Join(root, "bin", "k8s", "kubectl"))
	image = envOr("E2E_IMAGE", "docker.io/local/kubedevice:e2e")
	nriSocket = envOr("E2E_NRI_SOCKET", "/var/run/nri/nri.sock")
	Expect(kubeconfig).To(BeAnExistingFile(), "no cluster: run hack/e2e-node/up.sh (or make e2e-node-up) first")
	Expect(kubectlPath).To(BeAnExistingFile(), "no kubectl: run hack/e2e-node/install.sh first")
	kubectlCacheDir = GinkgoT().TempDir()

	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	Expect(err).NotTo(HaveOccurred())
	clientset, err = kubernetes.NewForConfig(cfg)
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
