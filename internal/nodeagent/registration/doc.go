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

// Package registration is the plugin side of the node agent: it accepts device
// plugins and keeps one gRPC client per registered plugin, exactly as the
// kubelet's pkg/kubelet/cm/devicemanager/plugin/v1beta1 does, so unmodified
// device plugins register with kubedevice.
//
// Two registration paths lead to the same client:
//
//   - server.go serves the v1beta1 Registration service on
//     <plugin-dir>/kubelet.sock. Register validates the request with the
//     kubelet's rules and error strings, dials the plugin back, asks for its
//     options and answers; the plugin must already be serving. The socket
//     heals itself: stale sockets are removed at start, and if ours is
//     deleted while we run (a kubelet's CleanupPluginDirectory, an
//     administrator) it is re-created at once, which plugins that watch the
//     directory take as the signal to register again.
//   - watcher.go watches the plugins_registry directory, as the kubelet's
//     pluginwatcher does: GetInfo, validation, registration and
//     NotifyRegistrationStatus with the kubelet's messages, and
//     deregistration when the socket disappears.
//
// client.go holds one connection to one plugin: dial (10 s), then
// GetDevicePluginOptions, then a ListAndWatch stream that is never retried
// (the plugin registers again instead, as with the kubelet).
//
// The consumer (the device manager) implements Handler. Every client has a
// ClientID that grows with each registration attempt, so the consumer can tell
// a newer registration from the late callbacks of an older one on the same
// socket path; this is how kubedevice avoids the kubelet's late-disconnect
// eviction race. No lock is held while dialing a plugin, so a plugin that
// hangs never delays another plugin's registration.
package registration
