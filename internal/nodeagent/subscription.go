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
	"sync"

	"k8s.io/apimachinery/pkg/util/sets"
)

// Subscription tells one consumer which resources changed, so it can read
// their snapshots without polling. The manager never blocks on it and never
// loses a change: changes accumulate as a set of resource names until the
// consumer takes them, and Ready holds at most one pending signal.
//
//	sub := m.Subscribe()
//	defer sub.Close()
//	for {
//		select {
//		case <-ctx.Done():
//			return
//		case <-sub.Ready():
//			for _, name := range sub.Changed() {
//				snap, ok := m.Snapshot(name) // !ok: the resource was removed
//				...
//			}
//		}
//	}
type Subscription struct {
	// unsubscribe removes the subscription from its source (a Manager or a Notifier).
	unsubscribe func(*Subscription)
	ready       chan struct{}

	mu      sync.Mutex
	pending sets.Set[string]
}

// Subscribe returns a new subscription. Its first Changed lists every
// resource known at the time, so the consumer starts from a full view.
func (m *Manager) Subscribe() *Subscription {
	s := newSubscription(func(s *Subscription) {
		m.subsMu.Lock()
		defer m.subsMu.Unlock()
		delete(m.subs, s)
	})
	m.mu.Lock()
	defer m.mu.Unlock()
	m.subsMu.Lock()
	m.subs[s] = struct{}{}
	m.subsMu.Unlock()
	for name := range m.resources {
		s.add(name)
	}
	return s
}

// Ready receives a value when changes are pending. After a receive, call
// Changed.
func (s *Subscription) Ready() <-chan struct{} { return s.ready }

// Changed returns the names of the resources that changed since the last
// call, sorted, and clears them. A name may be listed although the change was
// undone in the meantime; read the snapshot to know the current state.
func (s *Subscription) Changed() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pending.Len() == 0 {
		return nil
	}
	out := sets.List(s.pending)
	s.pending = sets.New[string]()
	return out
}

// Close stops the subscription. It is idempotent.
func (s *Subscription) Close() {
	s.unsubscribe(s)
}

func newSubscription(unsubscribe func(*Subscription)) *Subscription {
	return &Subscription{unsubscribe: unsubscribe, ready: make(chan struct{}, 1), pending: sets.New[string]()}
}

func (s *Subscription) add(names ...string) {
	if len(names) == 0 {
		return
	}
	s.mu.Lock()
	s.pending.Insert(names...)
	s.mu.Unlock()
	select {
	case s.ready <- struct{}{}:
	default:
	}
}

// notifyLocked tells every subscriber that the named resources changed. The
// caller holds m.mu, so notifications are ordered with the changes.
func (m *Manager) notifyLocked(names ...string) {
	m.subsMu.Lock()
	defer m.subsMu.Unlock()
	for s := range m.subs {
		s.add(names...)
	}
}

// Notifier hands out Subscriptions for a state kept outside a Manager: the agent's observe mode
// mirrors the kubelet's device manager through the same NodeDevice mirror, which reads it through
// the same Subscribe. The zero value is ready to use.
type Notifier struct {
	mu   sync.Mutex
	subs map[*Subscription]struct{}
}

// Subscribe returns a new subscription whose first Changed lists initial.
func (n *Notifier) Subscribe(initial ...string) *Subscription {
	s := newSubscription(func(s *Subscription) {
		n.mu.Lock()
		defer n.mu.Unlock()
		delete(n.subs, s)
	})
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.subs == nil {
		n.subs = map[*Subscription]struct{}{}
	}
	n.subs[s] = struct{}{}
	s.add(initial...)
	return s
}

// Notify tells every subscriber that the named resources changed.
func (n *Notifier) Notify(names ...string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for s := range n.subs {
		s.add(names...)
	}
}
