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

package devenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
)

// The author's plugins in the edit-run loop: a --plugin command that ends (even with status 0)
// is reported with the end of its log and its devices Disconnected, and the cluster keeps
// running; Options.RestartPlugins (SIGHUP) starts every --plugin command again and registers
// every --plugin-socket plugin again.

// keepRunning prints the error of a step that failed while the cluster serves, which keeps
// running; nothing when ctx ended (the cluster is stopping).
func (d *dev) keepRunning(ctx context.Context, err error) {
	if err == nil || ctx.Err() != nil {
		return
	}
	fmt.Fprintf(d.opts.Out, "kubedevice dev: %v\nThe cluster keeps running; kill -HUP %d restarts your plugins.\n", err, os.Getpid())
}

// reportExits reports each --plugin command that ended since the last look: how, the end of
// its log, and its resources' NodeDevices once the agent shows the plugin Disconnected.
func (d *dev) reportExits(ctx context.Context) error {
	for _, ap := range d.authors {
		if ap.comp == nil || ap.reported {
			continue
		}
		ended, how := ap.comp.ended()
		if !ended {
			continue
		}
		ap.reported = true
		fmt.Fprintf(d.opts.Out, "\n%s exited (%s); the cluster keeps running.%s\n", ap.name, how, logTail(ap.name, ap.comp.logPath))
		if err := d.p.run("Showing "+ap.name+"'s devices Disconnected", d.waitDisconnected(ctx, ap)); err != nil {
			return err
		}
		fmt.Fprintf(d.opts.Out, "Start it again: kill -HUP %d\n", os.Getpid())
	}
	return nil
}

// waitDisconnected waits until the NodeDevices of the plugin's resources show it Disconnected.
func (d *dev) waitDisconnected(ctx context.Context, ap *authorPlugin) func() (string, error) {
	return func() (string, error) {
		var got []*served
		what := fmt.Sprintf("the NodeDevices of %s to show %s Disconnected", strings.Join(ap.resources, ", "), ap.name)
		if err := d.waitFor(ctx, what, []string{agentName}, func(ctx context.Context) (bool, string, error) {
			all, err := servedResources(ctx, d.c)
			if err != nil {
				return false, "", err
			}
			got = pick(all, ap.resources)
			up := slices.ContainsFunc(got, func(s *served) bool { return s.state != string(kdv1alpha1.PluginStateDisconnected) })
			return !up, describeServed(got, "no resource"), nil
		}); err != nil {
			return "", err
		}
		return describeServed(got, "no resource"), nil
	}
}

// restartPlugins stops every --plugin command that still runs and starts it again, registers
// every --plugin-socket plugin again, and waits until each serves its resources again.
func (d *dev) restartPlugins(ctx context.Context) error {
	if len(d.authors) == 0 {
		fmt.Fprintln(d.opts.Out, "\nkubedevice dev: no --plugin or --plugin-socket to restart.")
		return nil
	}
	fmt.Fprintln(d.opts.Out)
	var errs []error
	for _, ap := range d.authors {
		if err := d.restartPlugin(ctx, ap); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// restartPlugin restarts one plugin (see restartPlugins).
func (d *dev) restartPlugin(ctx context.Context, ap *authorPlugin) error {
	if ap.comp != nil && !ap.reported {
		ap.reported = true
		if err := ap.comp.stop(); err != nil {
			return err
		}
		_, how := ap.comp.ended()
		fmt.Fprintf(d.opts.Out, "Stopped %s (%s).\n", ap.name, how)
		if err := d.p.run("Showing "+ap.name+"'s devices Disconnected", d.waitDisconnected(ctx, ap)); err != nil {
			return err
		}
	}
	title := "Restarting " + ap.name
	if ap.command == "" {
		title = "Registering " + ap.name + " (a running plugin) again"
	}
	return d.p.run(title, func() (string, error) {
		if ap.command == "" {
			if err := d.registerSocket(ctx, ap); err != nil {
				return "", err
			}
		} else if err := d.startAuthorCommand(ap); err != nil {
			return "", err
		}
		detail, err := d.waitServing(ctx, ap)
		if ap.comp != nil && err != nil {
			// An end the error reports already.
			ap.reported, _ = ap.comp.ended()
		}
		return detail, err
	})
}

// waitServing waits until the agent shows every resource of the plugin registered with a healthy
// device, and returns the progress line's detail.
func (d *dev) waitServing(ctx context.Context, ap *authorPlugin) (string, error) {
	var got []*served
	what := fmt.Sprintf("%s to register %s with the agent again, each with a healthy device", ap.name, strings.Join(ap.resources, ", "))
	if err := d.waitFor(ctx, what, []string{ap.name, agentName}, func(ctx context.Context) (bool, string, error) {
		all, err := servedResources(ctx, d.c)
		if err != nil {
			return false, "", err
		}
		got = pick(all, ap.resources)
		ready := !slices.ContainsFunc(got, func(s *served) bool { return !s.ready() })
		return ready, describeServed(got, "no resource"), nil
	}); err != nil {
		return "", err
	}
	return describeCounts(got), nil
}
