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
		opts   plugincheck.Options
		target plugincheck.CommandTarget
		junit  string
	)
	cmd := &cobra.Command{
		Use:     "test [flags] -- PLUGIN-COMMAND [ARGS...]",
		Short:   "Check a device plugin against the kubelet's rules (a conformance report, like csi-sanity)",
		Long:    pluginTestLong,
		Example: pluginTestExample,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				warnCheckerFlagsAfterDash(cmd, args)
				target.Args, opts.Target = args, &target
			}
			if opts.Socket == "" && len(args) == 0 {
				return errors.New("give a plugin command after --, or --socket")
			}
			report, err := plugincheck.Run(cmd.Context(), opts)
			if err != nil {
				return err
			}
			return writePluginReport(cmd, report, junit)
		},
	}
	opts.AddFlags(cmd.Flags())
	target.AddFlags(cmd.Flags())
	cmd.Flags().StringVar(&junit, "junit", "", "Also write the report as JUnit XML to this file.")
	return cmd
}

const pluginTestLong = `Check that a device plugin (device plugin API v1beta1) obeys the protocol as the kubelet uses it, and
report per check pass, fail, warn or skip with what the checker saw and the rule it enforces.

Given a command line, the checker creates a plugin directory (--plugin-dir, default a temporary one),
serves the kubelet's Registration service on kubelet.sock there, watches a plugins registry directory
(--plugins-registry-dir) as the kubelet's plugin watcher does, and starts the plugin pointed at them:
{plugin-dir} and {plugins-registry-dir} in the arguments are replaced by the directories, and
KUBEDEVICE_PLUGIN_DIR, KUBEDEVICE_KUBELET_SOCKET and KUBEDEVICE_PLUGINS_REGISTRY_DIR are set. A plugin
that can only use /var/lib/kubelet/device-plugins (or /var/lib/kubelet/plugins_registry) runs with
--mount-namespace (Linux, root, util-linux's unshare): the directories are bind-mounted there in a
private mount namespace. A plugin process that serves several resources (one socket each) has each
resource checked and reported in a section of its own. The checks: registration (version, resource
name, endpoint, options), ListAndWatch (first list, device IDs, health values, a health change, the
stream staying open), Allocate (every healthy device, several, an unknown ID, responses judged by the
same code the kubedevice agent enforces, each refusal saying whether it is the kubelet's rule or
kubedevice's stricter one), PreStartContainer, GetPreferredAllocation, registering again after the
kubelet restarts, and stopping on SIGTERM.

Given --socket, the checker talks to a plugin that already runs and skips what needs registration.

To check that the plugin reports a health change, give --health-change-cmd: a shell command that
changes a device's health, or removes a device, of resource KUBEDEVICE_RESOURCE_NAME
(KUBEDEVICE_PLUGIN_PID, KUBEDEVICE_PLUGIN_DIR and KUBEDEVICE_PLUGIN_SOCKET are set too). It runs on
each resource's ListAndWatch stream before and on the one after the kubelet restart, and must change
the devices each time: flip a health, not set it. Each stream must stay open --stream-hold (10 s) and
until the checker closes it. Accepting an unknown device ID, answering GetPreferredAllocation with no
container response, and device nodes without permissions are warnings; --strict makes warnings fail.
The exit code is 1 when a check failed, and when the run was interrupted (Ctrl-C), which fails no
check.

The checker's flags go before --; everything after -- is the plugin's command line.`

const pluginTestExample = `  kubedevice plugin test --junit report.xml \
      --health-change-cmd 'f=/tmp/gophers/gopher-0; grep -q unhealthy $f && echo ok > $f || echo unhealthy > $f' \
      -- bin/gopher-device-plugin --plugin-dir={plugin-dir} --gophers-dir=/tmp/gophers
  sudo kubedevice plugin test --mount-namespace -- ./my-plugin        # hard-codes /var/lib/kubelet/device-plugins
  kubedevice plugin test --socket /var/lib/kubelet/device-plugins/my.sock`

// writePluginReport prints the report, writes it as JUnit when asked, and returns the run's
// exit: errPluginFailed, errInterrupted or nil.
func writePluginReport(cmd *cobra.Command, report *plugincheck.Report, junit string) error {
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
