// Package controller holds the cluster reconcilers: node capacity from NodeDevices, NodeDevice
// lifecycle with their Node and agent Lease, and the DeviceAllocation audit.
//
// The RBAC markers below are the controller's whole permission set; `make manifests` turns them
// into config/rbac/controller.
//
// +kubebuilder:rbac:groups=kubedevice.io,resources=nodedevices,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups=kubedevice.io,resources=nodedevices/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=kubedevice.io,resources=deviceallocations,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups=kubedevice.io,resources=deviceallocations/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=nodes/status,verbs=get;patch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch;delete
package controller
