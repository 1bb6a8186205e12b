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

package nodeagent

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"

	"github.com/kubedevice/kubedevice/internal/nodeagent/poddevices"
)

// GetDeviceRunContainerOptions returns what container needs at creation to
// use its devices: the plugins' Allocate responses of its resources merged
// with the kubelet's rules (poddevices.RunContainerOptions, deterministic;
// conflicts are logged), or nil if it holds no device. As the kubelet's
// (GetDeviceRunContainerOptions in devicemanager/manager.go), it first calls
// PreStartContainer for every resource whose plugin asks for it, with the
// container's devices, and returns the kubelet's error if that fails.
//
// A container of a pod that has not finished and is missing devices it asks
// for (or whose allocation was restored across a node reboot) is allocated
// first (Allocate), as the kubelet re-allocates on this path; unlike the
// kubelet, that happens before PreStartContainer, so a plugin that requires
// it sees the new devices. A finished pod (Succeeded or Failed) is never
// allocated again.
//
// The agent does not call it (it allocates at bind time with AllocatePod
// and injects from PodAllocation; the DRA flow prepares claims with
// PrepareClaim): with Allocate, it is kept, tested against the kubelet's
// checklist, as the kubelet's per-container entry point.
func (m *Manager) GetDeviceRunContainerOptions(ctx context.Context, pod *v1.Pod, container *v1.Container) (*poddevices.RunContainerOptions, error) {
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "pod", klog.KObj(pod), "podUID", pod.UID, "containerName", container.Name)
	ctx = klog.NewContext(ctx, logger)
	uid := string(pod.UID)
	reqs := containerRequests(pod, container)

	if !isTerminal(pod) {
		m.mu.Lock()
		missing := false
		for _, rq := range reqs {
			if m.pods.ContainerDevices(uid, container.Name, rq.resource) == nil || m.isStaleLocked(uid, container.Name, rq.resource) {
				missing = true
				break
			}
		}
		m.mu.Unlock()
		if missing {
			if err := m.Allocate(ctx, pod, container); err != nil {
				return nil, err
			}
		}
	}

	if err := m.preStartContainer(ctx, uid, reqs, container.Name); err != nil {
		return nil, err
	}

	m.mu.Lock()
	opts, conflicts := m.pods.RunContainerOptions(uid, container.Name)
	m.mu.Unlock()
	for _, c := range conflicts {
		logger.Info("Device plugins set a container setting differently; keeping the first",
			"kind", c.Kind, "key", c.Key, "keptResource", c.KeptResource, "keptValue", c.KeptValue,
			"droppedResource", c.DroppedResource, "droppedValue", c.DroppedValue)
	}
	return opts, nil
}

// PreStartContainer calls PreStartContainer, with the container's devices,
// for every resource of container whose plugin requires it (PreStartRequired
// in GetDevicePluginOptions), in resource name order, and returns the
// kubelet's error for the first one that fails. It is the first step of
// GetDeviceRunContainerOptions, for a caller that prepares each start of a
// container apart from reading its options: the kubelet calls it before every
// start, restarts and retries of a failed creation included. It allocates
// nothing; a container that holds no devices of such a resource gets the
// kubelet's "no devices found allocated" error.
func (m *Manager) PreStartContainer(ctx context.Context, pod *v1.Pod, container *v1.Container) error {
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "pod", klog.KObj(pod), "podUID", pod.UID, "containerName", container.Name)
	ctx = klog.NewContext(ctx, logger)
	return m.preStartContainer(ctx, string(pod.UID), containerRequests(pod, container), container.Name)
}

// PreStartRequired reports whether the plugin serving resource asked for
// PreStartContainer before each start of a container holding its devices,
// and whether that is known: not for an unknown resource, nor for one whose
// plugin has not registered since the checkpoint restored it (no options
// yet; PreStartContainer skips it then, as the kubelet's endpoint restored
// from its checkpoint). A disconnected plugin keeps the options it had.
func (m *Manager) PreStartRequired(resource string) (required, known bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.resources[resource]
	if r == nil || r.primary.opts() == nil {
		return false, false
	}
	return r.primary.opts().GetPreStartRequired(), true
}

func (m *Manager) preStartContainer(ctx context.Context, uid string, reqs []deviceRequest, container string) error {
	for _, rq := range reqs {
		if err := m.callPreStartContainerIfNeeded(ctx, uid, container, rq.resource); err != nil {
			return err
		}
	}
	return nil
}

// callPreStartContainerIfNeeded is the kubelet's function of the same name:
// PreStartContainer with the container's devices of resource, if the
// resource's plugin requires it, bounded by Config.PreStartTimeout.
func (m *Manager) callPreStartContainerIfNeeded(ctx context.Context, uid, container, resource string) error {
	m.mu.Lock()
	r := m.resources[resource]
	devs := m.pods.ContainerDevices(uid, container, resource)
	if r == nil {
		m.mu.Unlock()
		if devs == nil {
			// Not a device plugin resource: the kubelet skips it.
			return nil
		}
		return fmt.Errorf(errEndpointNotFound, resource)
	}
	ep := r.primary
	m.mu.Unlock()
	if !ep.opts().GetPreStartRequired() {
		return nil
	}
	if devs == nil {
		return fmt.Errorf(errNoDevicesForPreStart, uid, container, resource)
	}
	klog.FromContext(ctx).V(4).Info("Calling PreStartContainer", "resourceName", resource, "deviceIDs", sets.List(devs))
	rctx, cancel := context.WithTimeout(ctx, m.cfg.PreStartTimeout)
	defer cancel()
	if err := ep.preStartContainer(rctx, sets.List(devs)); err != nil {
		return fmt.Errorf(errPreStartContainerCall, err)
	}
	return nil
}
