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
	"errors"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/kubedevice/kubedevice/internal/nodeagent"
	"github.com/kubedevice/kubedevice/internal/testutil"
)

// blockingCore is a Core whose AllocatePod waits until the pod is released (or its context
// ends), then answers the pod's error.
type blockingCore struct {
	Core
	mu      sync.Mutex
	release map[types.UID]chan struct{}
	errs    map[types.UID]error
	calls   []types.UID
}

func (c *blockingCore) gate(uid types.UID) chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.release[uid] == nil {
		c.release[uid] = make(chan struct{})
	}
	return c.release[uid]
}

func (c *blockingCore) AllocatePod(ctx context.Context, pod *corev1.Pod) error {
	c.mu.Lock()
	c.calls = append(c.calls, pod.UID)
	c.mu.Unlock()
	select {
	case <-c.gate(pod.UID):
	case <-ctx.Done():
		return ctx.Err()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.errs[pod.UID]
}

func (c *blockingCore) PodAllocation(string) (nodeagent.PodAllocation, bool) {
	return nodeagent.PodAllocation{}, false
}

func (c *blockingCore) started() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.calls)
}

// next waits for the next key the attempts requeue.
func next(t *testing.T, q workqueue.TypedRateLimitingInterface[reconcile.Request]) types.NamespacedName {
	t.Helper()
	got := make(chan reconcile.Request, 1)
	go func() {
		req, _ := q.Get()
		q.Done(req)
		got <- req
	}()
	select {
	case req := <-got:
		return req.NamespacedName
	case <-time.After(10 * time.Second):
		t.Fatal("nothing was requeued")
		return types.NamespacedName{}
	}
}

func TestAttempts(t *testing.T) {
	const fpga, gpu = "acme.io/fpga", "acme.io/gpu"
	core := &blockingCore{release: map[types.UID]chan struct{}{}, errs: map[types.UID]error{}}
	a := newAttempts(core, 2)
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()
	ctx, cancel := context.WithCancel(context.Background())
	if err := a.start(ctx, q); err != nil {
		t.Fatal(err)
	}
	drained := make(chan struct{})
	go func() {
		_ = a.drain(ctx)
		close(drained)
	}()
	pod := func(name string, res ...string) *corev1.Pod {
		w := testutil.MakePod(name, "ns").UID(types.UID(name)).Node("n1")
		for _, r := range res {
			w = w.Request(corev1.ResourceName(r), 1)
		}
		return w.Obj()
	}
	take := func(p *corev1.Pod) (outcome, bool) { return a.take(ctx, p) }
	f1, f2, f3, both, g := pod("f1", fpga), pod("f2", fpga), pod("f3", fpga), pod("both", fpga, gpu), pod("g", gpu)

	// Two attempts of fpga start; the third fpga pod and the pod asking for fpga and gpu park.
	for _, p := range []*corev1.Pod{f1, f2, f3, both} {
		if _, ok := take(p); ok {
			t.Fatalf("take(%s) answered before any attempt", p.Name)
		}
	}
	if _, ok := take(f1); ok {
		t.Fatal("take(f1) answered while its attempt is in flight")
	}
	// gpu has room whatever fpga does.
	if _, ok := take(g); ok {
		t.Fatal("take(g) answered before its attempt")
	}
	waitFor(t, func() bool { return core.started() == 3 })
	core.mu.Lock()
	core.errs["g"] = errors.New("refused")
	core.mu.Unlock()
	close(core.gate("g"))
	if got := next(t, q); got.Name != "g" {
		t.Fatalf("requeued %v, want g", got)
	}
	out, ok := take(g)
	if !ok || out.err == nil || out.err.Error() != "refused" {
		t.Fatalf("take(g) = %v, %v; want the refusal", out, ok)
	}
	if core.started() != 3 {
		t.Fatalf("%d attempts started, want 3: parked pods wait for their resource", core.started())
	}

	// f1's end requeues it and wakes both parked pods; one of them takes the room.
	close(core.gate("f1"))
	woken := map[string]bool{}
	for range 3 {
		woken[next(t, q).Name] = true
	}
	if !woken["f1"] || !woken["f3"] || !woken["both"] {
		t.Fatalf("requeued %v, want f1, f3 and both", woken)
	}
	if _, ok := take(f1); !ok {
		t.Fatal("take(f1) did not answer after its attempt ended")
	}
	if _, ok := take(both); ok {
		t.Fatal("take(both) answered before its attempt")
	}
	if _, ok := take(f3); ok {
		t.Fatal("take(f3) answered while parked")
	}
	waitFor(t, func() bool { return core.started() == 4 })

	// Stopping cancels the attempts in flight and waits for them; nothing starts after.
	cancel()
	select {
	case <-drained:
	case <-time.After(10 * time.Second):
		t.Fatal("drain did not return")
	}
	a.forget(types.NamespacedName{Namespace: "ns", Name: "f3"})
	if _, ok := take(f3); ok || core.started() != 4 {
		t.Fatalf("an attempt started after the agent stopped (%d started)", core.started())
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestAttemptsChanged: an attempt made before a change of the pod's resources (its plugin
// registering, its first devices arriving) is not taken if it ends with a refusal: the pod's
// next reconcile tries again at once, instead of recording the refusal and waiting for its
// backoff. An allocation is taken whatever changed.
func TestAttemptsChanged(t *testing.T) {
	core := &blockingCore{release: map[types.UID]chan struct{}{}, errs: map[types.UID]error{}}
	a := newAttempts(core, attemptsPerResource)
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := a.start(ctx, q); err != nil {
		t.Fatal(err)
	}
	refused := errors.New("no healthy devices")
	pod := func(name string) *corev1.Pod {
		core.mu.Lock()
		core.errs[types.UID(name)] = refused
		core.mu.Unlock()
		return testutil.MakePod(name, "ns").UID(types.UID(name)).Node("n1").Request(testResource, 1).Obj()
	}
	key := func(p *corev1.Pod) types.NamespacedName {
		return types.NamespacedName{Namespace: p.Namespace, Name: p.Name}
	}
	inFlight, ended, allocated := pod("in-flight"), pod("ended"), pod("allocated")

	// Ended, and its outcome not taken yet, when the change comes.
	if _, ok := a.take(ctx, ended); ok {
		t.Fatal("take answered before any attempt")
	}
	close(core.gate(ended.UID))
	if got := next(t, q); got != key(ended) {
		t.Fatalf("requeued %v, want %v", got, key(ended))
	}
	// In flight when the change comes; then refused.
	for _, p := range []*corev1.Pod{inFlight, allocated} {
		if _, ok := a.take(ctx, p); ok {
			t.Fatalf("take(%s) answered before its attempt", p.Name)
		}
	}
	waitFor(t, func() bool { return core.started() == 3 })
	for _, p := range []*corev1.Pod{ended, inFlight, allocated} {
		a.changed(key(p))
	}
	core.mu.Lock()
	core.errs[allocated.UID] = nil
	core.mu.Unlock()
	for _, p := range []*corev1.Pod{inFlight, allocated} {
		close(core.gate(p.UID))
		if got := next(t, q); got != key(p) {
			t.Fatalf("requeued %v, want %v", got, key(p))
		}
	}

	for _, p := range []*corev1.Pod{ended, inFlight} {
		if out, ok := a.take(ctx, p); ok {
			t.Errorf("take(%s) = %v: took a refusal made before its resources changed", p.Name, out.err)
		}
	}
	waitFor(t, func() bool { return core.started() == 5 })
	if out, ok := a.take(ctx, allocated); !ok || out.err != nil {
		t.Errorf("take(allocated) = %v, %t; want the allocation", out.err, ok)
	}
	// The new attempts (their pods' gates are open) are refused again, after the change: their
	// refusals are taken.
	for range 2 {
		next(t, q)
	}
	for _, p := range []*corev1.Pod{ended, inFlight} {
		if out, ok := a.take(ctx, p); !ok || !errors.Is(out.err, refused) {
			t.Errorf("take(%s) = %v, %t; want the refusal of the attempt made after the change", p.Name, out.err, ok)
		}
	}
}
