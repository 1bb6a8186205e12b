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
	"net"
	"os"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// requiredPluginsAnnotation is containerd's NRI default-validator annotation: a container of a pod
// that carries it is created only while every NRI plugin it names is connected.
const requiredPluginsAnnotation = "required-plugins.noderesource.dev/pod"

var _ = Describe("The real node", func() {
	var ns string

	BeforeEach(func(ctx context.Context) {
		ns = newNamespace(ctx)
	})

	It("runs a plain busybox pod that kubectl can exec into and read the logs of", func(ctx context.Context) {
		start := time.Now()
		createPod(ctx, MakePod("busybox", ns).Command("sh", "-c", "echo hello from $(hostname); exec sleep 3600").Obj())
		pod := waitForPhase(ctx, ns, "busybox", corev1.PodRunning)
		AddReportEntry("plain pod created -> Running", time.Since(start).Round(time.Millisecond).String())
		Expect(pod.Spec.NodeName).To(Equal(node.Name))
		Expect(pod.Status.PodIP).To(HavePrefix("10.88."), "the pod's IP comes from the CNI bridge's range")

		out, err := kubectl(ctx, "exec", "-n", ns, "busybox", "--", "sh", "-c", "echo $((6 * 7)) $(cat /etc/hostname)")
		Expect(err).NotTo(HaveOccurred())
		Expect(strings.TrimSpace(out)).To(Equal("42 busybox"))

		Eventually(ctx, func() (string, error) {
			return kubectl(ctx, "logs", "-n", ns, "busybox")
		}).Should(Equal("hello from busybox\n"))

		deletePod(ctx, ns, "busybox")
	})

	DescribeTable("lets pods reach the API server through the kubernetes Service with their service account",
		func(ctx context.Context, hostNetwork bool) {
			// kubectl is a static Go binary: without a kubeconfig it uses the in-cluster configuration,
			// as the kubedevice agent does (KUBERNETES_SERVICE_HOST/PORT, the service account's token and
			// CA, the server certificate checked for the service IP). busybox's own TLS client cannot
			// talk to a Go server (it offers no signature algorithm but SHA-1).
			b := MakePod("client", ns).RestartNever().
				HostPathFile("kubectl", kubectlPath, "/usr/local/bin/kubectl").
				Command("kubectl", "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}")
			if hostNetwork {
				b = b.HostNetwork()
			}
			createPod(ctx, b.Obj())
			pod := waitForPhase(ctx, ns, "client", corev1.PodSucceeded)
			Expect(pod.Status.ContainerStatuses).To(HaveLen(1))
			out, err := kubectl(ctx, "logs", "-n", ns, "client")
			Expect(err).NotTo(HaveOccurred())
			Expect(out).To(Equal("system:serviceaccount:" + ns + ":default"))
		},
		Entry("from the pod network", false),
		Entry("from the host network", true),
	)

	It("holds a container gated on the kubedevice NRI plugin while no such plugin is connected", func(ctx context.Context) {
		info, err := os.Stat(nriSocket)
		Expect(err).NotTo(HaveOccurred(), "containerd's NRI socket")
		Expect(info.Mode() & os.ModeSocket).NotTo(BeZero())
		conn, err := net.DialTimeout("unix", nriSocket, 5*time.Second)
		Expect(err).NotTo(HaveOccurred(), "containerd listens for NRI plugins")
		Expect(conn.Close()).To(Succeed())

		createPod(ctx, MakePod("gated", ns).Annotate(requiredPluginsAnnotation, `["kubedevice"]`).Obj())
		var waiting *corev1.ContainerStateWaiting
		Eventually(ctx, func(g Gomega) {
			pod, err := getPod(ctx, ns, "gated")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(pod.Status.ContainerStatuses).To(HaveLen(1))
			waiting = pod.Status.ContainerStatuses[0].State.Waiting
			g.Expect(waiting).NotTo(BeNil(), describeStatus(pod))
			g.Expect(waiting.Reason).To(Equal("CreateContainerError"), describeStatus(pod))
		}).Should(Succeed())
		Expect(waiting.Message).To(ContainSubstring("kubedevice"))

		// containerd keeps refusing: the kubelet's retries fail the same way.
		Consistently(ctx, func(g Gomega) {
			pod, err := getPod(ctx, ns, "gated")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(pod.Status.Phase).To(Equal(corev1.PodPending))
			g.Expect(pod.Status.ContainerStatuses[0].State.Running).To(BeNil())
		}, 3*time.Second).Should(Succeed())

		// A pod without the annotation in the same namespace is not held.
		createPod(ctx, MakePod("ungated", ns).Obj())
		waitForPhase(ctx, ns, "ungated", corev1.PodRunning)

		events, err := clientset.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=gated"})
		Expect(err).NotTo(HaveOccurred())
		var failed []string
		for _, e := range events.Items {
			if e.Reason == "Failed" {
				failed = append(failed, e.Message)
			}
		}
		Expect(failed).NotTo(BeEmpty())
		AddReportEntry("gated container error", failed[0])
	})
})
