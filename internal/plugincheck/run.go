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
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"
	"unicode"

	"k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

const (
	// maxSettleMessages bounds how many lists the first list may settle over.
	maxSettleMessages = 8
	// preStartTimeout is the kubelet's KubeletPreStartContainerRPCTimeoutInSecs.
	preStartTimeout = v1beta1.KubeletPreStartContainerRPCTimeoutInSecs * time.Second
	// unknownDeviceID is what allocate/unknown-device asks for.
	unknownDeviceID = "kubedevice-plugin-test-no-such-device"
	// maxEachDevice bounds how many devices allocate/each-device asks for one by one.
	maxEachDevice = 64
)

// run is one run of the checker.
type run struct {
	opts     Options
	t        Timeouts
	report   *Report
	kubelet  *fakeKubelet
	dir      string
	registry string
	// all are the resources the plugin registered, each checked on its own; resources are those
	// still checked (the others failed a check the rest need).
	all, resources []*resourceRun
}

// Run runs every check against the plugin and returns the report. The error is for what kept the
// checker itself from running; a plugin's failures are in the report.
func Run(ctx context.Context, opts Options) (*Report, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	r := &run{opts: opts, t: opts.Timeouts.complete(), report: &Report{Strict: opts.Strict}}
	start := time.Now()
	defer func() { r.report.Duration = time.Since(start) }()
	if opts.Target != nil {
		r.report.Plugin = opts.Target.String()
		defer r.cleanup()
		if err := r.setupDirs(); err != nil {
			return nil, err
		}
	} else {
		r.report.Plugin = opts.Socket
	}
	var interrupted atomic.Pointer[time.Time]
	stopWatch := context.AfterFunc(ctx, func() { now := time.Now(); interrupted.Store(&now) })
	defer stopWatch()
	r.checkAll(ctx)
	r.report.sortResults()
	if at := interrupted.Load(); at != nil {
		r.report.markInterrupted(*at)
	}
	return r.report, nil
}

// setupDirs creates the plugin directory and the plugins registry directory, and starts the fake
// kubelet in them.
func (r *run) setupDirs() error {
	var err error
	// Short paths: unix socket paths are limited to 107 bytes.
	if r.dir, err = makeDir(r.opts.Dir, "kdpt-", "plugin directory"); err != nil {
		return err
	}
	if r.registry, err = makeDir(r.opts.RegistryDir, "kdpr-", "plugins registry directory"); err != nil {
		return err
	}
	// The checker removes the directory's sockets, as a starting kubelet does: never those of a
	// device manager that serves it.
	if conn, err := net.DialTimeout("unix", filepath.Join(r.dir, kubeletSocketName), time.Second); err == nil {
		_ = conn.Close()
		return fmt.Errorf("%w: a device manager serves %s; give the checker a plugin directory of its own", errOptions, filepath.Join(r.dir, kubeletSocketName))
	}
	r.kubelet = newFakeKubelet(r.dir, r.registry)
	return r.kubelet.start()
}

// makeDir creates dir, or a new temporary directory when it is "", and returns its absolute path.
func makeDir(dir, tempPrefix, what string) (string, error) {
	if dir == "" {
		tmp, err := os.MkdirTemp("", tempPrefix)
		if err != nil {
			return "", fmt.Errorf("creating the %s: %w", what, err)
		}
		return tmp, nil
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return "", fmt.Errorf("creating the %s: %w", what, err)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("resolving the %s: %w", what, err)
	}
	return abs, nil
}

func (r *run) cleanup() {
	for _, res := range r.all {
		res.closeStream()
	}
	if r.kubelet != nil {
		r.kubelet.close()
	}
	if r.opts.Target != nil && r.opts.Target.Exited() != nil {
		select {
		case <-r.opts.Target.Exited():
		default:
			_ = r.opts.Target.Stop(r.t.Stop)
		}
	}
	if r.opts.Dir == "" && r.dir != "" {
		_ = os.RemoveAll(r.dir)
	}
	if r.opts.RegistryDir == "" && r.registry != "" {
		_ = os.RemoveAll(r.registry)
	}
}

func (r *run) checkAll(ctx context.Context) {
	if !r.connectAll(ctx) {
		return
	}
	var live []*resourceRun
	for _, res := range r.resources {
		if res.checkDevices(ctx) {
			live = append(live, res)
		}
	}
	if r.resources = live; len(live) == 0 {
		return
	}
	// Every resource's devices are checked before any health change: a hook may change the
	// devices of every resource of the process.
	for _, res := range r.resources {
		res.observeHealthChange(ctx, firstStream)
	}
	for _, res := range r.resources {
		res.holdStream(ctx, firstStream)
	}
	if r.opts.Target == nil {
		reason := "the plugin was given as a socket: the checker did not start it and serves no kubelet.sock to it"
		for _, res := range r.resources {
			res.skipAll(reason, CheckReregistration, CheckStop)
			res.recordStreamVerdicts()
		}
		return
	}
	r.checkReregistration(ctx)
	for _, res := range r.resources {
		res.recordStreamVerdicts()
	}
	r.checkStop()
}

// connectAll registers the plugin (or dials its socket) and makes a resourceRun per resource
// that can be talked to; false when none can.
func (r *run) connectAll(ctx context.Context) bool {
	if r.opts.Target == nil {
		res := r.newResource("")
		r.resources = []*resourceRun{res}
		return res.connectSocket(ctx)
	}
	started := time.Now()
	regs := r.awaitRegistrations(ctx, started)
	if len(regs) == 0 {
		return false
	}
	var connected []*resourceRun
	for _, name := range resourceNames(regs) {
		res := r.newResource(name)
		if res.checkRegistration(ctx, started, regs) {
			connected = append(connected, res)
		}
	}
	r.resources = connected
	return len(connected) > 0
}

// newResource adds a resource to the report; its checks are recorded under its name.
func (r *run) newResource(name string) *resourceRun {
	res := &resourceRun{run: r, name: name}
	if name != "" {
		r.report.Resources = append(r.report.Resources, name)
	}
	r.all = append(r.all, res)
	return res
}

// afterRegistration are the checks skipped when there is no plugin to talk to.
var afterRegistration = []Check{
	CheckFirstList, CheckDeviceIDs, CheckHealthValues,
	CheckAllocateEach, CheckAllocateSeveral, CheckAllocateUnknown,
	CheckPaths, CheckPermissions, CheckDuplicates, CheckCDINames,
	CheckPreStart, CheckPreferredAnswers, CheckPreferredMustInclude, CheckPreferredSize, CheckPreferredAvailable,
	CheckHealthUpdate, CheckStreamOpen, CheckReregistration, CheckStop,
}

func controlIDs(devs []*v1beta1.Device) int {
	n := 0
	for _, d := range devs {
		if strings.ContainsFunc(d.GetID(), unicode.IsControl) {
			n++
		}
	}
	return n
}

func healthMap(devs []*v1beta1.Device) map[string]string {
	m := make(map[string]string, len(devs))
	for _, d := range devs {
		m[d.GetID()] = d.GetHealth()
	}
	return m
}

func describeDevices(devs []*v1beta1.Device) string {
	if len(devs) == 0 {
		return "no devices"
	}
	parts := make([]string, 0, len(devs))
	for i, d := range devs {
		if i == 8 {
			parts = append(parts, fmt.Sprintf("... (%d in all)", len(devs)))
			break
		}
		parts = append(parts, fmt.Sprintf("%q=%s", d.GetID(), d.GetHealth()))
	}
	return strings.Join(parts, " ")
}

func prefixAll(prefix string, msgs []string) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = prefix + m
	}
	return out
}

func uniq(msgs []string) []string {
	var out []string
	for _, m := range msgs {
		if !slices.Contains(out, m) {
			out = append(out, m)
		}
	}
	return out
}

func seconds(d time.Duration) string { return fmt.Sprintf("%.1fs", d.Seconds()) }

func indent(s string) string {
	return "        " + strings.ReplaceAll(s, "\n", "\n        ")
}
