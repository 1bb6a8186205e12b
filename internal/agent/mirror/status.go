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

package mirror

import (
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
	"github.com/kubedevice/kubedevice/internal/agent/kube"
	"github.com/kubedevice/kubedevice/internal/contract"
	"github.com/kubedevice/kubedevice/internal/nodeagent"
)

// maxConditionMessage bounds a condition message the agent builds from a plugin's values (the API
// allows 32768 bytes).
const maxConditionMessage = 1024

// nodeDeviceConditions are the condition types the agent owns on a NodeDevice and compares.
// AgentReady is the controller's verdict on the agent's Lease: the agent seeds it on a new shard
// and carries it in its writes (withAgentReady), but never writes for it.
var nodeDeviceConditions = []string{kdv1alpha1.NodeDeviceRegistered, kdv1alpha1.NodeDeviceHealthy, kdv1alpha1.NodeDeviceRuntimeInjectionReady}

// shardPlan is one NodeDevice the agent wants for a resource: its identity and the devices it
// lists.
type shardPlan struct {
	name  string
	shard *int32
	// devices of the shard, sorted by ID.
	devices []nodeagent.DeviceSnapshot
	// current is the object as cached, nil when it does not exist yet.
	current *kdv1alpha1.NodeDevice
}

// planShards lays the devices of snap out in shards of at most MaxDevicesPerShard, in ID order,
// named kube.NodeDeviceName(node, resource, i), and sorts the existing objects of the resource into
// those to keep and those to delete. An existing object outside the layout (a surplus shard after
// the device set shrank, or one made by hand) is kept, listing no devices, while it carries
// cordons, so an administrator's cordon is never dropped; otherwise it is deleted. An object
// being deleted is neither kept nor deleted again.
func planShards(node string, snap nodeagent.ResourceSnapshot, existing []kdv1alpha1.NodeDevice) (keep []shardPlan, remove []*kdv1alpha1.NodeDevice) {
	byName := make(map[string]*kdv1alpha1.NodeDevice, len(existing))
	for i := range existing {
		byName[existing[i].Name] = &existing[i]
	}
	n := max(1, (len(snap.Devices)+kdv1alpha1.MaxDevicesPerShard-1)/kdv1alpha1.MaxDevicesPerShard)
	for i := range n {
		lo := i * kdv1alpha1.MaxDevicesPerShard
		hi := min(lo+kdv1alpha1.MaxDevicesPerShard, len(snap.Devices))
		name := kube.NodeDeviceName(node, snap.ResourceName, i)
		keep = append(keep, shardPlan{
			name:    name,
			shard:   ptr.To(int32(i)),
			devices: snap.Devices[lo:hi],
			current: byName[name],
		})
		delete(byName, name)
	}
	for i := range existing {
		nd := byName[existing[i].Name]
		if nd == nil || !nd.DeletionTimestamp.IsZero() {
			continue
		}
		if len(nd.Spec.Cordons) > 0 {
			keep = append(keep, shardPlan{name: nd.Name, shard: nd.Spec.Shard, current: nd})
			continue
		}
		remove = append(remove, nd)
	}
	return keep, remove
}

// nodeDeviceMetaUpToDate reports whether nd already has the labels, owner reference, finalizer and
// spec fields the agent applies.
func nodeDeviceMetaUpToDate(nd *kdv1alpha1.NodeDevice, node *corev1.Node, resource string, shard *int32) bool {
	labels := nodeDeviceLabels(node.Name, resource)
	for k, v := range labels {
		if nd.Labels[k] != v {
			return false
		}
	}
	return kube.HasOwner(nd.OwnerReferences, node.UID) && slices.Contains(nd.Finalizers, contract.NodeCapacityFinalizer) &&
		nd.Spec.NodeName == node.Name && nd.Spec.ResourceName == resource &&
		ptr.Equal(nd.Spec.Shard, shard)
}

func nodeDeviceLabels(node, resource string) map[string]string {
	return map[string]string{
		kdv1alpha1.LabelNodeName:     kube.LabelValue(node),
		kdv1alpha1.LabelResourceName: kube.LabelValue(resource),
	}
}

// nodeDeviceStatus computes the status of one shard: the devices it lists, counted; the plugin;
// the checkpoint provenance; the Registered and Healthy conditions at generation. Times the
// cluster has already seen are kept when what they date did not change (a device's health, a
// disconnected plugin, a condition's status), so a change the cluster never saw rewrites nothing.
// A registered plugin's since is the time of its registration, so each registration, the one
// after an agent restart included, shows.
func nodeDeviceStatus(snap nodeagent.ResourceSnapshot, devices []nodeagent.DeviceSnapshot, current *kdv1alpha1.NodeDevice,
	info nodeagent.CheckpointInfo, generation int64, now time.Time) kdv1alpha1.NodeDeviceStatus {
	var cur kdv1alpha1.NodeDeviceStatus
	if current != nil {
		cur = current.Status
	}
	restored := slices.ContainsFunc(snap.Devices, func(d nodeagent.DeviceSnapshot) bool { return d.Reason == nodeagent.ReasonAwaitingPlugin })
	st := kdv1alpha1.NodeDeviceStatus{ObservedGeneration: generation, Plugin: pluginStatus(snap, cur.Plugin, restored)}
	if snap.ServedByDRA {
		st.Path = kdv1alpha1.DevicePathDRA
	}
	addDevices(&st, devices, cur.Devices, snap.State == nodeagent.PluginRegistered)
	if info.BootID != "" || !info.LastWrite.IsZero() {
		st.Checkpoint = &kdv1alpha1.CheckpointStatus{BootID: info.BootID, LastWriteTime: apiTime(info.LastWrite)}
	}

	nowTime := metav1.NewTime(now.Truncate(time.Second))
	for _, c := range []metav1.Condition{
		registeredCondition(snap, restored, generation),
		healthyCondition(snap, st, generation),
	} {
		st.Conditions = append(st.Conditions, contract.WithTransitionTime(c, meta.FindStatusCondition(cur.Conditions, c.Type), nowTime))
	}
	return st
}

// pluginStatus is the status of snap's plugin; cur is the one the cluster has (nil when none),
// whose since a plugin still disconnected keeps, and whose options a restored resource keeps.
func pluginStatus(snap nodeagent.ResourceSnapshot, cur *kdv1alpha1.PluginStatus, restored bool) *kdv1alpha1.PluginStatus {
	p := &kdv1alpha1.PluginStatus{
		State:                           kdv1alpha1.PluginStateDisconnected,
		Since:                           apiTime(snap.StateSince),
		PreStartRequired:                snap.Options.PreStartRequired,
		GetPreferredAllocationAvailable: snap.Options.GetPreferredAllocationAvailable,
	}
	if snap.State == nodeagent.PluginRegistered {
		p.State = kdv1alpha1.PluginStateRegistered
	}
	if len(snap.Endpoints) > 0 {
		p.Endpoint = snap.Endpoints[0]
	}
	if snap.State == nodeagent.PluginRegistered || cur == nil {
		return p
	}
	if cur.State == p.State && cur.Since != nil {
		// Still disconnected: since when the cluster first saw it, not the agent's restart.
		p.Since = cur.Since.DeepCopy()
	}
	if restored {
		// A restored resource has no plugin yet to ask: what the last one said stands until
		// it registers again (start-up hands PreStartRequired to runtime injection from here).
		p.Endpoint = cur.Endpoint
		p.PreStartRequired = cur.PreStartRequired
		p.GetPreferredAllocationAvailable = cur.GetPreferredAllocationAvailable
	}
	return p
}

// addDevices lists devices in st, and counts them; a device keeps the transition time the
// cluster has (cur) while its health is unchanged.
func addDevices(st *kdv1alpha1.NodeDeviceStatus, devices []nodeagent.DeviceSnapshot, cur []kdv1alpha1.DeviceStatus, registered bool) {
	curDevices := make(map[string]*kdv1alpha1.DeviceStatus, len(cur))
	for i := range cur {
		curDevices[cur[i].ID] = &cur[i]
	}
	for _, d := range devices {
		ds := kdv1alpha1.DeviceStatus{
			ID:                 d.ID,
			Health:             apiHealth(d.Health),
			Reason:             d.Reason,
			Message:            d.Message,
			LastTransitionTime: apiTime(d.LastTransitionTime),
			NUMANodes:          slices.Clone(d.NUMANodes),
			Cordoned:           d.Cordoned,
			Holder:             apiHolder(d.Holder),
		}
		if c := curDevices[d.ID]; c != nil && c.Health == ds.Health && c.LastTransitionTime != nil {
			ds.LastTransitionTime = c.LastTransitionTime.DeepCopy()
		}
		st.Devices = append(st.Devices, ds)

		// A device restored from the checkpoint, awaiting its plugin, counts as a disconnected
		// plugin's device does: in capacity and unhealthy, never allocatable, allocated while a
		// pod holds it. The cluster sees what the agent knows the moment it starts.
		st.Capacity++
		switch {
		case d.Health != nodeagent.Healthy:
			st.Unhealthy++
		case registered && !d.Cordoned:
			st.Allocatable++
		}
		if d.Holder != nil {
			st.Allocated++
		}
		if d.Cordoned {
			st.Cordoned++
		}
	}
}

func registeredCondition(snap nodeagent.ResourceSnapshot, awaiting bool, generation int64) metav1.Condition {
	c := metav1.Condition{Type: kdv1alpha1.NodeDeviceRegistered, ObservedGeneration: generation}
	switch {
	case snap.State == nodeagent.PluginRegistered:
		c.Status, c.Reason = metav1.ConditionTrue, kdv1alpha1.ReasonPluginRegistered
		c.Message = fmt.Sprintf("A device plugin for %s is registered.", snap.ResourceName)
	case awaiting:
		c.Status, c.Reason = metav1.ConditionFalse, kdv1alpha1.ReasonAwaitingPluginRegistration
		c.Message = fmt.Sprintf("Restored from the agent's checkpoint; waiting for the device plugin for %s to register again.", snap.ResourceName)
	default:
		c.Status, c.Reason = metav1.ConditionFalse, kdv1alpha1.ReasonPluginDisconnected
		c.Message = fmt.Sprintf("No device plugin for %s is connected; its devices stay listed, none allocatable, until one registers or the grace period ends.", snap.ResourceName)
	}
	return c
}

func healthyCondition(snap nodeagent.ResourceSnapshot, st kdv1alpha1.NodeDeviceStatus, generation int64) metav1.Condition {
	c := metav1.Condition{Type: kdv1alpha1.NodeDeviceHealthy, ObservedGeneration: generation}
	switch {
	case snap.State != nodeagent.PluginRegistered:
		c.Status, c.Reason = metav1.ConditionFalse, kdv1alpha1.ReasonPluginDisconnected
		c.Message = fmt.Sprintf("No device plugin for %s is connected, so no device can be used.", snap.ResourceName)
	case snap.Rejected != nil:
		c.Status, c.Reason = metav1.ConditionFalse, kdv1alpha1.ReasonDeviceListRejected
		c.Message = kube.Truncate(fmt.Sprintf("The agent refused the device plugin's latest device list (%s): %s. Listed are the %d devices of the last list it accepted.",
			snap.Rejected.Reason, snap.Rejected.Message, st.Capacity), maxConditionMessage)
	case st.Unhealthy > 0:
		c.Status, c.Reason = metav1.ConditionFalse, kdv1alpha1.ReasonUnhealthyDevices
		c.Message = fmt.Sprintf("%d of %d devices are unhealthy.", st.Unhealthy, st.Capacity)
	default:
		c.Status, c.Reason = metav1.ConditionTrue, kdv1alpha1.ReasonAllDevicesHealthy
		c.Message = fmt.Sprintf("All %d devices are healthy.", st.Capacity)
	}
	return c
}

// withRuntimeInjection adds to st the RuntimeInjectionReady condition runtime injection reports
// (c, known), at generation. While the state is unknown (the agent has just started and has not
// tried the NRI socket yet), the condition the object has is kept, or none is set: an agent
// restart does not write a transient state.
func withRuntimeInjection(st kdv1alpha1.NodeDeviceStatus, current *kdv1alpha1.NodeDevice, c metav1.Condition, known bool,
	generation int64, now time.Time) kdv1alpha1.NodeDeviceStatus {
	var got *metav1.Condition
	if current != nil {
		got = meta.FindStatusCondition(current.Status.Conditions, kdv1alpha1.NodeDeviceRuntimeInjectionReady)
	}
	switch {
	case known:
		c.Type, c.ObservedGeneration = kdv1alpha1.NodeDeviceRuntimeInjectionReady, generation
		st.Conditions = append(st.Conditions, contract.WithTransitionTime(c, got, metav1.NewTime(now.Truncate(time.Second))))
	case got != nil:
		st.Conditions = append(st.Conditions, *got.DeepCopy())
	}
	return st
}

// withAgentReady adds to st the AgentReady condition the agent writes with a shard's status: the
// condition the controller writes for a valid Lease (contract.AgentReadyCondition) at generation
// when the object has none or has that one (its transition time kept), otherwise the object's own
// (the controller has found the Lease expired or missing, and says so until the Lease is renewed;
// the agent does not overrule it).
func withAgentReady(st kdv1alpha1.NodeDeviceStatus, current *kdv1alpha1.NodeDevice, namespace, node string,
	generation int64, now time.Time) kdv1alpha1.NodeDeviceStatus {
	var got *metav1.Condition
	if current != nil {
		got = meta.FindStatusCondition(current.Status.Conditions, kdv1alpha1.NodeDeviceAgentReady)
	}
	if got != nil && (got.Status != metav1.ConditionTrue || got.Reason != kdv1alpha1.ReasonAgentLeaseValid) {
		st.Conditions = append(st.Conditions, *got.DeepCopy())
		return st
	}
	c := contract.AgentReadyCondition(namespace, node, generation)
	st.Conditions = append(st.Conditions, contract.WithTransitionTime(c, got, metav1.NewTime(now.Truncate(time.Second))))
	return st
}

// nodeDeviceStatusUpToDate reports whether the object's status already says what want says, in
// the fields the agent owns. The checkpoint's last write time is not compared: it changes with
// every allocation of any resource, and is refreshed whenever the status is written anyway.
func nodeDeviceStatusUpToDate(current *kdv1alpha1.NodeDevice, want kdv1alpha1.NodeDeviceStatus) bool {
	if current == nil {
		return false
	}
	// Shallow copies: a shard's status holds up to 128 devices, compared on every reconcile of
	// its resource; copying them deeply and comparing them by reflection was most of the
	// agent's allocations while a plugin registered.
	got := current.Status
	if !slices.EqualFunc(got.Devices, want.Devices, deviceStatusEqual) {
		return false
	}
	got.Devices, want.Devices = nil, nil
	got.Conditions = kube.OwnedConditions(got.Conditions, nodeDeviceConditions)
	want.Conditions = kube.OwnedConditions(want.Conditions, nodeDeviceConditions)
	got.Checkpoint, want.Checkpoint = withoutWriteTime(got.Checkpoint), withoutWriteTime(want.Checkpoint)
	return equality.Semantic.DeepEqual(got, want)
}

// deviceStatusEqual is equality.Semantic.DeepEqual for one device (times to the second, as the
// API stores them; an empty NUMA list equal to none), without reflection.
func deviceStatusEqual(a, b kdv1alpha1.DeviceStatus) bool {
	return a.ID == b.ID && a.Health == b.Health && a.Reason == b.Reason && a.Message == b.Message &&
		a.Cordoned == b.Cordoned && slices.Equal(a.NUMANodes, b.NUMANodes) &&
		timesEqual(a.LastTransitionTime, b.LastTransitionTime) &&
		(a.Holder == nil) == (b.Holder == nil) && (a.Holder == nil || *a.Holder == *b.Holder)
}

// timesEqual compares two optional times as equality.Semantic does.
func timesEqual(a, b *metav1.Time) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Equal(b)
}

// withoutWriteTime returns a copy of c without its last write time, which changes with every
// checkpoint write and is not compared.
func withoutWriteTime(c *kdv1alpha1.CheckpointStatus) *kdv1alpha1.CheckpointStatus {
	if c == nil {
		return nil
	}
	out := *c
	out.LastWriteTime = nil
	return &out
}

// apiTime returns t as the API stores it (whole seconds), or nil for the zero time.
func apiTime(t time.Time) *metav1.Time {
	if t.IsZero() {
		return nil
	}
	mt := metav1.NewTime(t.Truncate(time.Second))
	return &mt
}

func apiHealth(h nodeagent.Health) kdv1alpha1.DeviceHealth {
	if h == nodeagent.Healthy {
		return kdv1alpha1.DeviceHealthy
	}
	return kdv1alpha1.DeviceUnhealthy
}

func apiHolder(h *nodeagent.DeviceHolder) *kdv1alpha1.DeviceHolder {
	if h == nil {
		return nil
	}
	if h.Claim != nil {
		return &kdv1alpha1.DeviceHolder{Namespace: h.Claim.Namespace, ClaimName: h.Claim.Name}
	}
	return &kdv1alpha1.DeviceHolder{Namespace: h.Namespace, PodName: h.PodName, PodUID: h.PodUID, ContainerName: h.Container}
}
