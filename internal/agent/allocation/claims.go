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

package allocation

import (
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/kubedevice/kubedevice/internal/nodeagent"
)

// usesClaims reports whether the pod may hold devices through DRA ResourceClaims: claims of its
// own, or the claim the scheduler made for its extended-resource requests (KEP-5004).
func usesClaims(pod *corev1.Pod) bool {
	return len(pod.Spec.ResourceClaims) > 0 || pod.Status.ExtendedResourceClaimStatus != nil
}

// claimDevices is what the pod's containers hold through the ResourceClaims the agent prepared
// (the DRA flow), in the shape of a core PodAllocation, so its DeviceAllocation shows them beside
// the device plugin path's; nil when none. A container gets the devices of the claim requests it
// names (all of a claim's when it names no request), and, for extended resources served by DRA,
// those of the requests the scheduler mapped to it. Runtime options are not shown: the kubelet
// gives them to the runtime through the claim's CDI spec.
func claimDevices(claimNamed func(namespace, name string) (nodeagent.ClaimAllocation, bool), pod *corev1.Pod) *nodeagent.PodAllocation {
	if !usesClaims(pod) {
		return nil
	}
	claimName := map[string]string{} // pod claim name → ResourceClaim name
	for _, pc := range pod.Spec.ResourceClaims {
		if pc.ResourceClaimName != nil {
			claimName[pc.Name] = *pc.ResourceClaimName
		}
	}
	for _, st := range pod.Status.ResourceClaimStatuses {
		if st.ResourceClaimName != nil {
			claimName[st.Name] = *st.ResourceClaimName
		}
	}
	h := &claimHolds{claimNamed: claimNamed, namespace: pod.Namespace,
		claims: map[string]*nodeagent.ClaimAllocation{}, held: map[string]map[string]sets.Set[string]{}}
	for _, c := range append(slices.Clone(pod.Spec.InitContainers), pod.Spec.Containers...) {
		for _, rc := range c.Resources.Claims {
			if name, ok := claimName[rc.Name]; ok {
				h.add(c.Name, name, rc.Request)
			}
		}
	}
	if st := pod.Status.ExtendedResourceClaimStatus; st != nil {
		for _, m := range st.RequestMappings {
			h.add(m.ContainerName, st.ResourceClaimName, m.RequestName)
		}
	}
	if len(h.held) == 0 {
		return nil
	}
	out := &nodeagent.PodAllocation{PodUID: string(pod.UID), Namespace: pod.Namespace, Name: pod.Name}
	for _, container := range slices.Sorted(maps.Keys(h.held)) {
		ca := nodeagent.ContainerAllocation{Name: container}
		for _, resource := range slices.Sorted(maps.Keys(h.held[container])) {
			ca.Resources = append(ca.Resources, nodeagent.ResourceAllocation{ResourceName: resource, DeviceIDs: sets.List(h.held[container][resource])})
		}
		out.Containers = append(out.Containers, ca)
	}
	return out
}

// claimHolds gathers what a pod's containers hold through the claims in its namespace: held is
// container → resource → device IDs; claims are the claims looked up, nil when not prepared.
type claimHolds struct {
	claimNamed func(namespace, name string) (nodeagent.ClaimAllocation, bool)
	namespace  string
	claims     map[string]*nodeagent.ClaimAllocation
	held       map[string]map[string]sets.Set[string]
}

// add records container as holding the devices of the claim's request (all its requests when
// request is empty), when the claim is prepared.
func (h *claimHolds) add(container, claim, request string) {
	c, ok := h.claims[claim]
	if !ok {
		if prepared, found := h.claimNamed(h.namespace, claim); found {
			c = &prepared
		}
		h.claims[claim] = c
	}
	if c == nil {
		return
	}
	for _, ra := range c.Resources {
		if request != "" && ra.Request != request && !strings.HasPrefix(ra.Request, request+"/") {
			continue
		}
		if h.held[container] == nil {
			h.held[container] = map[string]sets.Set[string]{}
		}
		if h.held[container][ra.ResourceName] == nil {
			h.held[container][ra.ResourceName] = sets.New[string]()
		}
		h.held[container][ra.ResourceName].Insert(ra.DeviceIDs...)
	}
}

// withClaims adds the claims' devices to the device plugin path's allocation (either may be nil):
// what the pod's DeviceAllocation shows.
func withClaims(alloc, claims *nodeagent.PodAllocation) *nodeagent.PodAllocation {
	switch {
	case claims == nil:
		return alloc
	case alloc == nil:
		return claims
	}
	out := *alloc
	out.Containers = slices.Clone(alloc.Containers)
	for _, cc := range claims.Containers {
		i := slices.IndexFunc(out.Containers, func(c nodeagent.ContainerAllocation) bool { return c.Name == cc.Name })
		if i < 0 {
			out.Containers = append(out.Containers, cc)
			continue
		}
		merged := out.Containers[i]
		merged.Resources = append(slices.Clone(merged.Resources), cc.Resources...)
		slices.SortFunc(merged.Resources, func(a, b nodeagent.ResourceAllocation) int { return strings.Compare(a.ResourceName, b.ResourceName) })
		out.Containers[i] = merged
	}
	return &out
}
