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

// Command kubedevice-controller is the kubedevice cluster controller: it publishes the devices the
// node agents report in NodeDevices as Node capacity, tracks the agents' Leases, and keeps
// NodeDevices and DeviceAllocations honest. It parses flags and wires; the work is in
// internal/controller.
package main

import (
	"flag"
	"fmt"
	"os"

	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/kubedevice/kubedevice/internal/contract"
	"github.com/kubedevice/kubedevice/internal/controller"
	"github.com/kubedevice/kubedevice/internal/indexer"
	"github.com/kubedevice/kubedevice/internal/metricsserving"
	"github.com/kubedevice/kubedevice/internal/version"
)

// The client rate limits by default: controller-runtime's, which the controller has always used.
const (
	defaultKubeAPIQPS   = 20
	defaultKubeAPIBurst = 30
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "kubedevice-controller: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	agentNamespace := os.Getenv("POD_NAMESPACE")
	if agentNamespace == "" {
		agentNamespace = controller.DefaultAgentNamespace
	}

	// --kubeconfig is registered on flag.CommandLine by controller-runtime's config package.
	var (
		metricsAddr   string
		metricsSecure bool
		probeAddr     string
		leaderElect   bool
		leaderElectNS string
		kubeAPIQPS    float64
		kubeAPIBurst  int
		opts          controller.Options
		showVersion   bool
		zapOpts       = zap.Options{}
	)
	flag.StringVar(&metricsAddr, "metrics-bind-address", ":8080",
		"Address the Prometheus metrics endpoint (/metrics) binds to; \"0\" disables it.")
	flag.BoolVar(&metricsSecure, "metrics-secure", true,
		"Serve /metrics over HTTPS to authenticated and authorized clients only (a TokenReview and a SubjectAccessReview per scrape: get on the non-resource URL /metrics, which the ClusterRole kubedevice-metrics-reader grants); false serves plain HTTP to anyone who reaches the address.")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081",
		"Address the health probes (/healthz, /readyz) bind to; \"0\" disables them.")
	flag.BoolVar(&leaderElect, "leader-elect", false,
		"Elect a leader among controller replicas (Lease "+controller.LeaderElectionID+"), so only one reconciles.")
	flag.StringVar(&leaderElectNS, "leader-election-namespace", os.Getenv("POD_NAMESPACE"),
		"Namespace of the leader election Lease; defaults to $POD_NAMESPACE, else the namespace the controller runs in.")
	flag.StringVar(&opts.AgentNamespace, "agent-namespace", agentNamespace,
		"Namespace of the node agents' Leases (kubedevice-agent-<node>); defaults to $POD_NAMESPACE, else "+controller.DefaultAgentNamespace+".")
	flag.DurationVar(&opts.AgentLeaseDuration, "agent-lease-duration", controller.DefaultAgentLeaseDuration,
		"How long after its last renewal a node agent's Lease stays valid; after that the node's NodeDevices get AgentReady=False and its kubedevice resources are published as 0.")
	flag.Float64Var(&kubeAPIQPS, "kube-api-qps", defaultKubeAPIQPS,
		"Requests per second the controller sends to the API server, sustained. Reads come from its cache; the writes of a first install "+
			"(two per NodeDevice and one per Node) go at this rate, about 15 000 at 5 000 nodes: raise it with the API server's capacity "+
			"(75-200 on a large control plane) to publish a new cluster faster.")
	flag.IntVar(&kubeAPIBurst, "kube-api-burst", defaultKubeAPIBurst,
		"Requests the controller may send to the API server in a burst above --kube-api-qps.")
	flag.IntVar(&opts.Workers, "workers", controller.DefaultWorkers,
		"How many objects each reconciler (node capacity, NodeDevice, DeviceAllocation) works on at once; with one, writes go one API round trip after another whatever --kube-api-qps allows.")
	flag.BoolVar(&showVersion, "version", false,
		"Print the version (the release and the git commit it was built from) and exit.")
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	if flag.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", flag.Args())
	}
	info := version.Get()
	if showVersion {
		_, err := fmt.Println("kubedevice-controller", info)
		return err
	}
	if kubeAPIQPS <= 0 || kubeAPIBurst <= 0 {
		return fmt.Errorf("--kube-api-qps (%g) and --kube-api-burst (%d) must be positive", kubeAPIQPS, kubeAPIBurst)
	}
	// client-go and leader election log through klog: the same logger, so every line has one format.
	logger := zap.New(zap.UseFlagOptions(&zapOpts))
	ctrl.SetLogger(logger)
	klog.SetLogger(logger)

	scheme, err := contract.NewScheme()
	if err != nil {
		return err
	}

	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("loading the kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = float32(kubeAPIQPS), kubeAPIBurst
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                        scheme,
		Metrics:                       metricsserving.Options(metricsAddr, metricsSecure),
		HealthProbeBindAddress:        probeAddr,
		LeaderElection:                leaderElect,
		LeaderElectionID:              controller.LeaderElectionID,
		LeaderElectionNamespace:       leaderElectNS,
		LeaderElectionReleaseOnCancel: true,
		Cache:                         controller.CacheOptions(opts),
	})
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}
	ctx := ctrl.SetupSignalHandler()
	if err := indexer.Setup(ctx, mgr.GetFieldIndexer()); err != nil {
		return fmt.Errorf("setting up the field indexes: %w", err)
	}
	if err := controller.Setup(mgr, opts); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return fmt.Errorf("adding the health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return fmt.Errorf("adding the readiness check: %w", err)
	}

	metrics.Registry.MustRegister(version.NewCollector())
	ctrl.Log.WithName("setup").Info("Starting the manager", "version", info.Version, "commit", info.Commit,
		"agentNamespace", opts.AgentNamespace, "agentLeaseDuration", opts.AgentLeaseDuration, "leaderElect", leaderElect,
		"kubeAPIQPS", kubeAPIQPS, "kubeAPIBurst", kubeAPIBurst, "workers", opts.Workers)
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("running the manager: %w", err)
	}
	return nil
}
