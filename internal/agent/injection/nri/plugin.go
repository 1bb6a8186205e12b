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

package nri

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/containerd/nri/pkg/api"
	nriplugin "github.com/containerd/nri/pkg/plugin"
	"github.com/go-logr/logr"
	"sigs.k8s.io/yaml"
)

// RequiredPluginsAnnotation is the pod annotation with which containerd's default NRI validator
// refuses to create a pod's containers unless every plugin it lists (a JSON or YAML list of
// plugin names) is connected: "required-plugins.noderesource.dev/pod". A container-scoped
// variant (…/container.<name>) takes precedence for that container.
const RequiredPluginsAnnotation = nriplugin.RequiredPluginsAnnotation + "/pod"

// Results of a CreateContainer request, as counted in kubedevice_agent_nri_create_container_total.
const (
	resultInjected  = "injected"
	resultUntouched = "untouched"
	resultRefused   = "refused"
)

// ErrDevicesNotReady is the error (wrapped) with which a container is refused because the
// devices of its pod are not allocated yet, or because PreStartContainer has not run (or failed)
// for this start of a container whose plugin requires it. containerd fails the creation and the
// kubelet retries it.
var ErrDevicesNotReady = errors.New("the pod's kubedevice devices are not ready")

// PodChecker answers for pods the index has not recorded yet: those the agent's pod controller
// has not reconciled since they were bound.
type PodChecker interface {
	// NeedsDevices reports whether the pod namespace/name, known to the runtime by uid, is bound
	// to the node and asks for resources the agent's device manager serves. It must answer from
	// memory (the agent's informer cache).
	NeedsDevices(ctx context.Context, namespace, name, uid string) (bool, error)
}

// plugin is the NRI plugin: it handles CreateContainer, and nothing else, from the index and the
// grants.
type plugin struct {
	name   string
	index  *Index
	grants *Grants
	pods   PodChecker
	logger logr.Logger
}

// CreateContainer gives a container the devices its pod holds: envs, mounts, device nodes and
// their cgroup rules, annotations and CDI devices. A container of a pod that holds no kubedevice
// device, or that holds none itself, is left untouched. A container of a pod that asks for
// kubedevice devices not allocated yet, or a container whose plugin requires PreStartContainer
// and which has no grant for this start, is refused with ErrDevicesNotReady. It reads memory only:
// containerd calls the plugins one container at a time, node-wide, and gives up on a plugin
// after its request timeout (2 s), creating the container without the adjustment.
func (p *plugin) CreateContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	start := time.Now()
	adj, result, err := p.createContainer(ctx, pod, ctr)
	createContainerTotal.WithLabelValues(result).Inc()
	// Logger values are built only for a message that is logged: this runs for every container
	// of the node.
	switch logger := p.logger; result {
	case resultRefused:
		logger.Info("Refused a container whose devices are not ready", "pod", pod.GetNamespace()+"/"+pod.GetName(), "podUID", pod.GetUid(),
			"container", ctr.GetName(), "err", err.Error(), "duration", time.Since(start))
	case resultInjected:
		if v := logger.V(2); v.Enabled() {
			v.Info("Injected devices into a container", "pod", pod.GetNamespace()+"/"+pod.GetName(), "podUID", pod.GetUid(),
				"container", ctr.GetName(), "envs", len(adj.GetEnv()), "mounts", len(adj.GetMounts()),
				"devices", len(adj.GetLinux().GetDevices()), "cdiDevices", len(adj.GetCDIDevices()), "duration", time.Since(start))
		}
	default:
		if v := logger.V(5); v.Enabled() {
			v.Info("Left a container untouched", "pod", pod.GetNamespace()+"/"+pod.GetName(), "podUID", pod.GetUid(),
				"container", ctr.GetName(), "duration", time.Since(start))
		}
	}
	return adj, nil, err
}

func (p *plugin) createContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, string, error) {
	e := p.index.lookup(pod.GetUid())
	if e == nil {
		return p.unknownPod(ctx, pod, ctr)
	}
	switch e.state {
	case podPending:
		return nil, resultRefused, fmt.Errorf("injecting the devices of container %q of pod %s/%s: %w: %s",
			ctr.GetName(), pod.GetNamespace(), pod.GetName(), ErrDevicesNotReady, e.reason)
	case podReady:
		c := e.containers[ctr.GetName()]
		if c.Options == nil {
			return nil, resultUntouched, nil
		}
		adj, err := adjustment(c.Options, p.index.stats)
		if err != nil {
			return nil, resultRefused, fmt.Errorf("injecting the devices of container %q of pod %s/%s: %w",
				ctr.GetName(), pod.GetNamespace(), pod.GetName(), err)
		}
		if p.grants.Required(c.Resources) {
			// Taken last, so that a creation refused for another reason keeps the grant.
			if why, ok := p.grants.admit(pod.GetNamespace(), pod.GetName(), pod.GetUid(), ctr.GetName(), ctr.GetId()); !ok {
				return nil, resultRefused, fmt.Errorf("injecting the devices of container %q of pod %s/%s: %w: %s",
					ctr.GetName(), pod.GetNamespace(), pod.GetName(), ErrDevicesNotReady, why)
			}
		}
		return adj, resultInjected, nil
	default:
		return nil, resultUntouched, nil
	}
}

// unknownPod decides for a pod the index has not recorded: refused if it requires this plugin by
// annotation or asks for resources the agent serves (the agent has not allocated its devices
// yet), untouched otherwise.
func (p *plugin) unknownPod(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, string, error) {
	notYet := func(why string) error {
		return fmt.Errorf("injecting the devices of container %q of pod %s/%s: %w: %s",
			ctr.GetName(), pod.GetNamespace(), pod.GetName(), ErrDevicesNotReady, why)
	}
	if requires(pod, ctr.GetName(), p.name) {
		return nil, resultRefused, notYet("the kubedevice agent has not seen the pod yet")
	}
	needs, err := p.pods.NeedsDevices(ctx, pod.GetNamespace(), pod.GetName(), pod.GetUid())
	if err != nil {
		return nil, resultRefused, notYet(fmt.Sprintf("looking the pod up: %v", err))
	}
	if needs {
		return nil, resultRefused, notYet("the kubedevice agent has not allocated them yet")
	}
	return nil, resultUntouched, nil
}

// requires reports whether the pod's required-plugins annotation, as it applies to container,
// names plugin. An annotation that is not a list names nothing.
func requires(pod *api.PodSandbox, container, plugin string) bool {
	value, ok := nriplugin.GetEffectiveAnnotation(pod, nriplugin.RequiredPluginsAnnotation, container)
	if !ok {
		return false
	}
	var names []string
	if err := yaml.Unmarshal([]byte(value), &names); err != nil {
		return false
	}
	return slices.Contains(names, plugin)
}
