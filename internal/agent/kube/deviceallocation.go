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

package kube

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
	"github.com/kubedevice/kubedevice/internal/contract"
	"github.com/kubedevice/kubedevice/internal/crashpoint"
	"github.com/kubedevice/kubedevice/internal/nodeagent"
	"github.com/kubedevice/kubedevice/internal/nodeagent/poddevices"
)

// What a DeviceAllocation says, computed the same way by every flow that writes one (the
// allocation flow for the devices the agent allocates, the observe flow for those the kubelet
// allocated): the containers' devices and runtime options, the summary, the transition times
// kept, the release. Each flow adds its own Allocated condition.

// DeviceAllocationConditions are the condition types the agent owns on a DeviceAllocation.
// Conflict belongs to the controller.
var DeviceAllocationConditions = []string{kdv1alpha1.DeviceAllocationAllocated, kdv1alpha1.DeviceAllocationHealthy, kdv1alpha1.DeviceAllocationReleased}

// MaxSummaryLength bounds a DeviceAllocation's status.summary.
const MaxSummaryLength = 1024

// DeviceAllocationContainers returns what alloc (nil when the pod holds nothing) says pod's
// containers hold, in the pod's order, init containers first, with the runtime options alloc
// recorded.
func DeviceAllocationContainers(pod *corev1.Pod, alloc *nodeagent.PodAllocation) []kdv1alpha1.ContainerAllocation {
	if alloc == nil {
		return nil
	}
	var out []kdv1alpha1.ContainerAllocation
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
		out = append(out, containerAllocation(c))
	}
	// Containers the pod spec does not name (it cannot change, so this is defensive) last,
	// by name.
	rest := make([]string, 0, len(byName))
	for name := range byName {
		rest = append(rest, name)
	}
	slices.Sort(rest)
	for _, name := range rest {
		out = append(out, containerAllocation(byName[name]))
	}
	return out
}

// NewDeviceAllocation returns the metadata and spec the agent applies for pod's DeviceAllocation.
func NewDeviceAllocation(pod *corev1.Pod) *kdv1alpha1.DeviceAllocation {
	return newDeviceAllocation(pod.Namespace, DeviceAllocationName(pod.Spec.NodeName, pod.Name, string(pod.UID)),
		kdv1alpha1.DeviceAllocationSpec{NodeName: pod.Spec.NodeName, PodName: pod.Name, PodUID: string(pod.UID)})
}

// newDeviceAllocation returns the metadata and spec the agent applies for the DeviceAllocation
// namespace/name of the pod spec names.
func newDeviceAllocation(namespace, name string, spec kdv1alpha1.DeviceAllocationSpec) *kdv1alpha1.DeviceAllocation {
	return &kdv1alpha1.DeviceAllocation{
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: namespace,
			Labels: map[string]string{
				kdv1alpha1.LabelNodeName: LabelValue(spec.NodeName),
				kdv1alpha1.LabelPodUID:   spec.PodUID,
			},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: spec.PodName, UID: types.UID(spec.PodUID)}},
		},
		Spec: spec,
	}
}

// WriteDeviceAllocation writes pod's DeviceAllocation whole, its metadata and spec and st (already
// stamped for the object), in one server-side apply: the kind has no status subresource, so the
// object is created with its status, and every later change of status is an apply of the same
// fields. It returns the object written.
func WriteDeviceAllocation(ctx context.Context, c client.Client, pod *corev1.Pod, st kdv1alpha1.DeviceAllocationStatus) (*kdv1alpha1.DeviceAllocation, error) {
	da := NewDeviceAllocation(pod)
	da.Status = st
	return da, ApplyWhole(ctx, c, DeviceAllocationGVK, da)
}

// DeviceAllocationMetaUpToDate reports whether da already has the labels, owner reference and
// spec the agent applies for pod.
func DeviceAllocationMetaUpToDate(da *kdv1alpha1.DeviceAllocation, pod *corev1.Pod) bool {
	want := NewDeviceAllocation(pod)
	for k, v := range want.Labels {
		if da.Labels[k] != v {
			return false
		}
	}
	return HasOwner(da.OwnerReferences, pod.UID) && da.Spec == want.Spec
}

// StampDeviceAllocation returns want for the object current (nil when there is none): its
// conditions keep the transition times current records while their status holds. want is not
// modified.
//
// The conditions carry no observedGeneration. A DeviceAllocation has no status subresource, so
// its generation counts every write, the agent's and the controller's (Conflict): the agent cannot
// know the generation its own apply makes without reading after writing, a generation read before
// it is stale once the write lands (and `kubectl wait --for=condition=...` takes a condition whose
// observedGeneration is below metadata.generation as not met), and stamping the current one would
// make each writer's apply outdate the other's conditions, one more write per write. The spec is
// immutable, so there is no newer spec for a condition to lag behind.
func StampDeviceAllocation(want kdv1alpha1.DeviceAllocationStatus, current *kdv1alpha1.DeviceAllocation) kdv1alpha1.DeviceAllocationStatus {
	st := want
	st.Conditions = make([]metav1.Condition, len(want.Conditions))
	for i, c := range want.Conditions {
		c.ObservedGeneration = 0
		var got *metav1.Condition
		if current != nil {
			got = meta.FindStatusCondition(current.Status.Conditions, c.Type)
		}
		st.Conditions[i] = contract.WithTransitionTime(c, got, c.LastTransitionTime)
	}
	return st
}

// ReleasedDeviceAllocationStatus returns current's status, as the agent owns it, with Released=True for reason.
func ReleasedDeviceAllocationStatus(current *kdv1alpha1.DeviceAllocation, reason, message string, now time.Time) kdv1alpha1.DeviceAllocationStatus {
	st := *current.Status.DeepCopy()
	st.Conditions = OwnedConditions(st.Conditions, DeviceAllocationConditions)
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{
		Type:               kdv1alpha1.DeviceAllocationReleased,
		Status:             metav1.ConditionTrue,
		Reason:             reason,
		Message:            message,
		LastTransitionTime: metav1.NewTime(now.Truncate(time.Second)),
	})
	// No observedGeneration on any condition the agent owns (StampDeviceAllocation).
	for i := range st.Conditions {
		st.Conditions[i].ObservedGeneration = 0
	}
	return st
}

// DeviceAllocationStatusUpToDate reports whether the object's status already says what want says,
// in the fields the agent owns. A condition's observedGeneration is not compared: the agent sets
// none (StampDeviceAllocation), and one an earlier agent set while the kind had a status
// subresource is no reason to write.
func DeviceAllocationStatusUpToDate(current *kdv1alpha1.DeviceAllocation, want kdv1alpha1.DeviceAllocationStatus) bool {
	if current == nil {
		return false
	}
	got := current.Status.DeepCopy()
	got.Conditions = withoutObservedGeneration(OwnedConditions(got.Conditions, DeviceAllocationConditions))
	w := want.DeepCopy()
	w.Conditions = withoutObservedGeneration(OwnedConditions(w.Conditions, DeviceAllocationConditions))
	return equality.Semantic.DeepEqual(got, w)
}

// withoutObservedGeneration zeroes the observedGeneration of conds, in place, and returns them.
func withoutObservedGeneration(conds []metav1.Condition) []metav1.Condition {
	for i := range conds {
		conds[i].ObservedGeneration = 0
	}
	return conds
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
	out.RuntimeOptions = APIRuntimeOptions(c.RuntimeOptions)
	return out
}

// APIRuntimeOptions converts the core's merged options; nil when there are none, as the API
// server returns an empty object.
func APIRuntimeOptions(o *poddevices.RunContainerOptions) *kdv1alpha1.ContainerRuntimeOptions {
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

// DeviceAllocationSummary lists the devices per resource, resource=id,id;resource=id, resources and IDs sorted, a
// device listed once however many containers of the pod hold it.
func DeviceAllocationSummary(containers []kdv1alpha1.ContainerAllocation) string {
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
	return Truncate(strings.Join(parts, ";"), MaxSummaryLength)
}

// DeviceCount is the number of distinct devices the containers hold.
func DeviceCount(containers []kdv1alpha1.ContainerAllocation) int {
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

// ReleaseDeviceAllocation marks da Released and deletes it: two writes, so that a watcher sees why
// it went (the delete event carries the object as last written), and so that, until the delete
// lands, the object counts as holding nothing: the controller's conflict audit and a rebuild of
// the node's allocations from the DeviceAllocations skip a Released one. It decides on the object
// as the API server has it, as the cache may still show one already gone. The Released write is
// the whole object (the kind has no status subresource): its metadata and spec as the agent
// applies them, from the object's spec, and its status with Released.
func ReleaseDeviceAllocation(ctx context.Context, c client.Client, apiReader client.Reader, written *Written, cached *kdv1alpha1.DeviceAllocation, reason, message string, now time.Time) error {
	if !cached.DeletionTimestamp.IsZero() {
		return nil
	}
	da := &kdv1alpha1.DeviceAllocation{}
	if err := apiReader.Get(ctx, client.ObjectKeyFromObject(cached), da); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("getting DeviceAllocation %s: %w", klog.KObj(cached), err)
	}
	if !da.DeletionTimestamp.IsZero() || da.UID != cached.UID {
		return nil
	}
	if !meta.IsStatusConditionTrue(da.Status.Conditions, kdv1alpha1.DeviceAllocationReleased) {
		rel := newDeviceAllocation(da.Namespace, da.Name, da.Spec)
		rel.Status = ReleasedDeviceAllocationStatus(da, reason, message, now)
		written.Wrote(client.ObjectKeyFromObject(da))
		if err := ApplyWhole(ctx, c, DeviceAllocationGVK, rel); err != nil {
			if apierrors.IsNotFound(err) {
				return nil
			}
			return err
		}
		crashpoint.Hit(crashpoint.ReleaseMarked)
	}
	written.Wrote(client.ObjectKeyFromObject(da))
	if err := Delete(ctx, c, DeviceAllocationGVK.Kind, da); err != nil {
		return err
	}
	ctrl.LoggerFrom(ctx).Info("Released and deleted a DeviceAllocation", "deviceAllocation", klog.KObj(da), "reason", reason)
	return nil
}
