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
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
	"github.com/kubedevice/kubedevice/internal/agent/kube"
	"github.com/kubedevice/kubedevice/internal/contract"
	"github.com/kubedevice/kubedevice/internal/nodeagent"
	"github.com/kubedevice/kubedevice/internal/nodeagent/poddevices"
)

// deviceAllocationConditions are the condition types the agent owns on a DeviceAllocation.
// Conflict belongs to the controller.
var deviceAllocationConditions = []string{kdv1alpha1.DeviceAllocationAllocated, kdv1alpha1.DeviceAllocationReleased}

// Bounds of the API fields the agent fills from free text.
const (
	maxSummaryLength = 1024
	maxMessageLength = 32768
)

// desiredStatus computes the status of pod's DeviceAllocation: what alloc (nil when the pod holds
// nothing) says its containers hold, in the pod's order, init containers first, with the runtime
// options alloc recorded; and the Allocated condition, False with the core's reason and message
// when allocErr is not nil, that changed at now. It is not yet stamped for an object (stamped).
func desiredStatus(pod *corev1.Pod, alloc *nodeagent.PodAllocation, allocErr error, now time.Time) kdv1alpha1.DeviceAllocationStatus {
	var st kdv1alpha1.DeviceAllocationStatus
	if alloc != nil {
		byName := make(map[string]nodeagent.ContainerAllocation, len(alloc.Containers))
		for _, c := range alloc.Containers {
			byName[c.Name] = c
		}
		for _, name := range containerOrder(pod) {
			c, ok := byName[name]
			if !ok {
				continue
			}
			delete(byName, name)
			st.Containers = append(st.Containers, containerAllocation(c))
		}
		// Containers the pod spec does not name (it cannot change, so this is defensive) last,
		// by name.
		rest := make([]string, 0, len(byName))
		for name := range byName {
			rest = append(rest, name)
		}
		slices.Sort(rest)
		for _, name := range rest {
			st.Containers = append(st.Containers, containerAllocation(byName[name]))
		}
	}
	st.Summary = summary(st.Containers)

	c := metav1.Condition{Type: kdv1alpha1.DeviceAllocationAllocated, LastTransitionTime: metav1.NewTime(now.Truncate(time.Second))}
	if allocErr != nil {
		c.Status = metav1.ConditionFalse
		c.Reason = string(nodeagent.AllocationReasonOf(allocErr))
		c.Message = kube.Truncate(allocErr.Error(), maxMessageLength)
	} else {
		c.Status, c.Reason = metav1.ConditionTrue, kdv1alpha1.ReasonAllocated
		c.Message = fmt.Sprintf("The pod's %d devices are allocated and checkpointed on node %s.", deviceCount(st.Containers), pod.Spec.NodeName)
	}
	st.Conditions = []metav1.Condition{c}
	return st
}

// stamped returns want for the object current (nil when there is none) at generation: its
// conditions observe generation, and keep the transition times current records while their
// status holds. want is not modified.
func stamped(want kdv1alpha1.DeviceAllocationStatus, current *kdv1alpha1.DeviceAllocation, generation int64) kdv1alpha1.DeviceAllocationStatus {
	st := want
	st.Conditions = make([]metav1.Condition, len(want.Conditions))
	for i, c := range want.Conditions {
		c.ObservedGeneration = generation
		var got *metav1.Condition
		if current != nil {
			got = meta.FindStatusCondition(current.Status.Conditions, c.Type)
		}
		st.Conditions[i] = contract.WithTransitionTime(c, got, c.LastTransitionTime)
	}
	return st
}

// releasedStatus returns current's status, as the agent owns it, with Released=True for reason.
func releasedStatus(current *kdv1alpha1.DeviceAllocation, reason, message string, now time.Time) kdv1alpha1.DeviceAllocationStatus {
	st := *current.Status.DeepCopy()
	st.Conditions = kube.OwnedConditions(st.Conditions, deviceAllocationConditions)
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{
		Type:               kdv1alpha1.DeviceAllocationReleased,
		Status:             metav1.ConditionTrue,
		ObservedGeneration: current.Generation,
		Reason:             reason,
		Message:            message,
		LastTransitionTime: metav1.NewTime(now.Truncate(time.Second)),
	})
	return st
}

// statusUpToDate reports whether the object's status already says what want says,
// in the fields the agent owns.
func statusUpToDate(current *kdv1alpha1.DeviceAllocation, want kdv1alpha1.DeviceAllocationStatus) bool {
	if current == nil {
		return false
	}
	got := current.Status.DeepCopy()
	got.Conditions = kube.OwnedConditions(got.Conditions, deviceAllocationConditions)
	w := want.DeepCopy()
	w.Conditions = kube.OwnedConditions(w.Conditions, deviceAllocationConditions)
	return equality.Semantic.DeepEqual(got, w)
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

// containerOrder returns the names of the pod's containers that can hold devices, init containers
// first, each list in spec order.
func containerOrder(pod *corev1.Pod) []string {
	names := make([]string, 0, len(pod.Spec.InitContainers)+len(pod.Spec.Containers))
	for i := range pod.Spec.InitContainers {
		names = append(names, pod.Spec.InitContainers[i].Name)
	}
	for i := range pod.Spec.Containers {
		names = append(names, pod.Spec.Containers[i].Name)
	}
	return names
}

func containerAllocation(c nodeagent.ContainerAllocation) kdv1alpha1.ContainerAllocation {
	out := kdv1alpha1.ContainerAllocation{Name: c.Name}
	for _, r := range c.Resources {
		ids := slices.Clone(r.DeviceIDs)
		slices.Sort(ids)
		out.Resources = append(out.Resources, kdv1alpha1.ResourceAllocation{
			ResourceName: r.ResourceName,
			DeviceIDs:    ids,
			NUMANodes:    slices.Clone(r.NUMANodes),
		})
	}
	slices.SortFunc(out.Resources, func(a, b kdv1alpha1.ResourceAllocation) int { return strings.Compare(a.ResourceName, b.ResourceName) })
	out.RuntimeOptions = apiRuntimeOptions(c.RuntimeOptions)
	return out
}

// apiRuntimeOptions converts the core's merged options; nil when there are none, as the API
// server returns an empty object.
func apiRuntimeOptions(o *poddevices.RunContainerOptions) *kdv1alpha1.ContainerRuntimeOptions {
	if o == nil || len(o.Envs)+len(o.Mounts)+len(o.Devices)+len(o.Annotations)+len(o.CDIDevices) == 0 {
		return nil
	}
	out := &kdv1alpha1.ContainerRuntimeOptions{CDIDevices: slices.Clone(o.CDIDevices)}
	for _, e := range o.Envs {
		out.Envs = append(out.Envs, kdv1alpha1.EnvVar{Name: e.Name, Value: e.Value})
	}
	for _, m := range o.Mounts {
		out.Mounts = append(out.Mounts, kdv1alpha1.Mount{ContainerPath: m.ContainerPath, HostPath: m.HostPath, ReadOnly: m.ReadOnly})
	}
	for _, d := range o.Devices {
		out.Devices = append(out.Devices, kdv1alpha1.DeviceSpec{ContainerPath: d.ContainerPath, HostPath: d.HostPath, Permissions: d.Permissions})
	}
	for _, a := range o.Annotations {
		out.Annotations = append(out.Annotations, kdv1alpha1.Annotation{Key: a.Key, Value: a.Value})
	}
	return out
}

// coreRuntimeOptions is apiRuntimeOptions' inverse, for rebuilding the core's state from
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

// summary lists the devices per resource, resource=id,id;resource=id, resources and IDs sorted, a
// device listed once however many containers of the pod hold it.
func summary(containers []kdv1alpha1.ContainerAllocation) string {
	ids := map[string][]string{}
	for _, c := range containers {
		for _, r := range c.Resources {
			ids[r.ResourceName] = append(ids[r.ResourceName], r.DeviceIDs...)
		}
	}
	resources := make([]string, 0, len(ids))
	for r := range ids {
		resources = append(resources, r)
	}
	slices.Sort(resources)
	parts := make([]string, 0, len(resources))
	for _, r := range resources {
		l := ids[r]
		slices.Sort(l)
		parts = append(parts, r+"="+strings.Join(slices.Compact(l), ","))
	}
	return kube.Truncate(strings.Join(parts, ";"), maxSummaryLength)
}

// deviceCount is the number of distinct devices the containers hold.
func deviceCount(containers []kdv1alpha1.ContainerAllocation) int {
	seen := map[[2]string]bool{}
	for _, c := range containers {
		for _, r := range c.Resources {
			for _, id := range r.DeviceIDs {
				seen[[2]string{r.ResourceName, id}] = true
			}
		}
	}
	return len(seen)
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
