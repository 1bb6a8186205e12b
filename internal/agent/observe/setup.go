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

package observe

import (
	"flag"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/kubedevice/kubedevice/internal/agent/kube"
	"github.com/kubedevice/kubedevice/internal/nodeagent/registration"
)

// Options are the observe flow's settings and dependencies.
type Options struct {
	// NodeName is the agent's node. Required.
	NodeName string
	// PodResourcesSocket is the kubelet's PodResources API socket; empty means
	// DefaultPodResourcesSocket.
	PodResourcesSocket string
	// CheckpointPath is the kubelet's device manager checkpoint; empty means
	// DefaultCheckpointPath.
	CheckpointPath string
	// Resources are the resources observed; empty means every device plugin resource the
	// kubelet knows.
	Resources []string
	// Interval is how often the kubelet is read; zero means DefaultInterval.
	Interval time.Duration
	// Gate is opened by the first good reading of the kubelet; every flow waits on it.
	Gate *kube.Gate
	// Clock drives the readings and the conditions; nil means the real clock.
	Clock clock.WithTicker

	// resourcesFlag is the value of --observe-resources, which ParseFlags parses into Resources.
	resourcesFlag string
}

// AddFlags registers observe mode's flags on fs, bound to o. Once fs is parsed, ParseFlags
// completes o.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.resourcesFlag, "observe-resources", "",
		"Observe mode: comma-separated resources to observe (e.g. nvidia.com/gpu,example.com/gopher); empty observes every device plugin resource the kubelet knows.")
	fs.StringVar(&o.PodResourcesSocket, "kubelet-pod-resources-socket", DefaultPodResourcesSocket,
		"Observe mode: the kubelet's PodResources API socket.")
	fs.StringVar(&o.CheckpointPath, "kubelet-checkpoint", DefaultCheckpointPath,
		"Observe mode: the kubelet's device manager checkpoint, read for the resources the kubelet knows and the devices it knew healthy, and the plugins' Allocate responses.")
}

// ParseFlags adds the resources of --observe-resources, each an extended resource name, to
// Resources.
func (o *Options) ParseFlags() error {
	for _, r := range strings.Split(o.resourcesFlag, ",") {
		if r = strings.TrimSpace(r); r == "" {
			continue
		}
		if !registration.IsExtendedResourceName(r) {
			return fmt.Errorf("--observe-resources: %q is not an extended resource name (domain/name, outside kubernetes.io)", r)
		}
		o.Resources = append(o.Resources, r)
	}
	return nil
}

// allow reports whether resource is observed.
func (o Options) allow(resource string) bool {
	return len(o.Resources) == 0 || slices.Contains(o.Resources, resource)
}

// Setup adds the observe flow to mgr: the Observer, which reads the kubelet and is the NodeDevice
// mirror's Core (the caller wires the mirror with it), and the controller that mirrors the
// kubelet's allocations into DeviceAllocations. mgr's cache must hold the node's pods,
// DeviceAllocations, NodeDevices and Node, with the indexes of package indexer.
func Setup(mgr ctrl.Manager, opts Options) (*Observer, error) {
	if opts.NodeName == "" || opts.Gate == nil {
		return nil, fmt.Errorf("setting up observe mode: a node name and a gate are required")
	}
	if opts.PodResourcesSocket == "" {
		opts.PodResourcesSocket = DefaultPodResourcesSocket
	}
	if opts.CheckpointPath == "" {
		opts.CheckpointPath = DefaultCheckpointPath
	}
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	k, err := dialPodResources(opts.PodResourcesSocket)
	if err != nil {
		return nil, err
	}
	o := newObserver(opts, k, mgr.GetClient())
	if err := mgr.Add(o); err != nil {
		return nil, fmt.Errorf("adding the kubelet observer: %w", err)
	}
	if err := setupAllocations(mgr, o); err != nil {
		return nil, fmt.Errorf("setting up the observed DeviceAllocations: %w", err)
	}
	return o, nil
}
