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
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kubedevice/kubedevice/internal/crashpoint"
	"github.com/kubedevice/kubedevice/internal/nodeagent/poddevices"
	"github.com/kubedevice/kubedevice/internal/nodeagent/registration"
	"github.com/kubedevice/kubedevice/internal/nodeagent/topology"
)

// The kubelet's refusals (pkg/kubelet/cm/devicemanager/manager.go), verbatim.
const (
	errChangedRequest        = "pod %q container %q changed request for resource %q from %d to %d"
	errUnregisteredDevice    = "cannot allocate unregistered device %s"
	errNoHealthyDevices      = "no healthy devices present; cannot allocate unhealthy devices %s"
	errPreviouslyAllocated   = "previously allocated devices are no longer healthy; cannot allocate unhealthy devices %s"
	errDevicesUnavailable    = "requested number of devices unavailable for %s. Requested: %d, Available: %d"
	errAllocatedLess         = "unexpectedly allocated less resources than required. Requested: %d, Got: %d"
	errNoContainerResponses  = "no containers return in allocation response %v"
	errEndpointNotFound      = "endpoint not found in cache for a registered resource: %s"
	errNoDevicesForPreStart  = "no devices found allocated in local cache for pod %s, container %s, resource %s"
	errPreStartContainerCall = "device plugin PreStartContainer rpc failed with err: %w"
)

// errRebuildPending refuses allocations while the state of a corrupt
// checkpoint has not been rebuilt with RestoreAllocations.
var errRebuildPending = errors.New("the checkpoint was corrupt and the allocations it held are not rebuilt yet")

// errServedByDRA refuses a pod-path allocation of a resource served through
// DRA on the node.
var errServedByDRA = errors.New("the resource is served through DRA on this node: the scheduler allocates it to the pod's ResourceClaim")

// Allocate allocates the devices container asks for, as the kubelet's
// Allocate(pod, container) does at admission, and returns once the
// allocation is committed and the checkpoint written (fsync'd). Containers
// are expected in the kubelet's order (init containers first); the devices
// of the pod's regular init containers that come before container are
// reused, those of sidecars and app containers are not (the kubelet's
// Allocate in devicemanager/manager.go).
//
// It is a transaction: the devices are reserved (no concurrent allocation
// and no garbage collection can hand them to another pod), the plugin RPCs
// run without the manager's lock, the allocation is committed, then the
// checkpoint is written; any failure rolls the whole container back,
// committed resources included. A container that already holds its devices
// is left alone (no RPC), unless its allocation was restored across a node
// reboot: then the plugin's Allocate runs again with the same devices and
// its new response replaces the old one.
//
// A refusal is an *AllocationError with the kubelet's message; see the
// package documentation for the reasons and which ones are retryable.
func (m *Manager) Allocate(ctx context.Context, pod *v1.Pod, container *v1.Container) error {
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "pod", klog.KObj(pod), "podUID", pod.UID, "containerName", container.Name)
	ctx = klog.NewContext(ctx, logger)
	unlock := m.lockPod(string(pod.UID))
	defer unlock()
	tx := m.newTxn(pod)
	return tx.finish(ctx, m.allocateContainer(ctx, tx, pod, container))
}

// AllocatePod allocates every container of the pod in the kubelet's order
// (init containers first) as one transaction: either every container gets
// its devices and the checkpoint is written once, or nothing this call
// allocated is kept. When every container already holds its devices it
// returns at once: no RPC, no checkpoint write, no notification.
func (m *Manager) AllocatePod(ctx context.Context, pod *v1.Pod) error {
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "pod", klog.KObj(pod), "podUID", pod.UID)
	unlock := m.lockPod(string(pod.UID))
	defer unlock()
	containers := podContainers(pod)
	m.mu.Lock()
	done := m.podAllocatedLocked(pod, containers)
	m.mu.Unlock()
	if done {
		return nil
	}
	tx := m.newTxn(pod)
	for _, c := range containers {
		cctx := klog.NewContext(ctx, logger.WithValues("containerName", c.Name))
		if err := m.allocateContainer(cctx, tx, pod, c); err != nil {
			return tx.finish(cctx, err)
		}
	}
	return tx.finish(klog.NewContext(ctx, logger), nil)
}

// podAllocatedLocked reports whether every container of the pod holds
// exactly the devices it asks for, none of them awaiting re-allocation after
// a reboot.
func (m *Manager) podAllocatedLocked(pod *v1.Pod, containers []*v1.Container) bool {
	uid := string(pod.UID)
	for _, c := range containers {
		for _, rq := range containerRequests(pod, c) {
			if m.pods.ContainerDevices(uid, c.Name, rq.resource).Len() != rq.count || m.isStaleLocked(uid, c.Name, rq.resource) {
				return false
			}
		}
	}
	return true
}

// allocateContainer runs container c through the allocation pipeline (see
// the package documentation): requests, hints, then per resource pick and
// reserve, plugin, commit.
func (m *Manager) allocateContainer(ctx context.Context, tx *allocTxn, pod *v1.Pod, c *v1.Container) error {
	m.mu.Lock()
	reqs := m.devicePluginRequestsLocked(containerRequests(pod, c))
	affinity, err := m.admitTopologyLocked(ctx, pod, c, reqs)
	m.mu.Unlock()
	if err != nil {
		tx.worked = true
		return err
	}
	for _, rq := range reqs {
		if err := m.allocateResource(ctx, tx, pod, c.Name, rq, affinity); err != nil {
			return err
		}
	}
	return nil
}

// allocateResource is one resource's pass through the pipeline: pick and
// reserve (devicesToAllocateLocked), the plugin's Allocate without the lock
// (callAllocate), commit. On failure the reservation is rolled back.
func (m *Manager) allocateResource(ctx context.Context, tx *allocTxn, pod *v1.Pod, container string, rq deviceRequest, affinity topology.BitMask) error {
	ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithValues("resourceName", rq.resource))
	k := containerResource{container: container, resource: rq.resource}
	m.mu.Lock()
	ids, refresh, err := m.devicesToAllocateLocked(ctx, pod, container, rq.resource, rq.count, affinity)
	var ep *endpoint
	if err == nil && ids != nil {
		ep, err = m.primaryEndpointLocked(rq.resource)
	}
	if err != nil {
		m.pods.Rollback(tx.pod.UID, container, rq.resource)
	}
	m.mu.Unlock()
	tx.worked = tx.worked || err != nil || ids != nil
	if err != nil || ids == nil {
		return err
	}
	crashpoint.Hit(crashpoint.AllocReserved)
	resp, err := m.callAllocate(ctx, ep, k, ids)
	crashpoint.Hit(crashpoint.AllocPluginReturned)
	return m.commit(ctx, tx, k, ids, resp, err, refresh)
}

// Step 1: requests. Step 2, hints, is in topology_hints.go.

// deviceRequest is a number of devices of one resource a container asks for.
type deviceRequest struct {
	resource string
	count    int
}

// containerRequests returns the extended resources container c of pod asks
// for, sorted by name: its limits ("Requests must be equal to Limits", as
// the kubelet iterates them) with a positive quantity, except those a DRA
// ResourceClaim serves (KEP-5004). Native resources (cpu, memory, hugepages,
// kubernetes.io/...) are not device plugin resources.
//
// Unlike the kubelet, a request for 0 devices is skipped: the kubelet runs
// its health checks for it too and refuses a pod asking for 0 devices of a
// resource with no healthy device.
func containerRequests(pod *v1.Pod, c *v1.Container) []deviceRequest {
	var out []deviceRequest
	for name, q := range c.Resources.Limits {
		resource := string(name)
		if !registration.IsExtendedResourceName(resource) || isDRAExtendedResource(pod, c.Name, resource) {
			continue
		}
		if n := q.Value(); n > 0 {
			out = append(out, deviceRequest{resource: resource, count: int(n)})
		}
	}
	slices.SortFunc(out, func(a, b deviceRequest) int { return strings.Compare(a.resource, b.resource) })
	return out
}

// isDRAExtendedResource reports whether the scheduler mapped the container's
// extended resource to a DRA ResourceClaim, as the kubelet's check of the
// same name.
func isDRAExtendedResource(pod *v1.Pod, container, resource string) bool {
	status := pod.Status.ExtendedResourceClaimStatus
	if status == nil {
		return false
	}
	for _, m := range status.RequestMappings {
		if m.ContainerName == container && m.ResourceName == resource {
			return true
		}
	}
	return false
}

// isRestartableInitContainer reports whether c is a sidecar: an init
// container with restartPolicy Always.
func isRestartableInitContainer(c *v1.Container) bool {
	return c.RestartPolicy != nil && *c.RestartPolicy == v1.ContainerRestartPolicyAlways
}

// podContainers returns the pod's containers in the kubelet's order: init
// containers first, then app containers.
func podContainers(pod *v1.Pod) []*v1.Container {
	out := make([]*v1.Container, 0, len(pod.Spec.InitContainers)+len(pod.Spec.Containers))
	for i := range pod.Spec.InitContainers {
		out = append(out, &pod.Spec.InitContainers[i])
	}
	for i := range pod.Spec.Containers {
		out = append(out, &pod.Spec.Containers[i])
	}
	return out
}

// isTerminal reports whether the pod has finished: the kubelet's active pods
// exclude it, so its devices are not allocated again.
func isTerminal(pod *v1.Pod) bool {
	return pod.Status.Phase == v1.PodSucceeded || pod.Status.Phase == v1.PodFailed
}

// podRequests returns the pod-level request of each extended resource, as
// the kubelet's getPodDeviceRequest: resourcehelper.PodLimits without the
// pod overhead. Zero requests are left out, as in containerRequests.
func podRequests(pod *v1.Pod) []deviceRequest {
	var out []deviceRequest
	for name, q := range resourcehelper.PodLimits(pod, resourcehelper.PodResourcesOptions{ExcludeOverhead: true}) {
		resource := string(name)
		if !registration.IsExtendedResourceName(resource) {
			continue
		}
		if n := q.Value(); n > 0 {
			out = append(out, deviceRequest{resource: resource, count: int(n)})
		}
	}
	slices.SortFunc(out, func(a, b deviceRequest) int { return strings.Compare(a.resource, b.resource) })
	return out
}

// devicePluginRequestsLocked keeps the requests for device plugin resources,
// as the kubelet's isDevicePluginResource: a resource a plugin registered (or
// the checkpoint restored), or one whose devices some container still holds.
// Other extended resources (advertised on the Node by an administrator, or
// served by another device manager) are not ours to allocate: the kubelet
// admits the pod against the Node's capacity for them. While a corrupt
// checkpoint awaits its rebuild nothing is known, so every request is kept
// and refused, retryably, until the state is back.
func (m *Manager) devicePluginRequestsLocked(reqs []deviceRequest) []deviceRequest {
	if m.rebuildPending {
		return reqs
	}
	out := reqs[:0:0]
	for _, rq := range reqs {
		if m.isDevicePluginResourceLocked(rq.resource) {
			out = append(out, rq)
			continue
		}
		if m.pods.InUseCount(rq.resource) > 0 {
			out = append(out, rq)
		}
	}
	return out
}

// Steps 3 and 4: pick and reserve.

// devicesToAllocateLocked is the kubelet's devicesToAllocate
// (devicemanager/manager.go), step by step, for container of pod and
// required devices of resource, with the topology affinity the policy
// chose. It returns the devices to pass to the plugin's Allocate, nil if
// there is nothing to do, and whether this re-allocates devices the
// container already holds (after a reboot).
//
// It is called with m.mu held and returns with it held, releasing it only
// during GetPreferredAllocation. Each device is reserved for the container
// as soon as it is picked, so nothing (another allocation, garbage
// collection) can hand it to another pod while the lock is released; the
// caller rolls the reservation back if an error is returned. After the RPC
// every candidate is checked again against the current state.
func (m *Manager) devicesToAllocateLocked(ctx context.Context, pod *v1.Pod, container, resource string, required int, affinity topology.BitMask) (ids []string, refresh bool, err error) {
	uid := string(pod.UID)
	held := m.pods.ContainerDevices(uid, container, resource)
	if held != nil {
		if held.Len() != required {
			return nil, false, &AllocationError{Reason: AllocationAllocateFailed, Err: fmt.Errorf(errChangedRequest, uid, container, resource, held.Len(), required)}
		}
		// The container holds its devices. The kubelet skips a container the
		// runtime reports running (a kubelet restart) and otherwise runs the
		// checks below and returns without an RPC. The agent cannot see the
		// runtime and allocates before containers exist: a held allocation is
		// left alone, except one restored across a node reboot, whose plugin
		// must see Allocate again.
		if !m.isStaleLocked(uid, container, resource) {
			return nil, false, nil
		}
	}
	r, err := m.allocatableLocked(resource, container, held)
	if err != nil {
		return nil, false, err
	}
	if held != nil {
		ids := sets.List(held)
		if err := m.pods.Reserve(uid, container, resource, ids...); err != nil {
			return nil, false, &AllocationError{Reason: AllocationAllocateFailed, Err: fmt.Errorf("allocating %s for container %q: %w", resource, container, err)}
		}
		return ids, true, nil
	}
	p := &picker{store: m.pods, uid: uid, container: container, resource: resource, required: required, needed: required, picked: sets.New[string]()}
	ids, err = m.pickLocked(ctx, p, pod, r, affinity)
	return ids, false, err
}

// allocatableLocked returns the state of resource if the container may be
// allocated devices of it: not while a corrupt checkpoint awaits its
// rebuild, not a resource served through DRA (unless the container holds
// devices of it already), then the kubelet's health checks, in its order,
// before its needed == 0 check (kubernetes #109595).
func (m *Manager) allocatableLocked(resource, container string, held sets.Set[string]) (*resourceState, error) {
	if m.rebuildPending {
		return nil, &AllocationError{Reason: AllocationPluginUnavailable, Retryable: true, Err: fmt.Errorf("allocating %s for container %q: %w", resource, container, errRebuildPending)}
	}
	if held == nil && m.ServedByDRA(resource) {
		// One path per resource: a DRA resource's devices go to claims. A
		// pod holding some already (allocated before the switch) keeps them.
		return nil, &AllocationError{Reason: AllocationAllocateFailed, Err: fmt.Errorf("allocating %s for container %q: %w", resource, container, errServedByDRA)}
	}
	r := m.resources[resource]
	if r == nil {
		return nil, &AllocationError{Reason: AllocationPluginUnavailable, Retryable: true, Err: fmt.Errorf(errUnregisteredDevice, resource)}
	}
	if r.healthy.Len() == 0 {
		// kubernetes PR #139959: a resource whose plugin is not (yet)
		// serving defers admission; a serving plugin with no healthy device
		// refuses it.
		if len(r.endpoints) == 0 || !r.reported {
			return nil, &AllocationError{Reason: AllocationPluginUnavailable, Retryable: true, Err: fmt.Errorf(errNoHealthyDevices, resource)}
		}
		return nil, &AllocationError{Reason: AllocationInsufficientDevices, Err: fmt.Errorf(errNoHealthyDevices, resource)}
	}
	if !r.healthy.IsSuperset(held) {
		return nil, &AllocationError{Reason: AllocationInsufficientDevices, Err: fmt.Errorf(errPreviouslyAllocated, resource)}
	}
	return r, nil
}

// pickLocked picks and reserves the devices of a new allocation in the
// kubelet's order: the devices of the pod's earlier regular init containers;
// then, if the devices aligned with the affinity are more than enough, the
// plugin's preference among them, then the aligned ones; otherwise every
// aligned device, the plugin's preference among all available ones, the
// unaligned devices, the devices without topology.
func (m *Manager) pickLocked(ctx context.Context, p *picker, pod *v1.Pod, r *resourceState, affinity topology.BitMask) ([]string, error) {
	resource := p.resource
	if p.take(sets.List(m.reusableLocked(pod, p.container)[resource])) {
		return p.result()
	}
	// Neither a topology affinity nor the plugin's preference: the first
	// available devices in ID order, which is what the general path below
	// picks then, found in one pass.
	if affinity.IsEmpty() && !r.primary.opts().GetGetPreferredAllocationAvailable() {
		first := m.firstAvailableLocked(resource, p.needed)
		if len(first) < p.needed {
			return nil, &AllocationError{Reason: AllocationInsufficientDevices, Err: fmt.Errorf(errDevicesUnavailable, resource, p.needed, len(first))}
		}
		p.take(first)
		return p.result()
	}
	available := m.availableLocked(resource)
	if available.Len() < p.needed {
		return nil, &AllocationError{Reason: AllocationInsufficientDevices, Err: fmt.Errorf(errDevicesUnavailable, resource, p.needed, available.Len())}
	}
	aligned, _, _ := m.filterByAffinityLocked(resource, available, affinity)
	// The RPC runs without the lock: afterwards the candidates are those
	// still available (including devices freed meanwhile), and the
	// preferred ones are taken only if still among them.
	if p.needed < len(aligned) {
		preferred := m.preferredAllocationLocked(ctx, resource, union(aligned, p.order), sets.List(p.picked), p.required)
		alignedNow, _, _ := m.filterByAffinityLocked(resource, m.availableLocked(resource), affinity)
		p.take(filterIn(preferred, sets.New(alignedNow...)), alignedNow)
		return p.result()
	}
	if p.take(aligned) {
		return p.result()
	}
	preferred := m.preferredAllocationLocked(ctx, resource, union(sets.List(available), p.order), sets.List(p.picked), p.required)
	current := m.availableLocked(resource)
	alignedNow, unaligned, noAffinity := m.filterByAffinityLocked(resource, current, affinity)
	p.take(filterIn(preferred, current), alignedNow, unaligned, noAffinity)
	return p.result()
}

// picker collects and reserves the devices of one allocation.
type picker struct {
	store                    *poddevices.Store
	uid, container, resource string
	required, needed         int
	picked                   sets.Set[string]
	order                    []string
	err                      error
}

// take picks devices from each list of candidates in turn, in order, until
// none is needed, and reserves each list's picks. It reports whether it is
// done: nothing needed any more, or the reservation failed (p.err).
func (p *picker) take(lists ...[]string) bool {
	for _, candidates := range lists {
		if p.needed == 0 || p.err != nil {
			break
		}
		var batch []string
		for _, id := range candidates {
			if p.needed == 0 {
				break
			}
			if !p.picked.Has(id) {
				p.picked.Insert(id)
				batch = append(batch, id)
				p.needed--
			}
		}
		if len(batch) == 0 {
			continue
		}
		if err := p.store.Reserve(p.uid, p.container, p.resource, batch...); err != nil {
			p.err = err
			break
		}
		p.order = append(p.order, batch...)
	}
	return p.needed == 0 || p.err != nil
}

// result is the picked devices, or why there are not enough: a failed
// reservation, or devices lost to a race while the lock was released.
func (p *picker) result() ([]string, error) {
	switch {
	case p.err != nil:
		return nil, &AllocationError{Reason: AllocationAllocateFailed, Err: fmt.Errorf("allocating %s for container %q: %w", p.resource, p.container, p.err)}
	case p.needed > 0:
		return nil, &AllocationError{Reason: AllocationInsufficientDevices, Retryable: true, Err: fmt.Errorf(errAllocatedLess, p.required, p.required-p.needed)}
	}
	return p.order, nil
}

// reusableLocked returns, per resource, the devices of the pod that
// container may reuse: the kubelet's devicesToReuse as it stands when that
// container is allocated. Walking the containers before it in the kubelet's
// order, a regular init container's devices join the pool, a sidecar's and
// an app container's leave it. It is computed from the committed state, so
// it does not depend on the calls made before.
func (m *Manager) reusableLocked(pod *v1.Pod, container string) map[string]sets.Set[string] {
	uid := string(pod.UID)
	reuse := make(map[string]sets.Set[string])
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		if c.Name == container {
			return reuse
		}
		if isRestartableInitContainer(c) {
			m.pods.RemoveContainerAllocatedResources(uid, c.Name, reuse)
		} else {
			m.pods.AddContainerAllocatedResources(uid, c.Name, reuse)
		}
	}
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		if c.Name == container {
			return reuse
		}
		m.pods.RemoveContainerAllocatedResources(uid, c.Name, reuse)
	}
	return reuse
}

// union returns the sorted union of two lists.
func union(a, b []string) []string {
	return sets.List(sets.New(a...).Insert(b...))
}

// filterIn returns the elements of list that are in set, in list's order.
func filterIn(list []string, set sets.Set[string]) []string {
	var out []string
	for _, id := range list {
		if set.Has(id) {
			out = append(out, id)
		}
	}
	return out
}

// availableLocked returns the devices of resource that can be picked: healthy,
// not cordoned, not held or reserved by anyone (this container's own
// reservations included, which the picker already has).
func (m *Manager) availableLocked(resource string) sets.Set[string] {
	r := m.resources[resource]
	if r == nil {
		return sets.New[string]()
	}
	cordoned := m.cordons[resource]
	out := make(sets.Set[string], r.healthy.Len())
	for id := range r.healthy {
		if !m.pods.InUse(resource, id) && !cordoned.Has(id) {
			out.Insert(id)
		}
	}
	return out
}

// firstAvailableLocked returns the n available devices of resource (see
// availableLocked) that come first in ID order, walking the healthy devices
// in that order (sorted when they change, not per allocation) and stopping
// at the n-th: what the manager picks when neither a topology affinity nor
// the plugin's preference has a say, at a cost that does not grow with the
// pool, only with the devices held before the first free one. If fewer than
// n are available, all of them are returned.
func (m *Manager) firstAvailableLocked(resource string, n int) []string {
	r := m.resources[resource]
	if r == nil {
		return nil
	}
	cordoned := m.cordons[resource]
	first := make([]string, 0, n)
	for _, id := range r.sortedHealthy() {
		if m.pods.InUse(resource, id) || cordoned.Has(id) {
			continue
		}
		if first = append(first, id); len(first) == n {
			break
		}
	}
	return first
}

// deviceNodesLocked returns every reported device of resource with its NUMA
// nodes.
func (m *Manager) deviceNodesLocked(resource string) topology.DeviceNodes {
	r := m.resources[resource]
	if r == nil {
		return nil
	}
	out := make(topology.DeviceNodes, len(r.devices))
	for id, d := range r.devices {
		var nodes []int
		for _, n := range d.numaNodes {
			nodes = append(nodes, int(n))
		}
		out[id] = nodes
	}
	return out
}

// filterByAffinityLocked splits available devices of resource by the
// affinity (topology.FilterByAffinity); without affinity every device is
// without it, in ID order.
func (m *Manager) filterByAffinityLocked(resource string, available sets.Set[string], affinity topology.BitMask) (aligned, unaligned, noAffinity []string) {
	if affinity.IsEmpty() {
		return nil, nil, sets.List(available)
	}
	return topology.FilterByAffinity(m.deviceNodesLocked(resource), available, affinity)
}

// preferredAllocationLocked asks the resource's plugin, if it offers
// GetPreferredAllocation, which devices it prefers, with the kubelet's
// arguments. It releases m.mu during the RPC. A failure or a timeout
// (Config.PreferredAllocationTimeout) is logged and answered with no
// preference, so the manager chooses (the kubelet fails the allocation).
func (m *Manager) preferredAllocationLocked(ctx context.Context, resource string, available, mustInclude []string, size int) []string {
	r := m.resources[resource]
	if r == nil || !r.primary.opts().GetGetPreferredAllocationAvailable() {
		return nil
	}
	ep := r.primary
	m.mu.Unlock()
	rctx, cancel := context.WithTimeout(ctx, m.cfg.PreferredAllocationTimeout)
	resp, err := ep.getPreferredAllocation(rctx, available, mustInclude, size)
	cancel()
	m.mu.Lock()
	if err != nil {
		klog.FromContext(ctx).Error(err, "Device plugin GetPreferredAllocation failed; choosing the devices without its preference")
		return nil
	}
	if len(resp.GetContainerResponses()) == 0 {
		return nil
	}
	return resp.GetContainerResponses()[0].GetDeviceIDs()
}

// Step 5: plugin.

// primaryEndpointLocked returns the endpoint that serves Allocate for
// resource, or a retryable refusal if there is none.
func (m *Manager) primaryEndpointLocked(resource string) (*endpoint, error) {
	r := m.resources[resource]
	if r == nil || r.primary == nil {
		return nil, &AllocationError{Reason: AllocationPluginUnavailable, Retryable: true, Err: fmt.Errorf(errUnregisteredDevice, resource)}
	}
	return r.primary, nil
}

// callAllocate runs the plugin's Allocate for the reserved devices ids of
// k, with its deadline (Config.AllocateTimeout), and returns the response
// for the container: there must be one, and nothing a plugin answers
// reaches a container unchecked (Config.AllocatePolicy, internal/allocpolicy).
func (m *Manager) callAllocate(ctx context.Context, ep *endpoint, k containerResource, ids []string) (*pluginapi.ContainerAllocateResponse, error) {
	rctx, cancel := context.WithTimeout(ctx, m.cfg.AllocateTimeout)
	start := time.Now()
	resp, err := ep.allocate(rctx, ids)
	cancel()
	m.metrics.allocDuration.WithLabelValues(k.resource).Observe(time.Since(start).Seconds())
	if err != nil {
		return nil, rpcAllocationError(ep, k.resource, k.container, err)
	}
	if len(resp.GetContainerResponses()) == 0 || resp.GetContainerResponses()[0] == nil {
		return nil, &AllocationError{Reason: AllocationAllocateFailed, Err: fmt.Errorf(errNoContainerResponses, resp)}
	}
	if err := m.cfg.AllocatePolicy.Check(k.resource, resp.GetContainerResponses()[0]); err != nil {
		return nil, &AllocationError{Reason: AllocationAllocateFailed, Err: err}
	}
	return resp.GetContainerResponses()[0], nil
}

// rpcAllocationError classifies a failed Allocate RPC: a stopped endpoint is
// an unavailable plugin; timeouts, cancellation and transport failures are
// worth retrying; any other error the plugin returned is not.
func rpcAllocationError(ep *endpoint, resource, container string, err error) error {
	wrapped := fmt.Errorf("allocating %s for container %q: %w", resource, container, err)
	switch {
	case ep.isStopped():
		return &AllocationError{Reason: AllocationPluginUnavailable, Retryable: true, Err: wrapped}
	case isTransientRPCError(err):
		return &AllocationError{Reason: AllocationAllocateFailed, Retryable: true, Err: wrapped}
	default:
		return &AllocationError{Reason: AllocationAllocateFailed, Err: wrapped}
	}
}

func isTransientRPCError(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return true
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled, codes.ResourceExhausted, codes.Aborted:
		return true
	}
	return false
}

// Step 6: commit.

// commit ends one pass through the pipeline under m.mu: after an error the
// reservation of k is rolled back and the error returned; otherwise the
// devices are committed with the plugin's response and the transaction
// records the allocation, new or refreshed (re-allocated after a reboot).
func (m *Manager) commit(ctx context.Context, tx *allocTxn, k containerResource, ids []string, resp *pluginapi.ContainerAllocateResponse, err error, refresh bool) error {
	uid := tx.pod.UID
	m.mu.Lock()
	defer m.mu.Unlock()
	if err == nil {
		if cerr := m.pods.Commit(tx.pod, k.container, k.resource, m.devicesPerNUMALocked(k.resource, ids), resp); cerr != nil {
			err = &AllocationError{Reason: AllocationAllocateFailed, Err: tx.wrap(k, cerr)}
		}
	}
	if err != nil {
		m.pods.Rollback(uid, k.container, k.resource)
		return err
	}
	m.podRefs[uid] = tx.pod
	m.podChangedLocked(uid)
	tx.changed.Insert(k.resource)
	if refresh {
		tx.refreshed = append(tx.refreshed, k)
	} else {
		tx.added = append(tx.added, k)
	}
	klog.FromContext(ctx).V(4).Info("Allocated devices", "deviceIDs", ids, "reallocation", refresh)
	return nil
}

// devicesPerNUMALocked groups ids by NUMA node as the kubelet records them:
// a device under each of its nodes, or under -1 without topology (or if the
// plugin no longer reports it).
func (m *Manager) devicesPerNUMALocked(resource string, ids []string) map[int64][]string {
	out := make(map[int64][]string)
	var devs map[string]*device
	if r := m.resources[resource]; r != nil {
		devs = r.devices
	}
	for _, id := range ids {
		d := devs[id]
		if d == nil || len(d.numaNodes) == 0 {
			out[poddevices.NodeWithoutTopology] = append(out[poddevices.NodeWithoutTopology], id)
			continue
		}
		for _, n := range d.numaNodes {
			out[n] = append(out[n], id)
		}
	}
	return out
}

// The transaction around the pipeline.

// podLock serializes the allocations of one pod, so two calls for the same
// pod never interleave; calls for different pods run concurrently.
type podLock struct {
	mu   sync.Mutex
	refs int
}

// lockPod locks the pod's allocations and returns the unlock function.
func (m *Manager) lockPod(uid string) func() {
	m.podLocksMu.Lock()
	l := m.podLocks[uid]
	if l == nil {
		l = &podLock{}
		m.podLocks[uid] = l
	}
	l.refs++
	m.podLocksMu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		m.podLocksMu.Lock()
		if l.refs--; l.refs == 0 {
			delete(m.podLocks, uid)
		}
		m.podLocksMu.Unlock()
	}
}

// containerResource names one allocation of a transaction.
type containerResource struct{ container, resource string }

// allocTxn is one Allocate or AllocatePod call: what it committed, so a
// failure can undo it, and what to write and announce when it ends.
type allocTxn struct {
	m     *Manager
	pod   poddevices.PodRef
	start time.Time
	// worked is set when the transaction went past the already-allocated
	// check; only those are timed.
	worked bool
	// added are new allocations: released if the transaction fails.
	added []containerResource
	// refreshed are allocations restored across a reboot whose Allocate ran
	// again: kept (same devices, newer response) even if the transaction
	// fails.
	refreshed []containerResource
	changed   sets.Set[string]
}

func (m *Manager) newTxn(pod *v1.Pod) *allocTxn {
	return m.newTxnRef(poddevices.PodRef{UID: string(pod.UID), Namespace: pod.Namespace, Name: pod.Name})
}

// newTxnRef starts a transaction for the pod (or claim, see claims.go) ref.
func (m *Manager) newTxnRef(ref poddevices.PodRef) *allocTxn {
	return &allocTxn{
		m:       m,
		pod:     ref,
		start:   time.Now(),
		changed: sets.New[string](),
	}
}

// wrap names the allocation k in err, as refusals of pods and claims name
// it.
func (tx *allocTxn) wrap(k containerResource, err error) error {
	if IsClaimKey(tx.pod.UID) {
		return fmt.Errorf("preparing devices of %s: %w", k.resource, err)
	}
	return fmt.Errorf("allocating %s for container %q: %w", k.resource, k.container, err)
}

// finish ends the transaction with the outcome err: on success the
// checkpoint is written (fsync'd) before it returns; on failure, or if that
// write fails, the new allocations are released. Subscribers hear of the
// resources whose allocations changed.
func (tx *allocTxn) finish(ctx context.Context, err error) error {
	m, logger := tx.m, klog.FromContext(ctx)
	if err != nil {
		tx.releaseAdded()
	}
	if len(tx.added)+len(tx.refreshed) > 0 {
		// After a failure this write undoes what a concurrent write may
		// have persisted of the released allocations, and keeps refreshed
		// responses.
		if werr := m.persist(); werr != nil {
			if err == nil {
				first := append(slices.Clone(tx.added), tx.refreshed...)[0]
				err = &AllocationError{
					Reason:    AllocationAllocateFailed,
					Retryable: true,
					Err:       fmt.Errorf("allocating %s for container %q: %w", first.resource, first.container, werr),
				}
				tx.releaseAdded()
			} else {
				logger.Error(werr, "Writing the checkpoint after a failed allocation")
			}
		} else {
			crashpoint.Hit(crashpoint.CheckpointWritten)
			tx.clearStale(ctx)
		}
	}
	if tx.changed.Len() > 0 {
		m.mu.Lock()
		m.notifyLocked(sets.List(tx.changed)...)
		m.mu.Unlock()
	}
	if tx.worked {
		result := resultSuccess
		if err != nil {
			result = resultError
		}
		m.metrics.allocationDuration.WithLabelValues(result).Observe(time.Since(tx.start).Seconds())
	}
	if err != nil {
		logger.V(2).Info("Allocation failed", "err", err, "reason", AllocationReasonOf(err), "retryable", IsRetryable(err))
	} else if len(tx.added)+len(tx.refreshed) > 0 {
		logger.V(2).Info("Allocation committed", "allocations", len(tx.added), "reallocations", len(tx.refreshed))
	}
	return err
}

// releaseAdded undoes the transaction's new allocations.
func (tx *allocTxn) releaseAdded() {
	m, uid := tx.m, tx.pod.UID
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, k := range tx.added {
		if m.pods.Release(uid, k.container, k.resource) {
			m.podChangedLocked(uid)
		}
	}
	m.prunePodLocked(uid)
}

// clearStale drops the reboot marks of the refreshed allocations, which are
// now durable.
func (tx *allocTxn) clearStale(ctx context.Context) {
	if len(tx.refreshed) == 0 {
		return
	}
	m := tx.m
	m.mu.Lock()
	for _, k := range tx.refreshed {
		m.unmarkStaleLocked(tx.pod.UID, k.container, k.resource)
	}
	m.mu.Unlock()
	m.persistStaleLogged(klog.FromContext(ctx))
}

// prunePodLocked forgets what is kept about a pod that holds nothing any
// more.
func (m *Manager) prunePodLocked(uid string) {
	if !m.pods.HasPod(uid) {
		delete(m.podRefs, uid)
		delete(m.affinity, uid)
	}
}
