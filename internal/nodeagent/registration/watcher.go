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

package registration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/fsnotify/fsnotify"
	"k8s.io/klog/v2"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// watcher is the pluginwatcher path: plugins announce themselves with a
// socket in the plugins_registry directory that serves the pluginregistration
// Registration service. Like the kubelet's pluginwatcher it ignores names
// starting with "." and anything that is not a socket; unlike it, it does not
// descend into subdirectories.
type watcher struct {
	server *Server
	dir    string
	ctx    context.Context
	cancel context.CancelFunc
	fsw    *fsnotify.Watcher
	wg     sync.WaitGroup

	mu      sync.Mutex
	plugins map[string]*registryEntry // by registry socket path
}

// registryEntry is one registry socket we saw appear.
type registryEntry struct {
	info     os.FileInfo // tells a re-created socket from a duplicate event
	cancel   context.CancelFunc
	clientID ClientID // 0 until registered
}

func newWatcher(s *Server, dir string) *watcher {
	ctx, cancel := context.WithCancel(s.ctx)
	logger := klog.FromContext(ctx).WithName("pluginwatcher")
	return &watcher{
		server:  s,
		dir:     dir,
		ctx:     klog.NewContext(ctx, logger),
		cancel:  cancel,
		plugins: make(map[string]*registryEntry),
	}
}

// start watches the directory and registers the sockets already in it.
func (w *watcher) start() error {
	logger := klog.FromContext(w.ctx)
	if err := os.MkdirAll(w.dir, 0o750); err != nil {
		return fmt.Errorf("creating plugins registry directory: %w", err)
	}
	fsw, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("creating watcher for the plugins registry directory: %w", err)
	}
	w.fsw = fsw
	// Watch first, then list, so no socket created in between is missed;
	// a socket seen twice is registered once.
	if err := fsw.Add(w.dir); err != nil {
		return fmt.Errorf("watching plugins registry directory: %w", err)
	}
	entries, err := os.ReadDir(w.dir)
	if err != nil {
		return fmt.Errorf("reading plugins registry directory: %w", err)
	}
	for _, e := range entries {
		w.socketCreated(filepath.Join(w.dir, e.Name()))
	}
	logger.V(2).Info("Watching plugins registry", "path", w.dir)

	w.wg.Add(1)
	go w.loop()
	return nil
}

// stop ends the watch and any registration in progress. Registered plugins
// stay connected; the server disconnects them.
func (w *watcher) stop() {
	w.cancel()
	if w.fsw != nil {
		w.fsw.Close()
	}
	w.wg.Wait()
}

func (w *watcher) loop() {
	defer w.wg.Done()
	logger := klog.FromContext(w.ctx)
	for {
		select {
		case <-w.ctx.Done():
			return
		case ev, ok := <-w.fsw.Events:
			if !ok {
				return
			}
			switch {
			case ev.Has(fsnotify.Create):
				w.socketCreated(ev.Name)
			case ev.Has(fsnotify.Remove | fsnotify.Rename):
				w.socketRemoved(ev.Name)
			}
		case err, ok := <-w.fsw.Errors:
			if !ok {
				return
			}
			logger.Error(err, "Watching the plugins registry directory")
		}
	}
}

// socketCreated starts registering the plugin behind path, replacing any
// plugin registered from an earlier socket at the same path.
func (w *watcher) socketCreated(path string) {
	logger := klog.FromContext(w.ctx).WithValues("path", path)
	if strings.HasPrefix(filepath.Base(path), ".") {
		logger.V(5).Info("Ignoring file (starts with '.')")
		return
	}
	fi, err := os.Lstat(path)
	if err != nil {
		logger.V(5).Info("Ignoring vanished file", "err", err)
		return
	}
	if fi.Mode()&os.ModeSocket == 0 {
		logger.V(5).Info("Ignoring non socket file", "mode", fi.Mode())
		return
	}

	ctx, cancel := context.WithCancel(w.ctx)
	entry := &registryEntry{info: fi, cancel: cancel}
	w.mu.Lock()
	old := w.plugins[path]
	if old != nil && os.SameFile(old.info, fi) {
		w.mu.Unlock()
		cancel()
		return
	}
	w.plugins[path] = entry
	w.wg.Add(1)
	w.mu.Unlock()

	w.forget(old)
	go func() {
		defer w.wg.Done()
		w.register(ctx, path, entry)
	}()
}

// socketRemoved deregisters the plugin registered from path.
func (w *watcher) socketRemoved(path string) {
	w.mu.Lock()
	entry := w.plugins[path]
	delete(w.plugins, path)
	w.mu.Unlock()
	if entry != nil {
		klog.FromContext(w.ctx).V(2).Info("Deregistering plugin", "path", path)
	}
	w.forget(entry)
}

// forget cancels the entry's registration in progress, or disconnects the
// client it registered.
func (w *watcher) forget(e *registryEntry) {
	if e == nil {
		return
	}
	e.cancel()
	w.mu.Lock()
	id := e.clientID
	e.clientID = 0
	w.mu.Unlock()
	if id != 0 {
		w.server.disconnect(id)
	}
}

// register runs the kubelet's pluginwatcher registration for one socket:
// GetInfo, type and validation checks, registration, and
// NotifyRegistrationStatus with the outcome. It makes a single attempt, like
// the kubelet; a plugin retries by re-creating its socket.
func (w *watcher) register(ctx context.Context, path string, entry *registryEntry) {
	logger := klog.FromContext(ctx).WithValues("path", path)
	ctx = klog.NewContext(ctx, logger)

	conn, err := dial(ctx, path, w.server.cfg.DialTimeout)
	if err != nil {
		if ctx.Err() != nil {
			logger.V(2).Info("Registration cancelled: the socket went away or the server stopped")
			return
		}
		logger.Error(err, "RegisterPlugin error -- dial failed")
		return
	}
	defer conn.Close()
	reg := registerapi.NewRegistrationClient(conn)

	infoCtx, cancel := context.WithTimeout(ctx, getInfoTimeout)
	info, err := reg.GetInfo(infoCtx, &registerapi.InfoRequest{})
	cancel()
	if err != nil {
		logger.Error(err, "RegisterPlugin error -- failed to get plugin info using RPC GetInfo")
		return
	}
	if info.GetType() != registerapi.DevicePlugin {
		w.notify(ctx, reg, fmt.Sprintf(errWatcherNoHandler, info.GetType(), path))
		return
	}
	endpoint := info.GetEndpoint()
	if endpoint == "" {
		endpoint = path
	}
	logger = logger.WithValues("resourceName", info.GetName(), "endpoint", endpoint, "versions", info.GetSupportedVersions())
	ctx = klog.NewContext(ctx, logger)
	logger.Info("Got registration request from device plugin")
	w.server.countRegistration(info.GetName())

	if err := validatePlugin(info.GetName(), endpoint, info.GetSupportedVersions()); err != nil {
		w.notify(ctx, reg, fmt.Sprintf(errWatcherValidationFailed, err))
		return
	}
	logger.V(2).Info("Device plugin validated")
	w.connect(ctx, reg, path, entry, info.GetName(), endpoint)
}

// connect connects to the validated plugin of the socket at path and tells
// it whether it is registered.
func (w *watcher) connect(ctx context.Context, reg registerapi.RegistrationClient, path string, entry *registryEntry, resource, endpoint string) {
	c, err := w.server.connect(ctx, resource, endpoint)
	if err != nil {
		w.notify(ctx, reg, fmt.Sprintf(errWatcherRegistrationFailed, err))
		return
	}
	w.mu.Lock()
	current := w.plugins[path] == entry
	if current {
		entry.clientID = c.id
	}
	w.mu.Unlock()
	if !current {
		// The socket went away (or was replaced) while we were registering.
		w.server.disconnect(c.id)
		return
	}
	if !w.notify(ctx, reg, "") {
		// As the kubelet: a plugin that cannot hear it is registered is not.
		w.forget(entry)
	}
}

// notify sends the registration status: registered when errStr is empty,
// refused with errStr otherwise. It logs the outcome and reports whether the
// plugin received the status.
func (w *watcher) notify(ctx context.Context, reg registerapi.RegistrationClient, errStr string) bool {
	logger := klog.FromContext(ctx)
	ctx, cancel := context.WithTimeout(ctx, notifyTimeout)
	defer cancel()
	status := &registerapi.RegistrationStatus{PluginRegistered: errStr == "", Error: errStr}
	if _, err := reg.NotifyRegistrationStatus(ctx, status); err != nil {
		logger.Error(err, "RegisterPlugin error -- failed to send registration status", "registrationError", errStr)
		return false
	}
	if errStr != "" {
		logger.Error(nil, "Plugin registration refused", "registrationError", errStr)
		return true
	}
	logger.Info("Registered device plugin")
	return true
}
