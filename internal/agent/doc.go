// Package agent wires the node-agent core (internal/nodeagent) to Kubernetes: it watches the pods
// bound to its node, allocates their devices through the core, and mirrors devices, health and
// allocations into NodeDevice and DeviceAllocation objects with server-side apply.
//
// # Start-up
//
// Before anything is allocated, freed or mirrored, a runnable restores the core's checkpoint (the
// truth on the node). A corrupt checkpoint is reported (Warning event CheckpointCorrupt on the
// Node, kubedevice_agent_checkpoint_corrupt_total) and the allocations are rebuilt from the node's
// DeviceAllocations (RestoreAllocations). The cordons of the node's NodeDevices are handed to the
// core, the devices of pods that ended while the agent was away are freed against the synced pod
// cache, and the core starts serving plugins.
//
// # Pods and DeviceAllocations
//
// The pod controller (pod_controller.go), keyed by pod namespace/name, allocates the devices of
// each active pod that limits an extended resource (AllocatePod; init containers first; a
// resource no plugin serves is skipped, as the kubelet does, and the pod gets no
// DeviceAllocation until a plugin registers it), frees
// those of pods that ended, disappeared or were replaced (UpdateAllocatedDevices with the node's
// active pods from the synced cache), and keeps one DeviceAllocation per pod, named
// DeviceAllocationName(pod, UID). A refusal is an Allocated=False condition with the core's
// reason and a DeviceAllocationFailed Warning event on the pod, once per distinct refusal;
// retryable refusals are retried with backoff, and every change of a resource (a plugin
// registering, devices freed or healthy again) retriggers the pods still waiting for it. Pods are
// reconciled by several workers, so a plugin hanging in Allocate holds up only its own pods. When
// a pod ends its DeviceAllocation is marked Released, then deleted.
//
// # NodeDevices
//
// The NodeDevice mirror (nodedevice_controller.go) is keyed by resource name and fed by the core's
// subscription. Its queue (queue.go) lets the changes of one event settle into one run, and a
// run less than a second after the last one that wrote waits for the rest of the second, so each
// NodeDevice is written at most once per second; a write is made only when the desired status
// (nodedevice_status.go) differs from the object, so nothing is written in steady state.
// Resources with more than 128 devices are split into shards named NodeDeviceName(node,
// resource, shard). Cordons from every shard are handed to the core.
//
// # Runtime injection
//
// On a real node the kubelet creates the containers and knows nothing of the agent's allocations,
// so with RuntimeInjectionNRI (--runtime-injection=nri, the command's default) the agent is an NRI
// plugin of the container runtime (package nri, injection.go): at container creation it adds the
// allocation's envs, mounts, device nodes and CDI devices. The pod controller records in the
// plugin's index what each pod's containers get as soon as its devices are allocated and
// prepared (PreStartContainer included), before the DeviceAllocation is written, and a pod whose
// devices are refused or not allocated yet as waiting, so its containers are refused and the
// kubelet retries them. Pods the pod controller has not reconciled yet are looked up in the
// informer cache. The plugin connects once the agent is ready and reconnects whenever the
// runtime closes the connection; the state of the connection is the RuntimeInjectionReady
// condition of every NodeDevice of the node (kept as it is while unknown just after a start, so
// a restart writes nothing) and the kubedevice_agent_nri_connected gauge. It never makes the
// agent unready. With RuntimeInjectionNone (the zero value of Options) nothing is injected and
// the condition says InjectionDisabled.
//
// # Lease
//
// The agent renews the Lease kubedevice-agent-<node> in its namespace every 10 s: its only
// periodic write. The controller judges the agent alive from it.
//
// The RBAC markers below are the agent's whole permission set; `make manifests` turns them into
// config/rbac/agent. A ValidatingAdmissionPolicy further limits the agent's writes to objects
// whose spec.nodeName is its own node. Server-side apply needs create as well as patch when it
// creates an object.
//
// +kubebuilder:rbac:groups=kubedevice.io,resources=nodedevices,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=kubedevice.io,resources=nodedevices/status,verbs=patch
// +kubebuilder:rbac:groups=kubedevice.io,resources=deviceallocations,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=kubedevice.io,resources=deviceallocations/status,verbs=patch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;create;update
package agent
