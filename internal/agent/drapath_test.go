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

package agent

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubedevice/kubedevice/internal/agent/dra"
)

// nodeReader is a client.Reader of one Node that does not exist for the first missing Gets, and
// records when (on its clock) each Get was asked.
type nodeReader struct {
	node    *corev1.Node
	missing int
	clock   *clocktesting.FakeClock

	mu   sync.Mutex
	gets []time.Time
}

func (r *nodeReader) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.gets = append(r.gets, r.clock.Now())
	if len(r.gets) <= r.missing || key.Name != r.node.Name {
		return apierrors.NewNotFound(schema.GroupResource{Resource: "nodes"}, key.Name)
	}
	r.node.DeepCopyInto(obj.(*corev1.Node))
	return nil
}

func (*nodeReader) List(context.Context, client.ObjectList, ...client.ListOption) error {
	panic("the choice never lists")
}

// getTimes returns how long after start each Get was asked.
func (r *nodeReader) getTimes(start time.Time) []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]time.Duration, len(r.gets))
	for i, t := range r.gets {
		out[i] = t.Sub(start)
	}
	return out
}

func mustSelector(t *testing.T, s string) labels.Selector {
	t.Helper()
	sel, err := labels.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return sel
}

func mustResources(t *testing.T, patterns ...string) dra.Resources {
	t.Helper()
	r, err := dra.ParseResources(patterns)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// choose runs chooseDRAPath against r until it returns, moving the fake clock on by
// nodeReadInitialDelay whenever it waits, and returns its error.
func choose(ctx context.Context, t *testing.T, r *nodeReader, p *draPath) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- chooseDRAPath(ctx, r, r.clock, r.node.Name, p) }()
	for {
		select {
		case err := <-done:
			return err
		case <-time.After(time.Millisecond):
		}
		if r.clock.HasWaiters() {
			r.clock.Step(nodeReadInitialDelay)
		}
	}
}

// The node serves the DRA resources through DRA exactly when its labels match the selector, and
// the core follows: only the DRA resources, only on a chosen node, and none before the choice.
func TestChooseDRAPath(t *testing.T) {
	resources := mustResources(t, "example.com/*")
	for name, tc := range map[string]struct {
		selector string
		labels   map[string]string
		want     bool
		// log is the choice's log line.
		log string
	}{
		"equality matches": {"kubedevice.io/dra=true", map[string]string{"kubedevice.io/dra": "true", "zone": "a"}, true,
			`"level"=0 "msg"="Serving the DRA resources through DRA: the node's labels match --dra-node-selector" "draNodeSelector"="kubedevice.io/dra=true" "nodeLabels"={"kubedevice.io/dra"="true"} "draResources"="example.com/*"`},
		"equality does not match": {"kubedevice.io/dra=true", map[string]string{"kubedevice.io/dra": "false"}, false,
			`"level"=0 "msg"="Serving every resource through node capacity, as without --dra-resources: the node's labels do not match --dra-node-selector" "draNodeSelector"="kubedevice.io/dra=true" "nodeLabels"={"kubedevice.io/dra"="false"} "draResources"="example.com/*"`},
		"label missing": {"kubedevice.io/dra=true", nil, false,
			`"level"=0 "msg"="Serving every resource through node capacity, as without --dra-resources: the node's labels do not match --dra-node-selector" "draNodeSelector"="kubedevice.io/dra=true" "nodeLabels"={} "draResources"="example.com/*"`},
		"set matches": {"pool in (gpu-a,gpu-b),!legacy", map[string]string{"pool": "gpu-b"}, true,
			`"level"=0 "msg"="Serving the DRA resources through DRA: the node's labels match --dra-node-selector" "draNodeSelector"="!legacy,pool in (gpu-a,gpu-b)" "nodeLabels"={"pool"="gpu-b"} "draResources"="example.com/*"`},
		"excluded by a key": {"pool in (gpu-a,gpu-b),!legacy", map[string]string{"pool": "gpu-a", "legacy": ""}, false,
			`"level"=0 "msg"="Serving every resource through node capacity, as without --dra-resources: the node's labels do not match --dra-node-selector" "draNodeSelector"="!legacy,pool in (gpu-a,gpu-b)" "nodeLabels"={"legacy"="" "pool"="gpu-a"} "draResources"="example.com/*"`},
	} {
		t.Run(name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(time.Now())
			r := &nodeReader{node: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: tc.labels}}, clock: clk}
			p := newDRAPath(resources, mustSelector(t, tc.selector))
			if p.servedByDRA("example.com/gopher") {
				t.Error("a resource is served through DRA before the choice")
			}
			var logged []string
			ctx := logr.NewContext(t.Context(), funcr.New(func(_, args string) { logged = append(logged, args) }, funcr.Options{}))
			if err := choose(ctx, t, r, p); err != nil {
				t.Fatal(err)
			}
			got := map[string]any{
				"choice": p.served, "gopher": p.servedByDRA("example.com/gopher"), "other": p.servedByDRA("other.com/gpu"), "reads": len(r.gets),
				"log": logged,
			}
			want := map[string]any{"choice": tc.want, "gopher": tc.want, "other": false, "reads": 1, "log": []string{tc.log}}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// A Node that does not exist yet is read again after 250 ms, then 500 ms, ..., until it appears;
// the choice is then made from its labels.
func TestChooseDRAPathWaitsForTheNode(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	start := clk.Now()
	r := &nodeReader{
		node:    &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"kubedevice.io/dra": "true"}}},
		missing: 3, clock: clk,
	}
	p := newDRAPath(mustResources(t, "*"), mustSelector(t, "kubedevice.io/dra=true"))
	if err := choose(t.Context(), t, r, p); err != nil {
		t.Fatal(err)
	}
	want := []time.Duration{0, 250 * time.Millisecond, 750 * time.Millisecond, 1750 * time.Millisecond}
	if diff := cmp.Diff(want, r.getTimes(start)); diff != "" {
		t.Errorf("reads after the start (-want +got):\n%s", diff)
	}
	if served, ok := p.choice(); !ok || !served {
		t.Errorf("choice %v (made %v), want DRA", served, ok)
	}
}

// A Node that never appears within the start-up leaves the choice unmade, and the error names
// the Node, the selector and why.
func TestChooseDRAPathGivesUpWithTheStartUp(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	r := &nodeReader{node: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, missing: 1 << 30, clock: clk}
	p := newDRAPath(mustResources(t, "*"), mustSelector(t, "kubedevice.io/dra"))
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		for len(r.getTimes(clk.Now())) < 3 {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	err := choose(ctx, t, r, p)
	if !errors.Is(err, context.Canceled) || !apierrors.IsNotFound(err) {
		t.Errorf("error %v, want the context's and the last read's", err)
	}
	want := `reading Node "n1" to match its labels against --dra-node-selector="kubedevice.io/dra": `
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("error %q, want one starting %q", err, want)
	}
	if _, ok := p.choice(); ok {
		t.Error("the choice was made without the Node")
	}
}

// selectedLabels says what the choice looked at: the node's labels the selector names.
func TestSelectedLabels(t *testing.T) {
	got := selectedLabels(mustSelector(t, "pool in (a,b),!legacy,zone"), map[string]string{"pool": "a", "zone": "z1", "other": "x"})
	if diff := cmp.Diff(map[string]string{"pool": "a", "zone": "z1"}, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// startRecorder is a manager.Runnable that records that it started.
type startRecorder struct{ started chan struct{} }

func (s *startRecorder) Start(context.Context) error {
	close(s.started)
	return nil
}

// The runner starts the DRA flow on a node chosen for DRA, the removal of the old slices on any
// other, and nothing when the manager stops before the choice.
func TestDRAPathRunner(t *testing.T) {
	for name, choice := range map[string]*bool{"DRA": new(true), "node capacity": new(false), "no choice": nil} {
		t.Run(name, func(t *testing.T) {
			p := newDRAPath(mustResources(t, "*"), mustSelector(t, "a=b"))
			flow, withdrawal := &startRecorder{make(chan struct{})}, &startRecorder{make(chan struct{})}
			r := &draPathRunner{path: p, dra: flow, withdrawal: withdrawal}
			ctx, cancel := context.WithCancel(t.Context())
			if choice != nil {
				p.decide(*choice)
			} else {
				cancel()
			}
			defer cancel()
			if err := r.Start(ctx); err != nil {
				t.Fatal(err)
			}
			got := map[string]bool{"dra": isClosed(flow.started), "withdrawal": isClosed(withdrawal.started)}
			want := map[string]bool{"dra": choice != nil && *choice, "withdrawal": choice != nil && !*choice}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("started (-want +got):\n%s", diff)
			}
		})
	}
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
