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
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

const (
	// maxSocketPath is the longest unix socket path: sun_path holds 108 bytes with the NUL.
	maxSocketPath = 107
	// socketNameBudget is the room kept for a socket's file name in the plugin directories
	// (kubelet.sock, gopher.sock, or a plugin's own longer name).
	socketNameBudget = 40
)

var errLocked = errors.New("another kubedevice dev is using it")

// layout is where kubedevice dev keeps its files. Everything is under the work directory but the
// sockets' directories, which move to a short directory under /tmp when the work directory's path
// is too long for a unix socket path.
type layout struct {
	workDir string
	// runDir holds device-plugins/ and plugins_registry/.
	runDir string
	// tempRunDir says runDir was created under /tmp and is removed at the end.
	tempRunDir bool
}

// newLayout creates workDir if needed and chooses where the sockets go.
func newLayout(workDir string) (layout, error) {
	abs, err := filepath.Abs(workDir)
	if err != nil {
		return layout{}, fmt.Errorf("resolving the work directory %s: %w", workDir, err)
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return layout{}, fmt.Errorf("creating the work directory: %w", err)
	}
	l := layout{workDir: abs, runDir: abs}
	if socketDirFits(abs) {
		return l, nil
	}
	dir, err := os.MkdirTemp("/tmp", "kubedevice-dev-")
	if err != nil {
		return layout{}, fmt.Errorf("creating a short directory for the sockets: %w", err)
	}
	if !socketDirFits(dir) {
		return layout{}, fmt.Errorf("finding a directory for the sockets: %s is too long too", dir)
	}
	l.runDir, l.tempRunDir = dir, true
	return l, nil
}

// socketDirFits says whether sockets of up to socketNameBudget bytes in dir's plugin directories
// fit in a unix socket path.
func socketDirFits(dir string) bool {
	longest := max(len(filepath.Join(dir, "device-plugins")), len(filepath.Join(dir, "plugins_registry")))
	return longest+1+socketNameBudget <= maxSocketPath
}

func (l layout) kubeconfig() string   { return filepath.Join(l.workDir, "kubeconfig") }
func (l layout) logsDir() string      { return filepath.Join(l.workDir, "logs") }
func (l layout) gophersDir() string   { return filepath.Join(l.workDir, "gophers") }
func (l layout) schedulerDir() string { return filepath.Join(l.workDir, "kube-scheduler") }
func (l layout) pluginDir() string    { return filepath.Join(l.runDir, "device-plugins") }
func (l layout) registryDir() string  { return filepath.Join(l.runDir, "plugins_registry") }
func (l layout) stateDir() string     { return filepath.Join(l.workDir, "state") }

// The DRA driver's directories (--dra): the kubelet's plugins directory (its socket), the plugin
// watcher's directory no kubelet watches, and the CDI spec directory. Their sockets,
// kubedevice.io/dra.sock and kubedevice.io-reg.sock, are shorter than what socketDirFits keeps
// room for.
func (l layout) kubeletPluginsDir() string { return filepath.Join(l.runDir, "dra-plugins") }
func (l layout) draRegistryDir() string    { return filepath.Join(l.runDir, "dra-registry") }
func (l layout) cdiDir() string            { return filepath.Join(l.workDir, "cdi") }

func (l layout) lockPath() string { return filepath.Join(l.workDir, ".lock") }

// podResourcesSocket is the agent's PodResources socket: the dev cluster's own, never the host's
// default /var/lib/kubedevice/pod-resources. It fits wherever the plugin sockets fit.
func (l layout) podResourcesSocket() string {
	return filepath.Join(l.runDir, "pod-resources", "kubelet.sock")
}

func (l layout) logPath(name string) string { return filepath.Join(l.logsDir(), name+".log") }

// lock takes an exclusive lock on the work directory for the life of the process (the kernel
// drops it when the process ends, however it ends).
func (l layout) lock() (*os.File, error) {
	f, err := os.OpenFile(l.lockPath(), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("locking the work directory: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("locking the work directory %s: %w (stop it, or pass another --workdir)", l.workDir, errLocked)
		}
		return nil, fmt.Errorf("locking the work directory: %w", err)
	}
	return f, nil
}

// prepare removes what a previous run left (a checkpoint, sockets, gophers, logs) and creates the
// directories of this run.
func (l layout) prepare() error {
	for _, p := range []string{l.pluginDir(), l.registryDir(), l.stateDir(), l.gophersDir(), l.logsDir(), l.schedulerDir(), l.kubeconfig(),
		l.kubeletPluginsDir(), l.draRegistryDir(), l.cdiDir()} {
		if err := os.RemoveAll(p); err != nil {
			return fmt.Errorf("removing %s from a previous run: %w", p, err)
		}
	}
	for _, d := range []string{l.pluginDir(), l.registryDir(), l.stateDir(), l.gophersDir(), l.logsDir(), l.schedulerDir(),
		l.kubeletPluginsDir(), l.draRegistryDir(), l.cdiDir()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("creating %s: %w", d, err)
		}
	}
	return nil
}

// cleanup removes the sockets' directories, the agent's checkpoint, the gophers, the
// scheduler's certificates and the kubeconfig of the stopped cluster. The logs stay.
func (l layout) cleanup() error {
	paths := []string{l.pluginDir(), l.registryDir(), l.stateDir(), l.gophersDir(), l.schedulerDir(), l.kubeconfig(),
		l.kubeletPluginsDir(), l.draRegistryDir(), l.cdiDir()}
	if l.tempRunDir {
		paths = append(paths, l.runDir)
	}
	var errs []error
	for _, p := range paths {
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, fmt.Errorf("removing %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}
