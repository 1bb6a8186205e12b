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

package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	cmdutil "k8s.io/kubectl/pkg/cmd/util"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubedevice/kubedevice/internal/contract"
	"github.com/kubedevice/kubedevice/internal/remediation"
)

// drainRequestTimeout bounds each API call of drain and uncordon (not the wait for the evictions,
// which --timeout bounds).
const drainRequestTimeout = 30 * time.Second

// drainFlags are the flags drain and uncordon share.
type drainFlags struct {
	kubeconfig string
	dryRun     string
	opts       remediation.DrainOptions
}

func (f *drainFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.kubeconfig, "kubeconfig", "", "Path to a kubeconfig (default: $KUBECONFIG, else ~/.kube/config).")
	cmd.Flags().StringVar(&f.dryRun, "dry-run", "none",
		`"none", "client" (print what would be done, write nothing) or "server" (send every write with dryRun=All); --dry-run alone is "client".`)
	cmd.Flags().Lookup("dry-run").NoOptDefVal = "client"
}

// complete fills opts from the arguments NODE RESOURCE DEVICE... and the flags.
func (f *drainFlags) complete(cmd *cobra.Command, args []string) error {
	f.opts.Node, f.opts.Resource, f.opts.Devices = args[0], args[1], args[2:]
	f.opts.Out, f.opts.ErrOut = cmd.OutOrStdout(), cmd.ErrOrStderr()
	switch f.dryRun {
	case "none":
		f.opts.DryRun = cmdutil.DryRunNone
	case "client":
		f.opts.DryRun = cmdutil.DryRunClient
	case "server":
		f.opts.DryRun = cmdutil.DryRunServer
	default:
		return fmt.Errorf("--dry-run=%q: want none, client or server", f.dryRun)
	}
	return nil
}

// clients returns a client of kubedevice's objects and a clientset, both with the user's
// credentials from the kubeconfig, each request bounded by drainRequestTimeout.
func (f *drainFlags) clients() (client.Client, kubernetes.Interface, error) {
	cfg, err := loadConfig(f.kubeconfig)
	if err != nil {
		return nil, nil, err
	}
	cfg.Timeout = drainRequestTimeout
	scheme, err := contract.NewScheme()
	if err != nil {
		return nil, nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, nil, fmt.Errorf("creating a client: %w", err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("creating a clientset: %w", err)
	}
	return c, cs, nil
}

// loadConfig loads the kubeconfig as kubectl does (in a pod with none: its service account).
func loadConfig(kubeconfig string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("loading the kubeconfig: %w", err)
	}
	return cfg, nil
}

func newDrainCommand() *cobra.Command {
	f := &drainFlags{}
	cmd := &cobra.Command{
		Use:   "drain NODE RESOURCE DEVICE...",
		Short: "Cordon devices and evict the pods holding them, like kubectl drain for devices",
		Long: `Cordon the devices (NodeDevice.spec.cordons: the agent allocates them to no new pod), then evict
the pods holding them through the Eviction API, as kubectl drain does for a node: PodDisruptionBudgets
are respected (an eviction they refuse is retried every 5 s until --timeout), and each evicted pod is
awaited until it is gone. The holders are the pods whose DeviceAllocations on the node list the
devices, and for a device served through DRA the pods its ResourceClaim is reserved for. It runs
with your own credentials: patch on nodedevices, list on deviceallocations, get on pods and
resourceclaims, create on pods/eviction.

The devices stay cordoned when it fails or times out; ` + "`uncordon`" + ` puts them back in service.`,
		Example: `  kubedevice drain node-1 example.com/gopher gopher-0
  kubedevice drain node-1 example.com/gopher gopher-0 gopher-1 --timeout 5m --reason "fan failure"
  kubedevice drain node-1 example.com/gopher gopher-0 --dry-run    # print what it would do`,
		Args: cobra.MinimumNArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := f.complete(cmd, args); err != nil {
				return err
			}
			c, cs, err := f.clients()
			if err != nil {
				return err
			}
			return remediation.Drain(cmd.Context(), c, cs, f.opts)
		},
	}
	f.register(cmd)
	cmd.Flags().DurationVar(&f.opts.Timeout, "timeout", 0,
		"How long to wait for the evictions (retries of those a PodDisruptionBudget refuses included) before giving up; 0 waits forever.")
	cmd.Flags().StringVar(&f.opts.Reason, "reason", "drained with kubedevice drain", "The reason written into each new cordon.")
	return cmd
}

func newUncordonCommand() *cobra.Command {
	f := &drainFlags{}
	cmd := &cobra.Command{
		Use:   "uncordon NODE RESOURCE DEVICE...",
		Short: "Put cordoned devices back in service",
		Long: `Remove the devices' cordons from every NodeDevice shard of the resource on the node (a cordon is
honoured from any shard), so the agent allocates them again.`,
		Example: `  kubedevice uncordon node-1 example.com/gopher gopher-0`,
		Args:    cobra.MinimumNArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := f.complete(cmd, args); err != nil {
				return err
			}
			c, _, err := f.clients()
			if err != nil {
				return err
			}
			return remediation.Uncordon(cmd.Context(), c, f.opts)
		},
	}
	f.register(cmd)
	return cmd
}
