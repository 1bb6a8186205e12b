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
	"fmt"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
	"github.com/kubedevice/kubedevice/internal/contract"
)

// A node moving from the kubelet's device manager to kubedevice (observe mode, then manage mode)
// still has the kubelet's entry for each resource whose plugin it had: the kubelet keeps a stopped
// plugin's resource for its grace period (endpointStopGracePeriod, 5 minutes; the entry is in its
// checkpoint, so a kubelet restart starts the period again) and, every node status update (10 s),
// writes the resource's capacity (its devices, all unhealthy) and allocatable 0, rejecting the
// pods bound to the node that ask for it (UnexpectedAdmissionError). When the period ends it sets
// the capacity to 0 once (nodestatus.MachineInfo keeps a removed device plugin resource's key, at
// 0) and never writes the resource again. Publishing during the period made the kubelet and the
// controller overwrite each other every 10 s, the scheduler bind pods the kubelet then rejected.
//
// So the controller leaves alone a resource whose key in status.capacity or status.allocatable
// another field manager owns with a value above zero (a claim): the kubelet during its period, or
// anyone else who wrote a count there. Pods asking for it stay Pending (the kubelet's allocatable
// is 0), and the NodeDevices, an event and a metric say why. A key another manager owns at 0, or
// none, is published: that is the kubelet's end of the period. A kubelet restarted during the
// period writes 0 too, and takes the resource back once the controller publishes it; a resource
// the controller published that another manager sets to 0 is therefore held for the kubelet's
// grace period from then, and published again after it.

// kubeletFieldManager is the field manager of the kubelet's node status writes: the API server
// names a write without one after its user agent, up to the first "/".
const kubeletFieldManager = "kubelet"

// takeBackHold is how long a resource another field manager set to 0 over the controller's value is
// held: the kubelet's grace period (5 minutes), which began at its restart, before its write, plus
// its node status update period (10 s), after which it notices the end, with room to spare.
const takeBackHold = 5*time.Minute + 30*time.Second

// resourceHold is why the controller leaves a resource of a node as another field manager wrote
// it.
type resourceHold struct {
	// reason is ReasonKubeletDeviceManagerOwnsResource, ReasonAnotherManagerOwnsResource or
	// ReasonResourceTakenBack.
	reason string
	// manager is the field manager owning the resource's key (the kubelet first, when several do).
	manager string
	// capacity and allocatable are the node's values, "none" for a missing key.
	capacity, allocatable string
	// until is, for ReasonResourceTakenBack, when the hold ends.
	until time.Time
}

// nodeClaims is what the node-capacity reconciler remembers of a node between reconciles.
type nodeClaims struct {
	// ours are the resources whose node capacity the controller owned when it last looked.
	ours map[corev1.ResourceName]bool
	// takenBack are the resources another manager set to 0 over ours, held until a time.
	takenBack map[corev1.ResourceName]takeBack
	// held are the holds reported (event, metric) by the last reconcile.
	held map[corev1.ResourceName]resourceHold
}

// takeBack is who set a resource to 0 over the controller's value, and until when it is held.
type takeBack struct {
	manager string
	until   time.Time
}

func newNodeClaims() *nodeClaims {
	return &nodeClaims{
		ours:      map[corev1.ResourceName]bool{},
		takenBack: map[corev1.ResourceName]takeBack{},
		held:      map[corev1.ResourceName]resourceHold{},
	}
}

// judge returns the holds of the resources the controller means to write to a node (names), from
// the node's status and who owns its keys, and records in c what the next reconcile needs to see a
// manager take a resource back.
func (c *nodeClaims) judge(status corev1.NodeStatus, owners map[corev1.ResourceName]resourceOwners,
	names []corev1.ResourceName, now time.Time) map[corev1.ResourceName]resourceHold {
	holds := map[corev1.ResourceName]resourceHold{}
	for _, name := range names {
		o := owners[name]
		if h, claimed := claimOf(status, name, o); claimed {
			holds[name] = h
			c.ours[name] = false
			delete(c.takenBack, name)
			continue
		}
		if others := foreignManagers(o); len(others) > 0 && c.ours[name] {
			c.takenBack[name] = takeBack{manager: claimant(others), until: now.Add(takeBackHold)}
		}
		if tb, ok := c.takenBack[name]; ok && now.Before(tb.until) {
			holds[name] = newHold(status, name, kdv1alpha1.ReasonResourceTakenBack, []string{tb.manager}, tb.until)
			c.ours[name] = false
			continue
		}
		delete(c.takenBack, name)
		c.ours[name] = ownedBy(o, FieldOwner)
	}
	return holds
}

// published records which of names the controller owns after its patch of the node (owners), so
// that a manager taking one back from it is seen by the next reconcile, however soon.
func (c *nodeClaims) published(owners map[corev1.ResourceName]resourceOwners, names []corev1.ResourceName) {
	for _, name := range names {
		c.ours[name] = ownedBy(owners[name], FieldOwner)
	}
}

// keepOnly forgets what c remembers of the resources that are not in names.
func (c *nodeClaims) keepOnly(names map[corev1.ResourceName]bool) {
	for name := range c.ours {
		if !names[name] {
			delete(c.ours, name)
		}
	}
	for name := range c.takenBack {
		if !names[name] {
			delete(c.takenBack, name)
		}
	}
}

// writtenResources returns the resources of the NodeDevices the controller may write to their
// node: all but the Observed ones (the kubelet's).
func writtenResources(nds []kdv1alpha1.NodeDevice) map[corev1.ResourceName]bool {
	names := map[corev1.ResourceName]bool{}
	for i := range nds {
		if nds[i].Status.EffectivePath() != kdv1alpha1.DevicePathObserved {
			names[corev1.ResourceName(nds[i].Spec.ResourceName)] = true
		}
	}
	return names
}

// claimsOf returns what the reconciler remembers of node. Reconciles of one node never run at
// once, so the caller may use it without the lock.
func (r *nodeReconciler) claimsOf(node string) *nodeClaims {
	r.claimsMu.Lock()
	defer r.claimsMu.Unlock()
	c, ok := r.claims[node]
	if !ok {
		c = newNodeClaims()
		r.claims[node] = c
	}
	return c
}

// forgetClaims forgets node, gone or without NodeDevices, and its series of the held gauge.
func (r *nodeReconciler) forgetClaims(node string) {
	r.claimsMu.Lock()
	defer r.claimsMu.Unlock()
	delete(r.claims, node)
	nodeCapacityHeld.DeletePartialMatch(prometheus.Labels{"node": node})
}

// claimOf reports whether another field manager than kubedevice's owns a key of the resource
// name in the node's status with a value above zero, and the hold that makes.
func claimOf(status corev1.NodeStatus, name corev1.ResourceName, o resourceOwners) (resourceHold, bool) {
	var claimants []string
	if q, ok := status.Capacity[name]; ok && q.Sign() > 0 {
		claimants = append(claimants, foreign(o.capacity)...)
	}
	if q, ok := status.Allocatable[name]; ok && q.Sign() > 0 {
		claimants = append(claimants, foreign(o.allocatable)...)
	}
	if len(claimants) == 0 {
		return resourceHold{}, false
	}
	reason := kdv1alpha1.ReasonAnotherManagerOwnsResource
	if slices.Contains(claimants, kubeletFieldManager) {
		reason = kdv1alpha1.ReasonKubeletDeviceManagerOwnsResource
	}
	return newHold(status, name, reason, claimants, time.Time{}), true
}

func newHold(status corev1.NodeStatus, name corev1.ResourceName, reason string, managers []string, until time.Time) resourceHold {
	return resourceHold{
		reason: reason, manager: claimant(managers), until: until,
		capacity: quantityOf(status.Capacity, name), allocatable: quantityOf(status.Allocatable, name),
	}
}

// claimant names the manager a hold is reported under: the kubelet when it is one of managers,
// else the first by name.
func claimant(managers []string) string {
	switch {
	case slices.Contains(managers, kubeletFieldManager):
		return kubeletFieldManager
	case len(managers) > 0:
		return slices.Min(managers)
	}
	return ""
}

func quantityOf(list corev1.ResourceList, name corev1.ResourceName) string {
	if q, ok := list[name]; ok {
		return q.String()
	}
	return "none"
}

// ownKubedevice reports whether manager is one of kubedevice's own: the controller, which
// publishes, and `kubedevice cleanup`, which removes what it published.
func ownKubedevice(manager string) bool {
	return manager == contract.ControllerFieldOwner || manager == contract.CleanupFieldOwner
}

// foreign returns the managers of list that are not kubedevice's.
func foreign(list []string) []string {
	var out []string
	for _, m := range list {
		if !ownKubedevice(m) {
			out = append(out, m)
		}
	}
	return out
}

// foreignManagers returns the managers other than kubedevice's owning either key of a resource.
func foreignManagers(o resourceOwners) []string {
	out := foreign(o.capacity)
	for _, m := range foreign(o.allocatable) {
		out = appendOnce(out, m)
	}
	return out
}

func ownedBy(o resourceOwners, manager string) bool {
	return slices.Contains(o.capacity, manager) || slices.Contains(o.allocatable, manager)
}

// message explains the hold of resource name on node to the operator.
func (h resourceHold) message(node string, name corev1.ResourceName) string {
	values := fmt.Sprintf("status.capacity %s, status.allocatable %s", h.capacity, h.allocatable)
	switch h.reason {
	case kdv1alpha1.ReasonKubeletDeviceManagerOwnsResource:
		return fmt.Sprintf("The kubelet's device manager owns %s on node %s (%s): a device plugin for it is "+
			"registered with the kubelet, or stopped less than 5 minutes ago (the kubelet's grace period; a kubelet "+
			"restart starts it again from its checkpoint). kubedevice publishes the resource once the kubelet has "+
			"set it to 0; until then pods asking for it stay Pending. Make sure no plugin for it still registers "+
			"with the kubelet (/var/lib/kubelet/device-plugins).", name, node, values)
	case kdv1alpha1.ReasonAnotherManagerOwnsResource:
		return fmt.Sprintf("Field manager %q owns %s on node %s (%s). kubedevice publishes the resource once "+
			"that value is removed or set to 0; until then it is left as written.", h.manager, name, node, values)
	default:
		return fmt.Sprintf("Field manager %q set %s on node %s to 0 after kubedevice published it (%s), as a kubelet "+
			"restarted within the grace period of a plugin in its checkpoint does. kubedevice publishes it again "+
			"at %s, once the kubelet's grace period has run out; until then pods asking for it stay Pending.",
			h.manager, name, node, values, h.until.UTC().Format(time.RFC3339))
	}
}
