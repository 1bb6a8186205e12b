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
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
	"github.com/kubedevice/kubedevice/internal/nodeagent/registration"
)

// MirrorPodAnnotation is the kubelet's annotation on a static pod's mirror pod: the static pod's
// UID, which is the UID the container runtime knows the pod by.
const MirrorPodAnnotation = "kubernetes.io/config.mirror"

// Pods reads the pods bound to one node from the informer cache, which holds that node's pods
// only (the agent's cache options).
type Pods struct {
	Client   client.Reader
	NodeName string
}

// Active lists the pods of the node that are not terminal, from the cache. Listing a cached kind
// waits for its informer to sync, so the list is never an empty, unsynced view.
func (p Pods) Active(ctx context.Context) ([]*corev1.Pod, error) {
	list := &corev1.PodList{}
	if err := p.Client.List(ctx, list); err != nil {
		return nil, fmt.Errorf("listing the pods of node %q: %w", p.NodeName, err)
	}
	active := make([]*corev1.Pod, 0, len(list.Items))
	for i := range list.Items {
		if pod := &list.Items[i]; pod.Spec.NodeName == p.NodeName && !IsTerminal(pod) {
			active = append(active, pod)
		}
	}
	return active, nil
}

// Get returns the cached pod namespace/name if it is bound to the node, in any phase; nil when
// there is none.
func (p Pods) Get(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	pod := &corev1.Pod{}
	if err := p.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, pod); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("getting pod %s/%s from the cache: %w", namespace, name, err)
	}
	if pod.Spec.NodeName != p.NodeName {
		return nil, nil
	}
	return pod, nil
}

// IsTerminal reports whether the pod ended: Succeeded or Failed.
func IsTerminal(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

// RuntimeUID is the UID the container runtime knows pod by: a mirror pod's static pod UID, else
// the pod's UID.
func RuntimeUID(pod *corev1.Pod) string {
	if uid := pod.Annotations[MirrorPodAnnotation]; uid != "" {
		return uid
	}
	return string(pod.UID)
}

// RequestedResources returns the extended resources the pod's containers limit, sorted: those a
// device plugin may serve.
func RequestedResources(pod *corev1.Pod) []string {
	var out []string
	for i := range pod.Spec.InitContainers {
		out = append(out, ContainerResources(&pod.Spec.InitContainers[i])...)
	}
	for i := range pod.Spec.Containers {
		out = append(out, ContainerResources(&pod.Spec.Containers[i])...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// ContainerResources returns the extended resources c limits, unsorted.
func ContainerResources(c *corev1.Container) []string {
	var out []string
	for name, q := range c.Resources.Limits {
		if !q.IsZero() && registration.IsExtendedResourceName(string(name)) {
			out = append(out, string(name))
		}
	}
	return out
}

// ContainerNamed returns the pod's init or app container named name; nil when there is none.
func ContainerNamed(pod *corev1.Pod, name string) *corev1.Container {
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == name {
			return &pod.Spec.InitContainers[i]
		}
	}
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == name {
			return &pod.Spec.Containers[i]
		}
	}
	return nil
}

// Truncate cuts s to at most n bytes, at a rune boundary, marking the cut with "...".
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("...")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}

// HasOwner reports whether refs name the owner of UID uid.
func HasOwner(refs []metav1.OwnerReference, uid types.UID) bool {
	return slices.ContainsFunc(refs, func(r metav1.OwnerReference) bool { return r.UID == uid })
}

// PodPhaseOrDeletionChanged passes the pod updates that matter to a pod's devices: a changed
// phase (a pod starting or ending) and the start of its deletion. The allocation and observe
// flows watch pods through it.
func PodPhaseOrDeletionChanged(e event.UpdateEvent) bool {
	oldPod, okOld := e.ObjectOld.(*corev1.Pod)
	newPod, okNew := e.ObjectNew.(*corev1.Pod)
	if !okOld || !okNew {
		return true
	}
	return oldPod.Status.Phase != newPod.Status.Phase || oldPod.DeletionTimestamp.IsZero() != newPod.DeletionTimestamp.IsZero()
}

// PodOfDeviceAllocation maps a DeviceAllocation to its pod's key.
func PodOfDeviceAllocation(_ context.Context, o client.Object) []reconcile.Request {
	da, ok := o.(*kdv1alpha1.DeviceAllocation)
	if !ok {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: da.Namespace, Name: da.Spec.PodName}}}
}
