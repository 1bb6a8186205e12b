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
	"errors"
	"fmt"
	"slices"

	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/util/sets"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kubedevice/kubedevice/internal/nodeagent/checkpoint"
)

// Entry is one committed allocation in the form the checkpoint persists: what one container of
// one pod holds of one resource (DeviceIDs maps a NUMA node, NodeWithoutTopology for none, to the
// device IDs on it; AllocResp is the plugin's ContainerAllocateResponse in protobuf wire encoding).
// It is the checkpoint's own entry type, so committed state is persisted and restored as is.
type Entry = checkpoint.Entry

// Entries returns every committed allocation, sorted by pod UID, container name and resource
// name, for the checkpoint. In-flight reservations are not included: a reservation is never
// persisted, and after a restart it simply never happened. Each device list is sorted and
// AllocResp is the deterministic encoding of the response, so unchanged state gives identical
// entries.
func (s *Store) Entries() []Entry {
	var out []Entry
	for uid, p := range s.pods {
		out = p.appendEntries(out, uid)
	}
	sortEntries(out)
	return out
}

// PodEntries returns the committed entries of one pod, sorted by container and resource: what
// Entries returns for that pod, at the cost of that pod alone.
func (s *Store) PodEntries(podUID string) []Entry {
	p := s.pods[podUID]
	if p == nil {
		return nil
	}
	out := p.appendEntries(nil, podUID)
	sortEntries(out)
	return out
}

// appendEntries appends copies of the pod's committed allocations to out.
func (p *podState) appendEntries(out []Entry, uid string) []Entry {
	for container, resources := range p.containers {
		for resource, a := range resources {
			if a.committed == nil {
				continue
			}
			perNUMA := make(map[int64][]string, len(a.committed.devicesPerNUMA))
			for node, ids := range a.committed.devicesPerNUMA {
				perNUMA[node] = slices.Clone(ids)
			}
			out = append(out, Entry{
				PodUID:        uid,
				PodNamespace:  p.namespace,
				PodName:       p.name,
				ContainerName: container,
				ResourceName:  resource,
				DeviceIDs:     perNUMA,
				AllocResp:     slices.Clone(a.committed.raw),
			})
		}
	}
	return out
}

func sortEntries(out []Entry) {
	slices.SortFunc(out, func(x, y Entry) int {
		return cmp.Or(
			cmp.Compare(x.PodUID, y.PodUID),
			cmp.Compare(x.ContainerName, y.ContainerName),
			cmp.Compare(x.ResourceName, y.ResourceName),
		)
	})
}

// FromEntries adds the given entries to the Store as committed allocations, as after a restart
// from the checkpoint. An entry for a pod, container and resource that already has a committed
// allocation replaces it.
//
// An entry that cannot be restored is skipped and the others are still restored, as the kubelet
// does; unlike the kubelet, the skip is reported. FromEntries returns the number of entries skipped
// and an error joining one error per skipped entry, each naming the entry and wrapping
// ErrInvalidAllocation (undecodable AllocResp, no device ID, empty device ID) or ErrDeviceInUse (a
// device another pod already holds, restored or reserved before). The error is nil exactly when
// nothing was skipped.
func (s *Store) FromEntries(entries []Entry) (skipped int, err error) {
	var errs []error
	for _, e := range entries {
		if err := s.restore(e); err != nil {
			errs = append(errs, fmt.Errorf("restoring devices of %s for pod %q container %q: %w",
				e.ResourceName, e.PodUID, e.ContainerName, err))
		}
	}
	return len(errs), errors.Join(errs...)
}

// restore adds one entry, or returns why it cannot.
func (s *Store) restore(e Entry) error {
	resp := &pluginapi.ContainerAllocateResponse{}
	if err := proto.Unmarshal(e.AllocResp, resp); err != nil {
		return fmt.Errorf("decoding allocate response: %w: %w", ErrInvalidAllocation, err)
	}
	ca, err := newCommittedAllocation(e.DeviceIDs, resp, true)
	if err != nil {
		return err
	}
	for _, id := range sets.List(ca.ids) {
		if o := s.owners[e.ResourceName][id]; o != nil && o.podUID != e.PodUID {
			return fmt.Errorf("device %q held by pod %q: %w", id, o.podUID, ErrDeviceInUse)
		}
	}
	pod := PodRef{UID: e.PodUID, Namespace: e.PodNamespace, Name: e.PodName}
	s.setCommitted(pod, e.ContainerName, e.ResourceName, s.lookup(e.PodUID, e.ContainerName, e.ResourceName), ca)
	return nil
}
