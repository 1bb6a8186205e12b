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
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

const (
	// DefaultPluginDir is where plugins find our registration socket and
	// create their own sockets. It is not the kubelet's directory: the
	// kubelet removes foreign sockets from its own directory when it starts.
	DefaultPluginDir = "/var/lib/kubedevice/device-plugins"
	// DefaultPluginsRegistryDir is the pluginwatcher directory we watch.
	DefaultPluginsRegistryDir = "/var/lib/kubedevice/plugins_registry"
	// SocketName is the file name of the registration socket in the plugin
	// directory. Plugins hard-code it, so it keeps the kubelet's name.
	SocketName = "kubelet.sock"

	// MaxListAndWatchMessageSize caps one ListAndWatch message (the kubelet
	// keeps gRPC's 4 MiB default, issue #109304). 16 MiB is about 200k
	// devices on the wire.
	MaxListAndWatchMessageSize = 16 << 20

	// DefaultDialTimeout bounds dialing a plugin, as the kubelet's dial.
	DefaultDialTimeout = 10 * time.Second
	// DefaultMaxResources and DefaultMaxEndpoints cap what one node's
	// plugins may connect (the kubelet has no cap): each endpoint holds a
	// connection, a ListAndWatch stream and its goroutines, and each resource
	// a NodeDevice and a key in the Node's capacity. Real nodes have a few
	// resources and endpoints, SR-IOV or MIG layouts a few dozen.
	DefaultMaxResources = 128
	DefaultMaxEndpoints = 256
	// DefaultRegistrationRate and DefaultRegistrationBurst bound
	// registration attempts, each of which dials the plugin back: a node
	// starting with dozens of plugins registers them at once, a plugin
	// registering in a loop is refused with ResourceExhausted.
	DefaultRegistrationRate  = 10
	DefaultRegistrationBurst = 50
	// optionsTimeout bounds GetDevicePluginOptions (the kubelet has none).
	optionsTimeout = 10 * time.Second
	// getInfoTimeout bounds the pluginwatcher's GetInfo call (kubelet: 1 s).
	getInfoTimeout = time.Second
	// notifyTimeout bounds NotifyRegistrationStatus (kubelet: 5 s).
	notifyTimeout = 5 * time.Second
)

// The kubelet's error strings, kept verbatim because plugins and their tests
// match on them.
const (
	errFailedToDialDevicePlugin = "failed to dial device plugin: %w"
	errFailedToGetOptions       = "failed to get device plugin options: %w"
	errUnsupportedVersion       = "requested API version %q is not supported by kubelet. Supported version is %q"
	errInvalidResourceName      = "the ResourceName %q is invalid"
	errBadSocket                = "bad socketPath, must be an absolute path: %s"
	errServerUnhealthy          = "device plugin registration gRPC server failed and no device plugins can register"

	// Pluginwatcher messages (kubelet pluginmanager operation_generator.go
	// and devicemanager handler.go).
	errWatcherNoHandler          = "RegisterPlugin error -- no handler registered for plugin type: %s at socket %s"
	errWatcherValidationFailed   = "RegisterPlugin error -- plugin validation failed with err: %v"
	errWatcherRegistrationFailed = "RegisterPlugin error -- plugin registration failed with err: %v"
	errWatcherBadVersion         = "manager version, %s, is not among plugin supported versions %v"
	errWatcherBadName            = "invalid name of device plugin socket: %s"

	// Ours: the kubelet joins RegisterRequest.Endpoint to its directory
	// without any check (a path traversal, kubernetes PR #138382).
	errInvalidEndpoint = "the Endpoint %q is invalid: it must be the name of a socket file in %s"
	// Ours: a pluginwatcher endpoint is dialed as given, so it must be absolute.
	errWatcherBadEndpoint = "invalid endpoint of device plugin: %q is not an absolute path"

	// Ours: the limits on registrations and what a plugin may name as its
	// endpoint.
	errRegistrationRate  = "registration of %s refused: more than %g registrations per second (burst %d) on this node; retry later"
	errTooManyEndpoints  = "registration of %s refused: %d device plugin endpoints are connected, the most this node's agent accepts is %d"
	errTooManyResources  = "registration of %s refused: %d resources are registered, the most this node's agent accepts is %d"
	errEndpointOutside   = "the device plugin endpoint %q is refused: it must be a clean absolute path inside %s"
	errEndpointSymlink   = "the device plugin endpoint %q is refused: %s is a symbolic link"
	errEndpointNotSocket = "the device plugin endpoint %q is refused: it is not a socket"
)

// ClientID identifies one connection to a device plugin. IDs are unique for
// the life of a Server and grow with every registration attempt, so of two
// clients the one with the higher ID is the newer registration.
type ClientID uint64

// DevicePlugin is a connected device plugin as a Handler sees it.
type DevicePlugin interface {
	// ID identifies this connection; it is never reused.
	ID() ClientID
	// Resource is the extended resource name the plugin registered.
	Resource() string
	// SocketPath is the absolute path of the plugin's socket.
	SocketPath() string
	// Options are the options returned by GetDevicePluginOptions (never
	// RegisterRequest.Options, which the kubelet ignores too).
	Options() *pluginapi.DevicePluginOptions
	// API is the plugin's gRPC client, for Allocate, GetPreferredAllocation
	// and PreStartContainer. It fails once the plugin is disconnected.
	API() pluginapi.DevicePluginClient
}

// Handler is implemented by the device manager. For one client the calls are
// serialized and ordered: PluginConnected, then any number of
// PluginListAndWatchReceiver, then, if PluginConnected returned nil, exactly
// one PluginDisconnected. Calls for different clients run concurrently, and a
// client's late calls may arrive after a newer client for the same socket has
// connected: compare IDs.
type Handler interface {
	// PluginConnected is called once the plugin answered
	// GetDevicePluginOptions. An error refuses the registration; the plugin
	// sees it as the Register error.
	PluginConnected(ctx context.Context, p DevicePlugin) error
	// PluginListAndWatchReceiver is called with every ListAndWatch message.
	PluginListAndWatchReceiver(ctx context.Context, p DevicePlugin, resp *pluginapi.ListAndWatchResponse)
	// PluginDisconnected is called when the ListAndWatch stream ended or the
	// client was closed; cause is the stream's error, if any.
	PluginDisconnected(ctx context.Context, p DevicePlugin, cause error)
}
