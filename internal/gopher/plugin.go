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

package gopher

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/fsnotify/fsnotify"
	"golang.org/x/sync/errgroup"
	"k8s.io/klog/v2"
	"k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kubedevice/kubedevice/pkg/deviceplugin"
)

// Defaults of Options.
const (
	DefaultGophersDir   = "/etc/gophers"
	DefaultResourceName = "example.com/gopher"
	DefaultSocketName   = "gopher.sock"
	DefaultResyncPeriod = 30 * time.Second

	// settleDelay gathers the events of one change (create, then write)
	// into one rescan.
	settleDelay = 50 * time.Millisecond
	// gophersDirMode is used when the gophers directory has to be created.
	gophersDirMode = 0o755
)

// Options configure the gopher device plugin. Zero values take the defaults.
type Options struct {
	// GophersDir holds one file per gopher. Created if missing.
	GophersDir string
	// PluginDir is the device manager's plugin directory, where kubelet.sock
	// is (deviceplugin.DefaultSocketDir for the kubelet; kubedevice's is
	// /var/lib/kubedevice/device-plugins).
	PluginDir string
	// Registration is the registration path; defaults to direct.
	Registration deviceplugin.RegistrationMode
	// PluginsRegistryDir is the plugin watcher directory, for the watcher
	// registration path.
	PluginsRegistryDir string
	// ResourceName defaults to example.com/gopher.
	ResourceName string
	// SocketName is the plugin's socket file name; defaults to gopher.sock.
	SocketName string
	// ResyncPeriod is how often the directory is rescanned besides the
	// events; defaults to 30 s.
	ResyncPeriod time.Duration
}

// AddFlags registers the plugin's flags on fs, bound to o; New checks them.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.GophersDir, "gophers-dir", DefaultGophersDir,
		"Directory of gopher files, one device each; created if missing.")
	fs.StringVar(&o.PluginDir, "plugin-dir", deviceplugin.DefaultSocketDir,
		"The device manager's plugin directory: kubelet.sock is there, and so is the plugin's socket on the direct registration path. "+
			"The kubelet's is the default; kubedevice's is /var/lib/kubedevice/device-plugins.")
	fs.StringVar((*string)(&o.Registration), "registration", string(deviceplugin.RegistrationDirect),
		"How to register: \"direct\" calls Register on <plugin-dir>/kubelet.sock and registers again whenever the device manager restarts; "+
			"\"watcher\" serves the plugin's socket in --plugins-registry-dir for the device manager's plugin watcher.")
	fs.StringVar(&o.PluginsRegistryDir, "plugins-registry-dir", deviceplugin.DefaultRegistryDir,
		"The plugin watcher directory, used with --registration=watcher. "+
			"The kubelet's is the default; kubedevice's is /var/lib/kubedevice/plugins_registry.")
	fs.StringVar(&o.ResourceName, "resource-name", DefaultResourceName,
		"Extended resource name to advertise the gophers as.")
	fs.StringVar(&o.SocketName, "socket-name", DefaultSocketName,
		"File name of the plugin's socket.")
	fs.DurationVar(&o.ResyncPeriod, "resync-period", DefaultResyncPeriod,
		"How often to rescan --gophers-dir besides reacting to its changes.")
}

// Plugin is the gopher device plugin.
type Plugin struct {
	dir    string
	resync time.Duration
	dp     *deviceplugin.Plugin
}

// New validates opts and returns a plugin that is not running yet.
func New(opts Options) (*Plugin, error) {
	if opts.GophersDir == "" {
		opts.GophersDir = DefaultGophersDir
	}
	if opts.ResourceName == "" {
		opts.ResourceName = DefaultResourceName
	}
	if opts.SocketName == "" {
		opts.SocketName = DefaultSocketName
	}
	if opts.ResyncPeriod <= 0 {
		opts.ResyncPeriod = DefaultResyncPeriod
	}
	dir, err := filepath.Abs(opts.GophersDir)
	if err != nil {
		return nil, fmt.Errorf("resolving gophers directory: %w", err)
	}
	g := &Plugin{dir: dir, resync: opts.ResyncPeriod}
	g.dp, err = deviceplugin.New(deviceplugin.Config{
		ResourceName: opts.ResourceName,
		SocketDir:    opts.PluginDir,
		SocketName:   opts.SocketName,
		Registration: opts.Registration,
		RegistryDir:  opts.PluginsRegistryDir,
		Hooks: deviceplugin.Hooks{
			Allocate:               g.allocate,
			GetPreferredAllocation: g.preferredAllocation,
			PreStartContainer:      g.preStart,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("creating device plugin: %w", err)
	}
	return g, nil
}

// SocketPath is the plugin's socket.
func (g *Plugin) SocketPath() string { return g.dp.SocketPath() }

// Status is the device plugin's registration status.
func (g *Plugin) Status() deviceplugin.Status { return g.dp.Status() }

// Run scans and watches the gophers directory and serves the device plugin
// until ctx is cancelled. It returns an error only if it cannot start.
func (g *Plugin) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithName("gopher").WithValues("gophersDir", g.dir)
	ctx = klog.NewContext(ctx, logger)

	if err := os.MkdirAll(g.dir, gophersDirMode); err != nil {
		return fmt.Errorf("creating gophers directory: %w", err)
	}
	fsw, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("creating gophers directory watcher: %w", err)
	}
	defer fsw.Close()
	// Watch, then scan, so no change in between is missed.
	if err := fsw.Add(g.dir); err != nil {
		return fmt.Errorf("watching gophers directory: %w", err)
	}
	w := &dirWatch{g: g, fsw: fsw, watching: true}
	if err := w.refresh(logger); err != nil {
		return err
	}

	eg, ctx := errgroup.WithContext(ctx)
	eg.Go(func() error { return g.dp.Run(ctx) })
	eg.Go(func() error { return w.run(ctx) })
	return eg.Wait()
}

// dirWatch keeps the plugin's devices in step with the gophers directory.
type dirWatch struct {
	g        *Plugin
	fsw      *fsnotify.Watcher
	watching bool
	last     []string
}

func (w *dirWatch) run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	resync := time.NewTicker(w.g.resync)
	defer resync.Stop()
	settle := time.NewTimer(settleDelay)
	settle.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.fsw.Events:
			if !ok {
				return errors.New("watching gophers directory: watcher closed")
			}
			logger.V(4).Info("Gophers directory event", "event", ev.String())
			if filepath.Clean(ev.Name) == w.g.dir && ev.Has(fsnotify.Remove|fsnotify.Rename) {
				logger.Error(nil, "Gophers directory removed; no gophers until it is back", "retryIn", w.g.resync)
				w.watching = false
			}
			settle.Reset(settleDelay)
		case err, ok := <-w.fsw.Errors:
			if !ok {
				return errors.New("watching gophers directory: watcher closed")
			}
			logger.Error(err, "Watching gophers directory; rescanning")
			settle.Reset(settleDelay)
		case <-settle.C:
			w.logRefresh(logger)
		case <-resync.C:
			if !w.watching {
				if err := w.fsw.Add(w.g.dir); err == nil {
					logger.Info("Gophers directory is back; watching it again")
					w.watching = true
				}
			}
			w.logRefresh(logger)
		}
	}
}

func (w *dirWatch) logRefresh(logger klog.Logger) {
	if err := w.refresh(logger); err != nil {
		logger.Error(err, "Refreshing gophers")
	}
}

// refresh scans the directory and hands the gophers to the device plugin,
// logging what changed.
func (w *dirWatch) refresh(logger klog.Logger) error {
	devs, err := scan(logger, w.g.dir)
	if err != nil {
		return err
	}
	if err := w.g.dp.SetDevices(devs); err != nil {
		return fmt.Errorf("advertising gophers: %w", err)
	}
	now := describe(devs)
	if w.last == nil || !slices.Equal(now, w.last) {
		logger.Info("Gophers", "count", len(devs), "gophers", now)
	}
	w.last = now
	return nil
}

// describe renders devices as "ID=Health".
func describe(devs []*v1beta1.Device) []string {
	out := make([]string, 0, len(devs))
	for _, d := range devs {
		out = append(out, d.GetID()+"="+d.GetHealth())
	}
	return out
}
