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

// Package podresources serves the kubelet's PodResources API
// (k8s.io/kubelet/pkg/apis/podresources/v1, service PodResourcesLister) for
// the devices kubedevice manages. Node monitoring agents (dcgm-exporter,
// nfd-topology-updater, resource-topology-exporter, Akri) learn which pod holds
// which device from the kubelet's pod-resources socket; with kubedevice
// managing the device plugins, the kubelet's socket lists none of them, so the
// agent serves the same API on its own socket (DefaultSocketPath,
// /var/lib/kubedevice/pod-resources/kubelet.sock) for those agents to read
// instead.
//
// The Server answers from two small interfaces: a PodsProvider (the agent's
// informer cache of the pods bound to its node) and a DevicesProvider (the
// device manager core, *nodeagent.Manager). It follows the kubelet's
// pkg/kubelet/apis/podresources/server_v1.go:
//
//   - List returns the active pods, those not Succeeded or Failed (the kubelet's
//     GetActivePods, kubernetes #135485), every one of them, with or without
//     devices. Per pod: restartable init containers (sidecars) first, then app
//     containers; regular init containers are not listed.
//   - A container's devices are one ContainerDevices entry per (device, NUMA
//     node) with a single device ID, and one entry with a nil topology for a
//     device without topology, as the kubelet's
//     containerDevicesFromResourceDeviceInstances. Only committed allocations
//     are shown: an allocation in flight (reserved, its plugin's Allocate not
//     answered yet) is not (kubernetes #137534).
//   - GetAllocatableResources returns the healthy devices, in the same layout
//     (kubernetes #104122). Cordoned devices (NodeDevice spec.cordons) are not
//     allocatable in kubedevice, so they are left out too.
//   - Get returns one pod bound to the node in the layout of List; a pod the
//     node does not have gives "pod <name> in namespace <namespace> not found".
//   - Calls are rate-limited to DefaultQPS (100) with a burst of DefaultBurst
//     (10); the excess gets codes.ResourceExhausted "rejected by rate limit".
//   - cpu_ids, memory and dynamic_resources are always empty: exclusive CPUs,
//     memory and DRA claims are the kubelet's, not kubedevice's, and stay on the
//     kubelet's socket.
//
// Where it differs from the kubelet:
//
//   - The rate limit is per client connection, not one for all clients. With
//     the kubelet's single token bucket one client calling List in a loop takes
//     every token and every other client's calls are refused; here each
//     connection has its own bucket at the kubelet's rate, so a client can only
//     exhaust its own. The cost: the total rate grows with the number of
//     connections calling at once. The socket is 0600, so only root on the node
//     can open more, and root could stop the agent anyway; a client that opens
//     a connection per call gets a full burst each time, which is its own
//     doing, not another client's loss.
//   - List does not free anything first. The kubelet's List calls
//     UpdateAllocatedDevices, a write from a read path that also rewrites the
//     checkpoint. The agent's pod controller already frees a pod's devices as
//     soon as its informer sees it end or go, and List only ever looks up the
//     devices of the active pods it lists, so the answer is the same without a
//     write, and a burst of List calls never touches the checkpoint.
//   - Get of a terminal pod finds the pod, as the kubelet's does, but lists its
//     containers without devices: they are freed, or about to be. The kubelet
//     shows whatever it has not garbage-collected yet. A pod not found is
//     codes.NotFound (the kubelet's is codes.Unknown), with the same message;
//     Get is always enabled (the kubelet gates it on KubeletPodResourcesGet,
//     on by default).
//   - Pods are sorted by namespace and name, devices by resource, device ID
//     and NUMA node; the kubelet lists both in map order.
//   - "Active" is judged from the API server's view of the pod (its phase):
//     the agent cannot see the runtime, so a pod whose containers have all
//     exited but whose phase is not final yet is still listed.
//
// Metrics (registered with Options.Registerer):
// kubedevice_agent_pod_resources_requests_total and
// kubedevice_agent_pod_resources_errors_total, labels server_api_version
// ("v1") and method (List, GetAllocatableResources, Get) — the kubelet's
// kubelet_pod_resources_endpoint_* counters. Unlike the kubelet's, they count
// the calls rejected by the rate limit too.
//
// The socket's directory is created (0750) if missing; a socket a previous
// run left at the path is removed at Start (anything else there is an error);
// Stop removes the socket only if it is still the one Start created, so an
// agent being replaced never removes its successor's.
package podresources
