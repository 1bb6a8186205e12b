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

// Package devenv is `kubedevice dev`: a local cluster on one machine, with no kubelet, that shows
// kubedevice at work.
//
// It starts etcd and kube-apiserver with controller-runtime's envtest control plane (certificates,
// an admin user in system:masters whose kubeconfig it writes to <workdir>/kubeconfig) and
// kube-scheduler as a subprocess; installs the CRDs and admission policies embedded in the binary
// (package config); creates a Ready node, demo-node, whose device manager is the kubedevice agent;
// starts the controller, the agent and the Gopher device plugin with one gopher as subprocesses,
// each logging to <workdir>/logs/<name>.log; then creates two pods that each ask for one gopher.
// The first is bound and gets the gopher, the second stays Pending with the scheduler's
// "Insufficient example.com/gopher". It prints what kubectl would show, rendering the API server's
// own Table output (the server-side printing kubectl uses) with kubectl's layout, so the demo needs
// no kubectl.
//
// With Options.DRA (dra.go) the agent is the DRA driver kubedevice.io for the Gopher's resource
// and the plugin serves two gophers: the demo shows the ResourceSlices and kube-scheduler
// allocating one gopher to a ResourceClaim's pod and one to a pod with plain limits (through the
// DeviceClass's extendedResourceName) instead. No kubelet prepares the claims.
//
// With Options.Plugins and Options.PluginSockets (plugins.go) a plugin author's plugins run beside
// the Gopher: for each, the demo waits until the resources it registers have stayed the same for
// settleWindow, and creates a pod asking for one device of each resource. Options.PluginDRA puts
// some of those resources on the DRA path: the demo then waits for their ResourceSlices and
// DeviceClass, and shows the device kube-scheduler allocated to the pod's claim. The summary
// names every resource the demo serves.
//
// Every wait has a timeout and names what did not happen, with the end of the log of the component
// that should have made it happen; a plugin's NodeDevice whose device list the agent rejected
// (Healthy=False, DeviceListRejected) shows the reason and the value. A component of the cluster
// that stops on its own stops the run. An author's plugin that stops while the cluster serves is
// reported with the end of its log and its devices Disconnected, and the cluster keeps running;
// Options.RestartPlugins (SIGHUP to kubedevice dev) starts it again (restart.go). At the end
// (Ctrl-C, or right after the demo with Options.ExitAfterDemo) the agent is stopped first, then
// the author's plugins, then the other components in the reverse order of their start, and the
// sockets, the agent's checkpoint and the kubeconfig are removed; the logs stay.
//
// Unix socket paths are limited to 108 bytes: when the work directory's path is too long for the
// plugin sockets, they go to a short directory under /tmp, and kubedevice dev says so.
package devenv
