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
// serves the kubelet's Registration service on kubelet.sock there, watches a plugins registry
// directory as the kubelet's plugin watcher does (pluginregistration v1: GetInfo, type
// DevicePlugin), and starts the plugin pointed at them ({plugin-dir} and {plugins-registry-dir} in
// the arguments, KUBEDEVICE_PLUGIN_DIR and KUBEDEVICE_PLUGINS_REGISTRY_DIR in the environment, or a
// private mount namespace where the directories are bind-mounted on /var/lib/kubelet/device-plugins
// and /var/lib/kubelet/plugins_registry). Like the kubelet, it validates each registration, dials
// the plugin back and asks for its options before it answers, with the kubelet's error messages.
// A plugin process may register several resources (one socket each): each is checked on its own
// (a resourceRun) and has a section of its own in the report. Then it drives each resource over
// gRPC: ListAndWatch, Allocate, PreStartContainer and GetPreferredAllocation; it provokes a health
// change through a hook when given one; it restarts the "kubelet" (removes every socket of the
// plugin directory, creates kubelet.sock again, registers the registry's sockets again) and waits
// for each resource to register again; and it stops the plugin with SIGTERM and looks for each
// resource's socket. Given the socket of a plugin that already runs, it runs the checks that need
// no registration.
//
// Allocate responses are judged by the agent's own check (internal/allocpolicy): a plugin the
// checker passes is never refused by the agent, and each refusal says whether the rule is the
// kubelet's or kubedevice's stricter trust model.
//
// Each check (AllChecks) cites the rule it enforces: the kubelet's behaviour or the API's
// comment. A check passes, fails, warns or is skipped with the reason; warnings (behaviour the
// kubelet never exercises, such as accepting an unknown device ID) fail only with Strict. The
// report is text or JUnit XML (a test suite per resource).
//
// Files: run.go (the run, the directories), registration.go and watcher.go (the two ways to
// register), resource.go (one resource's run), listwatch.go, allocate.go, prestart.go
// (PreStartContainer, GetPreferredAllocation), liveness.go (health change, stream held),
// restart.go (kubelet restart, stop), validate.go (the rules), report.go, options.go, target.go.
package plugincheck
