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

// Package admission holds the envtest suite of kubedevice's admission policies for pods: the
// MutatingAdmissionPolicy of config/admission that gates the pods requesting kubedevice resources
// on the node agent's NRI plugin, run by a real kube-apiserver.
package admission

import (
	"context"
	"testing"
	"time"

	nrilog "github.com/containerd/nri/pkg/log"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/kubedevice/kubedevice/internal/testutil"
)

// systemNamespace is kubedevice's namespace, where the policy's parameters live.
const systemNamespace = "kubedevice-system"

var (
	testEnv   *envtest.Environment
	k8sClient client.Client
	ctx       context.Context
	cancel    context.CancelFunc
)

func TestAdmission(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Admission Integration Suite")
}

var _ = BeforeSuite(func() {
	logf.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	nrilog.Set(ginkgoNRILogger{})
	SetDefaultEventuallyTimeout(30 * time.Second)
	SetDefaultEventuallyPollingInterval(50 * time.Millisecond)
	ctx, cancel = context.WithCancel(context.Background())

	var err error
	testEnv, err = testutil.NewEnvironment()
	Expect(err).NotTo(HaveOccurred())
	cfg, err := testEnv.Start()
	Expect(err).NotTo(HaveOccurred())
	Expect(testutil.CheckServerVersion(cfg)).To(Succeed())
	k8sClient, err = client.New(cfg, client.Options{Scheme: testEnv.Scheme})
	Expect(err).NotTo(HaveOccurred())
	Expect(k8sClient.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: systemNamespace}})).To(Succeed())
})

var _ = AfterSuite(func() {
	if cancel != nil {
		cancel()
	}
	if testEnv != nil {
		Expect(testEnv.Stop()).To(Succeed())
	}
})

// ginkgoNRILogger writes the messages of containerd's NRI validator, which the specs run, to the
// spec's output.
type ginkgoNRILogger struct{}

func (ginkgoNRILogger) Debugf(_ context.Context, format string, args ...any) {
	GinkgoWriter.Printf("nri debug: "+format+"\n", args...)
}

func (ginkgoNRILogger) Infof(_ context.Context, format string, args ...any) {
	GinkgoWriter.Printf("nri: "+format+"\n", args...)
}

func (ginkgoNRILogger) Warnf(_ context.Context, format string, args ...any) {
	GinkgoWriter.Printf("nri warning: "+format+"\n", args...)
}

func (ginkgoNRILogger) Errorf(_ context.Context, format string, args ...any) {
	GinkgoWriter.Printf("nri error: "+format+"\n", args...)
}

// loadManifests reads the Kubernetes objects of the YAML files at paths, relative to the
// repository root.
func loadManifests(paths ...string) []*unstructured.Unstructured {
	GinkgoHelper()
	objs, err := testutil.LoadManifests(paths...)
	Expect(err).NotTo(HaveOccurred())
	return objs
}
