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

package poddevices

import (
	"cmp"
	"maps"
	"slices"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// RunContainerOptions is what a container needs at creation to use its devices: the merge of the
// Allocate responses of all its resources.
type RunContainerOptions struct {
	// Envs are environment variables, sorted by name.
	Envs []EnvVar
	// Mounts are bind mounts, sorted by container path.
	Mounts []Mount
	// Devices are device nodes, sorted by container path.
	Devices []DeviceSpec
	// Annotations are container annotations for the runtime, sorted by key.
	Annotations []Annotation
	// CDIDevices are fully qualified CDI device names (vendor.com/class=name), in the order first
	// seen: resources in name order, then each response's own order. CDI specs may edit the same
	// container setting, and the plugin's order is the only one with meaning, so it is kept.
	CDIDevices []string
}

// EnvVar is an environment variable.
type EnvVar struct {
	// Name is the variable's name.
	Name string
	// Value is the variable's value.
	Value string
}

// Mount is a bind mount of a host path into the container.
type Mount struct {
	// ContainerPath is the path inside the container.
	ContainerPath string
	// HostPath is the path on the host.
	HostPath string
	// ReadOnly makes the mount read-only.
	ReadOnly bool
}

// DeviceSpec is a host device node made available in the container.
type DeviceSpec struct {
	// ContainerPath is the device's path inside the container.
	ContainerPath string
	// HostPath is the device's path on the host.
	HostPath string
	// Permissions are the cgroup permissions: any of r (read), w (write), m (mknod).
	Permissions string
}

// Annotation is a container annotation passed to the runtime.
type Annotation struct {
	// Key is the annotation's key.
	Key string
	// Value is the annotation's value.
	Value string
}

// ConflictKind names the kind of setting two responses disagreed on.
type ConflictKind string

// The kinds of conflicting settings.
const (
	// ConflictEnv is an environment variable set to different values.
	ConflictEnv ConflictKind = "Env"
	// ConflictMount is a container path mounted from different host paths or with different
	// read-only flags.
	ConflictMount ConflictKind = "Mount"
	// ConflictDevice is a container path mapped to different host devices or with different
	// permissions.
	ConflictDevice ConflictKind = "Device"
	// ConflictAnnotation is an annotation set to different values.
	ConflictAnnotation ConflictKind = "Annotation"
)

// Conflict is a setting that a response gave differently from one merged before it. The earlier
// setting was kept and the later one dropped.
type Conflict struct {
	// Kind is the kind of setting.
	Kind ConflictKind
	// Key is the environment variable name, annotation key, or container path.
	Key string
	// KeptResource is the resource whose setting was kept.
	KeptResource string
	// KeptValue is the kept setting: the value, "hostPath:ro" or "hostPath:rw" for a mount, or
	// "hostPath:permissions" for a device.
	KeptValue string
	// DroppedResource is the resource whose setting was dropped. It equals KeptResource when one
	// response repeated a container path.
	DroppedResource string
	// DroppedValue is the dropped setting, written as KeptValue is.
	DroppedValue string
}

// RunContainerOptions merges the responses committed to the pod's container across its resources
// with the kubelet's rules (deviceRunContainerOptions in devicemanager/pod_devices.go) and returns the options, with the conflicts found so the caller
// can log them. It returns nil, nil if the container has no committed allocation.
//
// Merge rules: environment variables and annotations are deduplicated by key, mounts and devices
// by container path, CDI devices by name; the first setting wins. Unlike the kubelet, which walks
// resources in map order, resources are merged in name order, so "first" is the same on every call
// and the result is deterministic. A later setting equal to the kept one is not a conflict; one
// that differs in any field is (the kubelet compares host paths only, and ignores the read-only
// flag and permissions). CDI device names cannot conflict, duplicates are dropped. Conflicts are
// listed in the order they are found: by resource, then environment variables, devices, mounts and
// annotations, each by key or in the response's order.
func (s *Store) RunContainerOptions(podUID, container string) (*RunContainerOptions, []Conflict) {
	resources := s.pods[podUID].containerResources(container)
	var names []string
	for name, a := range resources {
		if a.committed != nil {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return nil, nil
	}
	slices.Sort(names)
	m := merger{
		envs:        make(map[string]setting),
		mounts:      make(map[string]setting),
		devices:     make(map[string]setting),
		annotations: make(map[string]setting),
		cdi:         make(map[string]bool),
	}
	for _, name := range names {
		m.add(name, resources[name].committed.resp)
	}
	slices.SortFunc(m.opts.Envs, func(x, y EnvVar) int { return cmp.Compare(x.Name, y.Name) })
	slices.SortFunc(m.opts.Mounts, func(x, y Mount) int { return cmp.Compare(x.ContainerPath, y.ContainerPath) })
	slices.SortFunc(m.opts.Devices, func(x, y DeviceSpec) int { return cmp.Compare(x.ContainerPath, y.ContainerPath) })
	slices.SortFunc(m.opts.Annotations, func(x, y Annotation) int { return cmp.Compare(x.Key, y.Key) })
	return &m.opts, m.conflicts
}

// setting is a kept setting: where it came from, its fields (a comparable value: a string, or an
// array of a mount's or device's fields) and its value as a Conflict shows it.
type setting struct {
	resource string
	fields   any
	value    string
}

// merger accumulates responses in order; the first setting of each key wins.
type merger struct {
	opts                               RunContainerOptions
	conflicts                          []Conflict
	envs, mounts, devices, annotations map[string]setting
	cdi                                map[string]bool
}

// add merges one resource's response. Map fields are walked in key order so that the order of
// conflicts is deterministic too.
func (m *merger) add(resource string, resp *pluginapi.ContainerAllocateResponse) {
	for _, k := range slices.Sorted(maps.Keys(resp.GetEnvs())) {
		v := resp.GetEnvs()[k]
		if m.keep(ConflictEnv, m.envs, k, setting{resource: resource, fields: v, value: v}) {
			m.opts.Envs = append(m.opts.Envs, EnvVar{Name: k, Value: v})
		}
	}
	for _, d := range resp.GetDevices() {
		next := setting{
			resource: resource,
			fields:   [2]string{d.GetHostPath(), d.GetPermissions()},
			value:    d.GetHostPath() + ":" + d.GetPermissions(),
		}
		if m.keep(ConflictDevice, m.devices, d.GetContainerPath(), next) {
			m.opts.Devices = append(m.opts.Devices, DeviceSpec{
				ContainerPath: d.GetContainerPath(),
				HostPath:      d.GetHostPath(),
				Permissions:   d.GetPermissions(),
			})
		}
	}
	for _, mnt := range resp.GetMounts() {
		mode := ":rw"
		if mnt.GetReadOnly() {
			mode = ":ro"
		}
		next := setting{
			resource: resource,
			fields:   [2]string{mnt.GetHostPath(), mode},
			value:    mnt.GetHostPath() + mode,
		}
		if m.keep(ConflictMount, m.mounts, mnt.GetContainerPath(), next) {
			m.opts.Mounts = append(m.opts.Mounts, Mount{
				ContainerPath: mnt.GetContainerPath(),
				HostPath:      mnt.GetHostPath(),
				ReadOnly:      mnt.GetReadOnly(),
			})
		}
	}
	for _, k := range slices.Sorted(maps.Keys(resp.GetAnnotations())) {
		v := resp.GetAnnotations()[k]
		if m.keep(ConflictAnnotation, m.annotations, k, setting{resource: resource, fields: v, value: v}) {
			m.opts.Annotations = append(m.opts.Annotations, Annotation{Key: k, Value: v})
		}
	}
	for _, c := range resp.GetCdiDevices() {
		if m.cdi[c.GetName()] {
			continue
		}
		m.cdi[c.GetName()] = true
		m.opts.CDIDevices = append(m.opts.CDIDevices, c.GetName())
	}
}

// keep reports whether key is new, recording next in seen if so, and records a conflict if key
// was seen with different fields.
func (m *merger) keep(kind ConflictKind, seen map[string]setting, key string, next setting) bool {
	kept, ok := seen[key]
	if !ok {
		seen[key] = next
		return true
	}
	if kept.fields != next.fields {
		m.conflicts = append(m.conflicts, Conflict{
			Kind:            kind,
			Key:             key,
			KeptResource:    kept.resource,
			KeptValue:       kept.value,
			DroppedResource: next.resource,
			DroppedValue:    next.value,
		})
	}
	return false
}
