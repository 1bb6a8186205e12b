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

// Command kubedevice-agent is the kubedevice node agent: the device plugin manager of one node. It
// serves the device plugin registration socket, allocates devices to the pods bound to its node,
// checkpoints every decision, mirrors devices and allocations into NodeDevice and DeviceAllocation
// objects, and serves the kubelet's PodResources API for the devices it manages. With --mode=observe
// it manages nothing and mirrors, read-only, what the kubelet reports of its own device plugins
// (internal/agent/observe). It only wires: each flag is registered by the options it sets
// (agent.Options.AddFlags, with its flows', and nodeagent.Flags.AddFlags), the manager's here; the
// work is in internal/nodeagent (the core) and internal/agent (the Kubernetes side).
package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/go-logr/logr"

	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/kubedevice/kubedevice/internal/agent"
	"github.com/kubedevice/kubedevice/internal/contract"
	"github.com/kubedevice/kubedevice/internal/indexer"
	"github.com/kubedevice/kubedevice/internal/metricsserving"
	"github.com/kubedevice/kubedevice/internal/nodeagent"
	"github.com/kubedevice/kubedevice/internal/version"
)

// Client rate limits: the agent writes nothing in steady state but its Lease; a plugin registering
// 10,000 devices writes 79 NodeDevice shards twice (object, then status subresource): 158 writes,
// which the burst lets through at once (the old burst of 50 then 20 a second took 5.4 s before the
// API server's own time). The sustained rate is unchanged.
const (
	clientQPS   = 20
	clientBurst = 200
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "kubedevice-agent: %v\n", err)
		os.Exit(1)
	}
}

// settings are what the command line says.
type settings struct {
	opts      agent.Options
	core      nodeagent.Flags
	metrics   metricsserving.Flags
	probeAddr string
	pprofAddr string
	zap       zap.Options
	// showVersion: print the version and exit (--version).
	showVersion bool
}

func run() error {
	s, err := parseFlags()
	if err != nil {
		return err
	}
	if s.showVersion {
		_, err := fmt.Println("kubedevice-agent", version.Get())
		return err
	}
	logger := setLogger(&s.zap, os.Stderr)
	metrics.Registry.MustRegister(version.NewCollector())
	mgr, dm, err := newManager(s)
	if err != nil {
		return err
	}
	ctx := ctrl.SetupSignalHandler()
	if err := indexer.Setup(ctx, mgr.GetFieldIndexer()); err != nil {
		return fmt.Errorf("setting up the field indexes: %w", err)
	}
	a, err := agent.Setup(mgr, dm, s.opts)
	if err != nil {
		return err
	}
	if err := mgr.Add(agent.MemoryReleaser()); err != nil {
		return fmt.Errorf("adding the memory releaser: %w", err)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return fmt.Errorf("adding the health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("device-manager", a.ReadyCheck); err != nil {
		return fmt.Errorf("adding the readiness check: %w", err)
	}

	info := version.Get()
	settings := append([]any{"version", info.Version, "commit", info.Commit}, s.opts.LogValues()...)
	logger.WithName("setup").Info("Starting the agent", append(settings, s.core.LogValues()...)...)
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("running the manager: %w", err)
	}
	return nil
}

// parseFlags parses the command line into settings: the flags of the agent, its flows and the
// core are registered and completed by their owners (agent.Options.AddFlags and ParseFlags,
// nodeagent.Flags.AddFlags), the manager's here.
func parseFlags() (*settings, error) {
	s := &settings{core: nodeagent.Flags{Config: nodeagent.DefaultConfig()}}
	s.core.Registerer = metrics.Registry
	s.opts.PodResources.Registerer = metrics.Registry
	fs := flag.CommandLine
	s.opts.AddFlags(fs)
	s.core.AddFlags(fs)
	s.metrics.AddFlags(fs)
	fs.StringVar(&s.probeAddr, "health-probe-bind-address", ":8081",
		"Address the health probes (/healthz, /readyz) bind to; \"0\" disables them.")
	fs.StringVar(&s.pprofAddr, "pprof-bind-address", "0",
		"Address Go's profiles (/debug/pprof/) bind to, plain HTTP to anyone who reaches it: for measuring the agent's footprint, never exposed beyond the node; \"0\" (the default) disables them.")
	// --kubeconfig is registered on flag.CommandLine by controller-runtime's config package.
	if f := fs.Lookup("kubeconfig"); f != nil {
		f.Usage = "Path to a kubeconfig. Empty: $KUBECONFIG if set, else the in-cluster configuration (the DaemonSet's service account)."
	}
	version.AddFlag(fs, &s.showVersion)
	s.zap.BindFlags(fs)
	flag.Parse()
	if flag.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", flag.Args())
	}
	if s.showVersion {
		return s, nil
	}
	if err := s.opts.ParseFlags(&s.core); err != nil {
		return nil, err
	}
	return s, nil
}

// newManager returns the manager of the agent's controllers and, unless in observe mode, the
// device manager core.
func newManager(s *settings) (ctrl.Manager, *nodeagent.Manager, error) {
	scheme, err := contract.NewScheme()
	if err != nil {
		return nil, nil, err
	}
	restCfg, err := ctrl.GetConfig()
	if err != nil {
		return nil, nil, fmt.Errorf("loading the kubeconfig: %w", err)
	}
	restCfg.QPS, restCfg.Burst = clientQPS, clientBurst
	var dm *nodeagent.Manager
	if s.opts.Mode != agent.ModeObserve {
		if dm, err = nodeagent.New(s.core.Config); err != nil {
			return nil, nil, err
		}
	}
	mgr, err := ctrl.NewManager(restCfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserving.Options(s.metrics.BindAddress, s.metrics.Secure),
		HealthProbeBindAddress: s.probeAddr,
		PprofBindAddress:       s.pprofAddr,
		Cache:                  agent.CacheOptions(s.opts.NodeName),
	})
	if err != nil {
		return nil, nil, fmt.Errorf("creating the manager: %w", err)
	}
	return mgr, dm, nil
}

// setLogger makes the logger of opts, writing to w, the logger of controller-runtime and of klog,
// so that the libraries that log through klog (client-go's reflectors and event broadcaster, the
// NRI stub) write in the same format as the agent, and returns it.
func setLogger(opts *zap.Options, w io.Writer) logr.Logger {
	logger := zap.New(zap.UseFlagOptions(opts), zap.WriteTo(w))
	ctrl.SetLogger(logger)
	klog.SetLogger(logger)
	return logger
}
