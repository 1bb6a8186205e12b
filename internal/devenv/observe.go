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

package devenv

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
)

// getNodeDevice returns the demo node's NodeDevice of the Gopher resource, nil when there is none
// yet. The demo's one gopher fits in one shard.
func getNodeDevice(ctx context.Context, c client.Client) (*kdv1alpha1.NodeDevice, error) {
	var list kdv1alpha1.NodeDeviceList
	if err := c.List(ctx, &list, client.MatchingFields{"spec.nodeName": NodeName}); err != nil {
		return nil, fmt.Errorf("listing the NodeDevices of %s: %w", NodeName, err)
	}
	for i := range list.Items {
		if list.Items[i].Spec.ResourceName == ResourceName {
			return &list.Items[i], nil
		}
	}
	return nil, nil
}

// nodeDeviceReady says whether the NodeDevice shows the plugin registered with the gophers, and,
// with deviceCapacity (the device plugin path), all of them allocatable.
func nodeDeviceReady(nd *kdv1alpha1.NodeDevice, gophers []string, deviceCapacity bool) (bool, string, error) {
	st := nd.Status
	state := "no plugin"
	if st.Plugin != nil {
		state = string(st.Plugin.State)
	}
	var ids []string
	for _, dev := range st.Devices {
		ids = append(ids, dev.ID+"("+string(dev.Health)+")")
	}
	seen := fmt.Sprintf("NodeDevice %s: plugin %s, capacity %d, allocatable %d, devices [%s]",
		nd.Name, state, st.Capacity, st.Allocatable, strings.Join(ids, " "))
	var s served
	if s.add(nd); s.rejected != "" {
		seen += "; " + s.rejected
	}
	ready := state == string(kdv1alpha1.PluginStateRegistered) && len(st.Devices) == len(gophers)
	for i := 0; ready && i < len(gophers); i++ {
		ready = st.Devices[i].ID == gophers[i]
	}
	// Through DRA the devices are offered in ResourceSlices, not as node capacity.
	if deviceCapacity {
		n := int64(len(gophers))
		ready = ready && int64(st.Capacity) == n && int64(st.Allocatable) == n
	}
	return ready, seen, nil
}

// nodeResource returns the demo node's status.capacity and status.allocatable of res, empty when
// absent.
func nodeResource(ctx context.Context, c client.Client, res string) (capacity, allocatable string, err error) {
	var node corev1.Node
	if err := c.Get(ctx, client.ObjectKey{Name: NodeName}, &node); err != nil {
		return "", "", fmt.Errorf("getting node %s: %w", NodeName, err)
	}
	if q, ok := node.Status.Capacity[corev1.ResourceName(res)]; ok {
		capacity = q.String()
	}
	if q, ok := node.Status.Allocatable[corev1.ResourceName(res)]; ok {
		allocatable = q.String()
	}
	return capacity, allocatable, nil
}

// podBound is done when the pod is bound to the demo node.
func podBound(c client.Client, name string) condition {
	return func(ctx context.Context) (bool, string, error) {
		var pod corev1.Pod
		if err := c.Get(ctx, client.ObjectKey{Namespace: PodNamespace, Name: name}, &pod); err != nil {
			return false, "", fmt.Errorf("getting pod %s: %w", name, err)
		}
		if pod.Spec.NodeName == NodeName {
			return true, "", nil
		}
		return false, "pod is not bound" + scheduledCondition(&pod), nil
	}
}

// scheduledCondition describes the pod's PodScheduled condition, if any.
func scheduledCondition(pod *corev1.Pod) string {
	for _, cond := range pod.Status.Conditions {
		if cond.Type == corev1.PodScheduled {
			return fmt.Sprintf("; PodScheduled=%s %s: %s", cond.Status, cond.Reason, cond.Message)
		}
	}
	return ""
}

// allocationHolds is done when the pod's DeviceAllocation is Allocated with the demo's gopher.
func allocationHolds(c client.Client, pod *corev1.Pod) condition {
	return func(ctx context.Context) (bool, string, error) {
		var list kdv1alpha1.DeviceAllocationList
		if err := c.List(ctx, &list, client.InNamespace(pod.Namespace)); err != nil {
			return false, "", fmt.Errorf("listing DeviceAllocations: %w", err)
		}
		for _, da := range list.Items {
			if da.Spec.PodName != pod.Name || da.Spec.PodUID != string(pod.UID) {
				continue
			}
			cond := apimeta.FindStatusCondition(da.Status.Conditions, kdv1alpha1.DeviceAllocationAllocated)
			held := heldDevices(&da)
			seen := fmt.Sprintf("DeviceAllocation %s holds [%s]", da.Name, strings.Join(held, " "))
			if cond != nil {
				seen += fmt.Sprintf(", Allocated=%s %s: %s", cond.Status, cond.Reason, cond.Message)
			}
			ok := cond != nil && cond.Status == "True" && slices.Equal(held, []string{ResourceName + "/" + GopherID})
			return ok, seen, nil
		}
		return false, "no DeviceAllocation of " + pod.Name, nil
	}
}

// heldDevices lists the devices a DeviceAllocation records as resource/id, sorted.
func heldDevices(da *kdv1alpha1.DeviceAllocation) []string {
	var held []string
	for _, ctr := range da.Status.Containers {
		for _, r := range ctr.Resources {
			for _, id := range r.DeviceIDs {
				held = append(held, r.ResourceName+"/"+id)
			}
		}
	}
	slices.Sort(held)
	return held
}

// schedulingFailed is done when the scheduler has reported, with a FailedScheduling event, that
// no node has a gopher left for the pod, and the pod is still unbound.
func schedulingFailed(c client.Client, pod *corev1.Pod) condition {
	return func(ctx context.Context) (bool, string, error) {
		var current corev1.Pod
		if err := c.Get(ctx, client.ObjectKeyFromObject(pod), &current); err != nil {
			return false, "", fmt.Errorf("getting pod %s: %w", pod.Name, err)
		}
		if current.Spec.NodeName != "" {
			return false, "pod was bound to " + current.Spec.NodeName, nil
		}
		var events corev1.EventList
		if err := c.List(ctx, &events, client.InNamespace(pod.Namespace),
			client.MatchingFields{"involvedObject.name": pod.Name}); err != nil {
			return false, "", fmt.Errorf("listing the events of pod %s: %w", pod.Name, err)
		}
		seen := "no FailedScheduling event" + scheduledCondition(&current)
		for _, e := range events.Items {
			if e.InvolvedObject.UID != pod.UID || e.Reason != failedScheduling {
				continue
			}
			if strings.Contains(e.Message, insufficientMessage) {
				return true, "", nil
			}
			seen = "FailedScheduling: " + e.Message
		}
		return false, seen, nil
	}
}
