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
	"testing"
	"time"
)

func TestGate(t *testing.T) {
	g := NewGate()
	if g.IsOpen() || !g.Opened().IsZero() {
		t.Fatal("a new gate is open")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := g.Wait(ctx); err == nil {
		t.Error("waiting on a closed gate with an ended context did not fail")
	}
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	g.Open(at)
	if err := g.Wait(context.Background()); err != nil {
		t.Errorf("waiting on an open gate: %v", err)
	}
	if !g.IsOpen() || !g.Opened().Equal(at) {
		t.Errorf("open gate: IsOpen %v, Opened %v; want true, %v", g.IsOpen(), g.Opened(), at)
	}
	select {
	case <-g.Done():
	default:
		t.Error("Done of an open gate is not closed")
	}
}
