package v1alpha1

// Bounds shared by the API types. MaxDevicesPerShard follows the ResourceSlice bound.
const (
	// MaxDevicesPerShard is the largest number of devices one NodeDevice lists; larger pools are
	// split into numbered shards.
	MaxDevicesPerShard = 128

	// MaxDeviceIDLength bounds a device ID. The device plugin API suggests 63 characters but the
	// kubelet does not enforce it; the node agent accepts up to 253 bytes.
	MaxDeviceIDLength = 253
)

// Field owner and label keys shared by the agent, the controller and the command-line tool.
const (
	// LabelNodeName carries spec.nodeName on every kubedevice object, for label selectors.
	LabelNodeName = "kubedevice.io/node"

	// LabelResourceName carries a label-safe form of spec.resourceName on NodeDevices.
	LabelResourceName = "kubedevice.io/resource"

	// LabelPodUID carries spec.podUID on DeviceAllocations.
	LabelPodUID = "kubedevice.io/pod-uid"
)
