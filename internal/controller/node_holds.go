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
	"context"
	"fmt"
	"maps"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
	"github.com/kubedevice/kubedevice/internal/contract"
)

// Event actions of the node-capacity reconciler's events about a hold.
const (
	actionHold    = "HoldNodeCapacity"
	actionRelease = "PublishNodeCapacity"
)

// reportHolds says what the controller holds back on node: the NodeCapacityPublished condition of
// the resources' NodeDevices, then a Warning event on the Node when a hold starts or changes its
// reason (a Normal one when it ends) and the kubedevice_node_capacity_held gauge. names are the
// resources judged (the controller means to write them to the node); a resource it does not write
// this time (a shard settling, shards disagreeing on the path) keeps what was said of it, but an
// Observed one, which is the kubelet's.
func (r *nodeReconciler) reportHolds(ctx context.Context, node *corev1.Node, nds []kdv1alpha1.NodeDevice,
	holds map[corev1.ResourceName]resourceHold, names []corev1.ResourceName) error {
	now := metav1.NewTime(r.clock.Now())
	judged := map[corev1.ResourceName]bool{}
	for _, name := range names {
		judged[name] = true
	}
	for i := range nds {
		nd := &nds[i]
		if !nd.DeletionTimestamp.IsZero() || !reported(nd) ||
			(!judged[corev1.ResourceName(nd.Spec.ResourceName)] && nd.Status.EffectivePath() != kdv1alpha1.DevicePathObserved) {
			continue
		}
		got := meta.FindStatusCondition(nd.Status.Conditions, kdv1alpha1.NodeDeviceNodeCapacityPublished)
		want := capacityCondition(node.Name, nd, holds, got, now)
		if !conditionChanged(got, want) {
			continue
		}
		var conds []metav1.Condition
		if want != nil {
			conds = append(conds, *want)
		}
		if err := applyConditionsAs(ctx, r.client, contract.ControllerNodeCapacityFieldOwner, nodeDeviceGVK,
			client.ObjectKeyFromObject(nd), conds...); err != nil {
			return err
		}
	}
	r.recordHolds(node, nds, holds, judged)
	return nil
}

// capacityCondition returns the NodeCapacityPublished condition nd should carry (got is the one it
// has), nil for none: False with the hold's reason while its resource is held; True once it is
// published again, on a NodeDevice that carried the condition; none on one that never did, or
// whose resource the controller does not publish (Observed, DRA).
func capacityCondition(node string, nd *kdv1alpha1.NodeDevice, holds map[corev1.ResourceName]resourceHold,
	got *metav1.Condition, now metav1.Time) *metav1.Condition {
	name := corev1.ResourceName(nd.Spec.ResourceName)
	c := metav1.Condition{Type: kdv1alpha1.NodeDeviceNodeCapacityPublished, ObservedGeneration: nd.Generation}
	h, held := holds[name]
	switch {
	case held && nd.Status.EffectivePath() != kdv1alpha1.DevicePathObserved:
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, h.reason, h.message(node, name)
	case got == nil || nd.Status.EffectivePath() != kdv1alpha1.DevicePathNodeCapacity:
		return nil
	default:
		c.Status, c.Reason = metav1.ConditionTrue, kdv1alpha1.ReasonNodeCapacityPublished
		c.Message = fmt.Sprintf("No other field manager claims %s on node %s: kubedevice publishes it.", name, node)
	}
	c = contract.WithTransitionTime(c, got, now)
	return &c
}

// recordHolds emits the events of the holds that started, changed or ended since the last
// reconcile of node, and sets the held gauge to match. A hold of a resource not judged this time
// is kept while the node has a NodeDevice of it the controller may write.
func (r *nodeReconciler) recordHolds(node *corev1.Node, nds []kdv1alpha1.NodeDevice,
	holds map[corev1.ResourceName]resourceHold, judged map[corev1.ResourceName]bool) {
	c := r.claimsOf(node.Name)
	next := make(map[corev1.ResourceName]resourceHold, len(holds))
	maps.Copy(next, holds)
	for name, h := range holds {
		if prev, ok := c.held[name]; ok && prev.reason == h.reason && prev.manager == h.manager {
			continue
		}
		nodeCapacityHeld.DeletePartialMatch(prometheus.Labels{"node": node.Name, "resource": string(name)})
		nodeCapacityHeld.WithLabelValues(node.Name, string(name), h.manager, h.reason).Set(1)
		r.recorder.Eventf(node, firstNodeDevice(nds, name), corev1.EventTypeWarning, h.reason, actionHold, "%s", h.message(node.Name, name))
	}
	written := writtenResources(nds)
	for name, prev := range c.held {
		if _, ok := holds[name]; ok {
			continue
		}
		if !judged[name] && written[name] {
			next[name] = prev
			continue
		}
		nodeCapacityHeld.DeletePartialMatch(prometheus.Labels{"node": node.Name, "resource": string(name)})
		if judged[name] {
			r.recorder.Eventf(node, firstNodeDevice(nds, name), corev1.EventTypeNormal, kdv1alpha1.ReasonNodeCapacityPublished, actionRelease,
				"No other field manager claims %s on node %s any more: kubedevice publishes it.", name, node.Name)
		}
	}
	c.held = next
}

// firstNodeDevice returns the NodeDevice of the resource name first by name, as the event's
// related object; nil (no related object) when there is none.
func firstNodeDevice(nds []kdv1alpha1.NodeDevice, name corev1.ResourceName) runtime.Object {
	var first *kdv1alpha1.NodeDevice
	for i := range nds {
		if corev1.ResourceName(nds[i].Spec.ResourceName) == name && (first == nil || nds[i].Name < first.Name) {
			first = &nds[i]
		}
	}
	if first == nil {
		return nil
	}
	return first
}
