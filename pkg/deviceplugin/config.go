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

package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/api/validate/content"
	"k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// RegistrationMode says how a plugin announces itself to the device manager.
type RegistrationMode string

const (
	// RegistrationDirect calls Register on <SocketDir>/kubelet.sock, the
	// classic device plugin registration.
	RegistrationDirect RegistrationMode = "direct"
	// RegistrationWatcher serves the pluginregistration Registration service
	// on a socket in RegistryDir, for the manager's plugin watcher.
	RegistrationWatcher RegistrationMode = "watcher"
)

const (
	// DefaultSocketDir is the kubelet's device plugin directory. For
	// kubedevice it is /var/lib/kubedevice/device-plugins on the host, which
	// a plugin's pod usually mounts at this path.
	DefaultSocketDir = "/var/lib/kubelet/device-plugins"
	// DefaultRegistryDir is the kubelet's plugin watcher directory.
	// kubedevice watches /var/lib/kubedevice/plugins_registry.
	DefaultRegistryDir = "/var/lib/kubelet/plugins_registry"
	// KubeletSocketName is the device manager's registration socket in
	// SocketDir.
	KubeletSocketName = "kubelet.sock"

	// maxSocketPathLength is the longest unix socket path Linux accepts
	// (sun_path is 108 bytes, NUL included).
	maxSocketPathLength = 107
	// maxDeviceIDLength is the longest device ID kubedevice accepts.
	maxDeviceIDLength = 253

	// The prefixes of the extended resource name rule (k8s.io/api/core/v1
	// ResourceDefaultNamespacePrefix and DefaultResourceRequestsPrefix).
	nativeResourceDomain = "kubernetes.io/"
	requestsPrefix       = "requests."
)

// Config configures a Plugin.
type Config struct {
	// ResourceName is the extended resource the plugin advertises, such as
	// example.com/gopher. Required.
	ResourceName string
	// SocketDir is the device manager's plugin directory: where kubelet.sock
	// is and where the plugin's socket is created for RegistrationDirect.
	// Defaults to DefaultSocketDir.
	SocketDir string
	// SocketName is the file name of the plugin's socket. Defaults to the
	// resource name with "/" replaced by "_" plus ".sock", e.g.
	// example.com_gopher.sock.
	SocketName string
	// Registration defaults to RegistrationDirect.
	Registration RegistrationMode
	// RegistryDir is the plugin watcher directory, where the plugin's socket
	// is created for RegistrationWatcher. Defaults to DefaultRegistryDir.
	RegistryDir string

	// Devices are the initial devices; see SetDevices.
	Devices []*v1beta1.Device
	// Hooks answer the manager's allocation RPCs.
	Hooks Hooks
	// Options, if set, are returned by GetDevicePluginOptions as they are.
	// When nil, PreStartRequired is set when Hooks.PreStartContainer is, and
	// GetPreferredAllocationAvailable when Hooks.GetPreferredAllocation is.
	Options *v1beta1.DevicePluginOptions
}

// Hooks are a plugin's answers to the device manager's allocation RPCs. Each
// is optional. A hook runs on a gRPC goroutine, possibly concurrently with
// other calls; its context carries the caller's deadline and the plugin's
// logger. An error fails the whole RPC.
type Hooks struct {
	// Allocate returns what a container allocated deviceIDs needs: envs,
	// mounts, device nodes, annotations, CDI devices. It is called once per
	// container of an Allocate request. Without it, every container gets an
	// empty response. A nil response counts as empty.
	Allocate func(ctx context.Context, deviceIDs []string) (*v1beta1.ContainerAllocateResponse, error)
	// GetPreferredAllocation picks size devices out of available, including
	// all of mustInclude. It is called once per container of the request.
	// Without it, every container gets an empty preference.
	GetPreferredAllocation func(ctx context.Context, available, mustInclude []string, size int) ([]string, error)
	// PreStartContainer is called before a container that holds deviceIDs
	// starts, when the plugin asked for it (PreStartRequired). Without it the
	// call succeeds.
	PreStartContainer func(ctx context.Context, deviceIDs []string) error
}

var errInvalidConfig = errors.New("invalid device plugin configuration")

// complete fills in the defaults of cfg and validates it.
func (cfg Config) complete() (Config, error) {
	invalid := func(format string, args ...any) (Config, error) {
		return Config{}, fmt.Errorf("%w: %s", errInvalidConfig, fmt.Sprintf(format, args...))
	}
	if msgs := validateResourceName(cfg.ResourceName); len(msgs) > 0 {
		return invalid("resource name %q is not an extended resource name: %s", cfg.ResourceName, strings.Join(msgs, "; "))
	}
	if cfg.SocketDir == "" {
		cfg.SocketDir = DefaultSocketDir
	}
	if cfg.RegistryDir == "" {
		cfg.RegistryDir = DefaultRegistryDir
	}
	if cfg.Registration == "" {
		cfg.Registration = RegistrationDirect
	}
	if cfg.SocketName == "" {
		cfg.SocketName = strings.ReplaceAll(cfg.ResourceName, "/", "_") + ".sock"
	}
	switch cfg.Registration {
	case RegistrationDirect, RegistrationWatcher:
	default:
		return invalid("registration mode %q is neither %q nor %q", cfg.Registration, RegistrationDirect, RegistrationWatcher)
	}
	if cfg.SocketName == "." || cfg.SocketName == ".." || strings.ContainsRune(cfg.SocketName, filepath.Separator) {
		return invalid("socket name %q must be a plain file name", cfg.SocketName)
	}
	if cfg.SocketName == KubeletSocketName {
		return invalid("socket name %q is the device manager's", cfg.SocketName)
	}
	if strings.HasPrefix(cfg.SocketName, ".") {
		// The plugin watcher ignores names starting with a dot.
		return invalid("socket name %q must not start with a dot", cfg.SocketName)
	}
	for _, dir := range []*string{&cfg.SocketDir, &cfg.RegistryDir} {
		abs, err := filepath.Abs(*dir)
		if err != nil {
			return invalid("resolving directory %q: %v", *dir, err)
		}
		*dir = abs
	}
	if path := cfg.socketPath(); len(path) > maxSocketPathLength {
		return invalid("socket path %q is %d bytes long, longer than the %d a unix socket allows", path, len(path), maxSocketPathLength)
	}
	return cfg, nil
}

// socketPath is the plugin's socket: in SocketDir for the direct path, in
// RegistryDir for the plugin watcher.
func (cfg Config) socketPath() string {
	if cfg.Registration == RegistrationWatcher {
		return filepath.Join(cfg.RegistryDir, cfg.SocketName)
	}
	return filepath.Join(cfg.SocketDir, cfg.SocketName)
}

// options are what GetDevicePluginOptions returns.
func (cfg Config) options() *v1beta1.DevicePluginOptions {
	if cfg.Options != nil {
		return &v1beta1.DevicePluginOptions{
			PreStartRequired:                cfg.Options.GetPreStartRequired(),
			GetPreferredAllocationAvailable: cfg.Options.GetGetPreferredAllocationAvailable(),
		}
	}
	return &v1beta1.DevicePluginOptions{
		PreStartRequired:                cfg.Hooks.PreStartContainer != nil,
		GetPreferredAllocationAvailable: cfg.Hooks.GetPreferredAllocation != nil,
	}
}

// validateResourceName applies the kubelet's rule for the resource name of a
// device plugin (v1helper.IsExtendedResourceName): a domain-prefixed name
// outside *kubernetes.io/, not starting with "requests.", such that
// "requests.<name>" is a qualified name. It returns what is wrong, or nothing.
func validateResourceName(name string) []string {
	switch {
	case !strings.Contains(name, "/"):
		return []string{"it must have a domain prefix, as in example.com/" + name}
	case strings.Contains(name, nativeResourceDomain):
		return []string{"the " + nativeResourceDomain + " domain is reserved for native resources"}
	case strings.HasPrefix(name, requestsPrefix):
		return []string{"it must not start with " + requestsPrefix}
	}
	return content.IsLabelKey(requestsPrefix + name)
}
