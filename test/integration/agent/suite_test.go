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

// Package agent holds the envtest suite of the node agent: its reconcilers run in-process with the
// real device manager core (nodeagent.Manager) and real gRPC stub device plugins on temporary unix
// sockets, against a real kube-apiserver and etcd, as the agent's service account with the RBAC
// and the admission policy of config/. The cluster controller runs beside it, so Node capacity
// follows the NodeDevices as in a cluster.
package agent

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	kdcontroller "github.com/kubedevice/kubedevice/internal/controller"
	"github.com/kubedevice/kubedevice/internal/indexer"
	"github.com/kubedevice/kubedevice/internal/testutil"
)

const (
	// agentNamespace holds the agents' Leases and both service accounts.
	agentNamespace = "kubedevice-system"
	agentUser      = "system:serviceaccount:kubedevice-system:kubedevice-agent"
	controllerUser = "system:serviceaccount:kubedevice-system:kubedevice-controller"
	// nodeNameExtraKey is the bound service account token's node claim, which the admission
	// policy checks.
	nodeNameExtraKey = "authentication.kubernetes.io/node-name"
)

var (
	testEnv   *envtest.Environment
	cfg       *rest.Config
	k8sClient client.WithWatch
	ctx       context.Context
	cancel    context.CancelFunc
)

func TestAgent(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Agent Integration Suite")
}

var _ = BeforeSuite(func() {
	logf.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	SetDefaultEventuallyTimeout(20 * time.Second)
	SetDefaultEventuallyPollingInterval(10 * time.Millisecond)
	SetDefaultConsistentlyPollingInterval(50 * time.Millisecond)
	ctx, cancel = context.WithCancel(context.Background())

	var err error
	testEnv, err = testutil.NewEnvironment()
	Expect(err).NotTo(HaveOccurred())
	cfg, err = testEnv.Start()
	Expect(err).NotTo(HaveOccurred())
	k8sClient, err = client.NewWithWatch(cfg, client.Options{Scheme: testEnv.Scheme})
	Expect(err).NotTo(HaveOccurred())
	Expect(k8sClient.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: agentNamespace}})).To(Succeed())

	// The agents run as the agent's service account with only the RBAC of config/rbac (a
	// permission the markers forgot fails the suite), and the admission policy limits each to
	// the objects of its own node; the controller runs as its own service account.
	for _, obj := range loadManifests(
		"config/rbac/agent/role.yaml",
		"config/rbac/agent_service_account.yaml",
		"config/rbac/agent_role_binding.yaml",
		"config/rbac/controller/role.yaml",
		"config/rbac/controller_service_account.yaml",
		"config/rbac/controller_role_binding.yaml",
		"config/admission/agent_node_restriction.yaml",
	) {
		Expect(k8sClient.Create(ctx, obj)).To(Succeed(), "creating %s %s", obj.GetKind(), obj.GetName())
	}
	DeferCleanup(startController())
})

var _ = AfterSuite(func() {
	cancel()
	if testEnv != nil {
		Expect(testEnv.Stop()).To(Succeed())
	}
})

// startController runs the cluster controller as cmd/kubedevice-controller wires it, as the
// controller's service account, and returns the function that stops it.
func startController() func() {
	GinkgoHelper()
	opts := kdcontroller.Options{AgentNamespace: agentNamespace, AgentLeaseDuration: kdcontroller.DefaultAgentLeaseDuration}
	asController := rest.CopyConfig(cfg)
	asController.Impersonate = rest.ImpersonationConfig{
		UserName: controllerUser,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + agentNamespace, "system:authenticated"},
	}
	mgr, err := ctrl.NewManager(asController, ctrl.Options{
		Scheme:                 testEnv.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  kdcontroller.CacheOptions(opts),
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	})
	Expect(err).NotTo(HaveOccurred())
	Expect(indexer.Setup(ctx, mgr.GetFieldIndexer())).To(Succeed())
	Expect(kdcontroller.Setup(mgr, opts)).To(Succeed())
	return runManager(mgr)
}

// runManager starts mgr and returns the function that stops it and waits until it has.
func runManager(mgr ctrl.Manager) func() {
	mgrCtx, mgrCancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer GinkgoRecover()
		defer close(done)
		Expect(mgr.Start(mgrCtx)).To(Succeed())
	}()
	return func() {
		mgrCancel()
		Eventually(done).Should(BeClosed())
	}
}
