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
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
	"github.com/kubedevice/kubedevice/internal/agent/kube"
	"github.com/kubedevice/kubedevice/internal/indexer"
	"github.com/kubedevice/kubedevice/internal/nodeagent"
)

// maxEventNote is the longest note an events.k8s.io Event takes.
const maxEventNote = 1024

// stamp returns want, with the health of the devices it lists, stamped for the object current
// (nil: none yet): what the pod's DeviceAllocation must say.
func (r *reconciler) stamp(want kdv1alpha1.DeviceAllocationStatus, current *kdv1alpha1.DeviceAllocation) kdv1alpha1.DeviceAllocationStatus {
	return stamped(withHealth(want, r.health.device, current, r.Clock.Now()), current)
}

// healthChanged returns the pods whose DeviceAllocation lists a device of one of resources and
// does not show the health the core now says of its devices: the pods to reconcile after the
// resources changed. A change of a device no pod holds names none, so it costs no write.
func (r *reconciler) healthChanged(ctx context.Context, resources []string) []types.NamespacedName {
	r.health.refresh(resources)
	list := &kdv1alpha1.DeviceAllocationList{}
	// Read only, never modified: the cache's objects need not be copied at every change.
	if err := r.client.List(ctx, list, client.MatchingFields{indexer.DeviceAllocationNodeName: r.NodeName}, client.UnsafeDisableDeepCopy); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing the DeviceAllocations whose devices' health changed")
		return nil
	}
	now := r.Clock.Now()
	var keys []types.NamespacedName
	for i := range list.Items {
		da := &list.Items[i]
		if da.Spec.NodeName != r.NodeName || !da.DeletionTimestamp.IsZero() ||
			meta.IsStatusConditionTrue(da.Status.Conditions, kdv1alpha1.DeviceAllocationReleased) || !listsResource(da, resources) {
			continue
		}
		if healthDiffers(da, r.health.device, now) {
			keys = append(keys, types.NamespacedName{Namespace: da.Namespace, Name: da.Spec.PodName})
		}
	}
	return keys
}

// listsResource reports whether da lists a device of one of resources.
func listsResource(da *kdv1alpha1.DeviceAllocation, resources []string) bool {
	for _, c := range da.Status.Containers {
		for _, res := range c.Resources {
			if slices.Contains(resources, res.ResourceName) {
				return true
			}
		}
	}
	return false
}

// reportHealth reports, with an event on the pod, each device of the device plugin path (those
// alloc lists; nil: none) whose health the DeviceAllocation just written (st) says differently
// than it did before (current; nil: there was none): a Warning for a device now unhealthy, or
// unhealthy for another reason, a Normal for one healthy again. The devices of DRA
// ResourceClaims get none: the kubelet shows their health in the pod's
// status.containerStatuses[].allocatedResourcesStatus.
func (r *reconciler) reportHealth(pod *corev1.Pod, current *kdv1alpha1.DeviceAllocation, st kdv1alpha1.DeviceAllocationStatus, alloc *nodeagent.PodAllocation) {
	if alloc == nil {
		return
	}
	var was []kdv1alpha1.UnhealthyDevice
	if current != nil {
		was = current.Status.UnhealthyDevices
	}
	for _, d := range heldDevices(kube.DeviceAllocationContainers(pod, alloc)) {
		prev, now := findUnhealthy(was, d.resource, d.id), findUnhealthy(st.UnhealthyDevices, d.resource, d.id)
		switch {
		case now != nil && (prev == nil || prev.Reason != now.Reason):
			note := kube.Truncate(fmt.Sprintf("%s: device %s of %s is unhealthy: %s: %s", containersOf(d), d.id, d.resource, now.Reason, now.Message), maxEventNote)
			r.Recorder.Eventf(pod, nil, corev1.EventTypeWarning, kdv1alpha1.EventReasonDeviceUnhealthy, kube.EventAction("DeviceHealth", note), "%s", note)
		case now == nil && prev != nil:
			note := kube.Truncate(fmt.Sprintf("%s: device %s of %s is healthy again (it was %s).", containersOf(d), d.id, d.resource, prev.Reason), maxEventNote)
			r.Recorder.Eventf(pod, nil, corev1.EventTypeNormal, kdv1alpha1.EventReasonDeviceHealthy, kube.EventAction("DeviceHealth", note), "%s", note)
		}
	}
}

// containersOf names the containers holding d: "Container app", "Containers fetch, app".
func containersOf(d heldDevice) string {
	if len(d.containers) == 1 {
		return "Container " + d.containers[0]
	}
	return "Containers " + strings.Join(d.containers, ", ")
}
