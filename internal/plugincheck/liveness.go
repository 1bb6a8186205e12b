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

package plugincheck

import (
	"context"
	"fmt"
	"strings"
	"time"

	"k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// verdict gathers one check's outcome over several observations: the worst outcome wins
// (Fail, then Warn, then Pass, then Skip), and the evidence of each is kept.
type verdict struct {
	started  time.Time
	outcome  Outcome
	evidence []string
}

var outcomeRank = map[Outcome]int{"": 0, Skip: 1, Pass: 2, Warn: 3, Fail: 4}

func (v *verdict) add(o Outcome, evidence ...string) {
	if v.started.IsZero() {
		v.started = time.Now()
	}
	if outcomeRank[o] > outcomeRank[v.outcome] {
		v.outcome = o
	}
	v.evidence = append(v.evidence, evidence...)
}

func (r *resourceRun) recordStreamVerdicts() {
	for _, cv := range []struct {
		c Check
		v *verdict
	}{{CheckHealthUpdate, &r.health}, {CheckStreamOpen, &r.streamOpen}} {
		o := cv.v.outcome
		if o == "" {
			o = Skip
		}
		r.record(cv.c, o, cv.v.started, cv.v.evidence...)
	}
}

// observeHealthChange runs the health change hook and waits on the current stream for the new
// list: a device whose health changed, or a device removed or added, in a full list.
func (r *resourceRun) observeHealthChange(ctx context.Context, label string) {
	if r.opts.HealthChange == nil {
		if r.health.outcome == "" {
			r.health.add(Skip, "no way to change a device's health was given (--health-change-cmd)")
		}
		return
	}
	started := time.Now()
	if err := r.stream.ended(); err != nil {
		r.health.add(Fail, fmt.Sprintf("%s: no health change can arrive: %v", label, err))
		return
	}
	var env []string
	if r.opts.Target != nil {
		env = r.opts.Target.Env()
	}
	env = append(env, "KUBEDEVICE_PLUGIN_SOCKET="+r.socket, EnvResourceName+"="+r.name)
	before := r.devices
	if err := r.opts.HealthChange(ctx, env); err != nil {
		r.health.add(Fail, fmt.Sprintf("%s: the health change hook failed: %v", label, err))
		return
	}
	deadline := time.Now().Add(r.t.HealthUpdate)
	var seen []string
	for {
		msg, err := r.stream.next(time.Until(deadline))
		if err != nil {
			ev := []string{fmt.Sprintf("%s: no list with a changed health or a removed device within %s of the health change: %v", label, seconds(r.t.HealthUpdate), err)}
			if len(seen) == 0 {
				ev = append(ev, "the hook runs once on each stream (before and after the kubelet restart): each run must change the devices again, e.g. flip a device's health")
			}
			r.health.add(Fail, append(ev, seen...)...)
			return
		}
		r.devices = msg.GetDevices()
		c := diffLists(before, r.devices)
		switch {
		case len(c.changed)+len(c.removed)+len(c.added) == 0:
			seen = append(seen, "a list without a change: "+describeDevices(r.devices))
		case len(c.changed) > 0 && len(c.removed) > 0:
			r.health.add(Fail, fmt.Sprintf("%s: the list after the health change (%s) lacks devices %s: each list must be the full list",
				label, strings.Join(c.changed, ", "), quoteAll(c.removed)))
			return
		default:
			r.health.add(Pass, fmt.Sprintf("%s: %s, sent %s after the health change, in a full list of %d devices", label, c.describe(), seconds(time.Since(started)), len(r.devices)))
			return
		}
	}
}

// listChange is how one device list differs from the one before.
type listChange struct {
	changed, removed, added []string
}

func diffLists(before, after []*v1beta1.Device) listChange {
	b, a := healthMap(before), healthMap(after)
	var c listChange
	for _, id := range sortedKeys(b) {
		h, ok := a[id]
		switch {
		case !ok:
			c.removed = append(c.removed, id)
		case h != b[id]:
			c.changed = append(c.changed, fmt.Sprintf("%q %s -> %s", id, b[id], h))
		}
	}
	for _, id := range sortedKeys(a) {
		if _, ok := b[id]; !ok {
			c.added = append(c.added, id)
		}
	}
	return c
}

// describe says which of the API's changes was seen: "Whenever a Device state change or a Device
// disappears, ListAndWatch returns the new list".
func (c listChange) describe() string {
	var parts []string
	if len(c.changed) > 0 {
		parts = append(parts, "a health change ("+strings.Join(c.changed, ", ")+")")
	}
	if len(c.removed) > 0 {
		parts = append(parts, "devices removed ("+quoteAll(c.removed)+")")
	}
	if len(c.added) > 0 {
		parts = append(parts, "devices added ("+quoteAll(c.added)+")")
	}
	return strings.Join(parts, " and ")
}

// holdStream waits until the current stream has been open StreamHold, and judges whether it is
// still open: the kubelet never calls ListAndWatch again, so a stream that ends leaves the
// resource's devices unhealthy until the plugin registers again.
func (r *resourceRun) holdStream(ctx context.Context, label string) {
	started := time.Now()
	if r.streamOpen.started.IsZero() {
		r.streamOpen.started = started
	}
	wait := time.NewTimer(max(time.Until(r.stream.opened.Add(r.t.StreamHold)), 0))
	defer wait.Stop()
	select {
	case <-wait.C:
	case <-r.stream.done:
	case <-ctx.Done():
		r.streamOpen.add(Skip, fmt.Sprintf("%s: the run was interrupted", label))
		return
	}
	open := time.Since(r.stream.opened)
	if err := r.stream.ended(); err != nil {
		r.streamOpen.add(Fail, fmt.Sprintf("%s: %v (it was opened %s before; it must stay open at least %s, and until the kubelet closes it)",
			label, err, seconds(open), seconds(r.t.StreamHold)))
		return
	}
	r.streamOpen.add(Pass, fmt.Sprintf("%s is open %s after it was opened (held at least %s)", label, seconds(open), seconds(r.t.StreamHold)))
}

func quoteAll(ids []string) string {
	q := make([]string, len(ids))
	for i, id := range ids {
		q[i] = fmt.Sprintf("%q", id)
	}
	return strings.Join(q, " ")
}
