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
	"fmt"
	"slices"
	"time"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/util/sets"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"k8s.io/utils/clock"
)

// Health is a device's health as the manager sees it. Any health string a
// plugin reports other than "Healthy" is Unhealthy, as in the kubelet.
type Health string

// The two health values, spelled as in the device plugin API.
const (
	Healthy   Health = pluginapi.Healthy
	Unhealthy Health = pluginapi.Unhealthy
)

// Reasons for a device's health, shown with every device in snapshots. The
// API layer mirrors them.
const (
	// ReasonReportedHealthy: the plugin reports the device Healthy.
	ReasonReportedHealthy = "Healthy"
	// ReasonReportedUnhealthy: the plugin reports the device with any other
	// health.
	ReasonReportedUnhealthy = "PluginReportedUnhealthy"
	// ReasonPluginDisconnected: the resource's last plugin endpoint went
	// away; the device is unusable until a plugin registers and reports it.
	ReasonPluginDisconnected = "PluginDisconnected"
	// ReasonAwaitingPlugin: the device was restored from the checkpoint and
	// its plugin has not reported it yet.
	ReasonAwaitingPlugin = "AwaitingPluginRegistration"
	// ReasonNotReported: a container holds the device and the plugin no
	// longer reports it. Shown (unhealthy, held) until it is freed; never
	// allocatable while held.
	ReasonNotReported = "NotReportedByPlugin"
)

const (
	msgReportedHealthy    = "The device plugin reports the device as Healthy."
	msgReportedUnhealthy  = "The device plugin reports the device as %q."
	msgPluginDisconnected = "No device plugin is connected for this resource; the device cannot be allocated until a plugin registers and reports it."
	msgAwaitingPlugin     = "Restored from the checkpoint; waiting for the device plugin to register and report the device."
	msgNotReported        = "The device plugin no longer reports this device; it stays allocated to the container holding it until that container's pod ends."
)

// Limits on one ListAndWatch message. A message beyond them is rejected as a
// whole and the previous device set is kept.
const (
	// MaxDevicesPerResource is the most devices one message may list: 256
	// NodeDevice shards, well above the 10 k devices per node the agent
	// supports, and below the 100 k it must reject (a plugin of 100 k devices
	// would need 782 shards, which the agent cannot mirror at its rate limits).
	MaxDevicesPerResource = 32_768
	// MaxDeviceIDLength is the longest device ID accepted, in bytes.
	MaxDeviceIDLength = 253
	// maxHealthInMessage bounds how much of an unknown health string is
	// quoted in a device's message.
	maxHealthInMessage = 63
)

// Values of the reason label of kubedevice_device_plugin_invalid_updates_total.
const (
	invalidTooManyDevices  = "TooManyDevices"
	invalidEmptyID         = "EmptyDeviceID"
	invalidIDTooLong       = "DeviceIDTooLong"
	invalidIDCharacters    = "InvalidDeviceID"
	invalidDuplicateID     = "DuplicateDeviceID"
	invalidMessageTooLarge = "MessageTooLarge"
)

// validateDeviceList checks one ListAndWatch message. It returns the metric
// reason and an error for the first problem found.
func validateDeviceList(devs []*pluginapi.Device) (string, error) {
	if len(devs) > MaxDevicesPerResource {
		return invalidTooManyDevices, fmt.Errorf("listing %d devices, more than the limit of %d", len(devs), MaxDevicesPerResource)
	}
	seen := make(map[string]struct{}, len(devs))
	for i, d := range devs {
		id := d.GetID()
		switch {
		case id == "":
			return invalidEmptyID, fmt.Errorf("device %d has an empty ID", i)
		case len(id) > MaxDeviceIDLength:
			return invalidIDTooLong, fmt.Errorf("device %d has an ID of %d bytes, more than the limit of %d", i, len(id), MaxDeviceIDLength)
		case !validIDEncoding(id):
			return invalidIDCharacters, fmt.Errorf("device %d has ID %q, which is not valid UTF-8: the API objects that carry device IDs are JSON and cannot hold it", i, id)
		}
		if _, dup := seen[id]; dup {
			return invalidDuplicateID, fmt.Errorf("device ID %q is listed more than once", id)
		}
		seen[id] = struct{}{}
	}
	return "", nil
}

// validIDEncoding says whether a device ID can be carried: any valid UTF-8, control characters
// (NUL included) among them, as the kubelet accepts any ID. Invalid UTF-8 is refused: NodeDevice,
// DeviceAllocation and the checkpoint are JSON, where it would turn into U+FFFD and no longer
// name the plugin's device (the kubelet's own checkpoint has the same loss).
func validIDEncoding(id string) bool {
	return utf8.ValidString(id)
}

// device is the manager's record of one device.
type device struct {
	id             string
	health         Health
	reason         string
	message        string
	lastTransition time.Time
	numaNodes      []int64 // sorted, without duplicates; nil without topology
}

func (d *device) equal(o *device) bool {
	return d.id == o.id && d.health == o.health && d.reason == o.reason && d.message == o.message &&
		d.lastTransition.Equal(o.lastTransition) && slices.Equal(d.numaNodes, o.numaNodes)
}

// proto returns the device as the device plugin API describes it.
func (d *device) proto() *pluginapi.Device {
	out := &pluginapi.Device{ID: d.id, Health: string(d.health)}
	if len(d.numaNodes) > 0 {
		out.Topology = &pluginapi.TopologyInfo{}
		for _, n := range d.numaNodes {
			out.Topology.Nodes = append(out.Topology.Nodes, &pluginapi.NUMANode{ID: n})
		}
	}
	return out
}

// deviceFromProto converts a reported device. The transition time is set by
// the caller.
func deviceFromProto(d *pluginapi.Device) *device {
	out := &device{id: d.GetID()}
	if d.GetHealth() == pluginapi.Healthy {
		out.health, out.reason, out.message = Healthy, ReasonReportedHealthy, msgReportedHealthy
	} else {
		health := d.GetHealth()
		if len(health) > maxHealthInMessage {
			health = health[:maxHealthInMessage]
		}
		out.health, out.reason, out.message = Unhealthy, ReasonReportedUnhealthy, fmt.Sprintf(msgReportedUnhealthy, health)
	}
	for _, n := range d.GetTopology().GetNodes() {
		if n != nil {
			out.numaNodes = append(out.numaNodes, n.GetID())
		}
	}
	slices.Sort(out.numaNodes)
	out.numaNodes = slices.Compact(out.numaNodes)
	return out
}

// resourceState is everything the manager knows about one resource. The
// invariants (the kubelet keeps four maps in step; #133702 is what happens
// when they drift):
//   - primary is never nil: it is the newest live endpoint, or, when no
//     plugin is connected, the endpoint that stopped last (or the stopped
//     endpoint restored from the checkpoint);
//   - healthy and unhealthy partition the keys of devices;
//   - awaiting is informational only (never counted, never allocatable) and
//     empty once a plugin has reported devices.
type resourceState struct {
	name string

	endpoints map[string]*endpoint // live endpoints by socket path
	primary   *endpoint

	state      PluginState
	stateSince time.Time
	graceTimer clock.Timer // removes the resource once the grace period ends

	devices   map[string]*device // every device of the last accepted message
	healthy   sets.Set[string]
	unhealthy sets.Set[string]
	// healthySorted caches healthy in ID order (sortedHealthy); nil when
	// healthy changed since.
	healthySorted []string
	awaiting      map[string]*device // restored from the checkpoint, not yet reported
	// missingSince records when a held device stopped being reported (in
	// devices or awaiting); snapshots show held devices that are neither as
	// missing since then. Entries of devices no longer held are dropped with
	// the next message.
	missingSince map[string]time.Time
	// reported is set by the first accepted ListAndWatch message: a plugin
	// that has not reported yet is not known to have no healthy device.
	reported bool
	// rejected is why the latest ListAndWatch message was refused; nil once
	// a message is accepted.
	rejected *ListRejection
}

// ListRejection is why the agent refused a plugin's ListAndWatch message as
// a whole (and kept the devices of the last accepted one).
type ListRejection struct {
	// Reason is the reason label of
	// kubedevice_device_plugin_invalid_updates_total (InvalidDeviceID, ...).
	Reason string
	// Message says what is wrong, offending values quoted (%q).
	Message string
	// At is when the message was refused.
	At time.Time
}

func newResourceState(name string) *resourceState {
	return &resourceState{
		name:      name,
		endpoints: make(map[string]*endpoint),
		devices:   make(map[string]*device),
		healthy:   sets.New[string](),
		unhealthy: sets.New[string](),
	}
}

// newestLiveEndpoint returns the live endpoint of the most recent
// registration, or nil.
func (r *resourceState) newestLiveEndpoint() *endpoint {
	var newest *endpoint
	for _, e := range r.endpoints {
		if newest == nil || e.clientID > newest.clientID {
			newest = e
		}
	}
	return newest
}

func (r *resourceState) stopGraceTimer() {
	if r.graceTimer != nil {
		r.graceTimer.Stop()
		r.graceTimer = nil
	}
}

// applyDevices replaces the device set with a validated ListAndWatch message.
// A device's transition time moves only when its health changes. It reports
// whether anything visible changed.
//
// held reports whether a container holds a device: a held device the
// message no longer lists is recorded as missing from now (missingSince).
func (r *resourceState) applyDevices(devs []*pluginapi.Device, now time.Time, held func(id string) bool) bool {
	changed := len(r.awaiting) > 0 || len(devs) != len(r.devices)
	next := make(map[string]*device, len(devs))
	healthy, unhealthy := sets.New[string](), sets.New[string]()
	for _, pd := range devs {
		d := deviceFromProto(pd)
		d.lastTransition = now
		if old, ok := r.devices[d.id]; ok {
			if old.health == d.health {
				d.lastTransition = old.lastTransition
			}
			changed = changed || !old.equal(d)
		} else {
			changed = true
		}
		next[d.id] = d
		if d.health == Healthy {
			healthy.Insert(d.id)
		} else {
			unhealthy.Insert(d.id)
		}
	}
	for id := range r.missingSince {
		if _, reported := next[id]; reported || !held(id) {
			delete(r.missingSince, id)
		}
	}
	for _, prev := range []map[string]*device{r.devices, r.awaiting} {
		for id := range prev {
			if _, reported := next[id]; !reported && held(id) {
				if r.missingSince == nil {
					r.missingSince = make(map[string]time.Time)
				}
				r.missingSince[id] = now
			}
		}
	}
	r.devices, r.healthy, r.unhealthy, r.awaiting = next, healthy, unhealthy, nil
	r.healthySorted = nil
	r.reported = true
	return changed
}

// registeredIDs returns the IDs the checkpoint records for the resource:
// every reported device, healthy or not, and the devices restored from the
// checkpoint that await their plugin.
func (r *resourceState) registeredIDs() sets.Set[string] {
	ids := make(sets.Set[string], len(r.devices)+len(r.awaiting))
	for id := range r.devices {
		ids.Insert(id)
	}
	for id := range r.awaiting {
		ids.Insert(id)
	}
	return ids
}

// markUnhealthy makes every device unhealthy for reason, as the kubelet's
// markResourceUnhealthy does to its sets, but also on the devices themselves.
func (r *resourceState) markUnhealthy(now time.Time, reason, message string) {
	for id, d := range r.devices {
		if d.health != Unhealthy {
			d.lastTransition = now
		}
		d.health, d.reason, d.message = Unhealthy, reason, message
		r.unhealthy.Insert(id)
	}
	r.healthy, r.healthySorted = sets.New[string](), nil
}

// sortedHealthy returns the healthy devices in ID order, sorted once per
// change of the healthy set rather than once per allocation.
func (r *resourceState) sortedHealthy() []string {
	if r.healthySorted == nil {
		r.healthySorted = sets.List(r.healthy)
	}
	return r.healthySorted
}
