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
// (internal/agent/observe). It parses flags and wires; the work is in internal/nodeagent (the core)
// and internal/agent (the Kubernetes side).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/go-logr/logr"

	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/kubedevice/kubedevice/internal/agent"
	"github.com/kubedevice/kubedevice/internal/agent/dra"
	"github.com/kubedevice/kubedevice/internal/agent/injection/nri"
	"github.com/kubedevice/kubedevice/internal/agent/observe"
	"github.com/kubedevice/kubedevice/internal/allocpolicy"
	"github.com/kubedevice/kubedevice/internal/contract"
	"github.com/kubedevice/kubedevice/internal/indexer"
	"github.com/kubedevice/kubedevice/internal/metricsserving"
	"github.com/kubedevice/kubedevice/internal/nodeagent"
	"github.com/kubedevice/kubedevice/internal/nodeagent/podresources"
	"github.com/kubedevice/kubedevice/internal/nodeagent/registration"
	"github.com/kubedevice/kubedevice/internal/nodeagent/topology"
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

var errNoNodeName = errors.New("--node-name is required when $NODE_NAME is not set")

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "kubedevice-agent: %v\n", err)
		os.Exit(1)
	}
}

// settings are what the command line says.
type settings struct {
	opts          agent.Options
	core          nodeagent.Config
	metricsAddr   string
	metricsSecure bool
	probeAddr     string
	pprofAddr     string
	zap           zap.Options
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

	scheme, err := contract.NewScheme()
	if err != nil {
		return err
	}
	restCfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("loading the kubeconfig: %w", err)
	}
	restCfg.QPS, restCfg.Burst = clientQPS, clientBurst

	var dm *nodeagent.Manager
	if s.opts.Mode != agent.ModeObserve {
		if dm, err = nodeagent.New(s.core); err != nil {
			return err
		}
	}
	mgr, err := ctrl.NewManager(restCfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserving.Options(s.metricsAddr, s.metricsSecure),
		HealthProbeBindAddress: s.probeAddr,
		PprofBindAddress:       s.pprofAddr,
		Cache:                  agent.CacheOptions(s.opts.NodeName),
	})
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
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
	logger.WithName("setup").Info("Starting the agent", "version", info.Version, "commit", info.Commit, "mode", s.opts.Mode, "node", s.opts.NodeName, "namespace", s.opts.Namespace,
		"pluginDir", s.core.PluginDir, "pluginsRegistryDir", s.core.PluginsRegistryDir,
		"topologyPolicy", s.core.TopologyPolicy, "topologyScope", s.core.TopologyScope,
		"topologyPolicyOptions", s.core.TopologyPolicyOptions,
		"runtimeInjection", s.opts.RuntimeInjection, "nriSocket", s.opts.NRI.SocketPath,
		"podResourcesSocket", s.opts.PodResources.SocketPath, "draResources", s.opts.DRAResources.String())
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("running the manager: %w", err)
	}
	return nil
}

// parseFlags parses the command line into settings, and validates them (agent.Options.Validate).
func parseFlags() (*settings, error) {
	namespace := os.Getenv("POD_NAMESPACE")
	if namespace == "" {
		namespace = agent.DefaultNamespace
	}
	s := &settings{core: nodeagent.DefaultConfig()}
	s.core.Registerer = metrics.Registry
	s.opts.PodResources.Registerer = metrics.Registry
	var topologyPolicy, topologyScope, injection, allocatePolicy, mode, observeResources string
	var topologyPolicyOptions, draResources []string
	s.opts.DRA = dra.Options{
		KubeletPluginsDir: dra.DefaultKubeletPluginsDir, KubeletRegistryDir: dra.DefaultKubeletRegistryDir, CDIDir: dra.DefaultCDIDir,
	}

	flag.StringVar(&s.opts.NodeName, "node-name", os.Getenv("NODE_NAME"),
		"Name of the node the agent runs on (required); defaults to $NODE_NAME, set from the pod's spec.nodeName by the DaemonSet.")
	flag.StringVar(&s.opts.Namespace, "namespace", namespace,
		"Namespace of the agent's Lease (kubedevice-agent-<node>); defaults to $POD_NAMESPACE, else "+agent.DefaultNamespace+".")
	flag.StringVar(&mode, "mode", string(agent.ModeManage),
		"What the agent does: "+joinValues(agent.Modes)+". manage: it is the device manager of the plugins that register with it. observe: the kubelet manages its own device plugins; the agent registers, allocates and injects nothing and mirrors, read-only, the kubelet's PodResources API and device manager checkpoint into NodeDevices (status.path Observed) and DeviceAllocations. The flags of manage mode are ignored in observe mode.")
	flag.StringVar(&observeResources, "observe-resources", "",
		"Observe mode: comma-separated resources to observe (e.g. nvidia.com/gpu,example.com/gopher); empty observes every device plugin resource the kubelet knows.")
	flag.StringVar(&s.opts.Observe.PodResourcesSocket, "kubelet-pod-resources-socket", observe.DefaultPodResourcesSocket,
		"Observe mode: the kubelet's PodResources API socket.")
	flag.StringVar(&s.opts.Observe.CheckpointPath, "kubelet-checkpoint", observe.DefaultCheckpointPath,
		"Observe mode: the kubelet's device manager checkpoint, read for the resources the kubelet knows and the devices it knew healthy, and the plugins' Allocate responses.")
	flag.StringVar(&s.core.PluginDir, "plugin-dir", s.core.PluginDir,
		"Directory of the registration socket (kubelet.sock) and the device plugins' sockets. Never the kubelet's own directory, which deletes foreign sockets.")
	flag.StringVar(&s.core.StateDir, "state-dir", s.core.StateDir,
		"Directory of the agent's checkpoint; not --plugin-dir, which every device plugin mounts read-write. A checkpoint an earlier agent left in --plugin-dir is moved here on the first start.")
	flag.StringVar(&s.core.BootIDPath, "boot-id-path", s.core.BootIDPath,
		"File holding the node's boot ID, recorded in the checkpoint: a different one at start means the node rebooted, so no container of the checkpoint still runs and every device is allocated again. Change it only to simulate a reboot in a test.")
	flag.StringVar(&s.core.PluginsRegistryDir, "plugins-registry-dir", s.core.PluginsRegistryDir,
		"Directory watched for plugins that announce themselves through the kubelet's plugin watcher; empty disables that registration path.")
	flag.DurationVar(&s.core.EndpointGracePeriod, "endpoint-grace-period", s.core.EndpointGracePeriod,
		"How long a resource whose device plugins all disconnected stays listed, with nothing allocatable, before it is removed (the kubelet's 5 minutes).")
	flag.StringVar(&topologyPolicy, "topology-policy", string(s.core.TopologyPolicy),
		"Topology manager policy for NUMA alignment of devices: "+joinValues(topology.Policies)+".")
	flag.StringVar(&topologyScope, "topology-scope", string(s.core.TopologyScope),
		"Granularity of NUMA alignment: "+joinValues(topology.Scopes)+".")
	flag.Func("topology-policy-options",
		"Topology manager policy options as the kubelet's --topology-manager-policy-options, key=value[,key=value...], repeatable: "+topology.OptionPreferClosestNUMANodes+"=true (best-effort and restricted prefer the NUMA set with the shortest distances, read from sysfs) and "+topology.OptionMaxAllowableNUMANodes+"=N (a policy other than none refuses to start on more NUMA nodes; default and minimum 8).",
		func(v string) error { topologyPolicyOptions = append(topologyPolicyOptions, v); return nil })
	flag.StringVar(&injection, "runtime-injection", string(agent.RuntimeInjectionNRI),
		"How containers get their devices at creation: "+joinValues(agent.RuntimeInjections)+". nri: the agent is an NRI plugin of the container runtime (containerd 2.x, CRI-O) and adds each container's envs, mounts, device nodes and CDI devices; while the NRI socket is missing or the connection is down it logs it, sets RuntimeInjectionReady=False on the node's NodeDevices and reconnects. none: no container is adjusted.")
	flag.StringVar(&s.opts.NRI.SocketPath, "nri-socket", nri.DefaultSocketPath,
		"The container runtime's NRI socket (--runtime-injection=nri).")
	flag.StringVar(&s.opts.NRI.PluginIndex, "nri-plugin-index", nri.DefaultPluginIndex,
		"Two-digit index of the agent's NRI plugin, registered as <index>-"+nri.PluginName+"; the runtime calls plugins in index order.")
	flag.StringVar(&s.opts.NRI.HostRoot, "nri-host-root", "",
		"Where the host's device nodes are seen in the agent's container: a device's host path (e.g. /dev/foo) is stat'ed as <root>/dev/foo for its type and numbers. Empty when the agent sees the host's /dev (privileged, or /dev mounted at /dev).")
	flag.StringVar(&s.opts.PodResources.SocketPath, "pod-resources-socket", podresources.DefaultSocketPath,
		"Unix socket on which the agent serves the kubelet's PodResources API (v1: List, Get, GetAllocatableResources) for the devices it manages, so node monitoring agents (dcgm-exporter, nfd-topology-updater) can map them to pods; the kubelet's own socket lists none of them. Its directory is created (0750) if missing. Empty disables it.")
	flag.StringVar(&allocatePolicy, "allocate-policy", "",
		"YAML file of the administrator's policy on device plugins' Allocate responses, per resource: allowedHostPathPrefixes, forbiddenEnvNames, forbiddenAnnotationPrefixes (docs/design.md, \"Trust model\"). Empty: only their structure is checked.")
	flag.Func("dra-resources",
		"Resources served through DRA, the agent being their DRA driver kubedevice.io (ResourceSlices, prepare through the kubelet, CDI): exact names, domain/* or *, comma-separated, repeatable. A resource is served by one path: these get no node capacity and are never allocated to pods through the device plugin path.",
		func(v string) error { draResources = append(draResources, v); return nil })
	flag.StringVar(&s.opts.DRA.KubeletPluginsDir, "kubelet-plugins-dir", s.opts.DRA.KubeletPluginsDir,
		"The kubelet's DRA plugins directory; the DRA socket is <dir>/kubedevice.io/dra.sock (with --dra-resources).")
	flag.StringVar(&s.opts.DRA.KubeletRegistryDir, "kubelet-registry-dir", s.opts.DRA.KubeletRegistryDir,
		"The kubelet's plugin watcher directory, where the DRA driver registers (with --dra-resources).")
	flag.StringVar(&s.opts.DRA.CDIDir, "cdi-dir", s.opts.DRA.CDIDir,
		"The container runtime's CDI spec directory, where a spec per prepared claim is written (with --dra-resources).")
	flag.StringVar(&s.metricsAddr, "metrics-bind-address", ":8080",
		"Address the Prometheus metrics endpoint (/metrics) binds to; \"0\" disables it.")
	flag.BoolVar(&s.metricsSecure, "metrics-secure", true,
		"Serve /metrics over HTTPS to authenticated and authorized clients only (a TokenReview and a SubjectAccessReview per scrape: get on the non-resource URL /metrics, which the ClusterRole kubedevice-metrics-reader grants); false serves plain HTTP to anyone who reaches the address.")
	flag.StringVar(&s.probeAddr, "health-probe-bind-address", ":8081",
		"Address the health probes (/healthz, /readyz) bind to; \"0\" disables them.")
	flag.StringVar(&s.pprofAddr, "pprof-bind-address", "0",
		"Address Go's profiles (/debug/pprof/) bind to, plain HTTP to anyone who reaches it: for measuring the agent's footprint, never exposed beyond the node; \"0\" (the default) disables them.")
	// --kubeconfig is registered on flag.CommandLine by controller-runtime's config package.
	if f := flag.Lookup("kubeconfig"); f != nil {
		f.Usage = "Path to a kubeconfig. Empty: $KUBECONFIG if set, else the in-cluster configuration (the DaemonSet's service account)."
	}
	flag.BoolVar(&s.showVersion, "version", false,
		"Print the version (the release and the git commit it was built from) and exit.")
	s.zap.BindFlags(flag.CommandLine)
	flag.Parse()
	if flag.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", flag.Args())
	}
	if s.showVersion {
		return s, nil
	}

	var err error
	if s.opts.Mode, err = agent.ParseMode(mode); err != nil {
		return nil, fmt.Errorf("--mode: %w", err)
	}
	for _, r := range strings.Split(observeResources, ",") {
		if r = strings.TrimSpace(r); r == "" {
			continue
		}
		if !registration.IsExtendedResourceName(r) {
			return nil, fmt.Errorf("--observe-resources: %q is not an extended resource name (domain/name, outside kubernetes.io)", r)
		}
		s.opts.Observe.Resources = append(s.opts.Observe.Resources, r)
	}
	if s.core.TopologyPolicy, err = topology.ParsePolicy(topologyPolicy); err != nil {
		return nil, fmt.Errorf("--topology-policy: %w", err)
	}
	if s.core.TopologyScope, err = topology.ParseScope(topologyScope); err != nil {
		return nil, fmt.Errorf("--topology-scope: %w", err)
	}
	if s.core.TopologyPolicyOptions, err = topology.ParsePolicyOptions(topologyPolicyOptions); err != nil {
		return nil, fmt.Errorf("--topology-policy-options: %w", err)
	}
	if s.opts.RuntimeInjection, err = agent.ParseRuntimeInjection(injection); err != nil {
		return nil, fmt.Errorf("--runtime-injection: %w", err)
	}
	if allocatePolicy != "" {
		if s.core.AllocatePolicy, err = allocpolicy.Load(allocatePolicy); err != nil {
			return nil, fmt.Errorf("--allocate-policy: %w", err)
		}
	}
	if s.opts.DRAResources, err = dra.ParseResources(draResources); err != nil {
		return nil, fmt.Errorf("--dra-resources: %w", err)
	}
	if s.opts.DRAResources.Any() {
		s.core.ServedByDRA = s.opts.DRAResources.Match
	}
	switch err := s.opts.Validate(s.core); {
	case errors.Is(err, agent.ErrNoNodeName):
		return nil, errNoNodeName
	case errors.Is(err, agent.ErrStateDir):
		return nil, fmt.Errorf("--state-dir=%w", err)
	case errors.Is(err, agent.ErrDRA):
		return nil, err
	case err != nil:
		return nil, fmt.Errorf("--pod-resources-socket=%w", err)
	}
	return s, nil
}

func joinValues[T ~string](values []T) string {
	s := make([]string, len(values))
	for i, v := range values {
		s[i] = string(v)
	}
	return strings.Join(s, ", ")
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
