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

// Package controller holds the envtest suite of the cluster controller: its reconcilers run
// in-process against a real kube-apiserver and etcd, with a fake clock for agent Lease expiry.
package controller

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"
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
	"github.com/kubedevice/kubedevice/internal/remediation"
	"github.com/kubedevice/kubedevice/internal/testutil"
)

const (
	// agentNamespace holds the agents' Leases, and their service account.
	agentNamespace = "kubedevice-system"
	// leaseDuration is the controller's --agent-lease-duration.
	leaseDuration = 40 * time.Second
	// controllerUser is the controller's service account, which the reconcilers run as.
	controllerUser = "system:serviceaccount:kubedevice-system:kubedevice-controller"
)

var (
	testEnv   *envtest.Environment
	cfg       *rest.Config
	k8sClient client.Client
	ctx       context.Context
	cancel    context.CancelFunc
	// fakeClock is the controller's clock: tests step it past Lease expiries.
	fakeClock *clocktesting.FakeClock
	// stopManager stops the running controller manager and waits for it.
	stopManager func()
)

func TestController(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Controller Integration Suite")
}

var _ = BeforeSuite(func() {
	logf.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	SetDefaultEventuallyTimeout(30 * time.Second)
	SetDefaultEventuallyPollingInterval(10 * time.Millisecond)
	ctx, cancel = context.WithCancel(context.Background())

	var err error
	testEnv, err = testutil.NewEnvironment()
	Expect(err).NotTo(HaveOccurred())
	cfg, err = testEnv.Start()
	Expect(err).NotTo(HaveOccurred())
	Expect(testutil.CheckServerVersion(cfg)).To(Succeed())
	k8sClient, err = client.New(cfg, client.Options{Scheme: testEnv.Scheme})
	Expect(err).NotTo(HaveOccurred())
	Expect(k8sClient.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: agentNamespace}})).To(Succeed())

	// The reconcilers run as the controller's service account, with only the RBAC of config/rbac:
	// a permission the markers forgot fails the suite.
	for _, obj := range loadManifests(
		"config/rbac/controller/role.yaml",
		"config/rbac/controller_service_account.yaml",
		"config/rbac/controller_role_binding.yaml",
		"config/rbac/leader_election_role.yaml",
		// Its node status writes go through the policy that holds them to capacity keys.
		"config/admission/controller_node_status.yaml",
	) {
		Expect(k8sClient.Create(ctx, obj)).To(Succeed(), "creating %s %s", obj.GetKind(), obj.GetName())
	}

	fakeClock = clocktesting.NewFakeClock(time.Now())
	stopManager = startManager()
})

var _ = AfterSuite(func() {
	if stopManager != nil {
		stopManager()
	}
	cancel()
	if testEnv != nil {
		Expect(testEnv.Stop()).To(Succeed())
	}
})

// startManager runs the controller's reconcilers in a new manager, wired as
// cmd/kubedevice-controller wires them (with leader election in the controller's namespace), as
// the controller's service account, and returns the function that stops it.
func startManager() func() {
	opts := kdcontroller.Options{AgentNamespace: agentNamespace, AgentLeaseDuration: leaseDuration, Clock: fakeClock,
		Remediation: kdcontroller.RemediationOptions{
			Policy:       remediation.Policy{remedyResource: remedyGrace},
			NodeInterval: remedyNodeInterval, ClusterInterval: remedyClusterInterval,
		}}
	mgrCfg := serviceAccountConfig(controllerUser, nil)
	mgrCfg.Wrap(controllerWrites.wrap)
	mgr, err := ctrl.NewManager(mgrCfg, ctrl.Options{
		Scheme:                        testEnv.Scheme,
		Metrics:                       metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress:        "0",
		LeaderElection:                true,
		LeaderElectionID:              kdcontroller.LeaderElectionID,
		LeaderElectionNamespace:       agentNamespace,
		LeaderElectionReleaseOnCancel: true,
		Cache:                         kdcontroller.CacheOptions(opts),
		// The manager is restarted within the process: reuse the controller names.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	Expect(err).NotTo(HaveOccurred())
	Expect(indexer.Setup(ctx, mgr.GetFieldIndexer())).To(Succeed())
	Expect(kdcontroller.Setup(mgr, opts)).To(Succeed())

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

// serviceAccountConfig returns a copy of the suite's rest config that acts as the service account
// user of the agents' namespace, with the given user extra.
func serviceAccountConfig(user string, extra map[string][]string) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.Impersonate = rest.ImpersonationConfig{
		UserName: user,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + agentNamespace, "system:authenticated"},
		Extra:    extra,
	}
	return c
}
