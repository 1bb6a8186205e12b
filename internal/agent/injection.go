package agent

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/kubedevice/kubedevice/internal/agent/nri"
	"github.com/kubedevice/kubedevice/internal/nodeagent"
)

// mirrorPodAnnotation is the kubelet's annotation on a static pod's mirror pod: the static pod's
// UID, which is the UID the container runtime knows the pod by.
const mirrorPodAnnotation = "kubernetes.io/config.mirror"

// maxPendingReason bounds the reason a refused container creation carries.
const maxPendingReason = 1024

// injection is the agent's side of runtime injection: the index the NRI plugin answers from, the
// runner that keeps the plugin connected, and the resources the core serves. All nil or empty
// with RuntimeInjectionNone.
type injection struct {
	index  *nri.Index
	runner *nri.Runner

	mu sync.RWMutex
	// served are the resources the core knows (a plugin registered them, or the checkpoint
	// restored them), as the NodeDevice mirror last saw.
	served map[string]bool
}

// setupInjection adds the NRI plugin's runner to mgr when the agent injects devices through NRI.
func (a *Agent) setupInjection(mgr ctrl.Manager) error {
	if a.opts.RuntimeInjection != RuntimeInjectionNRI {
		return nil
	}
	a.injection.index = nri.NewIndex(a.opts.NRI.HostRoot)
	a.injection.served = map[string]bool{}
	a.injection.runner = nri.NewRunner(a.opts.NRI, a.injection.index, a.grants, podChecker{a})
	if err := mgr.Add(injectionRunner{a}); err != nil {
		return fmt.Errorf("adding the NRI plugin: %w", err)
	}
	return nil
}

// InjectionStatus returns the state of runtime injection: StateDisabled with
// RuntimeInjectionNone, else the state of the NRI connection.
func (a *Agent) InjectionStatus() nri.Status {
	if a.injection.runner == nil {
		return nri.Status{State: nri.StateDisabled}
	}
	return a.injection.runner.Status()
}

// injectionRunner connects the NRI plugin once the agent is ready: the checkpoint restored and
// the informer cache synced, so that the plugin can answer for every pod from memory.
type injectionRunner struct{ *Agent }

// NeedLeaderElection is false: every node's agent runs.
func (injectionRunner) NeedLeaderElection() bool { return false }

// Start runs the NRI plugin until ctx ends.
func (r injectionRunner) Start(ctx context.Context) error {
	select {
	case <-r.ready:
	case <-ctx.Done():
		return nil
	}
	for _, s := range r.dm.Snapshots() {
		r.setServed(s.ResourceName, true)
	}
	r.injection.runner.Run(ctrl.LoggerInto(ctx, ctrl.LoggerFrom(ctx).WithName("nri")))
	return nil
}

var _ manager.LeaderElectionRunnable = injectionRunner{}

// setServed records whether the core serves resource.
func (a *Agent) setServed(resource string, served bool) {
	if a.injection.runner == nil {
		return
	}
	a.injection.mu.Lock()
	defer a.injection.mu.Unlock()
	if served {
		a.injection.served[resource] = true
	} else {
		delete(a.injection.served, resource)
	}
}

func (a *Agent) serves(resource string) bool {
	a.injection.mu.RLock()
	defer a.injection.mu.RUnlock()
	return a.injection.served[resource]
}

// recordInjection tells the NRI plugin what pod's containers get, after an allocation: nothing
// (alloc nil), its devices (the runtime options alloc recorded), or a refusal while err says why
// the devices are not ready.
func (a *Agent) recordInjection(pod *corev1.Pod, alloc *nodeagent.PodAllocation, err error) {
	x := a.injection.index
	if x == nil {
		return
	}
	uid := runtimeUID(pod)
	switch {
	case err != nil:
		reason := fmt.Sprintf("%s: %v", nodeagent.AllocationReasonOf(err), err)
		x.SetPending(uid, pod.Namespace, pod.Name, truncate(reason, maxPendingReason))
	case alloc == nil:
		x.SetNoDevices(uid, pod.Namespace, pod.Name)
	default:
		containers := make(map[string]nri.Container, len(alloc.Containers))
		for _, c := range alloc.Containers {
			containers[c.Name] = nri.Container{Options: c.RuntimeOptions, Resources: resourceNames(c)}
		}
		x.SetReady(uid, pod.Namespace, pod.Name, containers)
	}
}

// recordNotReady tells the NRI plugin that pod's containers must wait, for reason.
func (a *Agent) recordNotReady(pod *corev1.Pod, reason string) {
	if x := a.injection.index; x != nil {
		x.SetPending(runtimeUID(pod), pod.Namespace, pod.Name, reason)
	}
}

// forgetInjection drops what the NRI plugin and the PreStartContainer grants know of the pods
// named key, except active (nil: all of them).
func (a *Agent) forgetInjection(key types.NamespacedName, active *corev1.Pod) {
	keep := ""
	if active != nil {
		keep = runtimeUID(active)
	}
	a.grants.Forget(key.Namespace, key.Name, keep)
	if x := a.injection.index; x != nil {
		x.Forget(key.Namespace, key.Name, keep)
	}
}

// runtimeUID is the UID the container runtime knows pod by: a mirror pod's static pod UID, else
// the pod's UID.
func runtimeUID(pod *corev1.Pod) string {
	if uid := pod.Annotations[mirrorPodAnnotation]; uid != "" {
		return uid
	}
	return string(pod.UID)
}

// podChecker answers the NRI plugin for pods the pod controller has not recorded yet, from the
// informer cache.
type podChecker struct{ *Agent }

// NeedsDevices reports whether the cached pod namespace/name is the pod the runtime knows by uid,
// is active on the node, and asks for a resource the core serves.
func (c podChecker) NeedsDevices(ctx context.Context, namespace, name, uid string) (bool, error) {
	pod := &corev1.Pod{}
	if err := c.client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, pod); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("getting pod %s/%s from the cache: %w", namespace, name, err)
	}
	if runtimeUID(pod) != uid || pod.Spec.NodeName != c.opts.NodeName || isTerminal(pod) {
		return false, nil
	}
	for _, res := range requestedResources(pod) {
		if c.serves(res) {
			return true, nil
		}
	}
	return false, nil
}
