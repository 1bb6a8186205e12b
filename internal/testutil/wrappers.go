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

package testutil

import (
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
)

// NodeDeviceWrapper builds a NodeDevice.
type NodeDeviceWrapper struct{ kdv1alpha1.NodeDevice }

// MakeNodeDevice starts a NodeDevice named name for node-1 and example.com/gopher.
func MakeNodeDevice(name string) *NodeDeviceWrapper {
	return &NodeDeviceWrapper{kdv1alpha1.NodeDevice{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: kdv1alpha1.NodeDeviceSpec{
			NodeName:     "node-1",
			ResourceName: "example.com/gopher",
		},
	}}
}

// Node sets spec.nodeName.
func (w *NodeDeviceWrapper) Node(name string) *NodeDeviceWrapper {
	w.Spec.NodeName = name
	return w
}

// Resource sets spec.resourceName.
func (w *NodeDeviceWrapper) Resource(name string) *NodeDeviceWrapper {
	w.Spec.ResourceName = name
	return w
}

// Shard sets spec.shard.
func (w *NodeDeviceWrapper) Shard(n int32) *NodeDeviceWrapper {
	w.Spec.Shard = &n
	return w
}

// Cordon adds a cordon for the device.
func (w *NodeDeviceWrapper) Cordon(id, reason string) *NodeDeviceWrapper {
	w.Spec.Cordons = append(w.Spec.Cordons, kdv1alpha1.DeviceCordon{DeviceID: id, Reason: reason})
	return w
}

// Device adds a device to the status and counts it.
func (w *NodeDeviceWrapper) Device(id string, health kdv1alpha1.DeviceHealth, numa ...int64) *NodeDeviceWrapper {
	w.Status.Devices = append(w.Status.Devices, kdv1alpha1.DeviceStatus{ID: id, Health: health, NUMANodes: numa})
	w.Status.Capacity++
	if health == kdv1alpha1.DeviceHealthy {
		w.Status.Allocatable++
	} else {
		w.Status.Unhealthy++
	}
	return w
}

// Plugin sets the plugin state.
func (w *NodeDeviceWrapper) Plugin(state kdv1alpha1.PluginState) *NodeDeviceWrapper {
	w.Status.Plugin = &kdv1alpha1.PluginStatus{State: state}
	return w
}

// Path sets status.path: how pods get the resource's devices on the node.
func (w *NodeDeviceWrapper) Path(path kdv1alpha1.DevicePath) *NodeDeviceWrapper {
	w.Status.Path = path
	return w
}

// Obj returns the NodeDevice.
func (w *NodeDeviceWrapper) Obj() *kdv1alpha1.NodeDevice {
	return &w.NodeDevice
}

// DeviceAllocationWrapper builds a DeviceAllocation.
type DeviceAllocationWrapper struct{ kdv1alpha1.DeviceAllocation }

// MakeDeviceAllocation starts a DeviceAllocation for pod podName in namespace ns on node-1.
func MakeDeviceAllocation(name, ns string) *DeviceAllocationWrapper {
	return &DeviceAllocationWrapper{kdv1alpha1.DeviceAllocation{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: kdv1alpha1.DeviceAllocationSpec{
			NodeName: "node-1",
			PodName:  name,
			PodUID:   "00000000-0000-0000-0000-000000000001",
		},
	}}
}

// Node sets spec.nodeName.
func (w *DeviceAllocationWrapper) Node(name string) *DeviceAllocationWrapper {
	w.Spec.NodeName = name
	return w
}

// Pod sets spec.podName and spec.podUID.
func (w *DeviceAllocationWrapper) Pod(name, uid string) *DeviceAllocationWrapper {
	w.Spec.PodName = name
	w.Spec.PodUID = uid
	return w
}

// Container records devices of one resource held by a container.
func (w *DeviceAllocationWrapper) Container(name, resourceName string, ids ...string) *DeviceAllocationWrapper {
	for i := range w.Status.Containers {
		if w.Status.Containers[i].Name == name {
			w.Status.Containers[i].Resources = append(w.Status.Containers[i].Resources,
				kdv1alpha1.ResourceAllocation{ResourceName: resourceName, DeviceIDs: ids})
			return w
		}
	}
	w.Status.Containers = append(w.Status.Containers, kdv1alpha1.ContainerAllocation{
		Name:      name,
		Resources: []kdv1alpha1.ResourceAllocation{{ResourceName: resourceName, DeviceIDs: ids}},
	})
	return w
}

// Summary sets status.summary.
func (w *DeviceAllocationWrapper) Summary(s string) *DeviceAllocationWrapper {
	w.Status.Summary = s
	return w
}

// Condition sets a status condition.
func (w *DeviceAllocationWrapper) Condition(c metav1.Condition) *DeviceAllocationWrapper {
	w.Status.Conditions = append(w.Status.Conditions, c)
	return w
}

// Obj returns the DeviceAllocation.
func (w *DeviceAllocationWrapper) Obj() *kdv1alpha1.DeviceAllocation {
	return &w.DeviceAllocation
}

// PodWrapper builds a Pod.
type PodWrapper struct{ corev1.Pod }

// MakePod starts a pod with one container named "app".
func MakePod(name, ns string) *PodWrapper {
	return &PodWrapper{corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "app", Image: "busybox"}},
		},
	}}
}

// UID sets the pod UID.
func (w *PodWrapper) UID(uid types.UID) *PodWrapper {
	w.ObjectMeta.UID = uid
	return w
}

// Node binds the pod to a node.
func (w *PodWrapper) Node(name string) *PodWrapper {
	w.Spec.NodeName = name
	return w
}

// Request sets requests and limits of resource on the last container.
func (w *PodWrapper) Request(name corev1.ResourceName, n int64) *PodWrapper {
	setQuantity(&w.Spec.Containers[len(w.Spec.Containers)-1], name, n)
	return w
}

// Container appends a regular container.
func (w *PodWrapper) Container(name string) *PodWrapper {
	w.Spec.Containers = append(w.Spec.Containers, corev1.Container{Name: name, Image: "busybox"})
	return w
}

// InitContainer appends a regular init container asking for n of resource (n may be 0).
func (w *PodWrapper) InitContainer(name string, resourceName corev1.ResourceName, n int64) *PodWrapper {
	c := corev1.Container{Name: name, Image: "busybox"}
	if n > 0 {
		setQuantity(&c, resourceName, n)
	}
	w.Spec.InitContainers = append(w.Spec.InitContainers, c)
	return w
}

// SidecarContainer appends a restartable init container asking for n of resource.
func (w *PodWrapper) SidecarContainer(name string, resourceName corev1.ResourceName, n int64) *PodWrapper {
	always := corev1.ContainerRestartPolicyAlways
	c := corev1.Container{Name: name, Image: "busybox", RestartPolicy: &always}
	if n > 0 {
		setQuantity(&c, resourceName, n)
	}
	w.Spec.InitContainers = append(w.Spec.InitContainers, c)
	return w
}

// RestartPolicy sets spec.restartPolicy.
func (w *PodWrapper) RestartPolicy(p corev1.RestartPolicy) *PodWrapper {
	w.Spec.RestartPolicy = p
	return w
}

// Phase sets status.phase.
func (w *PodWrapper) Phase(p corev1.PodPhase) *PodWrapper {
	w.Status.Phase = p
	return w
}

// Obj returns the Pod.
func (w *PodWrapper) Obj() *corev1.Pod {
	return &w.Pod
}

func setQuantity(c *corev1.Container, name corev1.ResourceName, n int64) {
	if c.Resources.Limits == nil {
		c.Resources.Limits = corev1.ResourceList{}
	}
	if c.Resources.Requests == nil {
		c.Resources.Requests = corev1.ResourceList{}
	}
	q := *resource.NewQuantity(n, resource.DecimalSI)
	c.Resources.Limits[name] = q
	c.Resources.Requests[name] = q.DeepCopy()
}

// Devices adds n healthy devices named prefix-0 … prefix-(n-1) to the status and counts them.
func (w *NodeDeviceWrapper) Devices(prefix string, n int) *NodeDeviceWrapper {
	for i := range n {
		w.Device(fmt.Sprintf("%s-%d", prefix, i), kdv1alpha1.DeviceHealthy)
	}
	return w
}

// Released marks the allocation released (condition Released=True) for reason.
func (w *DeviceAllocationWrapper) Released(reason string) *DeviceAllocationWrapper {
	return w.Condition(metav1.Condition{
		Type:               kdv1alpha1.DeviceAllocationReleased,
		Status:             metav1.ConditionTrue,
		Reason:             reason,
		LastTransitionTime: metav1.Now(),
	})
}

// NodeWrapper builds a Node.
type NodeWrapper struct{ corev1.Node }

// MakeNode starts a Node with an empty status.
func MakeNode(name string) *NodeWrapper {
	return &NodeWrapper{corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}}
}

// Capacity sets resource name to quantity q in both status.capacity and status.allocatable, as
// the kubelet publishes resources it does not reserve for the system.
func (w *NodeWrapper) Capacity(name corev1.ResourceName, q string) *NodeWrapper {
	if w.Status.Capacity == nil {
		w.Status.Capacity = corev1.ResourceList{}
		w.Status.Allocatable = corev1.ResourceList{}
	}
	w.Status.Capacity[name] = resource.MustParse(q)
	w.Status.Allocatable[name] = resource.MustParse(q)
	return w
}

// Label sets a label, as the kubelet labels the Node it registers.
func (w *NodeWrapper) Label(key, value string) *NodeWrapper {
	if w.Labels == nil {
		w.Labels = map[string]string{}
	}
	w.Labels[key] = value
	return w
}

// Obj returns the Node.
func (w *NodeWrapper) Obj() *corev1.Node {
	return &w.Node
}

// LeaseWrapper builds a Lease.
type LeaseWrapper struct{ coordinationv1.Lease }

// MakeLease starts a Lease named name in namespace ns, held by name, for 40 s.
func MakeLease(name, ns string) *LeaseWrapper {
	return &LeaseWrapper{coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       &name,
			LeaseDurationSeconds: ptr.To[int32](40),
		},
	}}
}

// Holder sets spec.holderIdentity; empty is a released Lease.
func (w *LeaseWrapper) Holder(id string) *LeaseWrapper {
	w.Spec.HolderIdentity = &id
	return w
}

// RenewTime sets spec.renewTime (and spec.acquireTime when unset) to t.
func (w *LeaseWrapper) RenewTime(t time.Time) *LeaseWrapper {
	mt := metav1.NewMicroTime(t)
	w.Spec.RenewTime = &mt
	if w.Spec.AcquireTime == nil {
		w.Spec.AcquireTime = &mt
	}
	return w
}

// Obj returns the Lease.
func (w *LeaseWrapper) Obj() *coordinationv1.Lease {
	return &w.Lease
}
