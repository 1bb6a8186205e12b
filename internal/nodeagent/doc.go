// Package nodeagent is the device manager core of the node agent: the
// kubelet's pkg/kubelet/cm/devicemanager outside the kubelet. It is a plain Go
// library that knows nothing of the Kubernetes API.
//
// # Plugins and endpoints
//
// Manager runs a registration.Server (kubelet.sock and the plugins_registry
// watcher) and implements its Handler. Each connected plugin is an endpoint
// (endpoint.go), kept per resource and keyed by socket path, so a resource can
// have several endpoints during a rolling update (kubernetes #135437). The
// newest registration is the primary endpoint and serves Allocate,
// GetPreferredAllocation and PreStartContainer. Every accepted ListAndWatch
// message, from any endpoint of the resource, replaces its whole device set.
// Callbacks carry a client identity (registration.ClientID), so the late
// stream end or message of a replaced connection never touches a newer one. A
// registration on a socket path that already has an endpoint takes it over.
//
// When a resource's last endpoint goes away, its devices become unhealthy
// (ReasonPluginDisconnected) and the resource stays, with nothing
// allocatable, for Config.EndpointGracePeriod (5 min); then it is removed,
// reported once in GetCapacity's removed list, and announced to subscribers.
//
// # Device state
//
// All device state is behind Manager.mu, in one resourceState per resource
// (devices.go): every device with health, reason, message, last transition
// time and NUMA nodes; the healthy and unhealthy ID sets; the endpoints and
// the primary one; the plugin state (Registered / Disconnected, since when).
// Timestamps come from Config.Clock. A ListAndWatch message with empty,
// duplicate, too long (> 253 bytes) or control-character IDs, or more than
// 100,000 devices, is rejected whole (the previous set is kept), logged and
// counted in kubedevice_device_plugin_invalid_updates_total.
//
// Readers: GetCapacity (kubelet semantics, including removing expired
// resources), GetAllocatableDevices (healthy devices with topology),
// Snapshot/Snapshots (read-only copies for the NodeDevice mirror, devices
// sorted by ID) and Subscribe (which resources changed, coalesced, never
// blocking the manager).
//
// # For the allocation code
//
// Allocation, GetDeviceRunContainerOptions, UpdateAllocatedDevices, topology
// hints and the checkpoint belong in this Manager too. The pieces they build
// on, all called with Manager.mu held unless noted:
//
//   - m.resourceLocked(name), m.isDevicePluginResourceLocked(name),
//     m.healthyDevicesLocked(name) (do not modify the set), and the
//     resourceState fields devices (for NUMA nodes), healthy, unhealthy.
//   - m.endpointLocked(name) returns the primary endpoint; its opts() gives
//     GetDevicePluginOptions' answer (nil for a restored endpoint; the
//     generated getters are nil-safe). Call its RPCs without holding the lock:
//     allocate(ctx, ids), getPreferredAllocation(ctx, available, mustInclude,
//     size) and preStartContainer(ctx, ids) (error only). On a stopped
//     endpoint they fail with the kubelet's "endpoint %v has been stopped".
//     When ctx has no deadline they apply one (Allocate 30 s,
//     GetPreferredAllocation 10 s, PreStartContainer 30 s).
//   - newStoppedEndpoint(resource, stoppedAt) is the endpoint of a resource
//     restored from the checkpoint. RestoreRegisteredResources(map of
//     resource to device IDs, the checkpoint's RegisteredDevices) creates such
//     resources before Start: capacity and allocatable 0 until the plugin
//     registers, removal after the grace period, devices shown as
//     ReasonAwaitingPlugin in snapshots but never counted or allocatable.
//   - The kubelet writes its checkpoint on every ListAndWatch message and
//     when GetCapacity removed resources; the places are
//     pluginListAndWatchReceiver and GetCapacity/removeExpiredLocked.
//   - m.metrics.allocDuration (kubedevice_device_plugin_alloc_duration_seconds)
//     is defined for the Allocate RPC and not observed yet.
//   - Call m.notifyLocked(name) after any change a snapshot would show.
package nodeagent
