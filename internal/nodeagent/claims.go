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
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kubedevice/kubedevice/internal/nodeagent/poddevices"
)

// A DRA ResourceClaim prepared on the node holds its devices in the same
// poddevices.Store as the pods of the device plugin path, so one device is
// never held through both paths: Reserve refuses a device anyone holds.
//
// A claim is recorded under the key ClaimKeyPrefix + claim UID, never a pod
// UID (a pod UID is a UUID and has no ':'), with the claim's namespace and
// name in the entry's pod namespace and name fields and the claim's request
// name as its container name (ClaimContainer when none is given): one entry
// per request and resource, each with the plugin's Allocate response for
// exactly that request's devices, as a container's. The
// checkpoint format is unchanged, so an older agent reads such a file; it
// takes the claim for a pod that no longer exists and frees its devices at
// its first garbage collection (see docs/dra.md, "How it works").
const (
	// ClaimKeyPrefix starts the store key of a ResourceClaim.
	ClaimKeyPrefix = "claim:"
	// ClaimContainer is the container name a claim's entries are recorded
	// under when the request has no name.
	ClaimContainer = "resourceclaim"
)

// ClaimKey returns the store key of the claim of UID uid.
func ClaimKey(uid string) string { return ClaimKeyPrefix + uid }

// IsClaimKey reports whether key, a pod UID in the store, is a claim's.
func IsClaimKey(key string) bool { return strings.HasPrefix(key, ClaimKeyPrefix) }

// ClaimRef identifies a ResourceClaim.
type ClaimRef struct {
	UID       string
	Namespace string
	Name      string
}

// ClaimRequest is the devices of one resource a claim was allocated for one
// of its requests.
type ClaimRequest struct {
	// Request is the claim's request name (with its subrequest, as in the
	// allocation result); empty is ClaimContainer.
	Request      string
	ResourceName string
	// DeviceIDs are the plugin's device IDs.
	DeviceIDs []string
}

// ClaimAllocation is what a prepared claim holds.
type ClaimAllocation struct {
	Claim ClaimRef
	// Resources sorted by request, then resource name.
	Resources []ClaimResourceAllocation
}

// ClaimResourceAllocation is the devices of one resource a claim holds for
// one request and the plugin's Allocate response for them.
type ClaimResourceAllocation struct {
	Request      string
	ResourceName string
	// DeviceIDs sorted.
	DeviceIDs []string
	// NUMANodes of the devices, sorted; nil when none has topology.
	NUMANodes []int64
	// Response is the plugin's Allocate response (a copy).
	Response *pluginapi.ContainerAllocateResponse
}

// ErrClaimConflict is wrapped by the refusal of a claim that is already
// prepared with other devices.
var ErrClaimConflict = errors.New("the claim is already prepared with other devices")

// ServedByDRA reports whether resource is served through DRA on this node
// (Config.ServedByDRA).
func (m *Manager) ServedByDRA(resource string) bool {
	return m.cfg.ServedByDRA != nil && m.cfg.ServedByDRA(resource)
}

// PrepareClaim allocates exactly the given devices to the claim: the DRA
// driver's NodePrepareResources. It is a transaction, as Allocate: every
// device is checked (known, healthy, not cordoned, not held by a pod or
// another claim) and reserved, the plugin's Allocate runs for exactly those
// IDs (one call per resource), then PreStartContainer where the plugin
// requires it, then the allocation is committed and the checkpoint written
// and fsync'd before it returns. Any failure rolls the whole claim back.
//
// It is idempotent: a claim that already holds exactly these devices gets
// its recorded allocation back without an RPC, unless the node rebooted since
// (then Allocate runs again for the same devices and its response replaces
// the old one). A claim holding other devices is refused (ErrClaimConflict).
// Refusals are *AllocationError values.
func (m *Manager) PrepareClaim(ctx context.Context, claim ClaimRef, requests []ClaimRequest) (ClaimAllocation, error) {
	if claim.UID == "" {
		return ClaimAllocation{}, &AllocationError{Reason: AllocationAllocateFailed, Err: errors.New("preparing a claim without a UID")}
	}
	want, err := m.claimRequests(claim, requests)
	if err != nil {
		return ClaimAllocation{}, err
	}
	key := ClaimKey(claim.UID)
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "claim", claim.Namespace+"/"+claim.Name, "claimUID", claim.UID)
	ctx = klog.NewContext(ctx, logger)
	unlock := m.lockPod(key)
	defer unlock()

	m.mu.Lock()
	refresh, done, err := m.claimHeldLocked(claim, want)
	groups := sortedGroups(want)
	if err == nil && !done {
		err = m.reserveClaimLocked(key, groups, want, refresh)
	}
	m.mu.Unlock()
	if err != nil {
		return ClaimAllocation{}, err
	}
	if !done {
		tx := m.newTxnRef(poddevices.PodRef{UID: key, Namespace: claim.Namespace, Name: claim.Name})
		tx.worked = true
		if err := tx.finish(ctx, m.allocateClaim(ctx, tx, groups, want, refresh)); err != nil {
			return ClaimAllocation{}, err
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.claimAllocationLocked(key), nil
}

// claimHeldLocked compares what the claim holds with want: nothing (a new
// claim), exactly want (done, unless the node rebooted since: then refresh,
// to run Allocate again for the same devices), or other devices (refused).
func (m *Manager) claimHeldLocked(claim ClaimRef, want map[containerResource]sets.Set[string]) (refresh, done bool, err error) {
	key := ClaimKey(claim.UID)
	held := make(map[containerResource]sets.Set[string])
	stale := false
	for _, e := range m.pods.PodEntries(key) {
		held[containerResource{container: e.ContainerName, resource: e.ResourceName}] = sets.New(e.DeviceIDs.Devices()...)
		stale = stale || m.isStaleLocked(key, e.ContainerName, e.ResourceName)
	}
	if len(held) == 0 {
		return false, false, nil
	}
	same := len(held) == len(want)
	for k, ids := range want {
		same = same && held[k].Equal(ids)
	}
	if !same {
		return false, false, &AllocationError{Reason: AllocationAllocateFailed,
			Err: fmt.Errorf("preparing claim %s/%s: holds %v, asked for %v: %w", claim.Namespace, claim.Name, describeSets(held), describeSets(want), ErrClaimConflict)}
	}
	return true, !stale, nil
}

// allocateClaim runs the plugin's Allocate (and PreStartContainer where
// required) for each reserved group of the claim and commits it; after a
// failure the groups not committed yet are rolled back.
func (m *Manager) allocateClaim(ctx context.Context, tx *allocTxn, groups []containerResource, want map[containerResource]sets.Set[string], refresh bool) error {
	for i, k := range groups {
		if err := m.allocateClaimResource(ctx, tx, k, sets.List(want[k]), refresh); err != nil {
			m.mu.Lock()
			for _, rest := range groups[i:] {
				m.pods.Rollback(tx.pod.UID, rest.container, rest.resource)
			}
			m.mu.Unlock()
			return err
		}
	}
	return nil
}

// claimRequests validates the requests and merges them per request and
// resource.
func (m *Manager) claimRequests(claim ClaimRef, requests []ClaimRequest) (map[containerResource]sets.Set[string], error) {
	want := make(map[containerResource]sets.Set[string])
	seen := make(map[string]sets.Set[string]) // resource → IDs, across requests
	for _, rq := range requests {
		if rq.ResourceName == "" || len(rq.DeviceIDs) == 0 {
			return nil, &AllocationError{Reason: AllocationAllocateFailed,
				Err: fmt.Errorf("preparing claim %s/%s: a request without a resource name or devices", claim.Namespace, claim.Name)}
		}
		if !m.ServedByDRA(rq.ResourceName) {
			return nil, &AllocationError{Reason: AllocationAllocateFailed,
				Err: fmt.Errorf("preparing claim %s/%s: resource %s is not served through DRA on this node", claim.Namespace, claim.Name, rq.ResourceName)}
		}
		k := containerResource{container: rq.Request, resource: rq.ResourceName}
		if k.container == "" {
			k.container = ClaimContainer
		}
		if want[k] == nil {
			want[k] = sets.New[string]()
		}
		if seen[k.resource] == nil {
			seen[k.resource] = sets.New[string]()
		}
		for _, id := range rq.DeviceIDs {
			if id == "" {
				return nil, &AllocationError{Reason: AllocationAllocateFailed,
					Err: fmt.Errorf("preparing claim %s/%s: an empty device ID of %s", claim.Namespace, claim.Name, rq.ResourceName)}
			}
			if seen[k.resource].Has(id) && !want[k].Has(id) {
				return nil, &AllocationError{Reason: AllocationAllocateFailed,
					Err: fmt.Errorf("preparing claim %s/%s: device %q of %s is allocated to two requests", claim.Namespace, claim.Name, id, rq.ResourceName)}
			}
			seen[k.resource].Insert(id)
			want[k].Insert(id)
		}
	}
	if len(want) == 0 {
		return nil, &AllocationError{Reason: AllocationAllocateFailed,
			Err: fmt.Errorf("preparing claim %s/%s: no devices", claim.Namespace, claim.Name)}
	}
	return want, nil
}

// reserveClaimLocked checks and reserves the devices of every group (request
// and resource) of the claim, or none of them.
func (m *Manager) reserveClaimLocked(key string, groups []containerResource, want map[containerResource]sets.Set[string], refresh bool) error {
	for _, k := range groups {
		if err := m.reserveClaimGroupLocked(key, k, want[k], refresh); err != nil {
			for _, done := range groups {
				m.pods.Rollback(key, done.container, done.resource)
			}
			return err
		}
	}
	return nil
}

// reserveClaimGroupLocked checks and reserves the devices ids of one request
// and resource for the claim. With refresh the claim holds them already (a
// reallocation after a reboot).
func (m *Manager) reserveClaimGroupLocked(key string, k containerResource, ids sets.Set[string], refresh bool) error {
	resource := k.resource
	if m.rebuildPending {
		return &AllocationError{Reason: AllocationPluginUnavailable, Retryable: true,
			Err: fmt.Errorf("preparing devices of %s: %w", resource, errRebuildPending)}
	}
	r := m.resources[resource]
	if r == nil {
		return &AllocationError{Reason: AllocationPluginUnavailable, Retryable: true, Err: fmt.Errorf(errUnregisteredDevice, resource)}
	}
	if len(r.endpoints) == 0 || !r.reported {
		return &AllocationError{Reason: AllocationPluginUnavailable, Retryable: true,
			Err: fmt.Errorf("preparing devices of %s: its device plugin is not serving", resource)}
	}
	cordoned := m.cordons[resource]
	for _, id := range sets.List(ids) {
		d := r.devices[id]
		switch {
		case d == nil:
			return &AllocationError{Reason: AllocationInsufficientDevices,
				Err: fmt.Errorf("preparing devices of %s: device %q is unknown to its plugin", resource, id)}
		case !r.healthy.Has(id):
			return &AllocationError{Reason: AllocationInsufficientDevices,
				Err: fmt.Errorf("preparing devices of %s: device %q is unhealthy (%s)", resource, id, d.reason)}
		case cordoned.Has(id) && !refresh:
			return &AllocationError{Reason: AllocationInsufficientDevices,
				Err: fmt.Errorf("preparing devices of %s: device %q is cordoned", resource, id)}
		}
		if uid, container, ok := m.pods.PodAndContainerForDevice(resource, id); ok && (uid != key || !refresh) {
			return &AllocationError{Reason: AllocationInsufficientDevices,
				Err: fmt.Errorf("preparing devices of %s: device %q is held by %s", resource, id, m.describeHolderLocked(uid, container))}
		}
	}
	if err := m.pods.Reserve(key, k.container, resource, sets.List(ids)...); err != nil {
		// Held by an allocation in flight.
		return &AllocationError{Reason: AllocationInsufficientDevices, Retryable: true,
			Err: fmt.Errorf("preparing devices of %s: %w", resource, err)}
	}
	return nil
}

// describeHolderLocked names the pod container or claim under key uid.
func (m *Manager) describeHolderLocked(uid, container string) string {
	ref := m.podRefs[uid]
	if IsClaimKey(uid) {
		return fmt.Sprintf("ResourceClaim %s/%s (DRA)", ref.Namespace, ref.Name)
	}
	return fmt.Sprintf("pod %s/%s container %q (device plugin path)", ref.Namespace, ref.Name, container)
}

// allocateClaimResource runs the plugin's Allocate (and PreStartContainer
// where required) for the reserved devices of one resource and commits them,
// or rolls them back: the allocation pipeline's plugin and commit steps.
func (m *Manager) allocateClaimResource(ctx context.Context, tx *allocTxn, k containerResource, ids []string, refresh bool) error {
	ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithValues("request", k.container, "resourceName", k.resource))
	m.mu.Lock()
	ep, err := m.primaryEndpointLocked(k.resource)
	m.mu.Unlock()
	var resp *pluginapi.ContainerAllocateResponse
	if err == nil {
		resp, err = m.callAllocate(ctx, ep, k, ids)
	}
	if err == nil && ep.opts().GetPreStartRequired() {
		pctx, pcancel := context.WithTimeout(ctx, m.cfg.PreStartTimeout)
		if perr := ep.preStartContainer(pctx, ids); perr != nil {
			err = &AllocationError{Reason: AllocationAllocateFailed, Retryable: isTransientRPCError(perr), Err: fmt.Errorf(errPreStartContainerCall, perr)}
		}
		pcancel()
	}
	return m.commit(ctx, tx, k, ids, resp, err, refresh)
}

// UnprepareClaim frees the devices of the claim of UID uid: the DRA driver's
// NodeUnprepareResources. It is idempotent: a claim that holds nothing is
// not an error (freed is false). The checkpoint is written and fsync'd before
// it returns, so a freed claim never comes back after a restart.
func (m *Manager) UnprepareClaim(ctx context.Context, uid string) (freed bool, err error) {
	key := ClaimKey(uid)
	unlock := m.lockPod(key)
	defer unlock()
	m.mu.Lock()
	changed := sets.New[string]()
	for _, e := range m.pods.PodEntries(key) {
		if m.pods.Release(key, e.ContainerName, e.ResourceName) {
			changed.Insert(e.ResourceName)
		}
	}
	if changed.Len() == 0 {
		m.mu.Unlock()
		return false, nil
	}
	staleChanged := m.stale[key] != nil
	delete(m.stale, key)
	m.podChangedLocked(key)
	m.prunePodLocked(key)
	m.notifyLocked(sets.List(changed)...)
	m.mu.Unlock()
	logger := klog.FromContext(ctx)
	logger.V(2).Info("Freed the devices of a claim", "claimUID", uid, "resources", sets.List(changed))
	if staleChanged {
		m.persistStaleLogged(logger)
	}
	if err := m.persist(); err != nil {
		return true, fmt.Errorf("freeing the devices of claim %s: %w", uid, err)
	}
	return true, nil
}

// Claim returns what the claim of UID uid holds; false if nothing.
func (m *Manager) Claim(uid string) (ClaimAllocation, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	key := ClaimKey(uid)
	if !m.pods.HasPod(key) {
		return ClaimAllocation{}, false
	}
	return m.claimAllocationLocked(key), true
}

// ClaimNamed returns what the prepared claim namespace/name holds; false if
// no claim of that name holds anything. It costs a walk of the pods' and
// claims' names.
func (m *Manager) ClaimNamed(namespace, name string) (ClaimAllocation, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for key, ref := range m.podRefs {
		if IsClaimKey(key) && ref.Namespace == namespace && ref.Name == name && m.pods.HasPod(key) {
			return m.claimAllocationLocked(key), true
		}
	}
	return ClaimAllocation{}, false
}

// claimAllocationLocked builds the committed allocation of the claim under
// key.
func (m *Manager) claimAllocationLocked(key string) ClaimAllocation {
	ref := m.podRefs[key]
	out := ClaimAllocation{Claim: ClaimRef{UID: strings.TrimPrefix(key, ClaimKeyPrefix), Namespace: ref.Namespace, Name: ref.Name}}
	for _, e := range m.pods.PodEntries(key) {
		ra := resourceAllocation(e)
		resp := &pluginapi.ContainerAllocateResponse{}
		if err := proto.Unmarshal(e.AllocResp, resp); err != nil {
			// The store encoded it at Commit (poddevices I5): cannot happen.
			m.logger.Error(err, "Decoding a claim's recorded Allocate response", "claimUID", out.Claim.UID)
		}
		out.Resources = append(out.Resources, ClaimResourceAllocation{
			Request: e.ContainerName, ResourceName: ra.ResourceName, DeviceIDs: ra.DeviceIDs, NUMANodes: ra.NUMANodes, Response: resp,
		})
	}
	slices.SortFunc(out.Resources, func(a, b ClaimResourceAllocation) int {
		return cmp.Or(strings.Compare(a.Request, b.Request), strings.Compare(a.ResourceName, b.ResourceName))
	})
	return out
}

// sortedGroups returns the keys of m sorted by request, then resource.
func sortedGroups(m map[containerResource]sets.Set[string]) []containerResource {
	return slices.SortedFunc(maps.Keys(m), func(a, b containerResource) int {
		return cmp.Or(strings.Compare(a.container, b.container), strings.Compare(a.resource, b.resource))
	})
}

func describeSets(m map[containerResource]sets.Set[string]) map[string][]string {
	out := make(map[string][]string, len(m))
	for k, v := range m {
		out[k.container+"/"+k.resource] = sets.List(v)
	}
	return out
}
