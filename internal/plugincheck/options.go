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

package plugincheck

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/spf13/pflag"
)

// Timeouts bound the checker's waits. Zero values take the defaults.
type Timeouts struct {
	// Registration is how long the plugin has to register after it starts. Default 30 s.
	Registration time.Duration
	// RegistrationSettle is how long after each registration the checker waits for another
	// resource of the plugin to register (one process may serve several). Default 2 s.
	RegistrationSettle time.Duration
	// FirstList is how long ListAndWatch has to send its first list. Default 5 s.
	FirstList time.Duration
	// RPC bounds each Allocate and GetPreferredAllocation call. Default 10 s.
	RPC time.Duration
	// HealthUpdate is how long after --health-change-cmd the new list may take. Default 10 s.
	HealthUpdate time.Duration
	// Reregistration is how long after kubelet.sock is created again the plugin has to register
	// again. Default 30 s.
	Reregistration time.Duration
	// Stop is how long after SIGTERM the plugin has to exit. Default 10 s.
	Stop time.Duration
	// ListSettle is how long the checker waits after each of the first lists for another: the
	// checks use the list once no other follows within it. Default 1 s.
	ListSettle time.Duration
	// StreamHold is how long each ListAndWatch stream must stay open after it opened (and it
	// must stay open until the checker closes it). Default 10 s.
	StreamHold time.Duration
}

// The default timeouts.
const (
	DefaultRegistrationTimeout   = 30 * time.Second
	DefaultRegistrationSettle    = 2 * time.Second
	DefaultFirstListTimeout      = 5 * time.Second
	DefaultRPCTimeout            = 10 * time.Second
	DefaultHealthUpdateTimeout   = 10 * time.Second
	DefaultReregistrationTimeout = 30 * time.Second
	DefaultStopTimeout           = 10 * time.Second
	DefaultStreamHold            = 10 * time.Second
	DefaultListSettle            = time.Second
)

func (t Timeouts) complete() Timeouts {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&t.Registration, DefaultRegistrationTimeout)
	def(&t.RegistrationSettle, DefaultRegistrationSettle)
	def(&t.FirstList, DefaultFirstListTimeout)
	def(&t.RPC, DefaultRPCTimeout)
	def(&t.HealthUpdate, DefaultHealthUpdateTimeout)
	def(&t.Reregistration, DefaultReregistrationTimeout)
	def(&t.Stop, DefaultStopTimeout)
	def(&t.StreamHold, DefaultStreamHold)
	def(&t.ListSettle, DefaultListSettle)
	return t
}

// Options configure a run of the checker. Exactly one of Target and Socket is set.
type Options struct {
	// Target is the plugin to start, pointed at a plugin directory where the checker serves the
	// kubelet's Registration service on kubelet.sock, and at a plugins registry directory that
	// the checker watches as the kubelet's plugin watcher does.
	Target Target
	// Socket is the socket of a plugin that already runs. Registration, re-registration and stop
	// are then skipped.
	Socket string
	// Dir is the plugin directory for Target. Default: a new temporary directory, removed at the
	// end.
	Dir string
	// RegistryDir is the plugins registry directory for Target (the kubelet's
	// /var/lib/kubelet/plugins_registry). Default: a new temporary directory, removed at the end.
	RegistryDir string
	// HealthChange provokes a change of a device's health (--health-change-cmd). Without it,
	// list-and-watch/health-update is skipped.
	HealthChange func(ctx context.Context, env []string) error
	// Strict counts warnings as failures.
	Strict bool
	// Timeouts bound the waits.
	Timeouts Timeouts
	// Progress, if set, receives a line per check as it ends.
	Progress io.Writer
}

var errOptions = errors.New("invalid options")

// Validate says what is wrong with the options.
func (o *Options) Validate() error {
	if (o.Target == nil) == (o.Socket == "") {
		return fmt.Errorf("%w: give either a plugin to start or the socket of a running plugin", errOptions)
	}
	if o.Socket != "" && (o.Dir != "" || o.RegistryDir != "") {
		return fmt.Errorf("%w: --plugin-dir and --plugins-registry-dir are for a plugin the checker starts, not one given by --socket", errOptions)
	}
	return nil
}

// AddFlags registers the options' flags: the socket, the directories, the health change hook,
// --strict and the timeouts.
func (o *Options) AddFlags(f *pflag.FlagSet) {
	f.StringVar(&o.Socket, "socket", "", "The socket of a plugin that already runs, instead of a command to start.")
	f.StringVar(&o.Dir, "plugin-dir", "", "The plugin directory to serve kubelet.sock in (default: a new temporary directory, removed at the end). "+
		"Its sockets are removed, as a starting kubelet does; a directory a device manager serves is refused.")
	f.StringVar(&o.RegistryDir, "plugins-registry-dir", "", "The plugins registry directory the checker watches for plugins that register through "+
		"the kubelet's plugin watcher ({plugins-registry-dir}, "+EnvRegistryDir+"; default: a new temporary directory, removed at the end).")
	f.Var(&shellHookFlag{hook: &o.HealthChange}, "health-change-cmd", "A shell command that changes the health of one of the plugin's devices "+
		"(of resource $"+EnvResourceName+").")
	f.BoolVar(&o.Strict, "strict", false, "Count warnings as failures.")
	t := &o.Timeouts
	f.DurationVar(&t.Registration, "registration-timeout", DefaultRegistrationTimeout, "How long the plugin has to register after it starts.")
	f.DurationVar(&t.RegistrationSettle, "registration-settle", DefaultRegistrationSettle,
		"How long after each registration another resource of the plugin may register (all are checked).")
	f.DurationVar(&t.FirstList, "first-list-timeout", DefaultFirstListTimeout, "How long ListAndWatch has to send its first list.")
	f.DurationVar(&t.RPC, "rpc-timeout", DefaultRPCTimeout, "The deadline of each Allocate and GetPreferredAllocation call.")
	f.DurationVar(&t.HealthUpdate, "health-update-timeout", DefaultHealthUpdateTimeout, "How long after --health-change-cmd the new list may take.")
	f.DurationVar(&t.Reregistration, "reregistration-timeout", DefaultReregistrationTimeout,
		"How long after kubelet.sock is created again the plugin has to register again.")
	f.DurationVar(&t.Stop, "stop-timeout", DefaultStopTimeout, "How long after SIGTERM the plugin has to exit.")
	f.DurationVar(&t.ListSettle, "list-settle", DefaultListSettle,
		"How long after each of the first ListAndWatch lists another may replace it (the kubelet uses the latest list).")
	f.DurationVar(&t.StreamHold, "stream-hold", DefaultStreamHold,
		"How long each ListAndWatch stream must stay open after it opened (before and after the kubelet restart).")
}

// shellHookFlag is --health-change-cmd: a shell command, run as a ShellHook.
type shellHookFlag struct {
	hook    *func(ctx context.Context, env []string) error
	command string
}

func (f *shellHookFlag) String() string { return f.command }
func (f *shellHookFlag) Type() string   { return "command" }

func (f *shellHookFlag) Set(command string) error {
	if strings.TrimSpace(command) == "" {
		return errors.New("the health change command is empty")
	}
	f.command, *f.hook = command, ShellHook(command)
	return nil
}

// ShellHook returns a HealthChange that runs command with sh -c, with the target's environment
// (KUBEDEVICE_PLUGIN_DIR, KUBEDEVICE_PLUGIN_PID, KUBEDEVICE_RESOURCE_NAME) added.
func ShellHook(command string) func(ctx context.Context, env []string) error {
	return func(ctx context.Context, env []string) error {
		cmd := exec.CommandContext(ctx, "sh", "-c", command) //nolint:gosec // G204: the author's own hook.
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("running %q: %w: %s", command, err, strings.TrimSpace(string(out)))
		}
		return nil
	}
}
