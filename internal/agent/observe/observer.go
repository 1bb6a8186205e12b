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
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
	"github.com/kubedevice/kubedevice/internal/nodeagent"
)

// DefaultInterval is how often the observer reads the kubelet: the PodResources API has no watch
// (v1), so changes are seen by polling. Two local gRPC calls and a stat a second; with the
// mirror's settling and pacing a change reaches the NodeDevice within about 1.1 s (2 s at most).
const DefaultInterval = time.Second

// errNotObserved is the readiness check's answer until the kubelet has been read once.
var errNotObserved = errors.New("the kubelet has not been read yet")

// Observer reads the kubelet's device manager, read-only, and keeps the view the mirror writes
// into NodeDevices (it is the mirror's Core in observe mode) and the allocations the
// DeviceAllocation flow writes. It never registers, allocates or writes anything on the node.
type Observer struct {
	opts    Options
	kubelet kubelet
	ckpt    checkpointFile
	cache   client.Reader

	notifier nodeagent.Notifier
	// podChanges receives the keys of pods whose observed devices changed.
	podChanges chan types.NamespacedName

	mu       sync.RWMutex
	view     view
	mem      memory
	ckptTime time.Time
	// lastErr is the last reading's error; nil after a good one. read is false until one.
	lastErr error
	read    bool
}

func newObserver(opts Options, k kubelet, cache client.Reader) *Observer {
	return &Observer{
		opts:       opts,
		kubelet:    k,
		ckpt:       checkpointFile{path: opts.CheckpointPath},
		cache:      cache,
		podChanges: make(chan types.NamespacedName, 1024),
		mem:        memory{},
		view:       view{resources: map[string]nodeagent.ResourceSnapshot{}, pods: map[string]nodeagent.PodAllocation{}},
	}
}

// NeedLeaderElection is false: every node's agent runs.
func (*Observer) NeedLeaderElection() bool { return false }

// Start reads the kubelet every interval until ctx ends. The first good reading opens the gate
// (so the mirror never sees an empty view it would take for "no devices" and delete the
// NodeDevices); a failed reading keeps the last view, as the kubelet restarting or its socket
// missing for a while says nothing of the devices.
func (o *Observer) Start(ctx context.Context) error {
	logger := ctrl.LoggerFrom(ctx).WithName("observe")
	ctx = ctrl.LoggerInto(ctx, logger)
	defer func() { _ = o.kubelet.Close() }()
	o.remember(ctx)
	ticker := o.opts.Clock.NewTicker(o.opts.Interval)
	defer ticker.Stop()
	var lastLogged string
	for {
		if err := o.poll(ctx); err != nil {
			// Once per distinct error, not every second while the kubelet is away.
			if err.Error() != lastLogged {
				logger.Error(err, "Reading the kubelet's devices; keeping the last view until it answers")
				lastLogged = err.Error()
			}
		} else if lastLogged != "" {
			logger.Info("Reading the kubelet's devices again")
			lastLogged = ""
		}
		if err := o.Check(); err == nil && !o.opts.Gate.IsOpen() {
			o.opts.Gate.Open(o.opts.Clock.Now())
			logger.Info("Observing the kubelet's devices", "node", o.opts.NodeName, "resources", o.resourceNames())
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C():
		}
	}
}

// remember seeds the memory from the node's Observed NodeDevices, so an agent restart keeps the
// unhealthy devices it saw, which the kubelet names nowhere.
func (o *Observer) remember(ctx context.Context) {
	list := &kdv1alpha1.NodeDeviceList{}
	if err := o.cache.List(ctx, list); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing the node's NodeDevices to start from")
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, nd := range list.Items {
		if nd.Spec.NodeName != o.opts.NodeName || nd.Status.Path != kdv1alpha1.DevicePathObserved || !o.opts.allow(nd.Spec.ResourceName) {
			continue
		}
		rm := o.mem[nd.Spec.ResourceName]
		if rm == nil {
			rm = &resourceMemory{devices: map[string]*deviceMemory{}}
			if p := nd.Status.Plugin; p != nil && p.Since != nil {
				rm.since = p.Since.Time
			}
			o.mem[nd.Spec.ResourceName] = rm
		}
		for _, d := range nd.Status.Devices {
			dm := &deviceMemory{numa: slices.Clone(d.NUMANodes), health: nodeagent.Unhealthy}
			if d.Health == kdv1alpha1.DeviceHealthy {
				dm.health = nodeagent.Healthy
			}
			if d.LastTransitionTime != nil {
				dm.since = d.LastTransitionTime.Time
			}
			rm.devices[d.ID] = dm
		}
	}
}

// poll reads the kubelet once and publishes what changed.
func (o *Observer) poll(ctx context.Context) error {
	r, ckptTime, err := o.readAll(ctx)
	o.mu.Lock()
	o.lastErr = err
	if err != nil {
		o.mu.Unlock()
		return err
	}
	o.read = true
	prev := o.view
	o.view = build(r, o.mem, o.opts.allow, o.opts.Clock.Now())
	o.ckptTime = ckptTime
	next := o.view
	o.mu.Unlock()

	var changed []string
	for name, s := range next.resources {
		if p, ok := prev.resources[name]; !ok || !reflect.DeepEqual(p, s) {
			changed = append(changed, name)
		}
	}
	for name := range prev.resources {
		if _, ok := next.resources[name]; !ok {
			changed = append(changed, name)
		}
	}
	o.notifier.Notify(changed...)
	for uid, pa := range next.pods {
		if p, ok := prev.pods[uid]; !ok || !reflect.DeepEqual(p, pa) {
			o.podChanged(types.NamespacedName{Namespace: pa.Namespace, Name: pa.Name})
		}
	}
	for uid, pa := range prev.pods {
		if _, ok := next.pods[uid]; !ok {
			o.podChanged(types.NamespacedName{Namespace: pa.Namespace, Name: pa.Name})
		}
	}
	return nil
}

func (o *Observer) podChanged(key types.NamespacedName) {
	select {
	case o.podChanges <- key:
	default:
		// The DeviceAllocation flow is behind; it sees the pod at its next event or resync.
	}
}

// readAll reads the kubelet's PodResources API and checkpoint, and the node and its pods from
// the cache.
func (o *Observer) readAll(ctx context.Context) (reading, time.Time, error) {
	var r reading
	var err error
	if r.allocatable, err = o.kubelet.GetAllocatableResources(ctx); err != nil {
		return r, time.Time{}, err
	}
	if r.listed, err = o.kubelet.List(ctx); err != nil {
		return r, time.Time{}, err
	}
	var ckptTime time.Time
	r.checkpoint, ckptTime, err = o.ckpt.read()
	if err != nil {
		// A checkpoint that cannot be read loses only the unhealthy devices' and the runtime
		// options' source; the last good one is kept.
		ctrl.LoggerFrom(ctx).Error(err, "Reading the kubelet's device manager checkpoint; using the last good one", "path", o.ckpt.path)
	}
	node := &corev1.Node{}
	if err := o.cache.Get(ctx, client.ObjectKey{Name: o.opts.NodeName}, node); err == nil {
		r.node = node
	}
	pods := &corev1.PodList{}
	if err := o.cache.List(ctx, pods); err != nil {
		return r, time.Time{}, fmt.Errorf("listing the pods of node %q: %w", o.opts.NodeName, err)
	}
	r.pods = make(map[types.NamespacedName]*corev1.Pod, len(pods.Items))
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Spec.NodeName == o.opts.NodeName {
			r.pods[client.ObjectKeyFromObject(p)] = p
		}
	}
	return r, ckptTime, nil
}

// Snapshots returns every observed resource, sorted by name (mirror.Core).
func (o *Observer) Snapshots() []nodeagent.ResourceSnapshot {
	o.mu.RLock()
	defer o.mu.RUnlock()
	out := make([]nodeagent.ResourceSnapshot, 0, len(o.view.resources))
	for _, s := range o.view.resources {
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b nodeagent.ResourceSnapshot) int { return strings.Compare(a.ResourceName, b.ResourceName) })
	return out
}

// Snapshot returns one observed resource; false when the kubelet does not know it (mirror.Core).
func (o *Observer) Snapshot(name string) (nodeagent.ResourceSnapshot, bool) {
	o.mu.RLock()
	defer o.mu.RUnlock()
	s, ok := o.view.resources[name]
	return s, ok
}

// Subscribe tells which resources changed; its first Changed lists every resource (mirror.Core).
func (o *Observer) Subscribe() *nodeagent.Subscription {
	return o.notifier.Subscribe(o.resourceNames()...)
}

// CheckpointInfo is the kubelet's checkpoint's last write, as its modification time (mirror.Core).
func (o *Observer) CheckpointInfo() nodeagent.CheckpointInfo {
	o.mu.RLock()
	defer o.mu.RUnlock()
	return nodeagent.CheckpointInfo{LastWrite: o.ckptTime}
}

// PodAllocation is what the pod of UID uid holds as last observed; false when nothing.
func (o *Observer) PodAllocation(uid string) (nodeagent.PodAllocation, bool) {
	o.mu.RLock()
	defer o.mu.RUnlock()
	pa, ok := o.view.pods[uid]
	return pa, ok
}

// Check is nil while the last reading of the kubelet succeeded.
func (o *Observer) Check() error {
	o.mu.RLock()
	defer o.mu.RUnlock()
	if !o.read {
		return errNotObserved
	}
	return o.lastErr
}

func (o *Observer) resourceNames() []string {
	o.mu.RLock()
	defer o.mu.RUnlock()
	names := make([]string, 0, len(o.view.resources))
	for n := range o.view.resources {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// getPod asks the kubelet (PodResources Get) what pod holds now, without waiting for the next
// reading: the DeviceAllocation of a pod that just started is written at once. false when the
// kubelet lists no observed device for it.
func (o *Observer) getPod(ctx context.Context, pod *corev1.Pod) (nodeagent.PodAllocation, bool, error) {
	p, err := o.kubelet.Get(ctx, pod.Namespace, pod.Name)
	if err != nil {
		return nodeagent.PodAllocation{}, false, err
	}
	st, _, ckptErr := o.ckpt.read()
	if ckptErr != nil {
		ctrl.LoggerFrom(ctx).Error(ckptErr, "Reading the kubelet's device manager checkpoint; using the last good one", "path", o.ckpt.path)
	}
	pa := podAllocation(string(pod.UID), pod.Namespace, pod.Name, p.GetContainers(), o.opts.allow, runOptions(st))
	return pa, len(pa.Containers) > 0, nil
}
