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

// Invariants. They hold between any two calls on a Store; every method keeps them, and the
// randomized test in store_property_test.go checks them after every operation.
//
//  I1 Exclusivity between pods. For each resource, a device ID is held by at most one pod. Inside
//     that pod it may be held in several places at once: committed to a regular init container
//     and reused by a later container of the same pod (the kubelet's Allocate in devicemanager/manager.go), or reserved by a container
//     that already has it committed. Reserve and FromEntries refuse a device another pod holds
//     (ErrDeviceInUse); Commit only commits devices its own reservation holds.
//  I2 Used view. Devices() is exactly the union, per resource, of every committed and every
//     reserved (in-flight) device ID. Store.owners is that union indexed by resource and ID; each
//     owner counts the places (container × {reserved, committed}) of its pod that hold the ID, and
//     an ID leaves the index exactly when that count reaches zero.
//  I3 Reservations are invisible to the committed views: ContainerDevices, PodDevices, Pods,
//     HasPod, GetContainerDevices, PodAndContainerForDevice, RunContainerOptions, the reuse helpers
//     and Entries see committed allocations only, so neither the checkpoint, nor the PodResources
//     API, nor the mirror ever shows an allocation in flight.
//  I4 Reservations survive garbage collection. Delete removes committed allocations only; an
//     in-flight reservation is resolved only by Commit or Rollback of the same pod, container and
//     resource.
//  I5 A committed allocation has at least one device ID, a non-nil response, and that response's
//     deterministic wire encoding, computed at Commit. Entries therefore never fails and never
//     drops an allocation (the kubelet skips, at checkpoint time, an entry it cannot marshal, and
//     the allocation is then lost on restart).
//  I6 No empty leaves: an allocation with neither a reservation nor a commit is removed, and so is
//     a container with no allocations and a pod with no containers. podState.committed is the
//     number of the pod's allocations that have a commit.
//  I7 No aliasing. Inputs are copied on the way in and results are fresh values the caller owns,
//     so the manager may use them after releasing its mutex (for example around an RPC).

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/util/sets"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// NodeWithoutTopology is the NUMA node key under which a devices-per-NUMA map records a device
// that has no topology information, as the kubelet does.
const NodeWithoutTopology int64 = -1

var (
	// ErrDeviceInUse is returned when a device is asked for that another pod already holds,
	// reserved or committed.
	ErrDeviceInUse = errors.New("device is held by another pod")
	// ErrNotReserved is returned when Commit is asked to commit a device that the same pod,
	// container and resource has not reserved.
	ErrNotReserved = errors.New("device is not reserved")
	// ErrInvalidAllocation is returned for an allocation the Store cannot keep: no device IDs, an
	// empty device ID, a nil response, a response that cannot be encoded, or checkpoint bytes
	// that cannot be decoded.
	ErrInvalidAllocation = errors.New("invalid allocation")
)

// PodRef identifies the pod an allocation belongs to. Namespace and Name are recorded for the
// mirror (DeviceAllocation objects); UID is the key.
type PodRef struct {
	// UID is the pod's UID.
	UID string
	// Namespace is the pod's namespace.
	Namespace string
	// Name is the pod's name.
	Name string
}

// Store records the devices each pod's containers hold, per resource, and the in-flight
// reservations of allocations under way. The zero value is not usable; call New.
//
// A Store is not safe for concurrent use: the device manager serializes every call under its own
// mutex, which is also what makes a multi-call sequence (such as Devices followed by Reserve)
// atomic. Nothing returned by a Store aliases its state, so results may be used after the mutex is
// released.
type Store struct {
	// pods holds every pod that has at least one reserved or committed allocation.
	pods map[string]*podState
	// owners indexes every device ID held anywhere: resource → device ID → holding pod.
	owners map[string]map[string]*owner
}

// owner is the one pod holding a device, and how many places in that pod hold it.
type owner struct {
	podUID string
	refs   int
}

type podState struct {
	namespace, name string
	// containers maps container name → resource name → allocation.
	containers map[string]map[string]*allocation
	// committed counts the allocations in containers that have a commit.
	committed int
}

// allocation is what one container holds of one resource. At least one field is set.
type allocation struct {
	// reserved is the in-flight reservation; nil when there is none.
	reserved sets.Set[string]
	// committed is the committed allocation; nil when there is none.
	committed *committedAllocation
}

type committedAllocation struct {
	// devicesPerNUMA has no empty lists; each list is sorted and free of duplicates.
	devicesPerNUMA map[int64][]string
	// ids is the union of devicesPerNUMA.
	ids sets.Set[string]
	// resp is the Store's own copy of the plugin's response.
	resp *pluginapi.ContainerAllocateResponse
	// raw is resp's deterministic wire encoding.
	raw []byte
}

// New returns an empty Store.
func New() *Store {
	return &Store{
		pods:   make(map[string]*podState),
		owners: make(map[string]map[string]*owner),
	}
}

// Reserve adds device IDs of resource to the in-flight reservation of the pod's container,
// creating the reservation if there is none. It may be called repeatedly for the same container
// and resource, for example once per device as the allocation algorithm picks them; IDs already in
// the reservation are ignored. Reserved devices count as used in Devices at once, and stay so,
// across any Delete of the pod, until Commit or Rollback of the same pod, container and resource.
//
// Reserve is all or nothing: if any ID is held by another pod it returns an error wrapping
// ErrDeviceInUse and reserves none. A device held elsewhere in the same pod may be reserved; that
// is how a container reuses the devices of the pod's regular init containers.
func (s *Store) Reserve(podUID, container, resource string, ids ...string) error {
	for _, id := range ids {
		if id == "" {
			return fmt.Errorf("reserving devices of %s for pod %q container %q: empty device ID: %w",
				resource, podUID, container, ErrInvalidAllocation)
		}
		if o := s.owners[resource][id]; o != nil && o.podUID != podUID {
			return fmt.Errorf("reserving device %q of %s for pod %q container %q: held by pod %q: %w",
				id, resource, podUID, container, o.podUID, ErrDeviceInUse)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	a := s.ensureAllocation(podUID, container, resource)
	if a.reserved == nil {
		a.reserved = sets.New[string]()
	}
	for _, id := range ids {
		if a.reserved.Has(id) {
			continue
		}
		a.reserved.Insert(id)
		s.acquire(podUID, resource, id)
	}
	return nil
}

// Commit turns the pod container's reservation for resource into a committed allocation of the
// devices in devicesPerNUMA (NUMA node → device IDs; a device on several nodes is listed under
// each, one without topology under NodeWithoutTopology) with the plugin's response resp. Every
// device in devicesPerNUMA must be in the reservation; reserved devices not in devicesPerNUMA are
// released, since Commit resolves the reservation. A committed allocation the container already
// had for resource is replaced, as the kubelet replaces it. The pod's namespace and name are
// recorded from pod.
//
// Commit changes nothing and returns an error wrapping ErrNotReserved if a device is not
// reserved, or ErrInvalidAllocation if devicesPerNUMA holds no device, resp is nil, or resp cannot
// be encoded (the checkpoint could not hold it). The Store keeps its own copies of devicesPerNUMA
// and resp.
func (s *Store) Commit(pod PodRef, container, resource string, devicesPerNUMA map[int64][]string,
	resp *pluginapi.ContainerAllocateResponse) error {
	ca, err := newCommittedAllocation(devicesPerNUMA, resp, false)
	if err != nil {
		return fmt.Errorf("committing devices of %s for pod %q container %q: %w", resource, pod.UID, container, err)
	}
	a := s.lookup(pod.UID, container, resource)
	for _, id := range sets.List(ca.ids) {
		if a == nil || !a.reserved.Has(id) {
			return fmt.Errorf("committing device %q of %s for pod %q container %q: %w",
				id, resource, pod.UID, container, ErrNotReserved)
		}
	}
	s.setCommitted(pod, container, resource, a, ca)
	s.releaseReservation(pod.UID, resource, a)
	return nil
}

// Rollback removes the in-flight reservation of the pod's container for resource, if any, and
// frees its devices unless another place in the pod holds them. A committed allocation of the
// same container and resource is left alone.
func (s *Store) Rollback(podUID, container, resource string) {
	a := s.lookup(podUID, container, resource)
	if a == nil || a.reserved == nil {
		return
	}
	s.releaseReservation(podUID, resource, a)
	s.prune(podUID, container, resource)
}

// Release removes the committed allocation of the pod's container for resource, if any, and
// reports whether there was one. It undoes a Commit whose transaction failed afterwards (the
// checkpoint could not be written, or another resource of the same container failed to
// allocate). An in-flight reservation of the same container and resource is left alone.
func (s *Store) Release(podUID, container, resource string) bool {
	a := s.lookup(podUID, container, resource)
	if a == nil || a.committed == nil {
		return false
	}
	s.releaseCommitted(podUID, resource, a)
	s.prune(podUID, container, resource)
	return true
}

// Delete removes every committed allocation of the given pods, as garbage collection of pods that
// are no longer active does, and returns how many it removed (zero means the checkpoint need not
// be rewritten). In-flight reservations of those pods are kept: each is resolved by its own Commit
// or Rollback. Unknown UIDs are ignored.
func (s *Store) Delete(podUIDs ...string) int {
	removed := 0
	for _, uid := range podUIDs {
		p := s.pods[uid]
		if p == nil || p.committed == 0 {
			continue
		}
		for container, resources := range p.containers {
			for resource, a := range resources {
				if a.committed == nil {
					continue
				}
				s.releaseCommitted(uid, resource, a)
				removed++
				s.prune(uid, container, resource)
			}
		}
	}
	return removed
}

// Devices returns, per resource, every device ID in use: committed or reserved. This is the set an
// allocation must never pick from. Resources with no device in use are absent.
func (s *Store) Devices() map[string]sets.Set[string] {
	out := make(map[string]sets.Set[string], len(s.owners))
	for resource, ids := range s.owners {
		set := make(sets.Set[string], len(ids))
		for id := range ids {
			set.Insert(id)
		}
		out[resource] = set
	}
	return out
}

// InUse reports whether device id of resource is committed or reserved:
// Devices()[resource].Has(id) without copying every set.
func (s *Store) InUse(resource, id string) bool {
	return s.owners[resource][id] != nil
}

// InUseIDs returns the IDs of the devices of resource committed or
// reserved, in no particular order.
func (s *Store) InUseIDs(resource string) []string {
	ids := make([]string, 0, len(s.owners[resource]))
	for id := range s.owners[resource] {
		ids = append(ids, id)
	}
	return ids
}

// InUseCount returns the number of devices of resource committed or
// reserved.
func (s *Store) InUseCount(resource string) int {
	return len(s.owners[resource])
}

// ContainerDevices returns the device IDs committed to the pod's container for resource, or nil
// if there is no committed allocation (an in-flight reservation does not count).
func (s *Store) ContainerDevices(podUID, container, resource string) sets.Set[string] {
	a := s.lookup(podUID, container, resource)
	if a == nil || a.committed == nil {
		return nil
	}
	return a.committed.ids.Clone()
}

// PodDevices returns the union of the device IDs of resource committed to any container of the
// pod, for pod-scope topology hints, or nil if there are none.
func (s *Store) PodDevices(podUID, resource string) sets.Set[string] {
	p := s.pods[podUID]
	if p == nil {
		return nil
	}
	var out sets.Set[string]
	for _, resources := range p.containers {
		a := resources[resource]
		if a == nil || a.committed == nil {
			continue
		}
		if out == nil {
			out = sets.New[string]()
		}
		out.Insert(a.committed.ids.UnsortedList()...)
	}
	return out
}

// Pods returns the UIDs of the pods that have at least one committed allocation. Pods whose only
// allocations are in flight are not included, so garbage collection never sees them.
func (s *Store) Pods() sets.Set[string] {
	out := sets.New[string]()
	for uid, p := range s.pods {
		if p.committed > 0 {
			out.Insert(uid)
		}
	}
	return out
}

// PodsNotIn returns the pods with at least one committed allocation whose UID active does not
// hold: what Pods().Difference(active) says, without building the set of every pod first (the
// kubelet's UpdateAllocatedDevices contract passes every active pod on each call).
func (s *Store) PodsNotIn(active sets.Set[string]) sets.Set[string] {
	out := sets.New[string]()
	for uid, p := range s.pods {
		if p.committed > 0 && !active.Has(uid) {
			out.Insert(uid)
		}
	}
	return out
}

// HasPod reports whether the pod has at least one committed allocation.
func (s *Store) HasPod(podUID string) bool {
	p := s.pods[podUID]
	return p != nil && p.committed > 0
}

// ContainerDevice is one device of a container as the PodResources API reports it: one value per
// device and NUMA node.
type ContainerDevice struct {
	// ResourceName is the extended resource name, e.g. example.com/gopher.
	ResourceName string
	// DeviceID is the plugin's ID of the device.
	DeviceID string
	// NUMANode is the NUMA node, or NodeWithoutTopology when the device has no topology (the
	// PodResources entry then has a nil topology).
	NUMANode int64
}

// GetContainerDevices returns the devices committed to the pod's container across all resources,
// one value per (device, NUMA node), as the PodResources API lists them: a device on NUMA nodes 0
// and 1 appears twice. The list is sorted by resource name, device ID and NUMA node. It is nil if
// the container has no committed allocation.
func (s *Store) GetContainerDevices(podUID, container string) []ContainerDevice {
	var out []ContainerDevice
	for resource, a := range s.pods[podUID].containerResources(container) {
		if a.committed == nil {
			continue
		}
		for node, ids := range a.committed.devicesPerNUMA {
			for _, id := range ids {
				out = append(out, ContainerDevice{ResourceName: resource, DeviceID: id, NUMANode: node})
			}
		}
	}
	slices.SortFunc(out, func(x, y ContainerDevice) int {
		if c := strings.Compare(x.ResourceName, y.ResourceName); c != 0 {
			return c
		}
		if c := strings.Compare(x.DeviceID, y.DeviceID); c != 0 {
			return c
		}
		return cmp.Compare(x.NUMANode, y.NUMANode)
	})
	return out
}

// PodAndContainerForDevice returns the pod and container that hold the committed device id of
// resource, for example to tell a pod that its device's health changed. Device IDs are unique
// only within a resource, so the lookup is scoped by it. A device that is only reserved is not
// found. When several containers of the pod share the device (reuse of an init container's
// devices), the container whose name sorts first is returned.
func (s *Store) PodAndContainerForDevice(resource, id string) (podUID, container string, found bool) {
	o := s.owners[resource][id]
	if o == nil {
		return "", "", false
	}
	p := s.pods[o.podUID]
	if p == nil {
		return "", "", false
	}
	for _, name := range slices.Sorted(maps.Keys(p.containers)) {
		if a := p.containers[name][resource]; a != nil && a.committed != nil && a.committed.ids.Has(id) {
			return o.podUID, name, true
		}
	}
	return "", "", false
}

// AddContainerAllocatedResources adds the devices committed to the pod's container, per
// resource, to reuse: the devices of a regular init container become reusable by the pod's later
// containers (the kubelet's Allocate in devicemanager/manager.go). reuse is owned by the caller and must not be nil; its sets are
// replaced, never modified in place.
func (s *Store) AddContainerAllocatedResources(podUID, container string, reuse map[string]sets.Set[string]) {
	for resource, a := range s.pods[podUID].containerResources(container) {
		if a.committed == nil {
			continue
		}
		reuse[resource] = reuse[resource].Union(a.committed.ids)
	}
}

// RemoveContainerAllocatedResources removes the devices committed to the pod's container from
// reuse: a restartable init container (sidecar) or an app container keeps its devices, so later
// containers must not reuse them (the kubelet's Allocate in devicemanager/manager.go). A resource whose set becomes empty is removed from
// reuse. Its sets are replaced, never modified in place.
func (s *Store) RemoveContainerAllocatedResources(podUID, container string, reuse map[string]sets.Set[string]) {
	for resource, a := range s.pods[podUID].containerResources(container) {
		if a.committed == nil {
			continue
		}
		left, ok := reuse[resource]
		if !ok {
			continue
		}
		if left = left.Difference(a.committed.ids); left.Len() == 0 {
			delete(reuse, resource)
		} else {
			reuse[resource] = left
		}
	}
}

// newCommittedAllocation validates and copies a commit's inputs; owned says
// resp is the caller's to give (just decoded, as at a restore), so it is kept
// rather than cloned.
func newCommittedAllocation(devicesPerNUMA map[int64][]string, resp *pluginapi.ContainerAllocateResponse, owned bool) (*committedAllocation, error) {
	if resp == nil {
		return nil, fmt.Errorf("nil allocate response: %w", ErrInvalidAllocation)
	}
	perNUMA := make(map[int64][]string, len(devicesPerNUMA))
	ids := sets.New[string]()
	for node, list := range devicesPerNUMA {
		set := sets.New(list...)
		if set.Has("") {
			return nil, fmt.Errorf("empty device ID on NUMA node %d: %w", node, ErrInvalidAllocation)
		}
		if set.Len() == 0 {
			continue
		}
		perNUMA[node] = sets.List(set)
		ids = ids.Union(set)
	}
	if ids.Len() == 0 {
		return nil, fmt.Errorf("no device IDs: %w", ErrInvalidAllocation)
	}
	raw, err := marshalResponse(resp)
	if err != nil {
		return nil, err
	}
	if !owned {
		resp = proto.CloneOf(resp)
	}
	return &committedAllocation{
		devicesPerNUMA: perNUMA,
		ids:            ids,
		resp:           resp,
		raw:            raw,
	}, nil
}

// marshalResponse encodes resp deterministically (map fields in key order), so that unchanged
// state always yields identical checkpoint bytes.
func marshalResponse(resp *pluginapi.ContainerAllocateResponse) ([]byte, error) {
	raw, err := proto.MarshalOptions{Deterministic: true}.Marshal(resp)
	if err != nil {
		return nil, fmt.Errorf("encoding allocate response: %w: %w", ErrInvalidAllocation, err)
	}
	return raw, nil
}

// setCommitted stores ca as the committed allocation of a (created if nil), replacing any previous
// one. The caller has checked that no other pod holds ca's devices.
func (s *Store) setCommitted(pod PodRef, container, resource string, a *allocation, ca *committedAllocation) {
	if a == nil {
		a = s.ensureAllocation(pod.UID, container, resource)
	}
	p := s.pods[pod.UID]
	p.namespace, p.name = pod.Namespace, pod.Name
	for id := range ca.ids {
		s.acquire(pod.UID, resource, id)
	}
	if a.committed != nil {
		for id := range a.committed.ids {
			s.release(pod.UID, resource, id)
		}
	} else {
		p.committed++
	}
	a.committed = ca
}

// releaseReservation drops a's reservation, if any. The caller prunes.
func (s *Store) releaseReservation(podUID, resource string, a *allocation) {
	for id := range a.reserved {
		s.release(podUID, resource, id)
	}
	a.reserved = nil
}

// releaseCommitted drops a's committed allocation, which must exist. The caller prunes.
func (s *Store) releaseCommitted(podUID, resource string, a *allocation) {
	for id := range a.committed.ids {
		s.release(podUID, resource, id)
	}
	a.committed = nil
	s.pods[podUID].committed--
}

// acquire records one more place of pod podUID holding id. The caller has checked that no other
// pod holds it.
func (s *Store) acquire(podUID, resource, id string) {
	ids := s.owners[resource]
	if ids == nil {
		ids = make(map[string]*owner)
		s.owners[resource] = ids
	}
	if o := ids[id]; o != nil {
		o.refs++
		return
	}
	ids[id] = &owner{podUID: podUID, refs: 1}
}

// release records one place fewer holding id, and frees id when none is left.
func (s *Store) release(podUID, resource, id string) {
	ids := s.owners[resource]
	o := ids[id]
	if o == nil || o.podUID != podUID {
		// Unreachable while I1 and I2 hold; keeping the index untouched is the safe answer.
		return
	}
	if o.refs--; o.refs > 0 {
		return
	}
	delete(ids, id)
	if len(ids) == 0 {
		delete(s.owners, resource)
	}
}

// lookup returns the allocation of the pod's container for resource, or nil.
func (s *Store) lookup(podUID, container, resource string) *allocation {
	return s.pods[podUID].containerResources(container)[resource]
}

// ensureAllocation returns the allocation of the pod's container for resource, creating it and its
// parents if needed.
func (s *Store) ensureAllocation(podUID, container, resource string) *allocation {
	p := s.pods[podUID]
	if p == nil {
		p = &podState{containers: make(map[string]map[string]*allocation)}
		s.pods[podUID] = p
	}
	resources := p.containers[container]
	if resources == nil {
		resources = make(map[string]*allocation)
		p.containers[container] = resources
	}
	a := resources[resource]
	if a == nil {
		a = &allocation{}
		resources[resource] = a
	}
	return a
}

// prune removes the allocation, its container and its pod as they become empty (I6).
func (s *Store) prune(podUID, container, resource string) {
	p := s.pods[podUID]
	if p == nil {
		return
	}
	resources := p.containers[container]
	if a := resources[resource]; a == nil || a.reserved != nil || a.committed != nil {
		return
	}
	delete(resources, resource)
	if len(resources) > 0 {
		return
	}
	delete(p.containers, container)
	if len(p.containers) == 0 {
		delete(s.pods, podUID)
	}
}

// containerResources returns the container's allocations keyed by resource; nil (safe to range
// over and index) when the pod or container is unknown.
func (p *podState) containerResources(container string) map[string]*allocation {
	if p == nil {
		return nil
	}
	return p.containers[container]
}
