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

package controller

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
)

// capacityPlan is what the node should publish of kubedevice's resources: publish sets a count
// in status.capacity and status.allocatable, withdraw removes the resource from both.
type capacityPlan struct {
	publish  map[corev1.ResourceName]int64
	withdraw []corev1.ResourceName
}

// desiredCapacity returns the count to publish for every kubedevice resource of a node, from its
// NodeDevices (all shards, terminating ones included): per shard that is not terminating, while
// the agent is ready, its allocatable devices, or the devices pods hold when that is more (a
// plugin disconnected, or not registered again since an agent restart: nothing allocatable, the
// running pods' devices still theirs), summed; only the devices pods hold (the agent's last
// status) when the agent is not ready. The floor keeps running pods fitting the node, as the
// kubelet's sanitizeNodeAllocatable raises allocatable to the allocated devices at admission,
// while a new pod sees nothing free: a kubelet that restarts re-admits every running pod against
// the Node's allocatable, and kills those that do not fit (OutOf<resource>), which a zero did to
// every device pod of a node whose agent was away when its kubelet restarted. A NodeDevice counts
// only once it holds the node-capacity finalizer, so every resource the node publishes has a
// NodeDevice that cannot vanish before the resource is back at zero. A resource with a live shard
// that does not hold the finalizer yet is left out, so the node keeps what it publishes until
// every shard counts: publishing the sum of some shards would show the scheduler a count that is
// wrong, and cost a second patch when the last finalizer lands (on a first install, one patch per
// shard instead of one per node). Likewise a shard whose status the agent has not written yet
// (the agent creates the object, then writes its status): counting its empty status published a
// new resource as 0 and then, within a second, as its count. A resource whose only NodeDevices are terminating is included
// (at zero) only when the node still publishes it, so a resource that never reached the node is
// not added just to be zeroed.
//
// Only the node-capacity path publishes. A resource whose live shards all say it is served
// through DRA is withdrawn from the node when the node publishes it: the scheduler serves a
// DeviceClass's extendedResourceName through DRA only on nodes whose allocatable for it is not
// above zero (noderesources' shouldDelegateResourceToDRA), and a resource the node does not name
// at all says so plainly, where a zero would read as "no devices". A resource with a live shard the
// kubelet manages (observed) is never written: its capacity is the kubelet's. While a resource's
// live shards disagree on the path (the agent rewrites them one by one when it switches), the
// node keeps what it publishes.
func desiredCapacity(status corev1.NodeStatus, nds []kdv1alpha1.NodeDevice, agentReady bool) capacityPlan {
	desired := map[corev1.ResourceName]int64{}
	terminating := map[corev1.ResourceName]bool{}
	incomplete := map[corev1.ResourceName]bool{}
	dra := map[corev1.ResourceName]bool{}
	observed := map[corev1.ResourceName]bool{}
	for i := range nds {
		name := corev1.ResourceName(nds[i].Spec.ResourceName)
		if nds[i].Status.EffectivePath() == kdv1alpha1.DevicePathObserved {
			observed[name] = true
			continue
		}
		if !nds[i].DeletionTimestamp.IsZero() {
			terminating[name] = true
			continue
		}
		if nds[i].Status.EffectivePath() == kdv1alpha1.DevicePathDRA {
			dra[name] = true
			continue
		}
		if !controllerutil.ContainsFinalizer(&nds[i], NodeCapacityFinalizer) || !reported(&nds[i]) {
			incomplete[name] = true
			continue
		}
		n := int64(nds[i].Status.Allocated)
		if agentReady {
			n = int64(max(nds[i].Status.Allocatable, nds[i].Status.Allocated))
		}
		desired[name] += n
	}
	plan := capacityPlan{publish: desired}
	for name := range dra {
		_, capacityPath := desired[name]
		if !capacityPath && !incomplete[name] && !observed[name] && !publishesNothing(status, name) {
			plan.withdraw = append(plan.withdraw, name)
		}
		incomplete[name] = true
	}
	slices.Sort(plan.withdraw)
	for name := range observed {
		incomplete[name] = true
	}
	for name := range incomplete {
		delete(desired, name)
	}
	for name := range terminating {
		if _, live := desired[name]; live || incomplete[name] {
			continue
		}
		if _, ok := status.Capacity[name]; ok {
			desired[name] = 0
		} else if _, ok := status.Allocatable[name]; ok {
			desired[name] = 0
		}
	}
	return plan
}

// names returns the resources the plan writes (publishes or withdraws), sorted.
func (p capacityPlan) names() []corev1.ResourceName {
	names := slices.Collect(maps.Keys(p.publish))
	for _, name := range p.withdraw {
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// without returns the plan less the resources held: another field manager claims them, and the
// node keeps what that manager wrote.
func (p capacityPlan) without(held map[corev1.ResourceName]resourceHold) capacityPlan {
	out := capacityPlan{publish: map[corev1.ResourceName]int64{}}
	for name, n := range p.publish {
		if _, ok := held[name]; !ok {
			out.publish[name] = n
		}
	}
	for _, name := range p.withdraw {
		if _, ok := held[name]; !ok {
			out.withdraw = append(out.withdraw, name)
		}
	}
	return out
}

// capacityPatch returns the JSON merge patch of the nodes/status subresource that sets each
// resource the plan publishes in status.capacity and status.allocatable, naming only the keys
// whose value differs, and removes each resource it withdraws (a null value), or nil when the
// node already publishes what the plan says. Other resources are never named, so the kubelet's
// and other extenders' keys are left alone.
func capacityPatch(status corev1.NodeStatus, plan capacityPlan) ([]byte, error) {
	capacity := map[corev1.ResourceName]any{}
	allocatable := map[corev1.ResourceName]any{}
	for _, name := range slices.Sorted(maps.Keys(plan.publish)) {
		want := resource.NewQuantity(plan.publish[name], resource.DecimalSI)
		if got, ok := status.Capacity[name]; !ok || got.Cmp(*want) != 0 {
			capacity[name] = want.String()
		}
		if got, ok := status.Allocatable[name]; !ok || got.Cmp(*want) != 0 {
			allocatable[name] = want.String()
		}
	}
	for _, name := range plan.withdraw {
		if _, ok := status.Capacity[name]; ok {
			capacity[name] = nil
		}
		if _, ok := status.Allocatable[name]; ok {
			allocatable[name] = nil
		}
	}
	if len(capacity) == 0 && len(allocatable) == 0 {
		return nil, nil
	}
	patchStatus := map[string]any{}
	if len(capacity) > 0 {
		patchStatus["capacity"] = capacity
	}
	if len(allocatable) > 0 {
		patchStatus["allocatable"] = allocatable
	}
	patch, err := json.Marshal(map[string]any{"status": patchStatus})
	if err != nil {
		return nil, fmt.Errorf("encoding the node capacity patch: %w", err)
	}
	return patch, nil
}

// publishesNothing reports whether the node names the resource in neither status.capacity nor
// status.allocatable.
func publishesNothing(status corev1.NodeStatus, name corev1.ResourceName) bool {
	_, inCapacity := status.Capacity[name]
	_, inAllocatable := status.Allocatable[name]
	return !inCapacity && !inAllocatable
}

// needsZeroing reports whether a terminating NodeDevice is the last of its resource on the node
// that holds the node-capacity finalizer, so its finalizer may go only once the node publishes
// the resource as zero. A live shard without the finalizer does not take over: it could vanish
// before it counts, and leave the resource published.
//
// A shard the kubelet manages (observed) never needs it: its resource's capacity is the kubelet's.
func needsZeroing(nd *kdv1alpha1.NodeDevice, nds []kdv1alpha1.NodeDevice) bool {
	if nd.Status.EffectivePath() == kdv1alpha1.DevicePathObserved {
		return false
	}
	for i := range nds {
		if nds[i].Spec.ResourceName == nd.Spec.ResourceName && nds[i].DeletionTimestamp.IsZero() &&
			controllerutil.ContainsFinalizer(&nds[i], NodeCapacityFinalizer) {
			return false
		}
	}
	return true
}

// releasable returns the terminating NodeDevices holding the node-capacity finalizer that may now
// let go: another shard of their resource is still live on the node (it keeps the resource known
// as ours), the node publishes the resource as zero or not at all, or another field manager claims
// it (held: its value is that manager's, not ours to zero).
func releasable(status corev1.NodeStatus, nds []kdv1alpha1.NodeDevice, held map[corev1.ResourceName]resourceHold) []*kdv1alpha1.NodeDevice {
	var out []*kdv1alpha1.NodeDevice
	for i := range nds {
		nd := &nds[i]
		if nd.DeletionTimestamp.IsZero() || !controllerutil.ContainsFinalizer(nd, NodeCapacityFinalizer) {
			continue
		}
		name := corev1.ResourceName(nd.Spec.ResourceName)
		if _, claimed := held[name]; claimed || !needsZeroing(nd, nds) || publishesZero(status, name) {
			out = append(out, nd)
		}
	}
	return out
}

// publishesZero reports whether the node publishes name as zero or not at all, in both
// status.capacity and status.allocatable.
func publishesZero(status corev1.NodeStatus, name corev1.ResourceName) bool {
	for _, list := range []corev1.ResourceList{status.Capacity, status.Allocatable} {
		if q, ok := list[name]; ok && !q.IsZero() {
			return false
		}
	}
	return true
}

// reported reports whether the agent has written nd's status: the agent's status always names
// the plugin's state and the generation it observed, while an object it has just created has
// neither (the controller's own AgentReady condition does not count).
func reported(nd *kdv1alpha1.NodeDevice) bool {
	return nd.Status.Plugin != nil || nd.Status.ObservedGeneration > 0 || len(nd.Status.Devices) > 0
}
