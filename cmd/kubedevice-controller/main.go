// Command kubedevice-controller is the kubedevice cluster controller: it publishes the devices the
// node agents report in NodeDevices as Node capacity, tracks the agents' Leases, and keeps
// NodeDevices and DeviceAllocations honest. It parses flags and wires; the work is in
// internal/controller.
package main

import (
	"flag"
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
	"github.com/kubedevice/kubedevice/internal/controller"
	"github.com/kubedevice/kubedevice/internal/indexer"
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
		probeAddr     string
		leaderElect   bool
		leaderElectNS string
		opts          controller.Options
		zapOpts       = zap.Options{}
	)
	flag.StringVar(&metricsAddr, "metrics-bind-address", ":8080",
		"Address the Prometheus metrics endpoint (/metrics) binds to; \"0\" disables it.")
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
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	if flag.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", flag.Args())
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))

	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return fmt.Errorf("registering the built-in types: %w", err)
	}
	if err := kdv1alpha1.AddToScheme(scheme); err != nil {
		return fmt.Errorf("registering the kubedevice.io types: %w", err)
	}

	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("loading the kubeconfig: %w", err)
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                        scheme,
		Metrics:                       metricsserver.Options{BindAddress: metricsAddr},
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

	ctrl.Log.WithName("setup").Info("Starting the manager",
		"agentNamespace", opts.AgentNamespace, "agentLeaseDuration", opts.AgentLeaseDuration, "leaderElect", leaderElect)
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("running the manager: %w", err)
	}
	return nil
}
