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

package scale

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
)

// nodeWatcher follows what every Node publishes for gopher, from a watch of its own, and times
// when values appear.
type nodeWatcher struct {
	cancel context.CancelFunc

	mu sync.Mutex
	// published is the gopher count each node publishes in both status.capacity and
	// status.allocatable; absent when it publishes none or the two differ.
	published map[string]int64
	// since is when each node's published count last changed.
	since map[string]time.Time
	// pending holds, per node, the count a change should make it publish and when the change
	// was sent.
	pending map[string]pendingChange
	// latencies are the times from changes to the node publishing them.
	latencies []time.Duration
}

type pendingChange struct {
	want int64
	sent time.Time
}

func startNodeWatcher(cfg *rest.Config, scheme *runtime.Scheme) (*nodeWatcher, error) {
	c, err := cache.New(cfg, cache.Options{Scheme: scheme, DefaultTransform: cache.TransformStripManagedFields()})
	if err != nil {
		return nil, fmt.Errorf("creating the node watcher's cache: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &nodeWatcher{cancel: cancel, published: map[string]int64{}, since: map[string]time.Time{}, pending: map[string]pendingChange{}}
	inf, err := c.GetInformer(ctx, &corev1.Node{})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("getting the node informer: %w", err)
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { w.observe(o) },
		UpdateFunc: func(_, o any) { w.observe(o) },
	}); err != nil {
		cancel()
		return nil, fmt.Errorf("watching nodes: %w", err)
	}
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		cancel()
		return nil, fmt.Errorf("syncing the node watcher's cache")
	}
	return w, nil
}

func (w *nodeWatcher) stop() { w.cancel() }

func (w *nodeWatcher) observe(o any) {
	node, ok := o.(*corev1.Node)
	if !ok {
		return
	}
	now := time.Now()
	capacity, okC := node.Status.Capacity[gopher]
	allocatable, okA := node.Status.Allocatable[gopher]
	w.mu.Lock()
	defer w.mu.Unlock()
	old, had := w.published[node.Name]
	if !okC || !okA || capacity.Cmp(allocatable) != 0 {
		if had {
			delete(w.published, node.Name)
			w.since[node.Name] = now
		}
		return
	}
	v := capacity.Value()
	if had && old == v {
		return
	}
	w.published[node.Name] = v
	w.since[node.Name] = now
	if p, ok := w.pending[node.Name]; ok && p.want == v {
		w.latencies = append(w.latencies, now.Sub(p.sent))
		delete(w.pending, node.Name)
	}
}

// settledAt reports whether every node publishes what cl wants, and then the latest time one of
// them started to.
func (w *nodeWatcher) settledAt(cl *cluster) (time.Time, bool) {
	var last time.Time
	for i := range cl.p.nodes {
		node := nodeName(i)
		want := cl.want(node)
		w.mu.Lock()
		got, ok := w.published[node]
		since := w.since[node]
		w.mu.Unlock()
		if !ok || got != want {
			return time.Time{}, false
		}
		if since.After(last) {
			last = since
		}
	}
	return last, true
}

// missing counts the nodes that do not publish what cl wants.
func (w *nodeWatcher) missing(cl *cluster) int {
	n := 0
	for i := range cl.p.nodes {
		node := nodeName(i)
		want := cl.want(node)
		w.mu.Lock()
		got, ok := w.published[node]
		w.mu.Unlock()
		if !ok || got != want {
			n++
		}
	}
	return n
}

// expect records that node should come to publish want, after a change sent at sent.
func (w *nodeWatcher) expect(node string, want int64, sent time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pending[node] = pendingChange{want: want, sent: sent}
}

// pendingCount is the number of changes not yet published.
func (w *nodeWatcher) pendingCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.pending)
}

// takeLatencies returns the latencies recorded since the last call, sorted, and forgets them.
func (w *nodeWatcher) takeLatencies() []time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.latencies
	w.latencies = nil
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// percentile returns the q-quantile (0 < q ≤ 1) of sorted durations.
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*q+0.999999) - 1
	i = max(0, min(i, len(sorted)-1))
	return sorted[i]
}
