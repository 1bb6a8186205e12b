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

package podresources

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/kubedevice/kubedevice/internal/nodeagent/poddevices"
)

// List returns the active pods of the node, sorted by namespace and name, with the devices each
// container holds: restartable init containers (sidecars) first, then app containers; regular
// init containers are not listed, as the kubelet's List.
func (s *Server) List(ctx context.Context, _ *podresourcesapi.ListPodResourcesRequest) (*podresourcesapi.ListPodResourcesResponse, error) {
	pods, err := s.pods.ActivePods(ctx)
	if err != nil {
		return nil, providerError(ctx, err)
	}
	pods = slices.Clone(pods)
	slices.SortFunc(pods, func(a, b *corev1.Pod) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name), strings.Compare(string(a.UID), string(b.UID)))
	})
	out := make([]*podresourcesapi.PodResources, len(pods))
	for i, pod := range pods {
		out[i] = s.podResources(pod)
	}
	return &podresourcesapi.ListPodResourcesResponse{PodResources: out}, nil
}

// Get returns one pod of the node, in the layout of List. A pod that is not bound to the node is
// not found, with the kubelet's message; a terminal pod is found (as by the kubelet), and its
// containers hold nothing.
func (s *Server) Get(ctx context.Context, req *podresourcesapi.GetPodResourcesRequest) (*podresourcesapi.GetPodResourcesResponse, error) {
	pod, err := s.pods.Pod(ctx, req.GetPodNamespace(), req.GetPodName())
	if err != nil {
		return nil, providerError(ctx, err)
	}
	if pod == nil {
		return nil, status.Errorf(codes.NotFound, "pod %s in namespace %s not found", req.GetPodName(), req.GetPodNamespace())
	}
	return &podresourcesapi.GetPodResourcesResponse{PodResources: s.podResources(pod)}, nil
}

// GetAllocatableResources returns the devices that can be allocated: the healthy ones that are
// not cordoned, one entry per (device, NUMA node) as List. CPUs and memory are the kubelet's, not
// kubedevice's, and are left empty.
func (s *Server) GetAllocatableResources(context.Context, *podresourcesapi.AllocatableResourcesRequest) (*podresourcesapi.AllocatableResourcesResponse, error) {
	var devs []poddevices.ContainerDevice
	for resource, instances := range s.devices.GetAllocatableDevices() {
		for id, d := range instances {
			nodes := d.GetTopology().GetNodes()
			if len(nodes) == 0 {
				devs = append(devs, poddevices.ContainerDevice{ResourceName: resource, DeviceID: id, NUMANode: poddevices.NodeWithoutTopology})
				continue
			}
			for _, n := range nodes {
				devs = append(devs, poddevices.ContainerDevice{ResourceName: resource, DeviceID: id, NUMANode: n.GetID()})
			}
		}
	}
	slices.SortFunc(devs, func(a, b poddevices.ContainerDevice) int {
		return cmp.Or(strings.Compare(a.ResourceName, b.ResourceName), strings.Compare(a.DeviceID, b.DeviceID), cmp.Compare(a.NUMANode, b.NUMANode))
	})
	return &podresourcesapi.AllocatableResourcesResponse{Devices: containerDevices(devs)}, nil
}

// podResources lays out one pod: sidecars, then app containers. A terminal pod's devices are
// freed, or about to be: its containers are listed without them.
func (s *Server) podResources(pod *corev1.Pod) *podresourcesapi.PodResources {
	out := &podresourcesapi.PodResources{
		Name:       pod.Name,
		Namespace:  pod.Namespace,
		Containers: make([]*podresourcesapi.ContainerResources, 0, len(pod.Spec.InitContainers)+len(pod.Spec.Containers)),
	}
	terminal := pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
	add := func(c *corev1.Container) {
		cr := &podresourcesapi.ContainerResources{Name: c.Name}
		if !terminal {
			cr.Devices = containerDevices(s.devices.GetDevices(string(pod.UID), c.Name))
		}
		out.Containers = append(out.Containers, cr)
	}
	for i := range pod.Spec.InitContainers {
		if c := &pod.Spec.InitContainers[i]; c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			add(c)
		}
	}
	for i := range pod.Spec.Containers {
		add(&pod.Spec.Containers[i])
	}
	return out
}

// containerDevices converts devices to the API's entries, one per (device, NUMA node), with a
// nil topology for a device that has none, in the order given.
func containerDevices(devs []poddevices.ContainerDevice) []*podresourcesapi.ContainerDevices {
	if len(devs) == 0 {
		return nil
	}
	out := make([]*podresourcesapi.ContainerDevices, len(devs))
	for i, d := range devs {
		cd := &podresourcesapi.ContainerDevices{ResourceName: d.ResourceName, DeviceIds: []string{d.DeviceID}}
		if d.NUMANode != poddevices.NodeWithoutTopology {
			cd.Topology = &podresourcesapi.TopologyInfo{Nodes: []*podresourcesapi.NUMANode{{ID: d.NUMANode}}}
		}
		out[i] = cd
	}
	return out
}

// providerError turns a failure to read the node's pods into a gRPC status: the call's own
// deadline or cancellation as such, anything else as Unavailable.
func providerError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return status.FromContextError(ctx.Err()).Err()
	}
	return status.Error(codes.Unavailable, fmt.Sprintf("reading the node's pods: %v", err))
}
