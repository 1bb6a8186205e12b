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

// Package deviceplugin is a small SDK for writing Kubernetes device plugins
// (device plugin API v1beta1) that work unchanged against the kubelet and
// against kubedevice.
//
// A plugin describes its resource and its hooks in a Config, creates a Plugin
// with New, and calls Run, which blocks until its context is cancelled or Stop
// is called:
//
//	p, err := deviceplugin.New(deviceplugin.Config{
//		ResourceName: "example.com/gopher",
//		SocketName:   "gopher.sock",
//		Devices:      []*v1beta1.Device{deviceplugin.Device("gopher-0", true)},
//		Hooks:        deviceplugin.Hooks{Allocate: allocate},
//	})
//	...
//	go p.Run(ctx)
//	p.SetHealth("gopher-0", false) // from any goroutine
//
// # What Run does
//
//   - It serves the DevicePlugin service on a unix socket it owns: any stale
//     socket at that path is removed first, and the new socket gets mode 0600
//     (the kubelet and the kubedevice agent dial as root). It is served before
//     registration, as the device manager dials back while handling Register.
//   - It registers. With RegistrationDirect (the default) it calls Register
//     on <SocketDir>/kubelet.sock with Endpoint set to the socket's base name.
//     With RegistrationWatcher it serves the pluginregistration Registration
//     service on the same socket, created in RegistryDir, so the manager's
//     plugin watcher finds it; GetInfo answers type DevicePlugin, the resource
//     name, an empty endpoint (meaning "this socket") and version v1beta1.
//   - It registers again, on its own, when the device manager restarts:
//     when kubelet.sock is created again (direct path), when its own socket
//     is removed (a manager cleaning stale sockets at start; the socket is
//     re-created after a short pause), and when the manager's ListAndWatch
//     stream ends without a new one taking its place. Failed attempts are
//     retried with capped exponential backoff (250 ms to 30 s on the direct
//     path; 5 s to 1 min on the plugin watcher path, where an attempt means
//     re-creating the socket). Every outgoing RPC has a deadline.
//   - It streams the device list to every open ListAndWatch stream: the full
//     list first, then the full list again after every change (changes made
//     while a stream is still sending are coalesced into the latest list).
//     Several streams may be open at once, e.g. an old and a new manager
//     during a restart.
//   - When stopped it ends the streams, stops gRPC and removes its socket
//     (only if the socket is still its own: a newer instance of the same
//     plugin may have taken the path over during a rolling update).
//
// Device IDs are sorted, so every list sent is in a deterministic order.
//
// # Sharing the socket name
//
// The newest instance of a plugin wins the socket path: Run replaces a socket
// found at its path when it starts. An instance whose socket is later
// replaced by another process stops registering (and no longer removes or
// re-creates the path) until the path is free again, so two instances of one
// plugin never fight over it; Status().Serving is false meanwhile.
//
// # Logging
//
// The package has no global state. Run logs through the logr.Logger in its
// context (klog.FromContext), named "deviceplugin" and carrying the resource
// name and socket path; hooks receive a context with that logger.
// Registration failures are logged as errors and reported by Status. At
// verbosity 2 and more, every device list sent is logged; at 4, every RPC.
package deviceplugin
