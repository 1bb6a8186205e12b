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

// Package injection is the agent's runtime injection flow: what containers get when the runtime
// creates them, and the PreStartContainer calls that admit them.
//
// On a real node the kubelet creates the containers and knows nothing of the agent's
// allocations, so with NRI (the agent's --runtime-injection=nri, the command's default) the agent
// is an NRI plugin of the container runtime (package nri): at container creation it adds the
// allocation's envs, mounts, device nodes and CDI devices. The allocation flow records in the
// plugin's index what each pod's containers get as soon as its devices are allocated (Record),
// before the DeviceAllocation is written, and a pod whose devices are refused or not allocated
// yet as waiting (Hold), so its containers are refused and the kubelet retries them. Pods the
// allocation flow has not reconciled yet are looked up in the informer cache. The plugin connects
// once the agent is ready and reconnects whenever the runtime closes the connection; the state of
// the connection (Condition, Changed) is the RuntimeInjectionReady condition the mirror writes on
// every NodeDevice of the node and the kubedevice_agent_nri_connected gauge. It never makes the
// agent unready. Without NRI nothing is injected and the condition says InjectionDisabled.
//
// # PreStartContainer
//
// The kubelet calls a plugin's PreStartContainer, when the plugin asks for it, before every start
// of a container holding its devices (restarts and retried creations included), and a failure
// fails that start. The agent cannot call it inside the NRI hook (which must answer from memory),
// so it calls it ahead of each start and records a grant (nri.Grants) that the hook takes when
// the container is created:
//
//   - the allocation flow has it called for the first start of each container when it allocates
//     the pod's devices (PrepareFirstStarts; kubedevice_agent_prestart_container_total
//     {trigger="allocation"});
//   - the PreStartContainer controller (prestart.go) calls it when the pod's status shows that
//     such a container ended and that the kubelet will restart it (restartPolicy, the container's
//     own restartPolicy, sidecars; init containers of OnFailure and Always pods) and no call
//     prepared that restart yet (trigger "restart"), so the restart is not held up;
//   - the NRI hook refuses a creation that finds no grant and asks the controller for the call
//     (trigger "creation"): the kubelet's retry of the creation, about a second later, gets
//     through. This covers what the status does not show in time: a restart the kubelet made
//     before the status said the container ended, a sandbox recreated, a creation another NRI
//     plugin or the runtime failed after the hook admitted it.
//
// A failed call is reported with a PreStartContainerFailed Warning event on the pod (the kubelet's
// message, once per distinct error), the container's creations are refused with it, and it is
// retried with backoff (trigger "retry"); the DeviceAllocation stays Allocated, as the devices are.
// A call that waits for its plugin (stopped, or not registered again since an agent restart) is
// made the moment the plugin registers (registrations.go: the controller watches the core, and
// queues at once, its backoff forgotten, every pod with a pending call on a resource another
// connection now serves), so the kubelet's next creation of the container is admitted rather than
// refused once more; how long the kubelet waits before that creation is its own back-off. A running
// container is never called for: the controller acts only on a container the status shows ended,
// and not once the hook has admitted a newer one. Grants are in memory: after an agent restart, a
// container being created finds no grant and is refused once, and containers already running are
// not disturbed. Without NRI there is no hook to hold a start that was not prepared: the call at
// allocation and the restarts prepared from the status are all there is, and a restart the status
// shows late starts unprepared. Plugins that do not ask for PreStartContainer need no grant, and
// their containers are admitted as before. Which plugins ask for it the mirror keeps current
// (RefreshPreStart, Served), and start-up restores from the NodeDevices (RestorePreStartRequired).
//
// It owns the NRI plugin, its index, the grants and the PreStartContainer controller. It may not
// allocate or free devices, nor write any object of the cluster (it only reads pods and records
// events), nor call any method of the core but those of its Core interface.
package injection
