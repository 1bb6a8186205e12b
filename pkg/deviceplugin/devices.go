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

package deviceplugin

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode"

	"google.golang.org/protobuf/proto"
	"k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

var (
	// ErrUnknownDevice is returned by SetHealth for a device ID the plugin
	// does not advertise.
	ErrUnknownDevice = errors.New("unknown device")
	errInvalidDevice = errors.New("invalid device")
)

// Device returns a device with the given ID and health and, if numaNodes are
// given, a topology on those NUMA nodes.
func Device(id string, healthy bool, numaNodes ...int64) *v1beta1.Device {
	d := &v1beta1.Device{ID: id, Health: healthString(healthy)}
	if len(numaNodes) > 0 {
		d.Topology = &v1beta1.TopologyInfo{}
		for _, n := range numaNodes {
			d.Topology.Nodes = append(d.Topology.Nodes, &v1beta1.NUMANode{ID: n})
		}
	}
	return d
}

func healthString(healthy bool) string {
	if healthy {
		return v1beta1.Healthy
	}
	return v1beta1.Unhealthy
}

// SetDevices replaces the advertised devices and, if they changed, sends the
// new list to every open ListAndWatch stream. The list is copied and sorted
// by ID. An empty Health means Healthy; any other value than Healthy or
// Unhealthy is refused, as are empty or duplicate IDs and IDs longer than 253
// bytes or holding control characters (the device manager would refuse the
// whole list). On error nothing changes. It is safe to call from any
// goroutine, before or during Run.
func (p *Plugin) SetDevices(devs []*v1beta1.Device) error {
	list, err := normalizeDevices(devs)
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.replaceDevicesLocked(list)
	return nil
}

// SetHealth sets the health of one device and, if it changed, sends the new
// list to every open ListAndWatch stream. It returns an error wrapping
// ErrUnknownDevice if the plugin does not advertise id.
func (p *Plugin) SetHealth(id string, healthy bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	i, found := slices.BinarySearchFunc(p.devices, id, func(d *v1beta1.Device, id string) int { return strings.Compare(d.GetID(), id) })
	if !found {
		return fmt.Errorf("setting health of device %q: %w", id, ErrUnknownDevice)
	}
	health := healthString(healthy)
	if p.devices[i].GetHealth() == health {
		return nil
	}
	list := slices.Clone(p.devices)
	d := proto.CloneOf(list[i])
	d.Health = health
	list[i] = d
	p.replaceDevicesLocked(list)
	return nil
}

// Devices returns a copy of the advertised devices, sorted by ID.
func (p *Plugin) Devices() []*v1beta1.Device {
	p.mu.Lock()
	list := p.devices
	p.mu.Unlock()
	out := make([]*v1beta1.Device, len(list))
	for i, d := range list {
		out[i] = proto.CloneOf(d)
	}
	return out
}

// replaceDevicesLocked installs list, which nothing else references, and
// wakes the streams if it differs from the current one. The caller holds
// p.mu. Installed lists are never modified: streams send them as they are.
func (p *Plugin) replaceDevicesLocked(list []*v1beta1.Device) {
	if slices.EqualFunc(p.devices, list, func(a, b *v1beta1.Device) bool { return proto.Equal(a, b) }) {
		return
	}
	p.devices = list
	p.version++
	for s := range p.streams {
		s.wake()
	}
}

// currentDevices returns the installed list, which must not be modified,
// and its version.
func (p *Plugin) currentDevices() ([]*v1beta1.Device, uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.devices, p.version
}

// normalizeDevices validates devs and returns sorted copies.
func normalizeDevices(devs []*v1beta1.Device) ([]*v1beta1.Device, error) {
	list := make([]*v1beta1.Device, 0, len(devs))
	for i, d := range devs {
		if d == nil {
			return nil, fmt.Errorf("%w: device %d is nil", errInvalidDevice, i)
		}
		if err := validateDeviceID(d.GetID()); err != nil {
			return nil, fmt.Errorf("%w %d: %w", errInvalidDevice, i, err)
		}
		c := proto.CloneOf(d)
		switch c.GetHealth() {
		case "":
			c.Health = v1beta1.Healthy
		case v1beta1.Healthy, v1beta1.Unhealthy:
		default:
			return nil, fmt.Errorf("%w %q: health %q is neither %q nor %q", errInvalidDevice, c.GetID(), c.GetHealth(), v1beta1.Healthy, v1beta1.Unhealthy)
		}
		list = append(list, c)
	}
	slices.SortFunc(list, func(a, b *v1beta1.Device) int { return strings.Compare(a.GetID(), b.GetID()) })
	for i := 1; i < len(list); i++ {
		if list[i].GetID() == list[i-1].GetID() {
			return nil, fmt.Errorf("%w %q: listed twice", errInvalidDevice, list[i].GetID())
		}
	}
	return list, nil
}

func validateDeviceID(id string) error {
	switch {
	case id == "":
		return errors.New("empty ID")
	case len(id) > maxDeviceIDLength:
		return fmt.Errorf("ID of %d bytes, longer than %d", len(id), maxDeviceIDLength)
	case strings.ContainsFunc(id, unicode.IsControl):
		return fmt.Errorf("ID %q holds control characters", id)
	}
	return nil
}
