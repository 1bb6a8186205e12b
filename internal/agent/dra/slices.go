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

package dra

import (
	"fmt"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/dynamic-resource-allocation/deviceattribute"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/utils/ptr"

	"github.com/kubedevice/kubedevice/internal/nodeagent"
)

// DriverName is the DRA driver the agent registers with the kubelet and publishes ResourceSlices
// under.
const DriverName = "kubedevice.io"

// Attribute names (in the driver's domain) every device carries.
const (
	// AttributeResourceName is the device plugin's resource name, e.g. example.com/gopher.
	AttributeResourceName resourceapi.QualifiedName = DriverName + "/resourceName"
	// AttributeDeviceID is the device's ID exactly as its plugin names it.
	AttributeDeviceID resourceapi.QualifiedName = DriverName + "/deviceID"
)

// Taint keys, all with effect NoSchedule: the scheduler allocates no tainted device to a claim that
// does not tolerate it.
const (
	// TaintUnhealthy: the plugin reports the device unhealthy; the value is the reason.
	TaintUnhealthy = DriverName + "/unhealthy"
	// TaintCordoned: an administrator cordoned the device in NodeDevice.spec.cordons.
	TaintCordoned = DriverName + "/cordoned"
	// TaintPluginDisconnected: the resource's device plugin is gone (within its grace period) or
	// has not re-registered since the agent restarted.
	TaintPluginDisconnected = DriverName + "/plugin-disconnected"
	// TaintDevicePluginPath: a pod holds the device through the device plugin path (it got it
	// before the resource was switched to DRA); it is offered to claims once the pod frees it.
	TaintDevicePluginPath = DriverName + "/device-plugin-path"
)

// MaxDevicesPerSlice is the devices per ResourceSlice: the API's limit for slices whose devices
// carry taints (resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures). Any device may be
// tainted at any time, so every slice is cut at this size, and a taint coming or going never
// moves devices between slices.
const MaxDevicesPerSlice = resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures

// pool is one resource's pool as published, with the maps prepare needs to turn an allocation
// result back into plugin device IDs.
type pool struct {
	resource string
	// ids maps a DRA device name to the plugin's device ID.
	ids map[string]string
	// names is the reverse.
	names  map[string]string
	slices []resourceslice.Slice
	// dropped are the device IDs left out (name collisions, see DeviceName), for the log.
	dropped []string
}

// poolOf builds the pool of a DRA-served resource from its snapshot.
func poolOf(s nodeagent.ResourceSnapshot) pool {
	p := pool{resource: s.ResourceName, ids: map[string]string{}, names: map[string]string{}}
	collided := map[string]bool{}
	for _, d := range s.Devices {
		name := DeviceName(d.ID)
		if other, ok := p.ids[name]; ok && other != d.ID {
			collided[name] = true
		}
		p.ids[name] = d.ID
	}
	var devices []resourceapi.Device
	for _, d := range s.Devices {
		name := DeviceName(d.ID)
		if collided[name] {
			delete(p.ids, name)
			p.dropped = append(p.dropped, d.ID)
			continue
		}
		p.names[d.ID] = name
		devices = append(devices, device(s, d, name))
	}
	for len(devices) > MaxDevicesPerSlice {
		p.slices = append(p.slices, resourceslice.Slice{Devices: devices[:MaxDevicesPerSlice]})
		devices = devices[MaxDevicesPerSlice:]
	}
	// An empty pool is published too: the driver is up, the resource has no devices (yet).
	p.slices = append(p.slices, resourceslice.Slice{Devices: devices})
	return p
}

// device is one device of a slice.
func device(s nodeagent.ResourceSnapshot, d nodeagent.DeviceSnapshot, name string) resourceapi.Device {
	out := resourceapi.Device{Name: name, Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{}}
	// String attributes are at most 64 characters; a longer resource name or ID is left out (the
	// device's name and pool still identify it).
	if len(s.ResourceName) <= resourceapi.DeviceAttributeMaxValueLength {
		out.Attributes[AttributeResourceName] = resourceapi.DeviceAttribute{StringValue: ptr.To(s.ResourceName)}
	}
	if len(d.ID) <= resourceapi.DeviceAttributeMaxValueLength {
		out.Attributes[AttributeDeviceID] = resourceapi.DeviceAttribute{StringValue: ptr.To(d.ID)}
	}
	// KEP-6072's standard attribute, scalar form: the device's first NUMA node. A device without
	// topology has none.
	if len(d.NUMANodes) > 0 {
		out.Attributes[deviceattribute.StandardDeviceAttributeNUMANode] = resourceapi.DeviceAttribute{IntValue: ptr.To(d.NUMANodes[0])}
	}
	out.Taints = taints(s, d)
	return out
}

// taints are the device's NoSchedule taints, in a fixed order.
func taints(s nodeagent.ResourceSnapshot, d nodeagent.DeviceSnapshot) []resourceapi.DeviceTaint {
	var out []resourceapi.DeviceTaint
	add := func(key, value string) {
		out = append(out, resourceapi.DeviceTaint{Key: key, Value: value, Effect: resourceapi.DeviceTaintEffectNoSchedule})
	}
	if d.Health != nodeagent.Healthy {
		switch {
		case s.State == nodeagent.PluginDisconnected || d.Reason == nodeagent.ReasonPluginDisconnected || d.Reason == nodeagent.ReasonAwaitingPlugin:
			add(TaintPluginDisconnected, labelValue(d.Reason))
		default:
			add(TaintUnhealthy, labelValue(d.Reason))
		}
	}
	if d.Cordoned {
		add(TaintCordoned, "")
	}
	if d.Holder != nil && d.Holder.Claim == nil {
		add(TaintDevicePluginPath, "")
	}
	return out
}

// labelValue makes a reason a label value: at most 63 characters of [A-Za-z0-9._-], starting and
// ending with an alphanumeric; other characters become '-'.
func labelValue(v string) string {
	if validation.IsValidLabelValue(v) == nil {
		return v
	}
	b := []byte(v)
	for i, c := range b {
		if (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') && c != '.' && c != '_' && c != '-' {
			b[i] = '-'
		}
	}
	out := string(b)
	if len(out) > validation.LabelValueMaxLength {
		out = out[:validation.LabelValueMaxLength]
	}
	return strings.Trim(out, "-_.")
}

// driverResources builds the pools of every DRA-served resource in snaps.
func driverResources(snaps []nodeagent.ResourceSnapshot) (resourceslice.DriverResources, map[string]pool) {
	out := resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{}}
	pools := map[string]pool{}
	for _, s := range snaps {
		if !s.ServedByDRA {
			continue
		}
		p := poolOf(s)
		name := PoolName(s.ResourceName)
		pools[name] = p
		out.Pools[name] = resourceslice.Pool{Slices: p.slices}
	}
	return out, pools
}

// errUnknownDevice is returned for an allocation result naming a device the agent does not
// publish.
func errUnknownDevice(poolName, device string) error {
	return fmt.Errorf("device %s/%s is not one of the agent's devices (gone, or its plugin not registered)", poolName, device)
}
