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
	"os"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// describeDrain drains the node's one gopher, held by a running pod, with `kubectl kubedevice
// drain` (the image's kubedevice binary run by kubectl as its plugin, with the admin's
// kubeconfig): the pod is evicted, the gopher cordoned and the node offers none; `kubectl
// kubedevice uncordon` puts it back.
func describeDrain() {
	Describe("kubectl kubedevice drain and uncordon", Ordered, Label("drain"), Offset(1), func() {
		const label = "drain: "
		var ns string
		BeforeAll(func(ctx context.Context) {
			setUp(ctx, label, installWithKustomize)
			ns = newNamespace(ctx)
			registersTheGopher(ctx, label)
		}, NodeTimeout(20*time.Minute))
		AfterEach(func(ctx context.Context) {
			if CurrentSpecReport().Failed() {
				dumpKubedevice(ctx)
			}
		})

		It("evicts the pod holding the gopher and cordons it; uncordon puts it back in service", func(ctx context.Context) {
			drainsTheGopher(ctx, label, ns)
		}, SpecTimeout(5*time.Minute))
	})
}

func drainsTheGopher(ctx context.Context, label, ns string) {
	runsAPodWithTheGopher(ctx, label, ns, "drained")
	held, err := getPod(ctx, ns, "drained")
	Expect(err).NotTo(HaveOccurred())

	start := time.Now()
	out, err := kubectlKubedevice(ctx, "drain", node.Name, gopherResource, gopherID, "--timeout", "2m")
	Expect(err).NotTo(HaveOccurred(), out)
	recordTiming(label+"kubectl kubedevice drain (the holder evicted and gone)", time.Since(start))
	GinkgoWriter.Printf("kubectl kubedevice drain %s %s %s --timeout 2m:\n%s", node.Name, gopherResource, gopherID, out)
	Expect(out).To(ContainSubstring("cordoned " + gopherID))
	Expect(out).To(ContainSubstring("pod/drained evicted"))
	pod, err := getPod(ctx, ns, "drained")
	Expect(apierrors.IsNotFound(err) || (err == nil && pod.UID != held.UID)).To(BeTrue(), "the drained pod is still there")

	expectGopherCordoned(ctx, true)
	expectNodeGophers(ctx, 0)

	out, err = kubectlKubedevice(ctx, "uncordon", node.Name, gopherResource, gopherID)
	Expect(err).NotTo(HaveOccurred(), out)
	GinkgoWriter.Printf("kubectl kubedevice uncordon %s %s %s:\n%s", node.Name, gopherResource, gopherID, out)
	Expect(out).To(ContainSubstring("uncordoned " + gopherID))
	expectGopherCordoned(ctx, false)
	expectNodeGophers(ctx, 1)
}

// expectGopherCordoned waits until the agent reports the gopher cordoned (or not): spec.cordons
// names it, and status counts it out of the allocatable devices.
func expectGopherCordoned(ctx context.Context, cordoned bool) {
	Eventually(ctx, func(g Gomega) {
		nd, err := gopherNodeDevice(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(nd.Status.ObservedGeneration).To(Equal(nd.Generation))
		g.Expect(nd.Status.Devices).To(HaveLen(1))
		g.Expect(nd.Status.Devices[0].Cordoned).To(Equal(cordoned))
		names := len(nd.Spec.Cordons) == 1 && nd.Spec.Cordons[0].DeviceID == gopherID
		g.Expect(names).To(Equal(cordoned), "spec.cordons: %+v", nd.Spec.Cordons)
		want := int32(1)
		if cordoned {
			want = 0
		}
		g.Expect(nd.Status.Allocatable).To(Equal(want))
		g.Expect(nd.Status.Cordoned).To(Equal(1 - want))
	}).Should(Succeed())
}

// kubectlKubedevice runs `kubectl kubedevice ARGS`: kubectl finds the image's kubedevice binary
// as the plugin kubectl-kubedevice on the PATH, and the plugin reads the admin's kubeconfig.
func kubectlKubedevice(ctx context.Context, args ...string) (string, error) {
	dir := GinkgoT().TempDir()
	Expect(os.Symlink(imageBin("kubedevice"), filepath.Join(dir, "kubectl-kubedevice"))).To(Succeed())
	env := []string{"PATH=" + dir + string(os.PathListSeparator) + os.Getenv("PATH"), "KUBECONFIG=" + kubeconfig}
	return run(ctx, env, kubectlPath, append([]string{"kubedevice"}, args...)...)
}
