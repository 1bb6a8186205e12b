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
	"slices"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"

	"github.com/kubedevice/kubedevice/internal/nodeagent/topology"
)

// containerHintsLocked returns the NUMA topology hints of every device plugin
// resource container asks for, as the kubelet's hint provider
// (GetTopologyHints in devicemanager/topology_hints.go): nil for a resource without topology (no
// preference), [] when the request cannot be met, hints regenerated from the
// devices when the container already holds them. Unknown resources are
// left out. Hints are sorted, preferred and narrowest first.
//
// Unlike the kubelet, it does not garbage-collect first (the caller owns the
// list of active pods, see UpdateAllocatedDevices), and cordoned devices are
// not available.
func (m *Manager) containerHintsLocked(pod *v1.Pod, c *v1.Container) map[string][]topology.Hint {
	var reuse map[string]sets.Set[string]
	return m.hintsLocked(containerRequests(pod, c), func(in *topology.HintInput, resource string) {
		if reuse == nil {
			reuse = m.reusableLocked(pod, c.Name)
		}
		in.Reusable = reuse[resource]
		in.Allocated = m.pods.ContainerDevices(string(pod.UID), c.Name, resource)
	})
}

// podHintsLocked returns the hints of the pod as a whole (topology
// scope pod), as the kubelet's GetPodTopologyHints: the request of each
// resource is the pod's effective limit (resourcehelper.PodLimits: the
// larger of the largest init container and the sum of the app containers,
// with the sidecar rules), the allocated devices are those of the whole pod,
// and nothing is reusable.
func (m *Manager) podHintsLocked(pod *v1.Pod) map[string][]topology.Hint {
	return m.hintsLocked(podRequests(pod), func(in *topology.HintInput, resource string) {
		in.Allocated = m.pods.PodDevices(string(pod.UID), resource)
	})
}

// hintsLocked returns the sorted hints of each known resource of reqs: nil
// for one without topology, else topology.ResourceHints of its devices and
// available devices, with what fill adds (reusable and allocated devices).
func (m *Manager) hintsLocked(reqs []deviceRequest, fill func(in *topology.HintInput, resource string)) map[string][]topology.Hint {
	hints := make(map[string][]topology.Hint)
	for _, rq := range reqs {
		if m.resources[rq.resource] == nil {
			continue
		}
		devs := m.deviceNodesLocked(rq.resource)
		if !devs.HasTopology() {
			hints[rq.resource] = nil
			continue
		}
		in := topology.HintInput{MachineNodes: m.numaNodes, Devices: devs, Available: m.availableLocked(rq.resource), Request: rq.count}
		fill(&in, rq.resource)
		h := topology.ResourceHints(in)
		topology.SortHints(h)
		hints[rq.resource] = h
	}
	return hints
}

// podScopeKey is the affinity key of a pod as a whole (pod scope); container
// names are never empty.
const podScopeKey = ""

// admitTopologyLocked applies the topology policy to container c of pod,
// as the topology manager does at admission, and returns the NUMA affinity
// to allocate with (empty: no preference). Container scope merges the
// container's hints; pod scope merges the pod's hints once and gives every
// container the same affinity. Policy none admits without affinity, and so
// does every policy when the container holds devices of all of reqs (none
// are to be chosen). restricted and single-numa-node refuse an unaligned
// allocation with the kubelet's TopologyAffinityError.
func (m *Manager) admitTopologyLocked(ctx context.Context, pod *v1.Pod, c *v1.Container, reqs []deviceRequest) (topology.BitMask, error) {
	policy, scope := m.cfg.TopologyPolicy, m.cfg.TopologyScope
	uid := string(pod.UID)
	if policy == topology.PolicyNone || !slices.ContainsFunc(reqs, func(rq deviceRequest) bool {
		return m.pods.ContainerDevices(uid, c.Name, rq.resource) == nil
	}) {
		return 0, nil
	}
	logger := klog.FromContext(ctx)
	var hints map[string][]topology.Hint
	if scope == topology.ScopePod {
		if aff, ok := m.affinity[uid][podScopeKey]; ok {
			m.setAffinityLocked(uid, c.Name, aff)
			return aff, nil
		}
		hints = m.podHintsLocked(pod)
	} else {
		hints = m.containerHintsLocked(pod, c)
	}
	best, err := policy.Admit(m.numa, m.cfg.TopologyPolicyOptions, []map[string][]topology.Hint{hints})
	if err != nil {
		logger.Info("Topology policy refused the allocation", "policy", policy, "scope", scope, "hints", hints)
		return 0, &AllocationError{Reason: AllocationTopologyAffinityError, Err: err}
	}
	if scope == topology.ScopePod {
		m.setAffinityLocked(uid, podScopeKey, best.NUMANodeAffinity)
	}
	m.setAffinityLocked(uid, c.Name, best.NUMANodeAffinity)
	logger.V(4).Info("Topology policy admitted the allocation", "policy", policy, "scope", scope, "affinity", best)
	return best.NUMANodeAffinity, nil
}

func (m *Manager) setAffinityLocked(uid, container string, aff topology.BitMask) {
	byContainer := m.affinity[uid]
	if byContainer == nil {
		byContainer = make(map[string]topology.BitMask)
		m.affinity[uid] = byContainer
	}
	byContainer[container] = aff
}
