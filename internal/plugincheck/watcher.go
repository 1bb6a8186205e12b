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
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// The kubelet plugin watcher's deadlines for GetInfo and NotifyRegistrationStatus.
const (
	getInfoTimeout = time.Second
	notifyTimeout  = 5 * time.Second
	// reconcilePeriod is how often the kubelet's plugin manager tries a registration again.
	reconcilePeriod = time.Second
)

// pluginWatcher is the kubelet's plugin watcher (pkg/kubelet/pluginmanager) for device plugins:
// it registers every socket created in the plugins registry directory, and those already there
// when it starts (a kubelet restart finds them again), with the pluginregistration API: GetInfo,
// the device manager's ValidatePlugin and RegisterPlugin (dial the endpoint back and ask for its
// options), then NotifyRegistrationStatus. Names starting with "." and files that are not
// sockets are ignored, as the kubelet ignores them.
type pluginWatcher struct {
	dir string
	k   *fakeKubelet

	fsw    *fsnotify.Watcher
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	seen   map[string]os.FileInfo
}

func (w *pluginWatcher) start() error {
	fsw, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watching the plugins registry directory: %w", err)
	}
	if err := fsw.Add(w.dir); err != nil {
		_ = fsw.Close()
		return fmt.Errorf("watching the plugins registry directory %s: %w", w.dir, err)
	}
	entries, err := os.ReadDir(w.dir)
	if err != nil {
		_ = fsw.Close()
		return fmt.Errorf("reading the plugins registry directory: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w.fsw, w.cancel, w.seen = fsw, cancel, map[string]os.FileInfo{}
	for _, e := range entries {
		w.created(ctx, filepath.Join(w.dir, e.Name()))
	}
	w.wg.Add(1)
	go w.loop(ctx)
	return nil
}

// stop ends the watch and waits for the registrations in progress.
func (w *pluginWatcher) stop() {
	if w.fsw == nil {
		return
	}
	w.cancel()
	_ = w.fsw.Close()
	w.wg.Wait()
	w.fsw = nil
}

func (w *pluginWatcher) loop(ctx context.Context) {
	defer w.wg.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-w.fsw.Events:
			if !ok {
				return
			}
			if ev.Has(fsnotify.Create) {
				w.created(ctx, ev.Name)
			}
		case _, ok := <-w.fsw.Errors:
			if !ok {
				return
			}
		}
	}
}

// created registers the plugin behind path once per socket file.
func (w *pluginWatcher) created(ctx context.Context, path string) {
	fi, err := os.Lstat(path)
	if err != nil || strings.HasPrefix(filepath.Base(path), ".") || fi.Mode()&os.ModeSocket == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if old, ok := w.seen[path]; ok && os.SameFile(old, fi) {
		return
	}
	w.seen[path] = fi
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		if r := w.register(ctx, path); r != nil {
			w.k.add(r)
		}
	}()
}

// register is the kubelet's registration of the socket at path; nil when the socket went away
// (or the watcher stopped) before GetInfo answered. Like the kubelet's reconciler, which tries
// again each second while the socket is there, it asks GetInfo again until it answers.
func (w *pluginWatcher) register(ctx context.Context, path string) *registration {
	for {
		conn, info, err := getInfo(ctx, path)
		if err == nil {
			defer conn.Close()
			return w.registerInfo(ctx, registerapi.NewRegistrationClient(conn), path, info)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(reconcilePeriod):
		}
		if _, err := os.Lstat(path); err != nil {
			return nil
		}
	}
}

// getInfo dials the socket at path and calls GetInfo, with the kubelet's deadline.
func getInfo(ctx context.Context, path string) (*grpc.ClientConn, *registerapi.PluginInfo, error) {
	conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, getInfoTimeout)
	defer cancel()
	info, err := registerapi.NewRegistrationClient(conn).GetInfo(ctx, &registerapi.InfoRequest{}, grpc.WaitForReady(true))
	if err != nil {
		_ = conn.Close()
		return nil, nil, err
	}
	return conn, info, nil
}

// registerInfo is the device manager's part of the registration: the type, ValidatePlugin, the
// dial back, then NotifyRegistrationStatus.
func (w *pluginWatcher) registerInfo(ctx context.Context, client registerapi.RegistrationClient, path string, info *registerapi.PluginInfo) *registration {
	r := &registration{at: time.Now(), watcher: &watcherInfo{socket: path, versions: info.GetSupportedVersions()},
		req: &v1beta1.RegisterRequest{ResourceName: info.GetName(), Endpoint: info.GetEndpoint(), Version: strings.Join(info.GetSupportedVersions(), ",")}}
	if r.req.Endpoint == "" {
		r.req.Endpoint = path
	}
	if slices.Contains(info.GetSupportedVersions(), v1beta1.Version) {
		r.req.Version = v1beta1.Version
	}
	var failure error
	if info.GetType() != registerapi.DevicePlugin {
		failure = fmt.Errorf("RegisterPlugin error -- no handler registered for plugin type: %s at socket %s", info.GetType(), path)
	} else if failure = validateWatcherPlugin(r.req, info.GetSupportedVersions()); failure == nil {
		var err error
		if r.conn, r.opts, err = dialPlugin(ctx, r.req.GetEndpoint()); err != nil {
			failure = fmt.Errorf("RegisterPlugin error -- plugin registration failed with err: %w", err)
		}
	}
	if failure != nil {
		r.rejected = failure.Error()
	}
	w.notify(ctx, client, r)
	return r
}

// validateWatcherPlugin is the device manager's ValidatePlugin (kubelet plugin/v1beta1/handler.go).
func validateWatcherPlugin(req *v1beta1.RegisterRequest, versions []string) error {
	if !slices.Contains(versions, v1beta1.Version) {
		return fmt.Errorf("RegisterPlugin error -- plugin validation failed with err: manager version, %s, is not among plugin supported versions %v", v1beta1.Version, versions)
	}
	if len(validateResourceName(req.GetResourceName())) > 0 {
		return fmt.Errorf("RegisterPlugin error -- plugin validation failed with err: invalid name of device plugin socket: the ResourceName %q is invalid", req.GetResourceName())
	}
	return nil
}

// notify sends NotifyRegistrationStatus; a plugin that does not take it is noted in the
// registration's rejection, as the kubelet then deregisters it.
func (w *pluginWatcher) notify(ctx context.Context, client registerapi.RegistrationClient, r *registration) {
	ctx, cancel := context.WithTimeout(ctx, notifyTimeout)
	defer cancel()
	_, err := client.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: r.rejected == "", Error: r.rejected})
	if err != nil && r.rejected == "" {
		r.rejected = "NotifyRegistrationStatus failed, so the kubelet deregisters the plugin: " + err.Error()
		if r.conn != nil {
			_ = r.conn.Close()
			r.conn = nil
		}
	}
}
