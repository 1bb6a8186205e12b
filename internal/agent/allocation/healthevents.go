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
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
	"github.com/kubedevice/kubedevice/internal/agent/kube"
	"github.com/kubedevice/kubedevice/internal/nodeagent"
)

// maxEventNote is the longest note an events.k8s.io Event takes.
const maxEventNote = 1024

// stamp returns want, with the health of the devices it lists, stamped for the object current
// (nil: none yet): what the pod's DeviceAllocation must say.
func (r *reconciler) stamp(want kdv1alpha1.DeviceAllocationStatus, current *kdv1alpha1.DeviceAllocation) kdv1alpha1.DeviceAllocationStatus {
	return stamped(r.health.WithHealth(want, current, r.Clock.Now()), current)
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
	for _, d := range kube.HeldDevices(kube.DeviceAllocationContainers(pod, alloc)) {
		prev, now := kube.FindUnhealthy(was, d.Resource, d.ID), kube.FindUnhealthy(st.UnhealthyDevices, d.Resource, d.ID)
		switch {
		case now != nil && (prev == nil || prev.Reason != now.Reason):
			note := kube.Truncate(fmt.Sprintf("%s: device %s of %s is unhealthy: %s: %s", containersOf(d), d.ID, d.Resource, now.Reason, now.Message), maxEventNote)
			r.Recorder.Eventf(pod, nil, corev1.EventTypeWarning, kdv1alpha1.EventReasonDeviceUnhealthy, kube.EventAction("DeviceHealth", note), "%s", note)
		case now == nil && prev != nil:
			note := kube.Truncate(fmt.Sprintf("%s: device %s of %s is healthy again (it was %s).", containersOf(d), d.ID, d.Resource, prev.Reason), maxEventNote)
			r.Recorder.Eventf(pod, nil, corev1.EventTypeNormal, kdv1alpha1.EventReasonDeviceHealthy, kube.EventAction("DeviceHealth", note), "%s", note)
		}
	}
}

// containersOf names the containers holding d: "Container app", "Containers fetch, app".
func containersOf(d kube.HeldDevice) string {
	if len(d.Containers) == 1 {
		return "Container " + d.Containers[0]
	}
	return "Containers " + strings.Join(d.Containers, ", ")
}
