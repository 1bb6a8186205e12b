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

package nodeagent

import (
	"cmp"
	"slices"
	"strings"
	"time"
)

// PluginState says whether a resource has a connected plugin.
type PluginState string

const (
	// PluginRegistered: at least one plugin endpoint is connected.
	PluginRegistered PluginState = "Registered"
	// PluginDisconnected: no plugin endpoint is connected; the resource is
	// kept, with nothing allocatable, for the grace period. Resources restored
	// from the checkpoint start in this state.
	PluginDisconnected PluginState = "Disconnected"
)

// ResourceSnapshot is a read-only copy of one resource's state, for the
// mirror that turns it into NodeDevice status.
type ResourceSnapshot struct {
	ResourceName string
	// Endpoints are the socket paths of the connected plugin endpoints,
	// newest registration first: the first one serves RPCs. Empty when
	// disconnected.
	Endpoints []string
	// Registration identifies the plugin connection that serves the
	// resource's RPCs (Endpoints[0]): the number the registration server gave
	// it, which grows with every registration; 0 when no plugin is connected.
	// It changes whenever a plugin registers, on a new socket or taking over
	// its old one, so a consumer can tell a registration from other changes
	// (runtime injection retries at once the PreStartContainer calls that
	// waited for the plugin).
	Registration uint64
	// State and StateSince: when the resource last became Registered or
	// Disconnected.
	State      PluginState
	StateSince time.Time
	// Options of the endpoint that serves RPCs (zero for a resource restored
	// from the checkpoint).
	Options PluginOptions
	// Capacity and Allocatable have the semantics of the kubelet's
	// GetCapacity: all reported devices, and the healthy ones that are not
	// cordoned. Devices awaiting their plugin are not counted:
	//
	//	plugin connected, H healthy + U unhealthy   H+U / H
	//	no plugin, within the grace period          H+U / 0 (all unhealthy)
	//	no plugin, grace period over                no snapshot (removed)
	//	restored from checkpoint, plugin not back   0 / 0
	//	connected, no ListAndWatch message yet      0 / 0
	Capacity    int
	Allocatable int
	// Allocated is the number of Devices held by a container (with a
	// Holder); in-flight allocations are not counted until committed.
	Allocated int
	// Cordoned is the number of Devices that are cordoned.
	Cordoned int
	// Devices are sorted by ID.
	Devices []DeviceSnapshot
	// ServedByDRA: the resource's devices are prepared for DRA
	// ResourceClaims, not allocated to pods (Config.ServedByDRA).
	ServedByDRA bool
	// Rejected is why the plugin's latest ListAndWatch message was refused,
	// nil when it was accepted: Devices are those of the last accepted one.
	Rejected *ListRejection
}

// PluginOptions are the options a plugin returned from GetDevicePluginOptions.
type PluginOptions struct {
	PreStartRequired                bool
	GetPreferredAllocationAvailable bool
}

// DeviceSnapshot is one device's state.
type DeviceSnapshot struct {
	ID     string
	Health Health
	// Reason is one of the Reason* constants; Message explains it.
	Reason  string
	Message string
	// LastTransitionTime is when Health last changed.
	LastTransitionTime time.Time
	// NUMANodes the device is attached to, sorted; nil without topology.
	NUMANodes []int64
	// Holder is the container the device is allocated to (committed), or
	// nil. When containers of one pod share the device (an init
	// container's devices reused), the container whose name sorts first.
	Holder *DeviceHolder
	// Cordoned devices are never allocated (SetCordons).
	Cordoned bool
}

// snapshotLocked copies r. The caller holds m.mu.
func (m *Manager) snapshotLocked(r *resourceState) ResourceSnapshot {
	cordons := m.cordons[r.name]
	s := ResourceSnapshot{
		ResourceName: r.name,
		State:        r.state,
		StateSince:   r.stateSince,
		Capacity:     r.healthy.Len() + r.unhealthy.Len(),
		Allocatable:  m.allocatableCountLocked(r),
		ServedByDRA:  m.ServedByDRA(r.name),
		Rejected:     r.rejected,
		Options: PluginOptions{
			PreStartRequired:                r.primary.opts().GetPreStartRequired(),
			GetPreferredAllocationAvailable: r.primary.opts().GetGetPreferredAllocationAvailable(),
		},
	}
	s.Endpoints, s.Registration = r.liveEndpoints()

	s.Devices = make([]DeviceSnapshot, 0, len(r.devices)+len(r.awaiting))
	for _, devs := range []map[string]*device{r.devices, r.awaiting} {
		for _, d := range devs {
			ds := DeviceSnapshot{
				ID:                 d.id,
				Health:             d.health,
				Reason:             d.reason,
				Message:            d.message,
				LastTransitionTime: d.lastTransition,
				NUMANodes:          slices.Clone(d.numaNodes),
				Holder:             m.holderLocked(r.name, d.id),
				Cordoned:           cordons.Has(d.id),
			}
			if ds.Holder != nil {
				s.Allocated++
			}
			if ds.Cordoned {
				s.Cordoned++
			}
			s.Devices = append(s.Devices, ds)
		}
	}
	// Held devices the plugin no longer reports are shown as such, not
	// hidden: unhealthy, with their holder, never allocatable.
	for _, id := range m.pods.InUseIDs(r.name) {
		if r.devices[id] != nil || r.awaiting[id] != nil {
			continue
		}
		holder := m.holderLocked(r.name, id)
		if holder == nil { // reserved by an allocation in flight, not held
			continue
		}
		s.Allocated++
		s.Devices = append(s.Devices, DeviceSnapshot{
			ID: id, Health: Unhealthy, Reason: ReasonNotReported, Message: msgNotReported,
			LastTransitionTime: r.missingSince[id], Holder: holder, Cordoned: cordons.Has(id),
		})
		if cordons.Has(id) {
			s.Cordoned++
		}
	}
	slices.SortFunc(s.Devices, func(a, b DeviceSnapshot) int { return strings.Compare(a.ID, b.ID) })
	return s
}

// liveEndpoints returns the socket paths of r's connected endpoints, newest registration first,
// and the client ID of the newest (the one serving RPCs); nil and 0 when none is connected.
func (r *resourceState) liveEndpoints() (sockets []string, registration uint64) {
	live := make([]*endpoint, 0, len(r.endpoints))
	for _, e := range r.endpoints {
		live = append(live, e)
	}
	if len(live) == 0 {
		return nil, 0
	}
	slices.SortFunc(live, func(a, b *endpoint) int { return cmp.Compare(b.clientID, a.clientID) })
	for _, e := range live {
		sockets = append(sockets, e.socketPath())
	}
	return sockets, uint64(live[0].clientID)
}
