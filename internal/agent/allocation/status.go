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
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
	"github.com/kubedevice/kubedevice/internal/agent/kube"
	"github.com/kubedevice/kubedevice/internal/nodeagent"
	"github.com/kubedevice/kubedevice/internal/nodeagent/poddevices"
)

// Bounds of the API fields the agent fills from free text.
const (
	maxSummaryLength = kube.MaxSummaryLength
	maxMessageLength = 32768
)

// desiredStatus computes the status of pod's DeviceAllocation: what alloc (nil when the pod holds
// nothing) says its containers hold, in the pod's order, init containers first, with the runtime
// options alloc recorded; and the Allocated condition, False with the core's reason and message
// when allocErr is not nil, that changed at now. It is not yet stamped for an object (stamped).
func desiredStatus(pod *corev1.Pod, alloc *nodeagent.PodAllocation, allocErr error, now time.Time) kdv1alpha1.DeviceAllocationStatus {
	st := kdv1alpha1.DeviceAllocationStatus{Containers: kube.DeviceAllocationContainers(pod, alloc)}
	st.Summary = kube.DeviceAllocationSummary(st.Containers)

	c := metav1.Condition{Type: kdv1alpha1.DeviceAllocationAllocated, LastTransitionTime: metav1.NewTime(now.Truncate(time.Second))}
	if allocErr != nil {
		c.Status = metav1.ConditionFalse
		c.Reason = string(nodeagent.AllocationReasonOf(allocErr))
		c.Message = kube.Truncate(allocErr.Error(), maxMessageLength)
	} else {
		c.Status, c.Reason = metav1.ConditionTrue, kdv1alpha1.ReasonAllocated
		c.Message = fmt.Sprintf("The pod's %d devices are allocated and checkpointed on node %s.", kube.DeviceCount(st.Containers), pod.Spec.NodeName)
	}
	st.Conditions = []metav1.Condition{c}
	return st
}

// preStartDone reports whether current records, as allocated, the devices want lists: the
// PreStartContainer calls made for the first start of the containers when the devices were
// allocated need not be made again (after an agent restart, the containers may run; the next
// starts are prepared by the PreStartContainer controller).
func preStartDone(current *kdv1alpha1.DeviceAllocation, want kdv1alpha1.DeviceAllocationStatus) bool {
	if current == nil || !meta.IsStatusConditionTrue(current.Status.Conditions, kdv1alpha1.DeviceAllocationAllocated) {
		return false
	}
	return current.Status.Summary == want.Summary
}

// coreRuntimeOptions is kube.APIRuntimeOptions' inverse, for rebuilding the core's state from
// DeviceAllocations.
func coreRuntimeOptions(o *kdv1alpha1.ContainerRuntimeOptions) *poddevices.RunContainerOptions {
	if o == nil {
		return nil
	}
	out := &poddevices.RunContainerOptions{CDIDevices: slices.Clone(o.CDIDevices)}
	for _, e := range o.Envs {
		out.Envs = append(out.Envs, poddevices.EnvVar{Name: e.Name, Value: e.Value})
	}
	for _, m := range o.Mounts {
		out.Mounts = append(out.Mounts, poddevices.Mount{ContainerPath: m.ContainerPath, HostPath: m.HostPath, ReadOnly: m.ReadOnly})
	}
	for _, d := range o.Devices {
		out.Devices = append(out.Devices, poddevices.DeviceSpec{ContainerPath: d.ContainerPath, HostPath: d.HostPath, Permissions: d.Permissions})
	}
	for _, a := range o.Annotations {
		out.Annotations = append(out.Annotations, poddevices.Annotation{Key: a.Key, Value: a.Value})
	}
	return out
}

// podAllocationOf rebuilds the core's record of a pod's devices from its DeviceAllocation. ok is
// false for an allocation that holds nothing or was released.
func podAllocationOf(da *kdv1alpha1.DeviceAllocation) (nodeagent.PodAllocation, bool) {
	if meta.IsStatusConditionTrue(da.Status.Conditions, kdv1alpha1.DeviceAllocationReleased) || len(da.Status.Containers) == 0 {
		return nodeagent.PodAllocation{}, false
	}
	pa := nodeagent.PodAllocation{PodUID: da.Spec.PodUID, Namespace: da.Namespace, Name: da.Spec.PodName}
	for _, c := range da.Status.Containers {
		ca := nodeagent.ContainerAllocation{Name: c.Name, RuntimeOptions: coreRuntimeOptions(c.RuntimeOptions)}
		for _, r := range c.Resources {
			ca.Resources = append(ca.Resources, nodeagent.ResourceAllocation{
				ResourceName: r.ResourceName,
				DeviceIDs:    slices.Clone(r.DeviceIDs),
				NUMANodes:    slices.Clone(r.NUMANodes),
			})
		}
		pa.Containers = append(pa.Containers, ca)
	}
	slices.SortFunc(pa.Containers, func(a, b nodeagent.ContainerAllocation) int { return strings.Compare(a.Name, b.Name) })
	return pa, true
}

// PodAllocationsOf rebuilds the core's records from the live DeviceAllocations among das.
func PodAllocationsOf(das []kdv1alpha1.DeviceAllocation) []nodeagent.PodAllocation {
	var out []nodeagent.PodAllocation
	for i := range das {
		if pa, ok := podAllocationOf(&das[i]); ok {
			out = append(out, pa)
		}
	}
	return out
}

// conditionChanged reports whether want's condition of type t differs from current's in status,
// reason or message.
func conditionChanged(current *kdv1alpha1.DeviceAllocation, want kdv1alpha1.DeviceAllocationStatus, t string) bool {
	w := meta.FindStatusCondition(want.Conditions, t)
	if current == nil {
		return w != nil
	}
	g := meta.FindStatusCondition(current.Status.Conditions, t)
	if g == nil || w == nil {
		return (g == nil) != (w == nil)
	}
	return g.Status != w.Status || g.Reason != w.Reason || g.Message != w.Message
}

// The DeviceAllocation status computations this flow shares with the observe flow (package kube).
var (
	stamped           = kube.StampDeviceAllocation
	releasedStatus    = kube.ReleasedDeviceAllocationStatus
	statusUpToDate    = kube.DeviceAllocationStatusUpToDate
	apiRuntimeOptions = kube.APIRuntimeOptions
	summary           = kube.DeviceAllocationSummary
)
