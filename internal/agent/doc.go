// Package agent wires the node-agent core (internal/nodeagent) to Kubernetes: it watches the pods
// bound to its node, allocates their devices through the core, and mirrors devices, health and
// allocations into NodeDevice and DeviceAllocation objects with server-side apply.
//
// The RBAC markers below are the agent's whole permission set; `make manifests` turns them into
// config/rbac/agent. A ValidatingAdmissionPolicy further limits the agent's writes to objects
// whose spec.nodeName is its own node.
//
// +kubebuilder:rbac:groups=kubedevice.io,resources=nodedevices,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=kubedevice.io,resources=nodedevices/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=kubedevice.io,resources=deviceallocations,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=kubedevice.io,resources=deviceallocations/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch
package agent
