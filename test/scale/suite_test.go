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

package scale

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/kubedevice/kubedevice/internal/testutil"
)

const (
	// agentNamespace holds the agents' Leases and the controller's leader Lease.
	agentNamespace = "kubedevice-system"
	// controllerUser is the controller's service account, which the controller runs as.
	controllerUser = "system:serviceaccount:kubedevice-system:kubedevice-controller"
	// gopher is the resource every node publishes.
	gopher corev1.ResourceName = "example.com/gopher"
)

// params are the dimensions of the benchmarked cluster, from the environment.
type params struct {
	// nodes is the number of Nodes (KUBEDEVICE_SCALE_NODES).
	nodes int
	// shards is the number of NodeDevice shards of gopher per node (KUBEDEVICE_SCALE_SHARDS).
	shards int
	// devices is the number of devices per shard, at most 128 (KUBEDEVICE_SCALE_DEVICES).
	devices int
	// window is how long the steady-state and churn benchmarks measure (KUBEDEVICE_SCALE_WINDOW).
	window time.Duration
	// workers is the controller's --workers, 0 for its default (KUBEDEVICE_SCALE_WORKERS).
	workers int
	// churnRate is the number of NodeDevice allocatable changes per second in the churn benchmark
	// (KUBEDEVICE_SCALE_CHURN_RATE).
	churnRate int
}

func loadParams() (params, error) {
	p := params{nodes: 1000, shards: 2, devices: 128, window: time.Minute, churnRate: 20}
	for _, v := range []struct {
		env string
		dst *int
	}{
		{"KUBEDEVICE_SCALE_NODES", &p.nodes},
		{"KUBEDEVICE_SCALE_SHARDS", &p.shards},
		{"KUBEDEVICE_SCALE_DEVICES", &p.devices},
		{"KUBEDEVICE_SCALE_CHURN_RATE", &p.churnRate},
		{"KUBEDEVICE_SCALE_WORKERS", &p.workers},
	} {
		s := os.Getenv(v.env)
		if s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			return p, fmt.Errorf("%s=%q: want a positive integer", v.env, s)
		}
		*v.dst = n
	}
	if s := os.Getenv("KUBEDEVICE_SCALE_WINDOW"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			return p, fmt.Errorf("KUBEDEVICE_SCALE_WINDOW=%q: want a positive duration", s)
		}
		p.window = d
	}
	if p.devices > 128 {
		return p, fmt.Errorf("KUBEDEVICE_SCALE_DEVICES=%d: a shard holds at most 128 devices", p.devices)
	}
	return p, nil
}

// env is the control plane and the cluster the benchmarks share. It is built by the first
// benchmark that needs it, so `go test ./test/...` without -bench starts nothing.
type env struct {
	params
	testEnv *envtest.Environment
	// cfg is the control plane's admin config.
	cfg *rest.Config
	// agents writes as the node agents do (admin, unthrottled).
	agents client.Client
	// watcher follows the Nodes' published capacity.
	watcher *nodeWatcher
	// cluster is the fixture's state.
	cluster *cluster
}

var (
	sharedOnce sync.Once
	shared     *env
	sharedErr  error
)

// TestMain stops the control plane after the benchmarks.
func TestMain(m *testing.M) {
	code := m.Run()
	if shared != nil {
		shared.stop()
	}
	if agentShared != nil {
		agentShared.stop()
	}
	os.Exit(code)
}

// getEnv returns the shared environment, starting the control plane and creating the cluster on
// first use.
func getEnv(b *testing.B) *env {
	b.Helper()
	sharedOnce.Do(func() { shared, sharedErr = startEnv(b) })
	if sharedErr != nil {
		b.Fatalf("starting the scale environment: %v", sharedErr)
	}
	return shared
}

func startEnv(b *testing.B) (*env, error) {
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(zapLevel())))
	p, err := loadParams()
	if err != nil {
		return nil, err
	}
	testEnv, err := testutil.NewEnvironment()
	if err != nil {
		return nil, err
	}
	start := time.Now()
	cfg, err := testEnv.Start()
	if err != nil {
		return nil, fmt.Errorf("starting envtest: %w", err)
	}
	e := &env{params: p, testEnv: testEnv, cfg: cfg}
	fail := func(err error) (*env, error) {
		e.stop()
		return nil, err
	}
	b.Logf("control plane up in %s", time.Since(start).Round(time.Millisecond))

	agentCfg := rest.CopyConfig(cfg)
	agentCfg.QPS, agentCfg.Burst = -1, 0 // unthrottled: the fixture stands for thousands of agents
	if e.agents, err = client.New(agentCfg, client.Options{Scheme: testEnv.Scheme}); err != nil {
		return fail(fmt.Errorf("creating the agents' client: %w", err))
	}
	ctx := context.Background()
	// The controller runs as its service account with only the RBAC of config/rbac, and its node
	// status writes go through the admission policy that holds them to capacity keys, as deployed.
	if err := installAsDeployed(ctx, e.agents,
		"config/rbac/controller/role.yaml",
		"config/rbac/controller_service_account.yaml",
		"config/rbac/controller_role_binding.yaml",
		"config/rbac/leader_election_role.yaml",
		"config/admission/controller_node_status.yaml",
	); err != nil {
		return fail(err)
	}
	if e.watcher, err = startNodeWatcher(cfg, testEnv.Scheme); err != nil {
		return fail(err)
	}
	start = time.Now()
	if e.cluster, err = createCluster(ctx, e.agents, p); err != nil {
		return fail(err)
	}
	b.Logf("created %d Nodes with %d NodeDevices of %d devices each and their Leases in %s",
		p.nodes, p.nodes*p.shards, p.devices, time.Since(start).Round(time.Millisecond))
	return e, nil
}

func (e *env) stop() {
	if e.watcher != nil {
		e.watcher.stop()
	}
	if e.testEnv != nil {
		if err := e.testEnv.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stopping envtest: %v\n", err)
		}
	}
}

// controllerConfig returns a config acting as the controller's service account.
func (e *env) controllerConfig() *rest.Config {
	c := rest.CopyConfig(e.cfg)
	c.Impersonate = rest.ImpersonationConfig{
		UserName: controllerUser,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + agentNamespace, "system:authenticated"},
	}
	return c
}

// zapLevel is the controller's log level: errors only, unless KUBEDEVICE_SCALE_LOG=info.
func zapLevel() zapcore.Level {
	if os.Getenv("KUBEDEVICE_SCALE_LOG") == "info" {
		return zapcore.InfoLevel
	}
	return zapcore.ErrorLevel
}

// installAsDeployed creates the agents' namespace and then the objects of manifests (paths from
// the repository root), as the installs deploy them.
func installAsDeployed(ctx context.Context, c client.Client, manifests ...string) error {
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: agentNamespace}}); err != nil {
		return fmt.Errorf("creating namespace %s: %w", agentNamespace, err)
	}
	objs, err := testutil.LoadManifests(manifests...)
	if err != nil {
		return err
	}
	for _, obj := range objs {
		if err := c.Create(ctx, obj); err != nil {
			return fmt.Errorf("creating %s %s: %w", obj.GetKind(), obj.GetName(), err)
		}
	}
	return nil
}
