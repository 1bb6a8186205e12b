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

// Package plugincheck is `kubedevice plugin test`: a conformance checker for device plugins
// (device plugin API v1beta1), as csi-sanity is for CSI drivers. It judges the plugin, not
// kubedevice's core: it speaks the protocol itself.
//
// Given a plugin to start (a command line, or a function in tests), it creates a plugin directory,
// serves the kubelet's Registration service on kubelet.sock there, and starts the plugin pointed
// at it ({plugin-dir} in the arguments, KUBEDEVICE_PLUGIN_DIR in the environment, or a private
// mount namespace where the directory is bind-mounted on /var/lib/kubelet/device-plugins). Like
// the kubelet, its Register validates the request, dials the plugin back and asks for its options
// before it answers, with the kubelet's error messages. Then it drives the plugin over gRPC:
// ListAndWatch, Allocate, PreStartContainer and GetPreferredAllocation; it provokes a health
// change through a hook when given one; it restarts the "kubelet" (removes every socket, creates
// kubelet.sock again) and waits for the plugin to register again; and it stops the plugin with
// SIGTERM and looks for its socket. Given the socket of a plugin that already runs, it runs the
// checks that need no registration.
//
// Each check (AllChecks) cites the rule it enforces: the kubelet's behaviour or the API's
// comment. A check passes, fails, warns or is skipped with the reason; warnings (behaviour the
// kubelet never exercises, such as accepting an unknown device ID) fail only with Strict. The
// report is text or JUnit XML.
package plugincheck
