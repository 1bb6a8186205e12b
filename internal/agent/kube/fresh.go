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

package kube

import (
	"context"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Fresh decides whether the agent must write an object, without ever repeating its own last
// write: when the cached object is up to date it answers (cached, true) at once; when written
// says the agent has not written the object named key lately, it answers (cached, false) at once
// too, cached being nil when the cache holds none: the cache has seen every object that existed
// when it synced and every change since, but maybe the agent's own last ones, so there is nothing
// better to read (a first registration's shards, a pod's first DeviceAllocation, the shards an
// agent restart finds awaiting their plugin). Otherwise it reads the object of kind named key from
// the API server (the cache may not have seen the agent's last write yet) and answers that object,
// nil when there is none, and whether it is up to date. upToDate is asked only of an object that
// exists: one that does not is never up to date. written may be nil: the object is then always
// read when the cache cannot decide.
func Fresh[T any, PT interface {
	*T
	client.Object
}](ctx context.Context, reader client.Reader, written *Written, kind string, key client.ObjectKey, cached PT, upToDate func(PT) bool) (PT, bool, error) {
	if cached != nil && upToDate(cached) {
		return cached, true, nil
	}
	if written != nil && !written.Recently(key) {
		return cached, false, nil
	}
	var obj PT = new(T)
	if err := reader.Get(ctx, key, obj); err != nil {
		if !apierrors.IsNotFound(err) {
			return nil, false, fmt.Errorf("getting %s %s: %w", kind, klog.KRef(key.Namespace, key.Name), err)
		}
		obj = nil
	}
	return obj, obj != nil && upToDate(obj), nil
}

// WrittenMemory is how long Written remembers a write: far longer than the cache takes to see
// one (milliseconds, seconds when the API server is loaded), short enough to hold only the
// objects of the last burst.
const WrittenMemory = time.Minute

// Written remembers the objects of one kind the agent wrote (created, changed or deleted) in the
// last WrittenMemory, so Fresh reads from the API server only an object the cache may not show as
// the agent left it. Safe for concurrent use.
type Written struct {
	clock clock.PassiveClock

	mu sync.Mutex
	at map[client.ObjectKey]time.Time
	// pruned is when the map was last swept of forgotten writes.
	pruned time.Time
}

// NewWritten returns an empty Written on clk.
func NewWritten(clk clock.PassiveClock) *Written {
	return &Written{clock: clk, at: map[client.ObjectKey]time.Time{}, pruned: clk.Now()}
}

// Wrote records a write of the object named key, successful or not (a write that failed may
// still have been applied). A nil Written records nothing.
func (w *Written) Wrote(key client.ObjectKey) {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.clock.Now()
	w.at[key] = now
	if now.Sub(w.pruned) >= WrittenMemory {
		for k, t := range w.at {
			if now.Sub(t) >= WrittenMemory {
				delete(w.at, k)
			}
		}
		w.pruned = now
	}
}

// Recently reports whether the object named key was written in the last WrittenMemory.
func (w *Written) Recently(key client.ObjectKey) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	t, ok := w.at[key]
	return ok && w.clock.Since(t) < WrittenMemory
}
