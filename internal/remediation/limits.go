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

package remediation

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Limits spaces the remediation policy's evictions: at most one per node interval on each node, and
// one per cluster interval in the whole cluster, so a plugin flapping on every node cannot evict a
// fleet. Each is a token bucket of one token (golang.org/x/time/rate), driven by the times the
// caller passes (the controller's clock). It is safe for concurrent use.
type Limits struct {
	mu        sync.Mutex
	nodeEvery time.Duration
	cluster   *rate.Limiter
	nodes     map[string]*rate.Limiter
}

// NewLimits returns Limits allowing one eviction per nodeInterval per node and one per
// clusterInterval in all; the first eviction of each is allowed at once.
func NewLimits(nodeInterval, clusterInterval time.Duration) *Limits {
	return &Limits{
		nodeEvery: nodeInterval,
		cluster:   rate.NewLimiter(rate.Every(clusterInterval), 1),
		nodes:     map[string]*rate.Limiter{},
	}
}

// Reserve takes one eviction on node at now. When both limits allow it, it returns zero and a
// function that gives the eviction back (for one that did not happen: refused, or the pod gone);
// otherwise how long to wait until they would, having taken nothing.
func (l *Limits) Reserve(node string, now time.Time) (time.Duration, func(at time.Time)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.forget(now)
	nl := l.nodes[node]
	if nl == nil {
		nl = rate.NewLimiter(rate.Every(l.nodeEvery), 1)
		l.nodes[node] = nl
	}
	rn, rc := nl.ReserveN(now, 1), l.cluster.ReserveN(now, 1)
	if wait := max(rn.DelayFrom(now), rc.DelayFrom(now)); wait > 0 {
		rn.CancelAt(now)
		rc.CancelAt(now)
		return wait, nil
	}
	return 0, func(at time.Time) {
		l.mu.Lock()
		defer l.mu.Unlock()
		rn.CancelAt(at)
		rc.CancelAt(at)
	}
}

// forget drops the nodes whose limiter is full at now: a new one would allow the same, so the map
// holds only the nodes with an eviction within the last node interval, not every node ever seen.
func (l *Limits) forget(now time.Time) {
	for node, nl := range l.nodes {
		if nl.TokensAt(now) >= 1 {
			delete(l.nodes, node)
		}
	}
}
