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

package allocation

import (
	"context"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/kubedevice/kubedevice/internal/agent/kube"
	"github.com/kubedevice/kubedevice/internal/nodeagent"
)

// attemptsPerResource is the number of pods whose allocation may wait on one resource's plugin at
// once. A plugin hanging in Allocate (up to its 30 s deadline) holds that many attempts, never a
// reconcile worker, so the pods of other resources are allocated as if it did not hang; the pods
// of its own resource wait in line for it.
const attemptsPerResource = 4

// attempts runs the core's allocations of pods off the reconcile workers. A reconcile that needs
// a pod's devices starts an attempt (Core.AllocatePod, which may wait on plugins) and returns; the
// attempt's end requeues the pod, whose next reconcile takes the outcome and goes on from there.
// A pod asking for a resource with attemptsPerResource attempts in flight waits, parked, until
// one of them ends. AllocatePod is still one call per pod, so a pod asking for several resources
// is allocated all at once or not at all, and the core serializes the calls of one pod.
type attempts struct {
	core  Core
	limit int
	// prepare, when set, makes the PreStartContainer calls for the first start of the containers
	// of a pod the attempt allocated: in the attempt, so a plugin hanging in PreStartContainer
	// holds one of its own resource's attempts, as one hanging in Allocate does, never a worker.
	prepare func(ctx context.Context, pod *corev1.Pod, alloc nodeagent.PodAllocation)

	mu sync.Mutex
	// ctx is the controller's: attempts outlive the reconcile that starts them, not the agent.
	ctx   context.Context
	queue workqueue.TypedRateLimitingInterface[reconcile.Request]
	// stopped is set once the agent stops: no attempt starts after it.
	stopped bool
	wg      sync.WaitGroup
	// pods holds the attempt of each pod key, in flight or ended and not yet taken.
	pods map[types.NamespacedName]*attempt
	// inFlight counts the attempts in flight per resource.
	inFlight map[string]int
	// parked holds, per resource, the pods waiting for an attempt of that resource to end.
	parked map[string]sets.Set[types.NamespacedName]
}

// attempt is one AllocatePod call for the pod of uid.
type attempt struct {
	uid       types.UID
	resources []string
	done      bool
	out       outcome
	// stale is set when a resource the pod asks for changed after the attempt started (a plugin
	// registered, devices were freed or became healthy): a refusal it ends with may no longer
	// hold, so it is not taken and the pod is tried again.
	stale bool
}

func newAttempts(core Core, limit int) *attempts {
	return &attempts{
		core:     core,
		limit:    limit,
		pods:     map[types.NamespacedName]*attempt{},
		inFlight: map[string]int{},
		parked:   map[string]sets.Set[types.NamespacedName]{},
	}
}

// start is a source of the pod controller: it hands the attempts the controller's context and
// queue, through which an attempt's end requeues its pod.
func (a *attempts) start(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.ctx, a.queue = ctx, q
	return nil
}

// drain is a runnable of the agent's manager: once the agent stops it lets no attempt start and
// waits for those in flight (their context is cancelled, so the core rolls them back), so that
// nothing allocates after the agent has stopped.
func (a *attempts) drain(ctx context.Context) error {
	<-ctx.Done()
	a.mu.Lock()
	a.stopped = true
	a.mu.Unlock()
	a.wg.Wait()
	return nil
}

// take returns the outcome of pod's allocation when an attempt for it has ended, and true;
// otherwise it starts one (or parks the pod until one of its resources has room) and returns
// false: the pod is requeued when there is an outcome to take or room to start.
func (a *attempts) take(ctx context.Context, pod *corev1.Pod) (outcome, bool) {
	key := types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}
	a.mu.Lock()
	defer a.mu.Unlock()
	if at, ok := a.pods[key]; ok {
		switch {
		case !at.done:
			// In flight (for this pod, or for the pod this one replaced): its end requeues the key.
			return outcome{}, false
		case at.uid == pod.UID && (!at.stale || at.out.err == nil):
			delete(a.pods, key)
			return at.out, true
		default:
			// Ended for the pod this one replaced, or refused before a change of its resources:
			// try again.
			delete(a.pods, key)
		}
	}
	if a.stopped || a.ctx == nil {
		return outcome{}, false
	}
	resources := kube.RequestedResources(pod)
	for _, res := range resources {
		if a.inFlight[res] >= a.limit {
			if a.parked[res] == nil {
				a.parked[res] = sets.New[types.NamespacedName]()
			}
			a.parked[res].Insert(key)
			return outcome{}, false
		}
	}
	for _, res := range resources {
		a.inFlight[res]++
	}
	at := &attempt{uid: pod.UID, resources: resources}
	a.pods[key] = at
	a.wg.Add(1)
	go a.run(ctrl.LoggerInto(a.ctx, ctrl.LoggerFrom(ctx)), key, at, pod.DeepCopy())
	return outcome{}, false
}

// run makes the attempt: the core's allocation, bounded by podReconcileTimeout (each plugin call
// has its own deadline), then what the pod holds; its end requeues the pod and the pods parked on
// its resources.
func (a *attempts) run(ctx context.Context, key types.NamespacedName, at *attempt, pod *corev1.Pod) {
	defer a.wg.Done()
	ctx, cancel := context.WithTimeout(ctx, podReconcileTimeout)
	defer cancel()
	_, heldBefore := a.core.PodAllocation(string(pod.UID))
	err := a.core.AllocatePod(ctx, pod)
	out := outcome{err: err}
	if alloc, held := a.core.PodAllocation(string(pod.UID)); held {
		out.alloc = &alloc
		if err == nil && !heldBefore && a.prepare != nil {
			// Newly allocated by this attempt: prepare the containers' first starts.
			a.prepare(ctx, pod, alloc)
			out.prepared = true
		}
	}
	cancel()

	a.mu.Lock()
	at.done, at.out = true, out
	wake := []types.NamespacedName{key}
	for _, res := range at.resources {
		if a.inFlight[res]--; a.inFlight[res] <= 0 {
			delete(a.inFlight, res)
		}
		// Every pod parked on the resource is woken: each starts its attempt or parks again,
		// so none is left waiting while the resource has room.
		wake = append(wake, a.parked[res].UnsortedList()...)
		delete(a.parked, res)
	}
	q := a.queue
	a.mu.Unlock()
	for _, k := range wake {
		q.Add(reconcile.Request{NamespacedName: k})
	}
}

// changed marks the attempt of the pods named key, in flight or ended and not taken yet, as
// made before a change of a resource the pod asks for: a refusal it ends with is not taken, and
// the pod's next reconcile tries again. Without it, the retrigger of a pod whose attempt started
// before its plugin registered (or before the plugin's first devices arrived) would only take
// that attempt's refusal, and the pod would wait for its backoff.
func (a *attempts) changed(key types.NamespacedName) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if at, ok := a.pods[key]; ok {
		at.stale = true
	}
}

// forget drops the ended attempt of the pods named key, which left, and their place in line.
func (a *attempts) forget(key types.NamespacedName) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if at, ok := a.pods[key]; ok && at.done {
		delete(a.pods, key)
	}
	for res, keys := range a.parked {
		if keys.Delete(key); keys.Len() == 0 {
			delete(a.parked, res)
		}
	}
}
