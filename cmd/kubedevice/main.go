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

// Command kubedevice is kubedevice's command-line tool: `kubedevice dev` runs a local cluster with
// the agent, the controller and the Gopher device plugin and shows them at work; `kubedevice
// status` summarizes the devices of a cluster's nodes and who holds them; `kubedevice cleanup`
// removes what kubedevice leaves in a cluster after an uninstall; `kubedevice drain` cordons
// devices and evicts their holders, `kubedevice uncordon` puts them back in service; `kubedevice
// version` says which release it is. Run as kubectl-kubedevice it is a kubectl plugin (`kubectl
// kubedevice status`), and its help says so. It parses flags and wires; the work is in
// internal/devenv, internal/status, internal/cleanup, internal/remediation and internal/version.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/kubedevice/kubedevice/internal/cleanup"
	"github.com/kubedevice/kubedevice/internal/contract"
	"github.com/kubedevice/kubedevice/internal/devenv"
	"github.com/kubedevice/kubedevice/internal/status"
	"github.com/kubedevice/kubedevice/internal/version"
)

const (
	// statusTimeout bounds `kubedevice status`'s API calls.
	statusTimeout = 30 * time.Second
	// cleanupRequestTimeout bounds each API call of `kubedevice cleanup`.
	cleanupRequestTimeout = 30 * time.Second
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRootCommand().ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "kubedevice: %v\n", err)
		os.Exit(1)
	}
}

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "kubedevice",
		Short:         "kubedevice's command-line tool",
		Long:          "kubedevice is the kubelet's device plugin manager, taken out of the kubelet and made visible.\nThis tool runs a local demo cluster, summarizes a cluster's devices, and cleans up after an uninstall.",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.CompletionOptions.DisableDefaultCmd = true
	// --version prints what `kubedevice version` prints.
	root.Version = version.Get().String()
	root.SetVersionTemplate("kubedevice {{.Version}}\n")
	root.AddCommand(newDevCommand(), newStatusCommand(), newCleanupCommand(), newDrainCommand(), newUncordonCommand(), newPluginCommand(), newVersionCommand())
	asKubectlPlugin(root, os.Args[0])
	return root
}

func newDevCommand() *cobra.Command {
	opts := devenv.Options{}
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run a local cluster with the kubedevice agent, controller and Gopher plugin, and show them at work",
		Long: `Run a local cluster on this machine, with no kubelet and no containers: etcd, kube-apiserver and
kube-scheduler (from --k8s-bin-dir, built with hack/build-control-plane.sh if missing and the script is
in the working directory), the kubedevice CRDs and admission policies, a Ready node demo-node, the
kubedevice controller, the kubedevice agent as demo-node's device manager, and the Gopher device plugin
with one gopher. Then create gopher-pod and gopher-pod2, each asking for one example.com/gopher: the
first is bound and gets the gopher, the second stays Pending with "Insufficient example.com/gopher".
Print what kubectl shows, and keep running until Ctrl-C, then stop everything.

With --plugin, your plugin runs beside the Gopher: the demo waits for every resource it registers and
creates a pod asking for one device of each. When it exits the cluster keeps running and says so;
SIGHUP to kubedevice dev (kill -HUP <pid>, printed) starts it again.

The kubeconfig of the cluster's admin is <workdir>/kubeconfig; each component logs to
<workdir>/logs/<name>.log.`,
		Example: `  make demo                              # builds everything, then runs bin/kubedevice dev
  bin/kubedevice dev --exit-after-demo   # the end-to-end test: exit 0 only if the demo shows what it should
  bin/kubedevice dev --plugin './my-plugin --plugin-dir={plugin-dir}'   # your plugin beside the Gopher
  bin/kubedevice dev --plugin ./my-plugin --plugin-dra example.com/gpu   # its example.com/gpu through DRA
  sudo bin/kubedevice dev --plugin-mount-namespace --plugin ./my-plugin  # it hard-codes /var/lib/kubelet/device-plugins
  bin/kubedevice dev --plugin-socket example.com/gpu=/run/my-plugin.sock    # a plugin already running (say, in a debugger)`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.Out = cmd.OutOrStdout()
			// SIGHUP restarts the --plugin commands instead of ending kubedevice dev.
			restart := make(chan os.Signal, 1)
			signal.Notify(restart, syscall.SIGHUP)
			defer signal.Stop(restart)
			opts.RestartPlugins = restart
			return devenv.Run(cmd.Context(), opts)
		},
	}
	addDevFlags(cmd, &opts)
	return cmd
}

// addDevFlags adds the flags of kubedevice dev.
func addDevFlags(cmd *cobra.Command, opts *devenv.Options) {
	f := cmd.Flags()
	f.StringVar(&opts.WorkDir, "workdir", devenv.DefaultWorkDir,
		"Directory for the kubeconfig, the logs, the gophers and the plugin sockets; relative to the working directory.")
	f.StringVar(&opts.BinDir, "bin-dir", "",
		"Directory of kubedevice-controller, kubedevice-agent and gopher-device-plugin (default: the directory of this kubedevice binary).")
	f.StringVar(&opts.K8sBinDir, "k8s-bin-dir", "",
		"Directory of etcd, kube-apiserver and kube-scheduler (default: $KUBEBUILDER_ASSETS, else <bin-dir>/k8s).")
	f.DurationVar(&opts.Timeout, "timeout", devenv.DefaultTimeout,
		"How long each step may wait for what it waits for (the control plane to start, a pod to be bound, ...).")
	f.BoolVar(&opts.ExitAfterDemo, "exit-after-demo", false,
		"Stop everything after the demo, and exit 0 only if it showed what it should.")
	f.BoolVar(&opts.DRA, "dra", false,
		"Serve the Gopher's resource through DRA (the agent with --dra-resources=example.com/gopher, two gophers): show its ResourceSlices, "+
			"and the scheduler allocating one gopher to a pod with plain limits and one to a ResourceClaim, instead of the device plugin path.")
	f.StringArrayVar(&opts.Plugins, "plugin", nil,
		"A device plugin's command line (run with sh -c) to run beside the Gopher, pointed at the agent's plugin directory: "+
			"{plugin-dir} in it is replaced by the directory, and KUBEDEVICE_PLUGIN_DIR is set. The demo creates a pod asking for one device "+
			"of each resource it registers. If it exits, the cluster keeps running; SIGHUP to kubedevice dev starts it again. Repeatable.")
	f.StringArrayVar(&opts.PluginSockets, "plugin-socket", nil,
		"A device plugin that already runs, as RESOURCE=SOCKET: its socket is linked into the agent's plugin directory and registered for RESOURCE, "+
			"and the demo creates a pod asking for one device of it. SIGHUP to kubedevice dev registers it again. Repeatable.")
	f.StringArrayVar(&opts.PluginDRA, "plugin-dra", nil,
		"A resource of a --plugin or --plugin-socket to serve through DRA instead of the device plugin path (the agent with --dra-resources): "+
			"the demo shows its ResourceSlices and DeviceClass, and the scheduler allocating one device to the claim of a pod with plain limits. Repeatable.")
	f.BoolVar(&opts.PluginMountNamespace, "plugin-mount-namespace", false,
		"Run the --plugin commands in a private mount namespace with the agent's plugin directory bind-mounted on /var/lib/kubelet/device-plugins, "+
			"for plugins that cannot be told where it is (Linux, root, util-linux's unshare).")
}

func newStatusCommand() *cobra.Command {
	var (
		kubeconfig string
		opts       status.Options
	)
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Summarize each node's devices, their health, and who holds them",
		Long: `Summarize, per node, the device plugin resources the kubedevice agents report: total, allocatable,
allocated, unhealthy and cordoned devices summed over the NodeDevice shards, and the plugin's state;
each device, its health and the container holding it (namespace/pod/container); the pods waiting for
devices and why; and any disagreement between the NodeDevices and the DeviceAllocations.`,
		Example: `  export KUBECONFIG=bin/demo/kubeconfig && kubedevice status
  kubedevice status --node demo-node`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := newClient(kubeconfig)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), statusTimeout)
			defer cancel()
			return status.Run(ctx, c, cmd.OutOrStdout(), opts)
		},
	}
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", "", "Path to a kubeconfig (default: $KUBECONFIG, else ~/.kube/config).")
	cmd.Flags().StringVar(&opts.Node, "node", "", "Only this node.")
	return cmd
}

func newCleanupCommand() *cobra.Command {
	var (
		kubeconfig string
		opts       cleanup.Options
	)
	cmd := &cobra.Command{
		Use:   "cleanup",
		Short: "Remove what kubedevice leaves in a cluster after an uninstall",
		Long: `Remove every trace of kubedevice from a cluster whose kubedevice agents and controller are gone
(helm uninstall, or kubectl delete -k config/default --wait=false):

  1. Wait until no kubedevice controller runs: its leader election Lease (` + contract.LeaderElectionID + `
     in --lease-namespace) is absent, released or expired, at most --timeout. A controller that still
     runs would publish the resources again. --force skips the wait.
  2. Remove from every Node's status.capacity and status.allocatable the extended resources
     kubedevice published: those its controller's field manager (` + contract.ControllerFieldOwner + `) owns,
     and those of the node's NodeDevices. Other resources, cpu and memory are left alone.
  3. Delete every DeviceAllocation, and every NodeDevice once its ` + contract.NodeCapacityFinalizer + `
     finalizer is removed, so deleting the CRDs completes. A kubedevice agent installed again
     rebuilds them from its node's checkpoint; cordons in NodeDevices are lost (they are logged).

It is safe to run again, and a missing CRD is not an error. The Helm chart runs it as a post-delete
hook. It logs each change to standard error and prints a summary.`,
		Example: `  kubectl delete -k config/default --wait=false && kubedevice cleanup   # the CRDs' deletion then completes
  kubedevice cleanup --force    # without waiting for the controller's Lease`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			logger := zap.New(zap.WriteTo(cmd.ErrOrStderr()), zap.ConsoleEncoder())
			ctrl.SetLogger(logger)
			c, err := newClientWithTimeout(kubeconfig, cleanupRequestTimeout)
			if err != nil {
				return err
			}
			res, err := cleanup.Run(ctrl.LoggerInto(cmd.Context(), logger), c, opts)
			if err != nil {
				return fmt.Errorf("cleaning up: %w", err)
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), res)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&kubeconfig, "kubeconfig", "", "Path to a kubeconfig (default: $KUBECONFIG, else ~/.kube/config).")
	f.StringVar(&opts.LeaseNamespace, "lease-namespace", cleanup.DefaultLeaseNamespace,
		"Namespace of the controller's leader election Lease: the namespace kubedevice was installed in.")
	f.DurationVar(&opts.Timeout, "timeout", cleanup.DefaultTimeout,
		"How long to wait for the controller to stop before giving up.")
	f.BoolVar(&opts.Force, "force", false,
		"Do not wait for the controller to stop. A controller that still runs publishes its resources again.")
	return cmd
}

// newClient returns a client of the cluster the kubeconfig names, as kubectl finds it (in a pod
// with no kubeconfig: the pod's service account).
func newClient(kubeconfig string) (client.Client, error) {
	return newClientWithTimeout(kubeconfig, 0)
}

// newClientWithTimeout is newClient whose every request times out after timeout (0: never).
func newClientWithTimeout(kubeconfig string, timeout time.Duration) (client.Client, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("loading the kubeconfig: %w", err)
	}
	cfg.Timeout = timeout
	scheme, err := contract.NewScheme()
	if err != nil {
		return nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("creating a client: %w", err)
	}
	return c, nil
}
