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

package injection

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	"github.com/kubedevice/kubedevice/internal/agent/injection/nri"
	"github.com/kubedevice/kubedevice/internal/agent/kube"
	"github.com/kubedevice/kubedevice/internal/nodeagent"
)

// maxPendingReason bounds the reason a refused container creation carries.
const maxPendingReason = 1024

// Core is what runtime injection uses of the device manager core, *nodeagent.Manager.
type Core interface {
	// PreStartContainer prepares one start of container (the kubelet calls it at each start).
	PreStartContainer(ctx context.Context, pod *corev1.Pod, container *corev1.Container) error
	// PreStartRequired says whether resource's plugin asks for PreStartContainer, once the
	// plugin said.
	PreStartRequired(resource string) (required, known bool)
	// PodAllocation is what the pod of UID podUID holds; false when it holds nothing.
	PodAllocation(podUID string) (nodeagent.PodAllocation, bool)
	// Snapshots lists the resources the core knows.
	Snapshots() []nodeagent.ResourceSnapshot
	// Snapshot is what the core knows of resource; false when it knows nothing.
	Snapshot(resource string) (nodeagent.ResourceSnapshot, bool)
	// Subscribe tells which resources changed: the PreStartContainer controller retries at once
	// the calls that waited for a plugin that registered.
	Subscribe() *nodeagent.Subscription
}

// Options are runtime injection's settings and dependencies.
type Options struct {
	// NodeName is the agent's node. Required.
	NodeName string
	// NRI configures the NRI plugin; nil when containers are not adjusted (the agent's
	// RuntimeInjectionNone): the PreStartContainer calls are made all the same.
	NRI *nri.Options
	// Core is called for PreStartContainer and read. Required.
	Core Core
	// Gate holds the NRI plugin and the PreStartContainer controller until the agent has
	// started. Required.
	Gate *kube.Gate
	// Recorder reports failed PreStartContainer calls with Warning events on the pods. Required.
	Recorder recorder.EventRecorder
}

// Injection gives containers their devices when the runtime creates them: the index the NRI
// plugin answers from, the runner that keeps the plugin connected, the resources the core serves,
// and the PreStartContainer grants the NRI hook admits containers by, with the controller that
// makes the calls. The allocation flow tells it what each pod holds; the NodeDevice mirror tells
// it what each resource is.
type Injection struct {
	opts   Options
	pods   kube.Pods
	grants *nri.Grants
	// index and runner are nil without NRI.
	index  *nri.Index
	runner *nri.Runner

	mu sync.RWMutex
	// served are the resources the core knows (a plugin registered them, or the checkpoint
	// restored them), as the NodeDevice mirror last saw; kept with NRI only.
	served map[string]bool

	// preStartQueue is the PreStartContainer controller's queue, once it runs.
	preStartQueue atomic.Pointer[workqueue.TypedRateLimitingInterface[reconcile.Request]]
}

// Setup adds runtime injection to mgr: the NRI plugin (with opts.NRI) and the controller that
// calls PreStartContainer ahead of container starts. The manager's cache must hold the node's
// pods.
func Setup(mgr ctrl.Manager, opts Options) (*Injection, error) {
	x := &Injection{opts: opts, pods: kube.Pods{Client: mgr.GetClient(), NodeName: opts.NodeName}}
	x.grants = nri.NewGrants(x.requestPreStart)
	if opts.NRI != nil {
		x.index = nri.NewIndex(opts.NRI.HostRoot)
		x.served = map[string]bool{}
		x.runner = nri.NewRunner(*opts.NRI, x.index, x.grants, podChecker{x})
		if err := mgr.Add(runnerRunnable{x}); err != nil {
			return nil, fmt.Errorf("adding the NRI plugin: %w", err)
		}
	}
	if err := setupPreStart(mgr, x); err != nil {
		return nil, fmt.Errorf("setting up the PreStartContainer controller: %w", err)
	}
	return x, nil
}

// Status returns the state of runtime injection: StateDisabled without NRI, else the state of
// the NRI connection.
func (x *Injection) Status() nri.Status {
	if x.runner == nil {
		return nri.Status{State: nri.StateDisabled}
	}
	return x.runner.Status()
}

// Changed is signalled when Status changes; nil without NRI, where it never does.
func (x *Injection) Changed() <-chan struct{} {
	if x.runner == nil {
		return nil
	}
	return x.runner.Changed()
}

// Condition returns the RuntimeInjectionReady condition every NodeDevice of the node carries,
// without its generation and transition time; false while the state of the NRI connection is
// not known yet (just after a start).
func (x *Injection) Condition() (metav1.Condition, bool) {
	return runtimeInjectionCondition(x.Status())
}

// runtimeInjectionCondition returns the RuntimeInjectionReady condition of a state, without its
// generation and transition time; false while the state is unknown.
func runtimeInjectionCondition(s nri.Status) (metav1.Condition, bool) {
	c := metav1.Condition{Type: kdv1alpha1.NodeDeviceRuntimeInjectionReady, Status: metav1.ConditionFalse}
	switch s.State {
	case nri.StateConnected:
		c.Status, c.Reason = metav1.ConditionTrue, kdv1alpha1.ReasonNRIConnected
		c.Message = fmt.Sprintf("The agent is registered with the container runtime's NRI socket %s as plugin %s: containers get their devices at creation.", s.SocketPath, s.Plugin)
	case nri.StateSocketMissing:
		c.Reason = kdv1alpha1.ReasonNRISocketMissing
		c.Message = fmt.Sprintf("There is no NRI socket at %s: the container runtime has NRI disabled or is not running, or the socket's directory is not mounted into the agent. Containers are created without their devices, except those of pods requiring the kubedevice plugin, which are held. The agent keeps looking for the socket.", s.SocketPath)
	case nri.StateDisconnected:
		c.Reason = kdv1alpha1.ReasonNRIDisconnected
		c.Message = fmt.Sprintf("The agent is not registered with the NRI socket %s: the connection failed or closed (see the agent's log). Containers are created without their devices, except those of pods requiring the kubedevice plugin, which are held. The agent reconnects.", s.SocketPath)
	case nri.StateDisabled:
		c.Reason = kdv1alpha1.ReasonInjectionDisabled
		c.Message = "The agent runs with --runtime-injection=none and adjusts no container: containers get their devices only if something else gives them."
	default:
		return c, false
	}
	return c, true
}

// runnerRunnable connects the NRI plugin once the agent is ready: the checkpoint restored and
// the informer cache synced, so that the plugin can answer for every pod from memory.
type runnerRunnable struct{ x *Injection }

// NeedLeaderElection is false: every node's agent runs.
func (runnerRunnable) NeedLeaderElection() bool { return false }

// Start runs the NRI plugin until ctx ends.
func (r runnerRunnable) Start(ctx context.Context) error {
	if r.x.opts.Gate.Wait(ctx) != nil {
		return nil
	}
	for _, s := range r.x.opts.Core.Snapshots() {
		r.x.Served(s.ResourceName, true)
	}
	r.x.runner.Run(ctrl.LoggerInto(ctx, ctrl.LoggerFrom(ctx).WithName("nri")))
	return nil
}

var _ manager.LeaderElectionRunnable = runnerRunnable{}

// RestorePreStartRequired records, at start-up, that resource's plugin required
// PreStartContainer before the agent restarted: the plugin's options are not in the checkpoint,
// so until it registers again its containers need a call (which fails while it is away, so a
// creation waits for it).
func (x *Injection) RestorePreStartRequired(resource string) {
	x.grants.SetRequired(resource, true)
}

// RefreshPreStart takes from the core whether resource's plugin requires PreStartContainer, once
// the plugin said; a resource restored from the checkpoint keeps what start-up said until then.
func (x *Injection) RefreshPreStart(resource string) {
	if required, known := x.opts.Core.PreStartRequired(resource); known {
		x.grants.SetRequired(resource, required)
	}
}

// Served records whether the core serves resource; one it does not requires no PreStartContainer.
func (x *Injection) Served(resource string, served bool) {
	if !served {
		x.grants.SetRequired(resource, false)
	}
	if x.runner == nil {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if served {
		x.served[resource] = true
	} else {
		delete(x.served, resource)
	}
}

// Serves reports whether the core serves resource, as last recorded; always false without NRI.
func (x *Injection) Serves(resource string) bool {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.served[resource]
}

// Record tells the NRI plugin what pod's containers get, after an allocation: nothing (alloc
// nil), its devices (the runtime options alloc recorded), or a refusal while err says why the
// devices are not ready.
func (x *Injection) Record(pod *corev1.Pod, alloc *nodeagent.PodAllocation, err error) {
	if x.index == nil {
		return
	}
	uid := kube.RuntimeUID(pod)
	switch {
	case err != nil:
		reason := fmt.Sprintf("%s: %v", nodeagent.AllocationReasonOf(err), err)
		x.index.SetPending(uid, pod.Namespace, pod.Name, kube.Truncate(reason, maxPendingReason))
	case alloc == nil:
		x.index.SetNoDevices(uid, pod.Namespace, pod.Name)
	default:
		containers := make(map[string]nri.Container, len(alloc.Containers))
		for _, c := range alloc.Containers {
			containers[c.Name] = nri.Container{Options: c.RuntimeOptions, Resources: resourceNames(c)}
		}
		x.index.SetReady(uid, pod.Namespace, pod.Name, containers)
	}
}

// Hold tells the NRI plugin that pod's containers must wait, for reason.
func (x *Injection) Hold(pod *corev1.Pod, reason string) {
	if x.index != nil {
		x.index.SetPending(kube.RuntimeUID(pod), pod.Namespace, pod.Name, reason)
	}
}

// Forget drops what the NRI plugin and the PreStartContainer grants know of the pods named key,
// except active (nil: all of them).
func (x *Injection) Forget(key types.NamespacedName, active *corev1.Pod) {
	keep := ""
	if active != nil {
		keep = kube.RuntimeUID(active)
	}
	x.grants.Forget(key.Namespace, key.Name, keep)
	if x.index != nil {
		x.index.Forget(key.Namespace, key.Name, keep)
	}
}

// podChecker answers the NRI plugin for pods the allocation flow has not recorded yet, from the
// informer cache.
type podChecker struct{ x *Injection }

// NeedsDevices reports whether the cached pod namespace/name is the pod the runtime knows by uid,
// is active on the node, and asks for a resource the core serves.
func (c podChecker) NeedsDevices(ctx context.Context, namespace, name, uid string) (bool, error) {
	pod, err := c.x.pods.Get(ctx, namespace, name)
	if err != nil || pod == nil {
		return false, err
	}
	if kube.RuntimeUID(pod) != uid || kube.IsTerminal(pod) {
		return false, nil
	}
	for _, res := range kube.RequestedResources(pod) {
		if c.x.Serves(res) {
			return true, nil
		}
	}
	return false, nil
}
