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

package kube

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
	"github.com/kubedevice/kubedevice/internal/indexer"
	"github.com/kubedevice/kubedevice/internal/nodeagent"
)

// A held device's health as a DeviceAllocation shows it, the same for the allocation flow's
// DeviceAllocations and observe mode's: the Healthy condition and status.unhealthyDevices. The
// device plugin API carries only Healthy and Unhealthy; the agent knows more, and decides from
// the device's reason in its core's snapshot (the core's in manage mode, the Observer's in
// observe mode):
//
//   - the plugin reports the device unhealthy: unhealthy, PluginReportedUnhealthy;
//   - the plugin stopped listing the device the pod holds: unhealthy, NotReportedByPlugin;
//   - no plugin registered within the grace period, so the resource is gone from the node:
//     unhealthy, ResourceRemoved;
//   - observe mode: the kubelet does not list the device as allocatable: unhealthy,
//     KubeletNotAllocatable (the kubelet says neither why nor whether the plugin is gone);
//   - the plugin disconnected within its grace period, or has not registered again since an agent
//     restart: unknown. Nothing new is known of the device, which the container still has: it
//     keeps what the DeviceAllocation last said (a plugin's rolling update, a kubelet or agent
//     restart rewrite no DeviceAllocation); the NodeDevice shows the plugin's state;
//   - cordoned: not unhealthy (an administrator's decision about new allocations, not the
//     device's state).

// deviceState is what the agent knows of a held device's health.
type deviceState int

const (
	deviceHealthy deviceState = iota
	deviceUnhealthy
	deviceUnknown
)

// maxHealthMessage bounds a device's message and the Healthy condition's.
const maxHealthMessage = 1024

// maxDevicesNamed is how many unhealthy devices the Healthy condition's message names.
const maxDevicesNamed = 8

// deviceHealth is a held device's health: its state, and when unhealthy the reason, the message
// and since when (zero: not known).
type deviceHealth struct {
	state   deviceState
	reason  string
	message string
	since   time.Time
}

// healthLookup returns the health of the device id of resource.
type healthLookup func(resource, id string) deviceHealth

// HealthView is the health of the core's devices as a flow writing DeviceAllocations last read
// it: per resource, the devices that are not healthy. It is read on every reconcile of a pod
// holding devices (WithHealth), and refreshed from the core's snapshot of a resource when the core
// announces a change of it (Changed), so a reconcile costs no snapshot of a resource of thousands
// of devices. Safe for concurrent use.
type HealthView struct {
	snapshot func(name string) (nodeagent.ResourceSnapshot, bool)

	mu sync.Mutex
	// resources holds each resource read so far; a resource the core did not know when it was
	// read has an entry with known false.
	resources map[string]*resourceHealth
}

// resourceHealth is one resource's devices that are not healthy, by ID.
type resourceHealth struct {
	known   bool
	devices map[string]deviceHealth
}

// NewHealthView returns a view reading each resource's devices with snapshot (false: the core
// does not know the resource), the core's Snapshot.
func NewHealthView(snapshot func(name string) (nodeagent.ResourceSnapshot, bool)) *HealthView {
	return &HealthView{snapshot: snapshot, resources: map[string]*resourceHealth{}}
}

// refresh reads the named resources from the core again. The view's lock is held while the core
// is read, so a reconcile's first read of a resource and a refresh are stored in the order they
// read the core.
func (v *HealthView) refresh(names []string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, name := range names {
		v.resources[name] = v.readLocked(name)
	}
}

// device returns the health of the device id of resource, reading the resource from the core if
// the view has not yet.
func (v *HealthView) device(resource, id string) deviceHealth {
	v.mu.Lock()
	defer v.mu.Unlock()
	r := v.resources[resource]
	if r == nil {
		r = v.readLocked(resource)
		v.resources[resource] = r
	}
	if !r.known {
		return deviceHealth{state: deviceUnhealthy, reason: kdv1alpha1.DeviceReasonResourceRemoved,
			message: fmt.Sprintf("No device plugin for %s registered again within the grace period; the node no longer serves the resource.", resource)}
	}
	return r.devices[id]
}

// readLocked reads resource from the core. The caller holds v.mu.
func (v *HealthView) readLocked(resource string) *resourceHealth {
	snap, ok := v.snapshot(resource)
	if !ok {
		return &resourceHealth{}
	}
	r := &resourceHealth{known: true}
	for _, d := range snap.Devices {
		h := deviceHealth{state: deviceUnhealthy, reason: d.Reason, message: d.Message, since: d.LastTransitionTime}
		switch {
		case d.Health == nodeagent.Healthy:
			continue
		case d.Reason == nodeagent.ReasonPluginDisconnected || d.Reason == nodeagent.ReasonAwaitingPlugin:
			h = deviceHealth{state: deviceUnknown}
		case d.Reason != nodeagent.ReasonNotReported && d.Reason != kdv1alpha1.DeviceReasonKubeletNotAllocatable:
			// Any other health a plugin reports is Unhealthy, as in the kubelet.
			h.reason = kdv1alpha1.DeviceReasonPluginReportedUnhealthy
		}
		if r.devices == nil {
			r.devices = map[string]deviceHealth{}
		}
		r.devices[d.ID] = h
	}
	return r
}

// WithHealth returns want with the health the view says of the devices it lists, for the object
// current (nil: none yet), changed at now: the unhealthy devices and the Healthy condition
// (withHealth). The caller stamps it for the object (StampDeviceAllocation).
func (v *HealthView) WithHealth(want kdv1alpha1.DeviceAllocationStatus, current *kdv1alpha1.DeviceAllocation, now time.Time) kdv1alpha1.DeviceAllocationStatus {
	return withHealth(want, v.device, current, now)
}

// Changed reads resources from the core again and returns the pods whose DeviceAllocation on node
// (read from c, the cache, with the index indexer.DeviceAllocationNodeName) lists a device of one
// of them and does not show the health the core now says of its devices: the pods to reconcile
// after the resources changed. A change of a device no pod holds names none, so it costs no write;
// nor does a Released or deleted DeviceAllocation. A failed list is logged and names none.
func (v *HealthView) Changed(ctx context.Context, c client.Reader, node string, resources []string, now time.Time) []types.NamespacedName {
	v.refresh(resources)
	list := &kdv1alpha1.DeviceAllocationList{}
	// Read only, never modified: the cache's objects need not be copied at every change.
	if err := c.List(ctx, list, client.MatchingFields{indexer.DeviceAllocationNodeName: node}, client.UnsafeDisableDeepCopy); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing the DeviceAllocations whose devices' health changed")
		return nil
	}
	var keys []types.NamespacedName
	for i := range list.Items {
		da := &list.Items[i]
		if da.Spec.NodeName != node || !da.DeletionTimestamp.IsZero() ||
			meta.IsStatusConditionTrue(da.Status.Conditions, kdv1alpha1.DeviceAllocationReleased) || !listsResource(da, resources) {
			continue
		}
		if healthDiffers(da, v.device, now) {
			keys = append(keys, types.NamespacedName{Namespace: da.Namespace, Name: da.Spec.PodName})
		}
	}
	return keys
}

// listsResource reports whether da lists a device of one of resources.
func listsResource(da *kdv1alpha1.DeviceAllocation, resources []string) bool {
	for _, c := range da.Status.Containers {
		for _, res := range c.Resources {
			if slices.Contains(resources, res.ResourceName) {
				return true
			}
		}
	}
	return false
}

// HeldDevice is one device a pod holds, and the pod's containers holding it, in the pod's order.
type HeldDevice struct {
	Resource, ID string
	Containers   []string
}

// HeldDevices lists the devices containers (a DeviceAllocation's, in the pod's order) hold, by
// resource and ID.
func HeldDevices(containers []kdv1alpha1.ContainerAllocation) []HeldDevice {
	byKey := map[[2]string]*HeldDevice{}
	for _, c := range containers {
		for _, r := range c.Resources {
			for _, id := range r.DeviceIDs {
				k := [2]string{r.ResourceName, id}
				if byKey[k] == nil {
					byKey[k] = &HeldDevice{Resource: r.ResourceName, ID: id}
				}
				byKey[k].Containers = append(byKey[k].Containers, c.Name)
			}
		}
	}
	out := make([]HeldDevice, 0, len(byKey))
	for _, d := range byKey {
		out = append(out, *d)
	}
	slices.SortFunc(out, func(a, b HeldDevice) int { return cmp.Or(cmp.Compare(a.Resource, b.Resource), cmp.Compare(a.ID, b.ID)) })
	return out
}

// withHealth returns want with the health of the devices it lists, as lookup says, for the object
// current (nil: none yet): the unhealthy devices and the Healthy condition, changed at now. A
// device whose health is unknown keeps what current says of it; one current lists unhealthy for
// the same reason keeps its transition time. A status listing no device gets neither. want is not
// modified.
func withHealth(want kdv1alpha1.DeviceAllocationStatus, lookup healthLookup, current *kdv1alpha1.DeviceAllocation, now time.Time) kdv1alpha1.DeviceAllocationStatus {
	held := HeldDevices(want.Containers)
	if len(held) == 0 {
		return want
	}
	var was []kdv1alpha1.UnhealthyDevice
	if current != nil {
		was = current.Status.UnhealthyDevices
	}
	st := want
	st.UnhealthyDevices = nil
	for _, d := range held {
		prev := FindUnhealthy(was, d.Resource, d.ID)
		h := lookup(d.Resource, d.ID)
		switch {
		case h.state == deviceUnknown && prev != nil:
			u := *prev.DeepCopy()
			u.Containers = d.Containers
			st.UnhealthyDevices = append(st.UnhealthyDevices, u)
		case h.state == deviceUnhealthy:
			st.UnhealthyDevices = append(st.UnhealthyDevices, unhealthyDevice(d, h, prev, now))
		}
	}
	st.Conditions = slices.DeleteFunc(slices.Clone(want.Conditions), func(c metav1.Condition) bool { return c.Type == kdv1alpha1.DeviceAllocationHealthy })
	st.Conditions = append(st.Conditions, healthyCondition(len(held), st.UnhealthyDevices, now))
	return st
}

// unhealthyDevice is d's entry in unhealthyDevices, h saying why; its transition time is prev's
// (the entry as the object has it, nil: none) while the reason holds, else when the core saw the
// device change (now when it does not say).
func unhealthyDevice(d HeldDevice, h deviceHealth, prev *kdv1alpha1.UnhealthyDevice, now time.Time) kdv1alpha1.UnhealthyDevice {
	u := kdv1alpha1.UnhealthyDevice{
		ResourceName: d.Resource, DeviceID: d.ID, Containers: d.Containers,
		Reason: h.reason, Message: Truncate(h.message, maxHealthMessage),
	}
	switch {
	case prev != nil && prev.Reason == h.reason && prev.LastTransitionTime != nil:
		u.LastTransitionTime = prev.LastTransitionTime.DeepCopy()
	case !h.since.IsZero():
		u.LastTransitionTime = ptrTime(h.since)
	default:
		u.LastTransitionTime = ptrTime(now)
	}
	return u
}

// healthyCondition sums up the unhealthy devices among count held.
func healthyCondition(count int, unhealthy []kdv1alpha1.UnhealthyDevice, now time.Time) metav1.Condition {
	c := metav1.Condition{Type: kdv1alpha1.DeviceAllocationHealthy, LastTransitionTime: metav1.NewTime(now.Truncate(time.Second))}
	if len(unhealthy) == 0 {
		c.Status, c.Reason = metav1.ConditionTrue, kdv1alpha1.ReasonAllDevicesHealthy
		c.Message = fmt.Sprintf("All %d devices the pod holds are healthy.", count)
		return c
	}
	names := make([]string, 0, min(len(unhealthy), maxDevicesNamed))
	for _, u := range unhealthy[:min(len(unhealthy), maxDevicesNamed)] {
		names = append(names, fmt.Sprintf("%s %s (%s)", u.ResourceName, u.DeviceID, u.Reason))
	}
	if len(unhealthy) > maxDevicesNamed {
		names = append(names, fmt.Sprintf("and %d more", len(unhealthy)-maxDevicesNamed))
	}
	c.Status, c.Reason = metav1.ConditionFalse, kdv1alpha1.ReasonUnhealthyDevices
	c.Message = Truncate(fmt.Sprintf("%d of %d devices the pod holds are unhealthy: %s.", len(unhealthy), count, strings.Join(names, ", ")), maxHealthMessage)
	return c
}

// healthDiffers reports whether da does not show the health lookup says of the devices it lists,
// in its unhealthy devices or its Healthy condition's status, reason and message.
func healthDiffers(da *kdv1alpha1.DeviceAllocation, lookup healthLookup, now time.Time) bool {
	want := withHealth(kdv1alpha1.DeviceAllocationStatus{Containers: da.Status.Containers}, lookup, da, now)
	if !slices.EqualFunc(want.UnhealthyDevices, da.Status.UnhealthyDevices, unhealthyEqual) {
		return true
	}
	g, w := meta.FindStatusCondition(da.Status.Conditions, kdv1alpha1.DeviceAllocationHealthy), meta.FindStatusCondition(want.Conditions, kdv1alpha1.DeviceAllocationHealthy)
	if g == nil || w == nil {
		return (g == nil) != (w == nil)
	}
	return g.Status != w.Status || g.Reason != w.Reason || g.Message != w.Message
}

// unhealthyEqual compares two entries but their transition times.
func unhealthyEqual(a, b kdv1alpha1.UnhealthyDevice) bool {
	return a.ResourceName == b.ResourceName && a.DeviceID == b.DeviceID && a.Reason == b.Reason &&
		a.Message == b.Message && slices.Equal(a.Containers, b.Containers)
}

// FindUnhealthy returns the entry of the device id of resource in list, nil when it has none.
func FindUnhealthy(list []kdv1alpha1.UnhealthyDevice, resource, id string) *kdv1alpha1.UnhealthyDevice {
	for i := range list {
		if list[i].ResourceName == resource && list[i].DeviceID == id {
			return &list[i]
		}
	}
	return nil
}

// ptrTime returns t as the API stores it (whole seconds).
func ptrTime(t time.Time) *metav1.Time {
	mt := metav1.NewTime(t.Truncate(time.Second))
	return &mt
}
