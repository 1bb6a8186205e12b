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
	"os"
	"path/filepath"
	"slices"
	"time"

	"k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// checkReregistration restarts the kubelet and records, per resource, whether the plugin
// registered it again and serves a new stream; then it runs the health change on the new streams
// and holds them.
func (r *run) checkReregistration(ctx context.Context) {
	started := time.Now()
	// The kubelet goes away: its connections close and kubelet.sock stays behind until the new
	// kubelet removes it and every socket of the directory; its plugin watcher then finds the
	// sockets of the plugins registry again.
	for _, res := range r.resources {
		res.closeStream()
	}
	r.kubelet.stop()
	for len(r.kubelet.regs) > 0 {
		<-r.kubelet.regs
	}
	regs, why := map[string]*registration{}, ""
	if err := r.kubelet.start(); err != nil {
		why = "restarting the fake kubelet: " + err.Error()
	} else {
		regs, why = r.awaitReregistrations(ctx)
	}
	var again []*resourceRun
	for _, res := range r.resources {
		reg := regs[res.name]
		if reg == nil {
			res.record(CheckReregistration, Fail, started, why)
		}
		if reg == nil || !res.reconnect(ctx, started, reg) {
			res.notJudgedAgain()
			continue
		}
		again = append(again, res)
	}
	for _, res := range again {
		res.observeHealthChange(ctx, againStream)
	}
	for _, res := range again {
		res.holdStream(ctx, againStream)
	}
}

// awaitReregistrations waits until each resource registered again, rejected or not (the
// rejection is the other checks' business), and returns the first registration of each, with
// why the others did not come.
func (r *run) awaitReregistrations(ctx context.Context) (map[string]*registration, string) {
	got := map[string]*registration{}
	timeout := time.NewTimer(r.t.Reregistration)
	defer timeout.Stop()
	for len(got) < len(r.resources) {
		select {
		case reg := <-r.kubelet.regs:
			name := reg.req.GetResourceName()
			if _, seen := got[name]; !seen && slices.ContainsFunc(r.resources, func(res *resourceRun) bool { return res.name == name }) {
				got[name] = reg
			}
		case <-r.opts.Target.Exited():
			return got, "the plugin exited after kubelet.sock was created again"
		case <-timeout.C:
			return got, fmt.Sprintf("no Register call for this resource within %s of kubelet.sock being created again", seconds(r.t.Reregistration))
		case <-ctx.Done():
			return got, ctx.Err().Error()
		}
	}
	return got, ""
}

// reconnect takes the resource's new registration, opens ListAndWatch and reads its first list,
// and records registration/after-kubelet-restart; false when there is no new stream.
func (r *resourceRun) reconnect(ctx context.Context, restarted time.Time, reg *registration) bool {
	took := reg.at.Sub(restarted)
	r.socket = reg.endpointPath(r.dir)
	if reg.conn != nil {
		r.conn, reg.conn = reg.conn, nil
	} else {
		conn, _, err := dialPlugin(ctx, r.socket)
		if err != nil {
			r.record(CheckReregistration, Fail, restarted, fmt.Sprintf("registered again after %s (rejected: %s), but its endpoint does not answer: %v", seconds(took), reg.rejected, err))
			return false
		}
		r.conn = conn
	}
	r.client = v1beta1.NewDevicePluginClient(r.conn)
	s, err := openListStream(ctx, r.client)
	if err != nil {
		r.record(CheckReregistration, Fail, restarted, fmt.Sprintf("registered again after %s, but ListAndWatch failed: %v", seconds(took), err))
		return false
	}
	msg, err := s.next(r.t.FirstList)
	if err != nil {
		s.close()
		r.record(CheckReregistration, Fail, restarted, fmt.Sprintf("registered again after %s, but: %v", seconds(took), err))
		return false
	}
	r.stream, r.devices = s, msg.GetDevices()
	r.settle(s, restarted)
	r.record(CheckReregistration, Pass, restarted, fmt.Sprintf("registered again %s after kubelet.sock was created again (limit %s); ListAndWatch sent %d devices",
		seconds(took), seconds(r.t.Reregistration), len(msg.GetDevices())))
	return true
}

// notJudgedAgain notes on the stream checks that the resource has no stream after the restart.
func (r *resourceRun) notJudgedAgain() {
	note := "not judged again after the kubelet restart: the plugin serves no new stream (see registration/after-kubelet-restart)"
	if r.health.outcome != Skip {
		r.health.add(Pass, note)
	}
	r.streamOpen.add(Pass, note)
}

// checkStop stops the plugin and records, per resource, whether it exited in time and removed
// the resource's socket.
func (r *run) checkStop() {
	started := time.Now()
	err := r.opts.Target.Stop(r.t.Stop)
	for _, res := range r.resources {
		var problems []string
		if err != nil {
			problems = append(problems, "stopping the plugin: "+err.Error())
		}
		if _, statErr := os.Lstat(res.socket); statErr == nil {
			problems = append(problems, fmt.Sprintf("its socket %s is still there after it stopped", res.socket))
		}
		res.verdict(CheckStop, started, problems, fmt.Sprintf("exited %s after it was asked to stop and removed %s", seconds(time.Since(started)), filepath.Base(res.socket)))
	}
}
