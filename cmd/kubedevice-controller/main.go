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
// NodeDevices and DeviceAllocations honest. It only wires: the controllers' flags are registered by
// controller.Options.AddFlags, the manager's here; the work is in internal/controller.
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

// settings are what the command line says.
type settings struct {
	opts          controller.Options
	metrics       metricsserving.Flags
	probeAddr     string
	leaderElect   bool
	leaderElectNS string
	kubeAPIQPS    float64
	kubeAPIBurst  int
	zap           zap.Options
	showVersion   bool
}

func run() error {
	s, err := parseFlags()
	if err != nil {
		return err
	}
	info := version.Get()
	if s.showVersion {
		_, err := fmt.Println("kubedevice-controller", info)
		return err
	}
	// client-go and leader election log through klog: the same logger, so every line has one format.
	logger := zap.New(zap.UseFlagOptions(&s.zap))
	ctrl.SetLogger(logger)
	klog.SetLogger(logger)

	mgr, err := newManager(s)
	if err != nil {
		return err
	}
	ctx := ctrl.SetupSignalHandler()
	if err := indexer.Setup(ctx, mgr.GetFieldIndexer()); err != nil {
		return fmt.Errorf("setting up the field indexes: %w", err)
	}
	if err := controller.Setup(mgr, s.opts); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return fmt.Errorf("adding the health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return fmt.Errorf("adding the readiness check: %w", err)
	}

	metrics.Registry.MustRegister(version.NewCollector())
	settings := []any{"version", info.Version, "commit", info.Commit,
		"leaderElect", s.leaderElect, "kubeAPIQPS", s.kubeAPIQPS, "kubeAPIBurst", s.kubeAPIBurst}
	ctrl.Log.WithName("setup").Info("Starting the manager", append(settings, s.opts.LogValues()...)...)
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("running the manager: %w", err)
	}
	return nil
}

// parseFlags parses the command line into settings: the controllers' flags are registered by
// controller.Options.AddFlags, the manager's here.
func parseFlags() (*settings, error) {
	s := &settings{}
	fs := flag.CommandLine // --kubeconfig is registered on it by controller-runtime's config package.
	s.opts.AddFlags(fs)
	s.metrics.AddFlags(fs)
	fs.StringVar(&s.probeAddr, "health-probe-bind-address", ":8081",
		"Address the health probes (/healthz, /readyz) bind to; \"0\" disables them.")
	fs.BoolVar(&s.leaderElect, "leader-elect", false,
		"Elect a leader among controller replicas (Lease "+controller.LeaderElectionID+"), so only one reconciles.")
	fs.StringVar(&s.leaderElectNS, "leader-election-namespace", os.Getenv("POD_NAMESPACE"),
		"Namespace of the leader election Lease; defaults to $POD_NAMESPACE, else the namespace the controller runs in.")
	fs.Float64Var(&s.kubeAPIQPS, "kube-api-qps", defaultKubeAPIQPS,
		"Requests per second the controller sends to the API server, sustained. Reads come from its cache; the writes of a first install "+
			"(two per NodeDevice and one per Node) go at this rate, about 15 000 at 5 000 nodes: raise it with the API server's capacity "+
			"(75-200 on a large control plane) to publish a new cluster faster.")
	fs.IntVar(&s.kubeAPIBurst, "kube-api-burst", defaultKubeAPIBurst,
		"Requests the controller may send to the API server in a burst above --kube-api-qps.")
	version.AddFlag(fs, &s.showVersion)
	s.zap.BindFlags(fs)
	flag.Parse()
	if flag.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", flag.Args())
	}
	if !s.showVersion && (s.kubeAPIQPS <= 0 || s.kubeAPIBurst <= 0) {
		return nil, fmt.Errorf("--kube-api-qps (%g) and --kube-api-burst (%d) must be positive", s.kubeAPIQPS, s.kubeAPIBurst)
	}
	return s, nil
}

// newManager returns the controllers' manager, with its client's rate limits and leader election.
func newManager(s *settings) (ctrl.Manager, error) {
	scheme, err := contract.NewScheme()
	if err != nil {
		return nil, err
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return nil, fmt.Errorf("loading the kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = float32(s.kubeAPIQPS), s.kubeAPIBurst
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                        scheme,
		Metrics:                       metricsserving.Options(s.metrics.BindAddress, s.metrics.Secure),
		HealthProbeBindAddress:        s.probeAddr,
		LeaderElection:                s.leaderElect,
		LeaderElectionID:              controller.LeaderElectionID,
		LeaderElectionNamespace:       s.leaderElectNS,
		LeaderElectionReleaseOnCancel: true,
		Cache:                         controller.CacheOptions(s.opts),
	})
	if err != nil {
		return nil, fmt.Errorf("creating the manager: %w", err)
	}
	return mgr, nil
}
