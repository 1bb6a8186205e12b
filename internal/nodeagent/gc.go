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
	"github.com/kubedevice/kubedevice/internal/crashpoint"

	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
)

// UpdateAllocatedDevices frees the devices of every pod that is not in
// activePods (the kubelet's non-terminal pods that are not fully
// terminated), as the kubelet's UpdateAllocatedDevices, and, unlike it,
// writes the checkpoint when anything was freed, so a freed allocation does
// not come back after an agent restart. The write does not wait for the
// disk (see persistUnsynced): the next allocation's flush makes it durable,
// as the kubelet's next Allocate records its frees. Allocations in flight are never freed:
// their own transaction commits or rolls them back, and a commit for a pod
// that is gone is freed by the next call.
//
// The pods freed lose their topology affinity and reboot marks; subscribers
// hear of the resources whose devices were freed. The error is that of the
// checkpoint write; the devices are free in memory either way.
func (m *Manager) UpdateAllocatedDevices(ctx context.Context, activePods []*v1.Pod) error {
	logger := klog.FromContext(ctx)
	active := make(sets.Set[string], len(activePods))
	for _, p := range activePods {
		active.Insert(string(p.UID))
	}

	m.mu.Lock()
	gone := m.pods.PodsNotIn(active)
	for key := range gone {
		if IsClaimKey(key) {
			// A claim is not a pod: NodeUnprepareResources frees it.
			gone.Delete(key)
		}
	}
	changed := sets.New[string]()
	for uid := range gone {
		for _, e := range m.pods.PodEntries(uid) {
			changed.Insert(e.ResourceName)
		}
	}
	freed := m.pods.Delete(sets.List(gone)...)
	staleChanged := false
	for uid := range m.stale {
		if !active.Has(uid) && !m.pods.HasPod(uid) && !IsClaimKey(uid) {
			delete(m.stale, uid)
			staleChanged = true
		}
	}
	for uid := range m.affinity {
		if !active.Has(uid) {
			delete(m.affinity, uid)
		}
	}
	for uid := range gone {
		m.prunePodLocked(uid)
	}
	if freed > 0 {
		for uid := range gone {
			m.podChangedLocked(uid)
		}
		m.notifyLocked(sets.List(changed)...)
	}
	m.mu.Unlock()

	if freed == 0 {
		return nil
	}
	logger.V(2).Info("Freed the devices of pods that are no longer active", "pods", sets.List(gone), "allocations", freed)
	if staleChanged {
		m.persistStaleLogged(logger)
	}
	if err := m.persistUnsynced(); err != nil {
		return fmt.Errorf("freeing the devices of %d inactive pods: %w", gone.Len(), err)
	}
	crashpoint.Hit(crashpoint.ReleaseFreed)
	return nil
}
