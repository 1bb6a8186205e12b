// Command kubedevice-agent is the kubedevice node agent: the device plugin manager of one node. It
// serves the device plugin registration socket, allocates devices to the pods bound to its node,
// checkpoints every decision, mirrors devices and allocations into NodeDevice and DeviceAllocation
// objects, and serves the kubelet's PodResources API for the devices it manages. It parses flags and wires; the work is in internal/nodeagent (the core)
// and internal/agent (the Kubernetes side).
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
	"github.com/kubedevice/kubedevice/internal/agent"
	"github.com/kubedevice/kubedevice/internal/agent/nri"
	"github.com/kubedevice/kubedevice/internal/allocpolicy"
	"github.com/kubedevice/kubedevice/internal/indexer"
	"github.com/kubedevice/kubedevice/internal/metricsserving"
	"github.com/kubedevice/kubedevice/internal/nodeagent"
	"github.com/kubedevice/kubedevice/internal/nodeagent/podresources"
	"github.com/kubedevice/kubedevice/internal/nodeagent/topology"
)

// Client rate limits: the agent writes nothing in steady state but its Lease; the burst lets a
// full resync at start (about 80 NodeDevices for 10,000 devices) finish in a few seconds.
const (
	clientQPS   = 20
	clientBurst = 50
)

var (
	errNoNodeName         = errors.New("--node-name is required when $NODE_NAME is not set")
	errPodResourcesSocket = errors.New("want an absolute path outside --plugin-dir and --plugins-registry-dir, whose sockets the agent treats as device plugins'")
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "kubedevice-agent: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	namespace := os.Getenv("POD_NAMESPACE")
	if namespace == "" {
		namespace = agent.DefaultNamespace
	}
	cfg := nodeagent.DefaultConfig()
	cfg.Registerer = metrics.Registry

	var (
		opts           agent.Options
		metricsAddr    string
		metricsSecure  bool
		probeAddr      string
		topologyPolicy string
		topologyScope  string
		injection      string
		allocatePolicy string
		zapOpts        = zap.Options{}
	)
	opts.PodResources.Registerer = metrics.Registry
	flag.StringVar(&opts.NodeName, "node-name", os.Getenv("NODE_NAME"),
		"Name of the node the agent runs on (required); defaults to $NODE_NAME, set from the pod's spec.nodeName by the DaemonSet.")
	flag.StringVar(&opts.Namespace, "namespace", namespace,
		"Namespace of the agent's Lease (kubedevice-agent-<node>); defaults to $POD_NAMESPACE, else "+agent.DefaultNamespace+".")
	flag.StringVar(&cfg.PluginDir, "plugin-dir", cfg.PluginDir,
		"Directory of the registration socket (kubelet.sock), the device plugins' sockets and the checkpoint. Never the kubelet's own directory, which deletes foreign sockets.")
	flag.StringVar(&cfg.PluginsRegistryDir, "plugins-registry-dir", cfg.PluginsRegistryDir,
		"Directory watched for plugins that announce themselves through the kubelet's plugin watcher; empty disables that registration path.")
	flag.DurationVar(&cfg.EndpointGracePeriod, "endpoint-grace-period", cfg.EndpointGracePeriod,
		"How long a resource whose device plugins all disconnected stays listed, with nothing allocatable, before it is removed (the kubelet's 5 minutes).")
	flag.StringVar(&topologyPolicy, "topology-policy", string(cfg.TopologyPolicy),
		"Topology manager policy for NUMA alignment of devices: "+joinValues(topology.Policies)+".")
	flag.StringVar(&topologyScope, "topology-scope", string(cfg.TopologyScope),
		"Granularity of NUMA alignment: "+joinValues(topology.Scopes)+".")
	flag.StringVar(&injection, "runtime-injection", string(agent.RuntimeInjectionNRI),
		"How containers get their devices at creation: "+joinValues(agent.RuntimeInjections)+". nri: the agent is an NRI plugin of the container runtime (containerd 2.x, CRI-O) and adds each container's envs, mounts, device nodes and CDI devices; while the NRI socket is missing or the connection is down it logs it, sets RuntimeInjectionReady=False on the node's NodeDevices and reconnects. none: no container is adjusted.")
	flag.StringVar(&opts.NRI.SocketPath, "nri-socket", nri.DefaultSocketPath,
		"The container runtime's NRI socket (--runtime-injection=nri).")
	flag.StringVar(&opts.NRI.PluginIndex, "nri-plugin-index", nri.DefaultPluginIndex,
		"Two-digit index of the agent's NRI plugin, registered as <index>-"+nri.PluginName+"; the runtime calls plugins in index order.")
	flag.StringVar(&opts.NRI.HostRoot, "nri-host-root", "",
		"Where the host's device nodes are seen in the agent's container: a device's host path (e.g. /dev/foo) is stat'ed as <root>/dev/foo for its type and numbers. Empty when the agent sees the host's /dev (privileged, or /dev mounted at /dev).")
	flag.StringVar(&opts.PodResources.SocketPath, "pod-resources-socket", podresources.DefaultSocketPath,
		"Unix socket on which the agent serves the kubelet's PodResources API (v1: List, Get, GetAllocatableResources) for the devices it manages, so node monitoring agents (dcgm-exporter, nfd-topology-updater) can map them to pods; the kubelet's own socket lists none of them. Its directory is created (0750) if missing. Empty disables it.")
	flag.StringVar(&allocatePolicy, "allocate-policy", "",
		"YAML file of the administrator's policy on device plugins' Allocate responses, per resource: allowedHostPathPrefixes, forbiddenEnvNames, forbiddenAnnotationPrefixes (docs/design.md, \"Trust model\"). Empty: only their structure is checked.")
	flag.StringVar(&metricsAddr, "metrics-bind-address", ":8080",
		"Address the Prometheus metrics endpoint (/metrics) binds to; \"0\" disables it.")
	flag.BoolVar(&metricsSecure, "metrics-secure", true,
		"Serve /metrics over HTTPS to authenticated and authorized clients only (a TokenReview and a SubjectAccessReview per scrape: get on the non-resource URL /metrics, which the ClusterRole kubedevice-metrics-reader grants); false serves plain HTTP to anyone who reaches the address.")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081",
		"Address the health probes (/healthz, /readyz) bind to; \"0\" disables them.")
	// --kubeconfig is registered on flag.CommandLine by controller-runtime's config package.
	if f := flag.Lookup("kubeconfig"); f != nil {
		f.Usage = "Path to a kubeconfig. Empty: $KUBECONFIG if set, else the in-cluster configuration (the DaemonSet's service account)."
	}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	if flag.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", flag.Args())
	}
	if opts.NodeName == "" {
		return errNoNodeName
	}
	var err error
	if cfg.TopologyPolicy, err = topology.ParsePolicy(topologyPolicy); err != nil {
		return fmt.Errorf("--topology-policy: %w", err)
	}
	if cfg.TopologyScope, err = topology.ParseScope(topologyScope); err != nil {
		return fmt.Errorf("--topology-scope: %w", err)
	}
	if opts.RuntimeInjection, err = agent.ParseRuntimeInjection(injection); err != nil {
		return fmt.Errorf("--runtime-injection: %w", err)
	}
	if allocatePolicy != "" {
		if cfg.AllocatePolicy, err = allocpolicy.Load(allocatePolicy); err != nil {
			return fmt.Errorf("--allocate-policy: %w", err)
		}
	}
	if s := opts.PodResources.SocketPath; s != "" {
		if dir := filepath.Clean(filepath.Dir(s)); !filepath.IsAbs(s) || dir == filepath.Clean(cfg.PluginDir) ||
			(cfg.PluginsRegistryDir != "" && dir == filepath.Clean(cfg.PluginsRegistryDir)) {
			return fmt.Errorf("--pod-resources-socket=%q: %w", s, errPodResourcesSocket)
		}
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))

	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return fmt.Errorf("registering the built-in types: %w", err)
	}
	if err := kdv1alpha1.AddToScheme(scheme); err != nil {
		return fmt.Errorf("registering the kubedevice.io types: %w", err)
	}
	restCfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("loading the kubeconfig: %w", err)
	}
	restCfg.QPS, restCfg.Burst = clientQPS, clientBurst

	dm, err := nodeagent.New(cfg)
	if err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(restCfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserving.Options(metricsAddr, metricsSecure),
		HealthProbeBindAddress: probeAddr,
		Cache:                  agent.CacheOptions(opts.NodeName),
	})
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}
	ctx := ctrl.SetupSignalHandler()
	if err := indexer.Setup(ctx, mgr.GetFieldIndexer()); err != nil {
		return fmt.Errorf("setting up the field indexes: %w", err)
	}
	a, err := agent.Setup(mgr, dm, opts)
	if err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return fmt.Errorf("adding the health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("device-manager", a.ReadyCheck); err != nil {
		return fmt.Errorf("adding the readiness check: %w", err)
	}

	ctrl.Log.WithName("setup").Info("Starting the agent", "node", opts.NodeName, "namespace", opts.Namespace,
		"pluginDir", cfg.PluginDir, "pluginsRegistryDir", cfg.PluginsRegistryDir,
		"topologyPolicy", cfg.TopologyPolicy, "topologyScope", cfg.TopologyScope,
		"runtimeInjection", opts.RuntimeInjection, "nriSocket", opts.NRI.SocketPath,
		"podResourcesSocket", opts.PodResources.SocketPath)
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("running the manager: %w", err)
	}
	return nil
}

func joinValues[T ~string](values []T) string {
	s := make([]string, len(values))
	for i, v := range values {
		s[i] = string(v)
	}
	return strings.Join(s, ", ")
}
