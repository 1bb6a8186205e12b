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
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	promtestutil "github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
)

func TestRefusalPacer(t *testing.T) {
	key := types.NamespacedName{Namespace: "ns", Name: "p"}
	type step struct {
		// after is how long after the previous step this one runs.
		after time.Duration
		// uid of the pod; wrote, first: a refusal written after asking; forget: the pod left.
		uid    types.UID
		wrote  bool
		first  bool
		forget bool
		// wantWait is what wait answers before the step writes or forgets.
		wantWait time.Duration
	}
	tests := map[string][]step{
		"a pod never refused writes at once": {
			{uid: "a", wantWait: 0},
		},
		"each rewrite waits twice as long as the one before, up to the cap": {
			{uid: "a", wrote: true, first: true},
			{after: 500 * time.Millisecond, uid: "a", wantWait: 500 * time.Millisecond},
			{after: 500 * time.Millisecond, uid: "a", wrote: true, wantWait: 0},
			{after: time.Second, uid: "a", wantWait: time.Second},
			{after: time.Second, uid: "a", wrote: true, wantWait: 0},
			{after: 4 * time.Second, uid: "a", wrote: true, wantWait: 0},
			{after: 8 * time.Second, uid: "a", wrote: true, wantWait: 0},
			{after: 16 * time.Second, uid: "a", wrote: true, wantWait: 0},
			{after: 30 * time.Second, uid: "a", wrote: true, wantWait: 0},
			{after: time.Second, uid: "a", wantWait: 29 * time.Second},
		},
		"a first refusal after an allocation starts over": {
			{uid: "a", wrote: true, first: true},
			{after: time.Second, uid: "a", wrote: true},
			{after: 2 * time.Second, uid: "a", wrote: true, first: true},
			{after: 100 * time.Millisecond, uid: "a", wantWait: 900 * time.Millisecond},
		},
		"a new pod of the same name is not held back by the old one's pace": {
			{uid: "a", wrote: true, first: true},
			{uid: "b", wantWait: 0},
		},
		"a pod that left is forgotten": {
			{uid: "a", wrote: true, first: true},
			{uid: "a", forget: true, wantWait: time.Second},
			{uid: "a", wantWait: 0},
		},
	}
	for name, steps := range tests {
		t.Run(name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(t0)
			p := newRefusalPacer(clk)
			var got, want []time.Duration
			for _, s := range steps {
				clk.Step(s.after)
				got, want = append(got, p.wait(key, s.uid)), append(want, s.wantWait)
				switch {
				case s.forget:
					p.forget(key)
				case s.wrote:
					p.wrote(key, s.uid, s.first)
				}
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("waits (-want +got):\n%s", diff)
			}
		})
	}
}

// TestRefusedPodsGauge checks kubedevice_agent_refused_pods counts each refused pod once, however
// often its refusal is rewritten, and drops it when it is forgotten (allocated, ended or gone).
func TestRefusedPodsGauge(t *testing.T) {
	p := newRefusalPacer(clocktesting.NewFakeClock(t0))
	base := promtestutil.ToFloat64(refusedPods)
	a := types.NamespacedName{Namespace: "ns", Name: "a"}
	b := types.NamespacedName{Namespace: "ns", Name: "b"}
	steps := []struct {
		do   func()
		want float64
	}{
		{func() { p.wrote(a, "a1", true) }, 1},
		{func() { p.wrote(a, "a1", false) }, 1},
		{func() { p.wrote(a, "a2", true) }, 1},
		{func() { p.wrote(b, "b1", true) }, 2},
		{func() { p.forget(a) }, 1},
		{func() { p.forget(a) }, 1},
		{func() { p.forget(b) }, 0},
	}
	for i, s := range steps {
		s.do()
		if got := promtestutil.ToFloat64(refusedPods) - base; got != s.want {
			t.Errorf("step %d: kubedevice_agent_refused_pods = %v more than before, want %v", i, got, s.want)
		}
	}
}
