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

// Package nri makes the node agent an NRI plugin of the container runtime (containerd 2.x,
// CRI-O), so that containers created by an unmodified kubelet get their devices: at
// CreateContainer the plugin adds the envs, bind mounts, device nodes (with device cgroup rules
// granting the plugin's permissions), annotations and CDI devices (by name, resolved by the
// runtime from its CDI spec directories) of the container's allocation.
//
// # Answering from memory
//
// The runtime calls its NRI plugins one container at a time, node-wide, and gives up on a plugin
// after its request timeout (containerd: 2 s): it disconnects the plugin and creates the container
// without the adjustment. So the handler makes no RPC and no API call, and never calls a device
// plugin's PreStartContainer: it reads the Index, which the agent's allocation flow fills as it
// allocates (allocation happens when the pod is bound, before the kubelet creates containers).
// Device nodes are stat'ed when a pod is recorded and cached by path, so the handler makes no
// system call for a device it has seen. It answers in a few microseconds (see the benchmark).
//
// # PreStartContainer
//
// The kubelet calls a plugin's PreStartContainer, when the plugin asks for it, before every start
// of a container holding its devices, restarts and retried creations included, and a failure
// fails that start. The handler cannot make the call, so the agent makes it ahead of the start
// and records a grant (Grants): at allocation, for the first start; when the pod's status shows
// that such a container ended and will be restarted; and when a creation was refused for want of
// a grant. A creation of such a container takes the grant (recorded under the runtime's container
// ID, so the same creation asked again is admitted again); without one it is refused with
// ErrDevicesNotReady, saying that PreStartContainer has not run for this start yet, or the error
// of the call that failed, and the agent is asked to make the call, so the kubelet's retry of the
// creation, about a second later, gets through. Grants are in memory: after an agent restart a
// container being created is refused once; running containers are never affected. Containers
// whose plugins do not ask for PreStartContainer need no grant.
//
// # Decisions
//
//	pod in the index          container                      answer
//	ready                     holds devices                  adjustment
//	ready                     holds devices whose plugin     adjustment, taking the grant;
//	                          requires PreStartContainer     error without one
//	ready                     holds none                     untouched
//	pending                   any                            error: the kubelet retries creation
//	no kubedevice devices     any                            untouched
//	unknown                   required-plugins names us,     error
//	                          or the informer cache shows
//	                          the pod asking for a resource
//	                          the agent serves
//	unknown                   otherwise                      untouched
//
// An error fails the container's creation (CreateContainerError); the kubelet retries it about a
// second later, then with back-off, and the pod starts with its devices once they are allocated.
//
// # Connection
//
// Runner dials the runtime's socket (default /var/run/nri/nri.sock), registers as
// <index>-kubedevice (index 10 by default) and serves until the connection closes; then, or while
// the socket is missing, it retries with backoff (250 ms doubling to 5 s). A runtime restart
// closes the connection, so the loop is what keeps injection alive. While the plugin is not
// connected the runtime creates containers unmodified, except those of pods annotated
// required-plugins.noderesource.dev/pod: '["kubedevice"]' (RequiredPluginsAnnotation), which
// containerd's default validator refuses: the admission policy in config/admission adds that
// annotation to pods that request kubedevice resources. The state of the connection is the
// RuntimeInjectionReady condition of the node's NodeDevices and the
// kubedevice_agent_nri_connected gauge; it never makes the agent unready.
//
// It owns the NRI protocol: the plugin, its connection, the Index and the Grants. It knows
// nothing of the core, of the API server or of the agent's flows: package injection fills its
// Index and Grants and answers its PodChecker; it may import nothing of kubedevice but the core's
// poddevices types it injects.
package nri
