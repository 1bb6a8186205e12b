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
	"time"
)

// Gate is the agent's start-up gate: closed until the core's checkpoint is restored, the cordons
// are handed to the core and the core serves plugins. Nothing is allocated, freed or mirrored
// before it opens.
type Gate struct {
	ch chan struct{}
	// opened is when the gate opened; written once, before ch is closed.
	opened time.Time
}

// NewGate returns a closed gate.
func NewGate() *Gate {
	return &Gate{ch: make(chan struct{})}
}

// Open opens the gate, at now. It must be called once.
func (g *Gate) Open(now time.Time) {
	g.opened = now
	close(g.ch)
}

// Done is closed when the gate opens.
func (g *Gate) Done() <-chan struct{} {
	return g.ch
}

// IsOpen reports whether the gate is open.
func (g *Gate) IsOpen() bool {
	select {
	case <-g.ch:
		return true
	default:
		return false
	}
}

// Wait blocks until the gate opens or ctx ends.
func (g *Gate) Wait(ctx context.Context) error {
	select {
	case <-g.ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Opened is when the gate opened; the zero time while it is closed.
func (g *Gate) Opened() time.Time {
	if !g.IsOpen() {
		return time.Time{}
	}
	return g.opened
}
