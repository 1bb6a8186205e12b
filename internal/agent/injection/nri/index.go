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

package nri

import (
	"maps"
	"sync"

	"github.com/kubedevice/kubedevice/internal/nodeagent/poddevices"
)

// podState is what the index knows of a pod's devices.
type podState int

const (
	// podNoDevices: the agent reconciled the pod and it holds no kubedevice device; its
	// containers are left alone.
	podNoDevices podState = iota + 1
	// podPending: the pod asks for kubedevice devices that are not allocated (or not prepared)
	// yet; its containers are refused, so the kubelet retries them.
	podPending
	// podReady: the pod's devices are allocated and prepared; its containers get them.
	podReady
)

// podEntry is one pod in the index. Entries are never modified once stored: the index replaces
// them whole, so the handler reads one without holding the lock.
type podEntry struct {
	state podState
	// reason says why a pending pod waits.
	reason string
	// containers are a ready pod's containers that hold devices, by name.
	containers map[string]Container
}

// Container is what a container of a ready pod holds.
type Container struct {
	// Options are the runtime options of its devices.
	Options *poddevices.RunContainerOptions
	// Resources are the resources of its devices. When the plugin of one of them requires
	// PreStartContainer (Grants), each creation of the container needs a grant.
	Resources []string
}

// Index is the agent's record, in memory, of what each pod bound to the node must get at
// container creation. The pod controller writes it as it allocates (SetReady, SetPending,
// SetNoDevices) and forgets pods that end (Forget); the NRI handler only reads it, in
// microseconds. Pods are keyed by the UID the container runtime knows them by, which for a static
// pod is the kubelet's config hash rather than its mirror pod's UID. It is safe for concurrent
// use.
type Index struct {
	mu   sync.RWMutex
	pods podTable[*podEntry]

	stats *statCache
}

// NewIndex returns an empty index whose device nodes are looked up under hostRoot (empty: the
// agent sees the host's /dev).
func NewIndex(hostRoot string) *Index {
	return &Index{
		pods:  newPodTable[*podEntry](),
		stats: newStatCache(hostRoot),
	}
}

// SetReady records that the pod's devices are allocated: containers are its containers that hold
// devices, by container name. The host device nodes they name are looked up again now, outside
// any container creation, so the handler finds them cached and current.
func (x *Index) SetReady(uid, namespace, name string, containers map[string]Container) {
	for _, c := range containers {
		if c.Options == nil {
			continue
		}
		for _, d := range c.Options.Devices {
			// A node that cannot be stat'ed now is looked up again, and its error returned,
			// when a container is created with it.
			_, _ = x.stats.refresh(d.HostPath)
		}
	}
	x.set(uid, namespace, name, &podEntry{state: podReady, containers: maps.Clone(containers)})
}

// SetPending records that the pod asks for kubedevice devices that are not ready yet, and why.
func (x *Index) SetPending(uid, namespace, name, reason string) {
	x.set(uid, namespace, name, &podEntry{state: podPending, reason: reason})
}

// SetNoDevices records that the pod holds no kubedevice device.
func (x *Index) SetNoDevices(uid, namespace, name string) {
	x.set(uid, namespace, name, &podEntry{state: podNoDevices})
}

// Forget drops the pods recorded under namespace/name, except the one with UID keep (empty:
// all of them): the pod ended, disappeared, or was replaced by a pod of the same name.
func (x *Index) Forget(namespace, name, keep string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.pods.forget(namespace, name, keep)
}

// Len returns the number of pods recorded.
func (x *Index) Len() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.pods.len()
}

func (x *Index) set(uid, namespace, name string, e *podEntry) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.pods.put(uid, namespace, name, e)
}

// lookup returns the pod's entry, nil when the index has none.
func (x *Index) lookup(uid string) *podEntry {
	x.mu.RLock()
	defer x.mu.RUnlock()
	e, _ := x.pods.get(uid)
	return e
}
