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
// plugin's index what each pod's containers get as soon as its devices are allocated, before the
// DeviceAllocation is written, and a pod whose devices are refused or not allocated yet as
// waiting, so its containers are refused and the kubelet retries them. Pods the pod controller has not reconciled yet are looked up in the
// informer cache. The plugin connects once the agent is ready and reconnects whenever the
// runtime closes the connection; the state of the connection is the RuntimeInjectionReady
// condition of every NodeDevice of the node (kept as it is while unknown just after a start, so
// a restart writes nothing) and the kubedevice_agent_nri_connected gauge. It never makes the
// agent unready. With RuntimeInjectionNone (the zero value of Options) nothing is injected and
// the condition says InjectionDisabled.
//
// # PreStartContainer
//
// The kubelet calls a plugin's PreStartContainer, when the plugin asks for it, before every start
// of a container holding its devices (restarts and retried creations included), and a failure
// fails that start. The agent cannot call it inside the NRI hook (which must answer from memory),
// so it calls it ahead of each start and records a grant (nri.Grants) that the hook takes when
// the container is created:
//
//   - the pod controller calls it for the first start of each container when it allocates the
//     pod's devices (kubedevice_agent_prestart_container_total{trigger="allocation"});
//   - the PreStartContainer controller (prestart_controller.go) calls it when the pod's status
//     shows that such a container ended and that the kubelet will restart it (restartPolicy,
//     the container's own restartPolicy, sidecars; init containers of OnFailure and Always pods)
//     and no call prepared that restart yet (trigger "restart"), so the restart is not held up;
//   - the NRI hook refuses a creation that finds no grant and asks the controller for the call
//     (trigger "creation"): the kubelet's retry of the creation, about a second later, gets
//     through. This covers what the status does not show in time: a restart the kubelet made
//     before the status said the container ended, a sandbox recreated, a creation another NRI
//     plugin or the runtime failed after the hook admitted it.
//
// A failed call is reported with a PreStartContainerFailed Warning event on the pod (the kubelet's
// message, once per distinct error), the container's creations are refused with it, and it is
// retried with backoff (trigger "retry"); the DeviceAllocation stays Allocated, as the devices
// are. A running container is never called for: the controller acts only on a container the
// status shows ended, and not once the hook has admitted a newer one. Grants are in memory:
// after an agent restart, a container being created finds no grant and is refused once, and
// containers already running are not disturbed. With RuntimeInjectionNone there is no hook to
// hold a start that was not prepared: the call at allocation and the restarts prepared from the
// status are all there is, and a restart the status shows late starts unprepared. Plugins that do not ask for PreStartContainer need no grant, and their
// containers are admitted as before.
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
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;create;update,namespace=kubedevice-system
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create
package agent
