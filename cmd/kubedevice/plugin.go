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
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kubedevice/kubedevice/internal/plugincheck"
)

// errPluginFailed makes `kubedevice plugin test` exit non-zero when a check failed.
var errPluginFailed = errors.New("the plugin failed conformance checks")

// errInterrupted makes an interrupted run exit non-zero without blaming the plugin.
var errInterrupted = errors.New("the run was interrupted: the checks it cut short are skipped, not failed")

func newPluginCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "plugin",
		Short: "Tools for device plugin authors",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newPluginTestCommand())
	return cmd
}

func newPluginTestCommand() *cobra.Command {
	var (
		opts           plugincheck.Options
		target         plugincheck.CommandTarget
		healthChange   string
		junit, logFile string
		mountNamespace bool
	)
	cmd := &cobra.Command{
		Use:   "test [flags] -- PLUGIN-COMMAND [ARGS...]",
		Short: "Check a device plugin against the kubelet's rules (a conformance report, like csi-sanity)",
		Long: `Check that a device plugin (device plugin API v1beta1) obeys the protocol as the kubelet uses it, and
report per check pass, fail, warn or skip with what the checker saw and the rule it enforces.

Given a command line, the checker creates a plugin directory (--plugin-dir, default a temporary one),
serves the kubelet's Registration service on kubelet.sock there, and starts the plugin pointed at it:
{plugin-dir} in the arguments is replaced by the directory, and KUBEDEVICE_PLUGIN_DIR and
KUBEDEVICE_KUBELET_SOCKET are set. A plugin that can only use /var/lib/kubelet/device-plugins runs
with --mount-namespace (Linux, root, util-linux's unshare): the directory is bind-mounted there in a
private mount namespace. The checks: registration (version, resource name, endpoint, options),
ListAndWatch (first list, device IDs, health values, a health change, the stream staying open),
Allocate (every healthy device, several, an unknown ID, well-formed responses), PreStartContainer,
GetPreferredAllocation, registering again after the kubelet restarts, and stopping on SIGTERM.

Given --socket, the checker talks to a plugin that already runs and skips what needs registration.

To check that the plugin reports a health change, give --health-change-cmd: a shell command that
changes a device's health, or removes a device (KUBEDEVICE_PLUGIN_PID, KUBEDEVICE_PLUGIN_DIR and
KUBEDEVICE_PLUGIN_SOCKET are set). It runs twice, on the ListAndWatch stream before and on the one
after the kubelet restart, and must change the devices each time: flip a health, not set it.
Each stream must stay open --stream-hold (10 s) and until the checker closes it. Accepting an
unknown device ID, and answering GetPreferredAllocation with no container response, are warnings;
--strict makes warnings fail. The exit code is 1 when a check failed, and when the run was
interrupted (Ctrl-C), which fails no check.

The checker's flags go before --; everything after -- is the plugin's command line.`,
		Example: `  kubedevice plugin test --junit report.xml \
      --health-change-cmd 'f=/tmp/gophers/gopher-0; grep -q unhealthy $f && echo ok > $f || echo unhealthy > $f' \
      -- bin/gopher-device-plugin --plugin-dir={plugin-dir} --gophers-dir=/tmp/gophers
  sudo kubedevice plugin test --mount-namespace -- ./my-plugin        # hard-codes /var/lib/kubelet/device-plugins
  kubedevice plugin test --socket /var/lib/kubelet/device-plugins/my.sock`,
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case opts.Socket != "" && len(args) > 0:
				return errors.New("give either --socket or a plugin command, not both")
			case opts.Socket == "" && len(args) == 0:
				return errors.New("give a plugin command after --, or --socket")
			case len(args) > 0:
				warnCheckerFlagsAfterDash(cmd, args)
				target.Args = args
				if mountNamespace {
					target.MountAt = plugincheck.KubeletPluginDir
				}
				if logFile != "" {
					f, err := os.Create(logFile)
					if err != nil {
						return fmt.Errorf("creating the plugin's log: %w", err)
					}
					defer f.Close()
					target.Log = f
				}
				opts.Target = &target
			}
			if healthChange != "" {
				opts.HealthChange = plugincheck.ShellHook(healthChange)
			}
			report, err := plugincheck.Run(cmd.Context(), opts)
			if err != nil {
				return err
			}
			if report.Interrupted {
				defer fmt.Fprintln(cmd.ErrOrStderr(), "kubedevice plugin test: interrupted before the run ended; the report covers what ran")
			}
			if err := report.WriteText(cmd.OutOrStdout()); err != nil {
				return err
			}
			if junit != "" {
				f, err := os.Create(junit)
				if err != nil {
					return fmt.Errorf("creating the JUnit report: %w", err)
				}
				werr := report.WriteJUnit(f)
				if cerr := f.Close(); werr == nil {
					werr = cerr
				}
				if werr != nil {
					return werr
				}
			}
			if report.Failed() {
				return errPluginFailed
			}
			if report.Interrupted {
				return errInterrupted
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Socket, "socket", "", "The socket of a plugin that already runs, instead of a command to start.")
	f.StringVar(&opts.Dir, "plugin-dir", "", "The plugin directory to serve kubelet.sock in (default: a new temporary directory, removed at the end). "+
		"Its sockets are removed, as a starting kubelet does; a directory a device manager serves is refused.")
	f.BoolVar(&mountNamespace, "mount-namespace", false,
		"Run the plugin in a private mount namespace with the plugin directory bind-mounted on "+plugincheck.KubeletPluginDir+" (Linux, root).")
	f.StringVar(&healthChange, "health-change-cmd", "", "A shell command that changes the health of one of the plugin's devices.")
	f.StringVar(&junit, "junit", "", "Also write the report as JUnit XML to this file.")
	f.StringVar(&logFile, "plugin-log", "", "Write what the plugin prints to this file (its end is in the report when it does not register).")
	f.BoolVar(&opts.Strict, "strict", false, "Count warnings as failures.")
	f.DurationVar(&opts.Timeouts.Registration, "registration-timeout", plugincheck.DefaultRegistrationTimeout, "How long the plugin has to register after it starts.")
	f.DurationVar(&opts.Timeouts.FirstList, "first-list-timeout", plugincheck.DefaultFirstListTimeout, "How long ListAndWatch has to send its first list.")
	f.DurationVar(&opts.Timeouts.RPC, "rpc-timeout", plugincheck.DefaultRPCTimeout, "The deadline of each Allocate and GetPreferredAllocation call.")
	f.DurationVar(&opts.Timeouts.HealthUpdate, "health-update-timeout", plugincheck.DefaultHealthUpdateTimeout, "How long after --health-change-cmd the new list may take.")
	f.DurationVar(&opts.Timeouts.Reregistration, "reregistration-timeout", plugincheck.DefaultReregistrationTimeout,
		"How long after kubelet.sock is created again the plugin has to register again.")
	f.DurationVar(&opts.Timeouts.Stop, "stop-timeout", plugincheck.DefaultStopTimeout, "How long after SIGTERM the plugin has to exit.")
	f.DurationVar(&opts.Timeouts.ListSettle, "list-settle", plugincheck.DefaultListSettle,
		"How long after each of the first ListAndWatch lists another may replace it (the kubelet uses the latest list).")
	f.DurationVar(&opts.Timeouts.StreamHold, "stream-hold", plugincheck.DefaultStreamHold,
		"How long each ListAndWatch stream must stay open after it opened (before and after the kubelet restart).")
	return cmd
}

// warnCheckerFlagsAfterDash warns about arguments after -- that look like the checker's own
// flags: they reach the plugin, which may die with "unknown flag". --plugin-dir is left out: it is
// the plugin's own flag in the usual command line (--plugin-dir={plugin-dir}).
func warnCheckerFlagsAfterDash(cmd *cobra.Command, args []string) {
	for _, a := range args {
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "--") || name == "plugin-dir" || cmd.Flags().Lookup(name) == nil {
			continue
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "warning: %s comes after --, so it goes to the plugin, not the checker; put the checker's flags before --\n", a)
	}
}
