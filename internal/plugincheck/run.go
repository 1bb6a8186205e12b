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
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"
	"unicode"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// Timeouts bound the checker's waits. Zero values take the defaults.
type Timeouts struct {
	// Registration is how long the plugin has to register after it starts. Default 30 s.
	Registration time.Duration
	// FirstList is how long ListAndWatch has to send its first list. Default 5 s.
	FirstList time.Duration
	// RPC bounds each Allocate and GetPreferredAllocation call. Default 10 s.
	RPC time.Duration
	// HealthUpdate is how long after --health-change-cmd the new list may take. Default 10 s.
	HealthUpdate time.Duration
	// Reregistration is how long after kubelet.sock is created again the plugin has to register
	// again. Default 30 s.
	Reregistration time.Duration
	// Stop is how long after SIGTERM the plugin has to exit. Default 10 s.
	Stop time.Duration
	// ListSettle is how long the checker waits after each of the first lists for another: the
	// checks use the list once no other follows within it. Default 1 s.
	ListSettle time.Duration
	// StreamHold is how long each ListAndWatch stream must stay open after it opened (and it
	// must stay open until the checker closes it). Default 10 s.
	StreamHold time.Duration
}

// The default timeouts.
const (
	DefaultRegistrationTimeout   = 30 * time.Second
	DefaultFirstListTimeout      = 5 * time.Second
	DefaultRPCTimeout            = 10 * time.Second
	DefaultHealthUpdateTimeout   = 10 * time.Second
	DefaultReregistrationTimeout = 30 * time.Second
	DefaultStopTimeout           = 10 * time.Second
	DefaultStreamHold            = 10 * time.Second
	DefaultListSettle            = time.Second
	// maxSettleMessages bounds how many lists the first list may settle over.
	maxSettleMessages = 8
	// preStartTimeout is the kubelet's KubeletPreStartContainerRPCTimeoutInSecs.
	preStartTimeout = v1beta1.KubeletPreStartContainerRPCTimeoutInSecs * time.Second
	// unknownDeviceID is what allocate/unknown-device asks for.
	unknownDeviceID = "kubedevice-plugin-test-no-such-device"
	// maxEachDevice bounds how many devices allocate/each-device asks for one by one.
	maxEachDevice = 64
)

func (t Timeouts) complete() Timeouts {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&t.Registration, DefaultRegistrationTimeout)
	def(&t.FirstList, DefaultFirstListTimeout)
	def(&t.RPC, DefaultRPCTimeout)
	def(&t.HealthUpdate, DefaultHealthUpdateTimeout)
	def(&t.Reregistration, DefaultReregistrationTimeout)
	def(&t.Stop, DefaultStopTimeout)
	def(&t.StreamHold, DefaultStreamHold)
	def(&t.ListSettle, DefaultListSettle)
	return t
}

// Options configure a run of the checker. Exactly one of Target and Socket is set.
type Options struct {
	// Target is the plugin to start, pointed at a plugin directory where the checker serves the
	// kubelet's Registration service on kubelet.sock.
	Target Target
	// Socket is the socket of a plugin that already runs. Registration, re-registration and stop
	// are then skipped.
	Socket string
	// Dir is the plugin directory for Target. Default: a new temporary directory, removed at the
	// end.
	Dir string
	// HealthChange provokes a change of a device's health (--health-change-cmd). Without it,
	// list-and-watch/health-update is skipped.
	HealthChange func(ctx context.Context, env []string) error
	// Strict counts warnings as failures.
	Strict bool
	// Timeouts bound the waits.
	Timeouts Timeouts
	// Progress, if set, receives a line per check as it ends.
	Progress io.Writer
}

var errOptions = errors.New("invalid options")

// ShellHook returns a HealthChange that runs command with sh -c, with the target's environment
// (KUBEDEVICE_PLUGIN_DIR, KUBEDEVICE_PLUGIN_PID) added.
func ShellHook(command string) func(ctx context.Context, env []string) error {
	return func(ctx context.Context, env []string) error {
		cmd := exec.CommandContext(ctx, "sh", "-c", command) //nolint:gosec // G204: the author's own hook.
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("running %q: %w: %s", command, err, strings.TrimSpace(string(out)))
		}
		return nil
	}
}

// run is one run of the checker.
type run struct {
	opts    Options
	t       Timeouts
	report  *Report
	kubelet *fakeKubelet
	dir     string

	conn   *grpc.ClientConn
	client v1beta1.DevicePluginClient
	opts2  *v1beta1.DevicePluginOptions // GetDevicePluginOptions' answer
	socket string                       // the plugin's socket
	stream *listStream
	// devices is the latest list.
	devices []*v1beta1.Device
	// responses are the successful container allocation responses, for the response checks.
	responses []*v1beta1.ContainerAllocateResponse
	allocated []string // devices of a successful Allocate, for PreStartContainer
	// health and streamOpen gather list-and-watch/health-update and list-and-watch/stream-open
	// over the stream before and the stream after the kubelet restart.
	health, streamOpen verdict
}

// Run runs every check against the plugin and returns the report. The error is for what kept the
// checker itself from running; a plugin's failures are in the report.
func Run(ctx context.Context, opts Options) (*Report, error) {
	if (opts.Target == nil) == (opts.Socket == "") {
		return nil, fmt.Errorf("%w: give either a plugin to start or the socket of a running plugin", errOptions)
	}
	r := &run{opts: opts, t: opts.Timeouts.complete(), report: &Report{Strict: opts.Strict}}
	start := time.Now()
	defer func() { r.report.Duration = time.Since(start) }()
	if opts.Target != nil {
		r.report.Plugin = opts.Target.String()
		if err := r.setupDir(); err != nil {
			return nil, err
		}
		defer r.cleanup()
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

func (r *run) setupDir() error {
	r.dir = r.opts.Dir
	if r.dir == "" {
		// A short path: unix socket paths are limited to 107 bytes.
		dir, err := os.MkdirTemp("", "kdpt-")
		if err != nil {
			return fmt.Errorf("creating the plugin directory: %w", err)
		}
		r.dir = dir
	} else if err := os.MkdirAll(r.dir, 0o750); err != nil {
		return fmt.Errorf("creating the plugin directory: %w", err)
	}
	abs, err := filepath.Abs(r.dir)
	if err != nil {
		return fmt.Errorf("resolving the plugin directory: %w", err)
	}
	r.dir = abs
	// The checker removes the directory's sockets, as a starting kubelet does: never those of a
	// device manager that serves it.
	if conn, err := net.DialTimeout("unix", filepath.Join(r.dir, kubeletSocketName), time.Second); err == nil {
		_ = conn.Close()
		return fmt.Errorf("%w: a device manager serves %s; give the checker a plugin directory of its own", errOptions, filepath.Join(r.dir, kubeletSocketName))
	}
	r.kubelet = newFakeKubelet(r.dir)
	return r.kubelet.start()
}

func (r *run) cleanup() {
	if r.stream != nil {
		r.stream.close()
	}
	if r.kubelet != nil {
		r.kubelet.close()
	}
	if r.opts.Target != nil {
		select {
		case <-r.opts.Target.Exited():
		default:
			_ = r.opts.Target.Stop(r.t.Stop)
		}
	}
	if r.opts.Dir == "" && r.dir != "" {
		_ = os.RemoveAll(r.dir)
	}
}

// record adds a result.
func (r *run) record(c Check, o Outcome, started time.Time, evidence ...string) {
	if o == Warn && r.opts.Strict {
		evidence = append(evidence, "--strict: this warning fails the run")
	}
	res := Result{Check: c, Outcome: o, Evidence: evidence, Duration: time.Since(started), ended: time.Now()}
	r.report.Results = append(r.report.Results, res)
	if r.opts.Progress != nil {
		fmt.Fprintf(r.opts.Progress, "%-5s %s (%s)\n", o, c.ID, seconds(res.Duration))
		for _, e := range evidence {
			fmt.Fprintf(r.opts.Progress, "      %s\n", e)
		}
	}
}

// skipAll records a skip with the same reason for each check.
func (r *run) skipAll(reason string, checks ...Check) {
	for _, c := range checks {
		r.record(c, Skip, time.Now(), reason)
	}
}

// verdict records Pass with ok, or Fail with the problems.
func (r *run) verdict(c Check, started time.Time, problems []string, ok ...string) {
	if len(problems) > 0 {
		r.record(c, Fail, started, problems...)
		return
	}
	r.record(c, Pass, started, ok...)
}

func (r *run) checkAll(ctx context.Context) {
	if r.opts.Target != nil {
		if !r.checkRegistration(ctx) {
			return
		}
	} else if !r.connectSocket(ctx) {
		return
	}
	if !r.checkListAndWatch(ctx) {
		return
	}
	r.checkAllocate(ctx)
	r.checkPreStart(ctx)
	r.checkPreferred(ctx)
	first := "the first stream"
	r.observeHealthChange(ctx, first)
	r.holdStream(ctx, first)
	if r.opts.Target == nil {
		reason := "the plugin was given as a socket: the checker did not start it and serves no kubelet.sock to it"
		r.skipAll(reason, CheckReregistration, CheckStop)
		r.recordStreamVerdicts()
		return
	}
	r.checkReregistration(ctx)
	if r.stream != nil {
		again := "the stream after the kubelet restart"
		r.observeHealthChange(ctx, again)
		r.holdStream(ctx, again)
	} else {
		note := "not judged again after the kubelet restart: the plugin serves no new stream (see registration/after-kubelet-restart)"
		r.health.add(Pass, note)
		r.streamOpen.add(Pass, note)
	}
	r.recordStreamVerdicts()
	r.checkStop()
}

// afterRegistration are the checks skipped when there is no plugin to talk to.
var afterRegistration = []Check{
	CheckFirstList, CheckDeviceIDs, CheckHealthValues,
	CheckAllocateEach, CheckAllocateSeveral, CheckAllocateUnknown,
	CheckPaths, CheckPermissions, CheckDuplicates, CheckCDINames,
	CheckPreStart, CheckPreferredAnswers, CheckPreferredMustInclude, CheckPreferredSize, CheckPreferredAvailable,
	CheckHealthUpdate, CheckStreamOpen, CheckReregistration, CheckStop,
}

// connectSocket dials an already running plugin.
func (r *run) connectSocket(ctx context.Context) bool {
	r.skipAll("the plugin was given as a socket: its registration is not observed",
		CheckRegistered, CheckVersion, CheckResourceName, CheckEndpoint, CheckOptions)
	conn, opts, err := dialPlugin(ctx, r.opts.Socket)
	if err != nil {
		r.record(CheckFirstList, Fail, time.Now(), fmt.Sprintf("connecting to %s: %v", r.opts.Socket, err))
		r.skipAll("no connection to the plugin", afterRegistration[1:]...)
		return false
	}
	r.conn, r.client, r.opts2, r.socket = conn, v1beta1.NewDevicePluginClient(conn), opts, r.opts.Socket
	return true
}

// checkRegistration starts the plugin and waits for its first registration.
func (r *run) checkRegistration(ctx context.Context) bool {
	started := time.Now()
	if err := r.opts.Target.Start(ctx, r.dir); err != nil {
		r.record(CheckRegistered, Fail, started, "starting the plugin: "+err.Error())
		r.skipAll("the plugin did not start", CheckVersion, CheckResourceName, CheckEndpoint, CheckOptions)
		r.skipAll("the plugin did not start", afterRegistration...)
		return false
	}
	var first *registration
	timeout := time.NewTimer(r.t.Registration)
	defer timeout.Stop()
wait:
	for {
		select {
		case reg := <-r.kubelet.regs:
			if first == nil {
				first = reg
			}
			if reg.rejected == "" {
				first = reg
				break wait
			}
			// The kubelet rejected it; a plugin may try again (with a fixed request) within the
			// registration timeout.
		case <-r.opts.Target.Exited():
			break wait
		case <-timeout.C:
			break wait
		case <-ctx.Done():
			break wait
		}
	}
	regs := r.kubelet.registrations()
	if first == nil {
		ev := []string{fmt.Sprintf("no Register call on %s within %s", r.kubelet.socketPath(), seconds(time.Since(started)))}
		select {
		case <-r.opts.Target.Exited():
			ev = append(ev, "the plugin exited")
		default:
		}
		if out := strings.TrimSpace(r.opts.Target.Output()); out != "" {
			ev = append(ev, "the plugin's output ends with:\n"+indent(out))
		}
		r.record(CheckRegistered, Fail, started, ev...)
		r.skipAll("the plugin did not register", CheckVersion, CheckResourceName, CheckEndpoint, CheckOptions)
		r.skipAll("the plugin did not register", afterRegistration...)
		return false
	}
	req := first.req
	r.report.Resource = req.GetResourceName()
	var rejections []string
	for _, reg := range regs {
		if reg.rejected != "" {
			rejections = append(rejections, fmt.Sprintf("Register(resource %q, endpoint %q, version %q) after %s rejected: %s",
				reg.req.GetResourceName(), reg.req.GetEndpoint(), reg.req.GetVersion(), seconds(reg.at.Sub(started)), reg.rejected))
		}
	}
	if first.rejected != "" {
		if hint := r.socketElsewhereHint(req.GetEndpoint()); hint != "" {
			rejections = append(rejections, hint)
		}
		r.record(CheckRegistered, Fail, started, rejections...)
	} else {
		r.record(CheckRegistered, Pass, started, append([]string{fmt.Sprintf("registered %s %s after start; the kubelet's dial back and GetDevicePluginOptions worked",
			req.GetResourceName(), seconds(first.at.Sub(started)))}, rejections...)...)
	}

	now := time.Now()
	if req.GetVersion() == v1beta1.Version {
		r.record(CheckVersion, Pass, now, fmt.Sprintf("version %q", req.GetVersion()))
	} else {
		r.record(CheckVersion, Fail, now, fmt.Sprintf("version %q; the kubelet supports %q", req.GetVersion(), v1beta1.SupportedVersions))
	}
	r.verdict(CheckResourceName, now, prefixAll(fmt.Sprintf("resource name %q: ", req.GetResourceName()), validateResourceName(req.GetResourceName())),
		fmt.Sprintf("resource name %q", req.GetResourceName()))
	r.socket = filepath.Join(r.dir, req.GetEndpoint())
	endpointProblems := prefixAll(fmt.Sprintf("endpoint %q: ", req.GetEndpoint()), validateEndpoint(req.GetEndpoint()))
	if len(endpointProblems) == 0 {
		if st, err := os.Stat(r.socket); err != nil {
			endpointProblems = append(endpointProblems, fmt.Sprintf("endpoint %q: %v", req.GetEndpoint(), err))
		} else if st.Mode()&os.ModeSocket == 0 {
			endpointProblems = append(endpointProblems, fmt.Sprintf("endpoint %q is not a socket (%s)", req.GetEndpoint(), st.Mode()))
		}
	}
	r.verdict(CheckEndpoint, now, endpointProblems, fmt.Sprintf("endpoint %q, a unix socket in the plugin directory", req.GetEndpoint()))

	// Talk to the plugin: over the kubelet's connection, or (when the kubelet rejected the
	// registration for its version or name) over a connection of our own, to check the rest.
	if first.conn != nil {
		r.conn, r.opts2 = first.conn, first.opts
		first.conn = nil // ours now
	} else {
		conn, opts, err := dialPlugin(ctx, r.socket)
		if err != nil {
			r.record(CheckOptions, Fail, now, fmt.Sprintf("GetDevicePluginOptions at %s: %v", r.socket, err))
			r.skipAll("no connection to the plugin", afterRegistration...)
			return false
		}
		r.conn, r.opts2 = conn, opts
	}
	r.client = v1beta1.NewDevicePluginClient(r.conn)
	reg, got := req.GetOptions(), r.opts2
	if reg.GetPreStartRequired() == got.GetPreStartRequired() && reg.GetGetPreferredAllocationAvailable() == got.GetGetPreferredAllocationAvailable() {
		r.record(CheckOptions, Pass, now, "registered and answered "+describeOptions(got))
	} else {
		r.record(CheckOptions, Fail, now, "registered "+describeOptions(reg), "GetDevicePluginOptions answered "+describeOptions(got)+" (what the kubelet uses)")
	}
	return true
}

// socketElsewhereHint explains a registration whose endpoint is not in the checker's directory:
// the plugin created its socket elsewhere, most often because it hard-codes the kubelet's
// directory. It returns "" when the socket is where it should be.
func (r *run) socketElsewhereHint(endpoint string) string {
	if len(validateEndpoint(endpoint)) > 0 {
		return ""
	}
	if _, err := os.Lstat(filepath.Join(r.dir, endpoint)); err == nil {
		return ""
	}
	hint := fmt.Sprintf("the plugin's socket %q is not in the checker's plugin directory %s", endpoint, r.dir)
	if _, err := os.Lstat(filepath.Join(KubeletPluginDir, endpoint)); err == nil {
		hint += fmt.Sprintf(" but in %s", KubeletPluginDir)
	}
	return hint + ": the plugin seems to hard-code its directory; run the checker with --mount-namespace (root), which bind-mounts the checker's directory on " +
		KubeletPluginDir + " for the plugin, or point the plugin at {plugin-dir}"
}

func describeOptions(o *v1beta1.DevicePluginOptions) string {
	return fmt.Sprintf("pre_start_required=%t get_preferred_allocation_available=%t", o.GetPreStartRequired(), o.GetGetPreferredAllocationAvailable())
}

// checkListAndWatch opens the stream and checks its first list.
func (r *run) checkListAndWatch(ctx context.Context) bool {
	started := time.Now()
	s, err := openListStream(ctx, r.client)
	if err != nil {
		r.record(CheckFirstList, Fail, started, "ListAndWatch: "+err.Error())
		r.skipAll("no ListAndWatch stream", afterRegistration[1:]...)
		return false
	}
	r.stream = s
	msg, err := s.next(r.t.FirstList)
	if err != nil {
		r.record(CheckFirstList, Fail, started, err.Error())
		r.skipAll("no device list", afterRegistration[1:]...)
		return false
	}
	evidence := []string{fmt.Sprintf("first list after %s: %s", seconds(time.Since(started)), describeDevices(msg.GetDevices()))}
	r.devices = msg.GetDevices()
	evidence = append(evidence, r.settle(s, started)...)
	if len(evidence) > 1 {
		evidence = append(evidence, fmt.Sprintf("the checks use the latest list, as the kubelet does (lists %s apart or less are taken as one settling list)", seconds(r.t.ListSettle)))
	}
	r.record(CheckFirstList, Pass, started, evidence...)
	now := time.Now()
	ok := []string{fmt.Sprintf("%d devices, IDs valid and unique", len(r.devices))}
	if n := controlIDs(r.devices); n > 0 {
		ok = append(ok, fmt.Sprintf("%d IDs hold control characters: the kubelet accepts them (quoted here)", n))
	}
	r.verdict(CheckDeviceIDs, now, validateDeviceIDs(r.devices), ok...)
	r.verdict(CheckHealthValues, now, validateHealth(r.devices), "every health is Healthy or Unhealthy")
	return true
}

// settle reads the lists that follow the first within the settle window: the kubelet uses the
// latest list, and a plugin may send an empty list and its full list a moment later. r.devices
// becomes the latest; it returns a line per list read.
func (r *run) settle(s *listStream, started time.Time) []string {
	var evidence []string
	for range maxSettleMessages {
		next, err := s.next(r.t.ListSettle)
		if err != nil {
			break
		}
		r.devices = next.GetDevices()
		evidence = append(evidence, fmt.Sprintf("then, after %s: %s", seconds(time.Since(started)), describeDevices(r.devices)))
	}
	return evidence
}

func (r *run) healthy() []string {
	var ids []string
	seen := map[string]bool{}
	for _, d := range r.devices {
		if d.GetHealth() == v1beta1.Healthy && d.GetID() != "" && !seen[d.GetID()] {
			ids = append(ids, d.GetID())
			seen[d.GetID()] = true
		}
	}
	return ids
}

func (r *run) allocate(ctx context.Context, containers ...[]string) (*v1beta1.AllocateResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, r.t.RPC)
	defer cancel()
	req := &v1beta1.AllocateRequest{}
	for _, ids := range containers {
		req.ContainerRequests = append(req.ContainerRequests, &v1beta1.ContainerAllocateRequest{DevicesIds: ids})
	}
	return r.client.Allocate(ctx, req)
}

func (r *run) checkAllocate(ctx context.Context) {
	healthy := r.healthy()
	responseChecks := []Check{CheckPaths, CheckPermissions, CheckDuplicates, CheckCDINames}
	if len(healthy) == 0 {
		r.skipAll("the plugin lists no healthy device", CheckAllocateEach, CheckAllocateSeveral, CheckAllocateUnknown)
		r.skipAll("no allocation response to look at", responseChecks...)
		return
	}

	started := time.Now()
	var problems []string
	each := healthy
	if len(each) > maxEachDevice {
		each = each[:maxEachDevice]
	}
	for _, id := range each {
		resp, err := r.allocate(ctx, []string{id})
		switch {
		case err != nil:
			problems = append(problems, fmt.Sprintf("Allocate([%q]): %v", id, err))
		case len(resp.GetContainerResponses()) != 1:
			problems = append(problems, fmt.Sprintf("Allocate([%q]) answered %d container responses for 1 container request", id, len(resp.GetContainerResponses())))
		default:
			r.responses = append(r.responses, resp.GetContainerResponses()[0])
			if r.allocated == nil {
				r.allocated = []string{id}
			}
		}
	}
	r.verdict(CheckAllocateEach, started, problems, fmt.Sprintf("Allocate answered for each of %d healthy devices", len(each)))

	started = time.Now()
	if len(healthy) < 2 {
		r.record(CheckAllocateSeveral, Skip, started, fmt.Sprintf("the plugin lists %d healthy device; several need 2", len(healthy)))
	} else {
		several := healthy
		if len(several) > 8 {
			several = several[:8]
		}
		resp, err := r.allocate(ctx, several)
		switch {
		case err != nil:
			r.record(CheckAllocateSeveral, Fail, started, fmt.Sprintf("Allocate(%q) in one container: %v", several, err))
		case len(resp.GetContainerResponses()) != 1:
			r.record(CheckAllocateSeveral, Fail, started, fmt.Sprintf("Allocate(%q) in one container answered %d container responses", several, len(resp.GetContainerResponses())))
		default:
			r.responses = append(r.responses, resp.GetContainerResponses()[0])
			r.allocated = several
			resp2, err := r.allocate(ctx, healthy[:1], healthy[1:2])
			switch {
			case err != nil:
				r.record(CheckAllocateSeveral, Warn, started, fmt.Sprintf("Allocate for two containers, [%q] and [%q]: %v", healthy[0], healthy[1], err))
			case len(resp2.GetContainerResponses()) != 2:
				r.record(CheckAllocateSeveral, Warn, started, fmt.Sprintf("Allocate for two containers answered %d container responses", len(resp2.GetContainerResponses())))
			default:
				r.responses = append(r.responses, resp2.GetContainerResponses()...)
				r.record(CheckAllocateSeveral, Pass, started, fmt.Sprintf("Allocate(%q) in one container, and for two containers, answered", several))
			}
		}
	}

	started = time.Now()
	if _, err := r.allocate(ctx, []string{unknownDeviceID}); err != nil {
		r.record(CheckAllocateUnknown, Pass, started, fmt.Sprintf("Allocate([%q]) refused: %v", unknownDeviceID, err))
	} else {
		r.record(CheckAllocateUnknown, Warn, started, fmt.Sprintf("Allocate([%q]), a device the plugin never listed, succeeded", unknownDeviceID))
	}

	if len(r.responses) == 0 {
		r.skipAll("no allocation response to look at", responseChecks...)
		return
	}
	r.judgeResponses()
}

// judgeResponses runs the response checks over every successful container response; a check
// with nothing to look at (no device node to hold permissions, no CDI device) is skipped.
func (r *run) judgeResponses() {
	started := time.Now()
	var all responseProblems
	var mounts, devs, cdis, envs int
	for _, resp := range r.responses {
		p := validateContainerResponse(resp)
		all.paths = append(all.paths, p.paths...)
		all.permissions = append(all.permissions, p.permissions...)
		all.duplicates = append(all.duplicates, p.duplicates...)
		all.cdi = append(all.cdi, p.cdi...)
		all.repeats = append(all.repeats, p.repeats...)
		mounts += len(resp.GetMounts())
		devs += len(resp.GetDevices())
		cdis += len(resp.GetCdiDevices())
		envs += len(resp.GetEnvs())
	}
	n := len(r.responses)
	none := fmt.Sprintf("the %d allocation responses hold", n)
	if mounts+devs+envs == 0 {
		r.record(CheckPaths, Skip, started, none+" no mount, device node or env: no path to check")
	} else {
		r.verdict(CheckPaths, started, uniq(all.paths), fmt.Sprintf("%d responses: %d mounts, %d device nodes, %d envs; paths absolute and clean, env names valid", n, mounts, devs, envs))
	}
	if devs == 0 {
		r.record(CheckPermissions, Skip, started, none+" no device node: no permissions to check")
	} else {
		r.verdict(CheckPermissions, started, uniq(all.permissions), fmt.Sprintf("%d device nodes, permissions well formed", devs))
	}
	if mounts+devs+cdis == 0 {
		r.record(CheckDuplicates, Skip, started, none+" no mount, device node or CDI device: nothing to repeat")
	} else {
		ok := []string{fmt.Sprintf("%d responses without conflicting duplicates", n)}
		if rep := uniq(all.repeats); len(rep) > 0 {
			ok = append(ok, prefixAll("identical repeats, which the kubelet merges: ", rep)...)
		}
		r.verdict(CheckDuplicates, started, uniq(all.duplicates), ok...)
	}
	if cdis == 0 {
		r.record(CheckCDINames, Skip, started, none+" no CDI device: no name to check")
	} else {
		r.verdict(CheckCDINames, started, uniq(all.cdi), fmt.Sprintf("%d CDI devices, names fully qualified", cdis))
	}
}

func (r *run) checkPreStart(ctx context.Context) {
	started := time.Now()
	if !r.opts2.GetPreStartRequired() {
		r.record(CheckPreStart, Skip, started, "GetDevicePluginOptions says pre_start_required=false: the kubelet never calls PreStartContainer")
		return
	}
	if len(r.allocated) == 0 {
		r.record(CheckPreStart, Skip, started, "no device could be allocated to start a container with")
		return
	}
	ctx, cancel := context.WithTimeout(ctx, preStartTimeout)
	defer cancel()
	_, err := r.client.PreStartContainer(ctx, &v1beta1.PreStartContainerRequest{DevicesIds: r.allocated})
	if err != nil {
		r.record(CheckPreStart, Fail, started, fmt.Sprintf("PreStartContainer(%q): %v", r.allocated, err))
		return
	}
	r.record(CheckPreStart, Pass, started, fmt.Sprintf("PreStartContainer(%q) answered in %s", r.allocated, seconds(time.Since(started))))
}

func (r *run) checkPreferred(ctx context.Context) {
	checks := []Check{CheckPreferredAnswers, CheckPreferredMustInclude, CheckPreferredSize, CheckPreferredAvailable}
	if !r.opts2.GetGetPreferredAllocationAvailable() {
		r.skipAll("GetDevicePluginOptions says get_preferred_allocation_available=false: the kubelet never calls GetPreferredAllocation", checks...)
		return
	}
	healthy := r.healthy()
	if len(healthy) == 0 {
		r.skipAll("the plugin lists no healthy device", checks...)
		return
	}
	// With 3 or more devices: the first is left out of the available ones, the last must be
	// included, and 2 are asked for; a plugin that picks from its own list, or the first ones,
	// gets caught.
	req := &v1beta1.ContainerPreferredAllocationRequest{AvailableDeviceIDs: healthy, MustIncludeDeviceIDs: healthy[len(healthy)-1:], AllocationSize: 1}
	switch {
	case len(healthy) >= 3:
		req.AvailableDeviceIDs, req.AllocationSize = healthy[1:], 2
	case len(healthy) == 2:
		req.AllocationSize = 2
	}
	started := time.Now()
	rpcCtx, cancel := context.WithTimeout(ctx, r.t.RPC)
	defer cancel()
	resp, err := r.client.GetPreferredAllocation(rpcCtx, &v1beta1.PreferredAllocationRequest{ContainerRequests: []*v1beta1.ContainerPreferredAllocationRequest{req}})
	describe := fmt.Sprintf("GetPreferredAllocation(available %q, must_include %q, size %d)", req.AvailableDeviceIDs, req.MustIncludeDeviceIDs, req.AllocationSize)
	switch {
	case err != nil:
		why := err.Error()
		if status.Code(err) == codes.Unimplemented {
			why += " (the options say it is available)"
		}
		r.record(CheckPreferredAnswers, Fail, started, describe+": "+why)
		r.skipAll("GetPreferredAllocation did not answer", checks[1:]...)
		return
	case len(resp.GetContainerResponses()) == 0:
		// The kubelet reads ContainerResponses[0] only when there is one: none is no preference.
		r.record(CheckPreferredAnswers, Warn, started, describe+" answered no container response: the kubelet takes that as no preference and picks the devices itself")
		r.skipAll("GetPreferredAllocation answered no preference", checks[1:]...)
		return
	case len(resp.GetContainerResponses()) != 1:
		r.record(CheckPreferredAnswers, Fail, started, fmt.Sprintf("%s answered %d container responses for 1 container request", describe, len(resp.GetContainerResponses())))
		r.skipAll("GetPreferredAllocation did not answer one container response", checks[1:]...)
		return
	}
	got := resp.GetContainerResponses()[0].GetDeviceIDs()
	r.record(CheckPreferredAnswers, Pass, started, fmt.Sprintf("%s answered %q", describe, got))
	must, size, avail := validatePreferred(req, got)
	ok := fmt.Sprintf("%s answered %q", describe, got)
	r.verdict(CheckPreferredMustInclude, started, prefixAll(describe+": ", must), ok)
	r.verdict(CheckPreferredSize, started, prefixAll(describe+": ", size), ok)
	r.verdict(CheckPreferredAvailable, started, prefixAll(describe+": ", avail), ok)
}

func (r *run) checkReregistration(ctx context.Context) {
	started := time.Now()
	// The kubelet goes away: its connections close and kubelet.sock stays behind until the new
	// kubelet removes it and every socket of the directory.
	r.stream.close()
	r.stream = nil
	_ = r.conn.Close()
	r.conn = nil
	r.kubelet.stop()
	for len(r.kubelet.regs) > 0 {
		<-r.kubelet.regs
	}
	if err := r.kubelet.start(); err != nil {
		r.record(CheckReregistration, Fail, started, "restarting the fake kubelet: "+err.Error())
		return
	}
	timeout := time.NewTimer(r.t.Reregistration)
	defer timeout.Stop()
	var reg *registration
	for reg == nil {
		select {
		case reg = <-r.kubelet.regs:
			// A rejected registration counts: the rejection is the other checks' business.
		case <-r.opts.Target.Exited():
			r.record(CheckReregistration, Fail, started, "the plugin exited after kubelet.sock was created again")
			return
		case <-timeout.C:
			r.record(CheckReregistration, Fail, started, fmt.Sprintf("no Register call within %s of kubelet.sock being created again", seconds(r.t.Reregistration)))
			return
		case <-ctx.Done():
			r.record(CheckReregistration, Fail, started, ctx.Err().Error())
			return
		}
	}
	took := time.Since(started)
	r.socket = filepath.Join(r.dir, reg.req.GetEndpoint())
	if reg.conn != nil {
		r.conn, reg.conn = reg.conn, nil
	} else {
		conn, _, err := dialPlugin(ctx, r.socket)
		if err != nil {
			r.record(CheckReregistration, Fail, started, fmt.Sprintf("registered again after %s (rejected: %s), but its endpoint does not answer: %v", seconds(took), reg.rejected, err))
			return
		}
		r.conn = conn
	}
	r.client = v1beta1.NewDevicePluginClient(r.conn)
	s, err := openListStream(ctx, r.client)
	if err != nil {
		r.record(CheckReregistration, Fail, started, fmt.Sprintf("registered again after %s, but ListAndWatch failed: %v", seconds(took), err))
		return
	}
	msg, err := s.next(r.t.FirstList)
	if err != nil {
		s.close()
		r.record(CheckReregistration, Fail, started, fmt.Sprintf("registered again after %s, but: %v", seconds(took), err))
		return
	}
	r.stream, r.devices = s, msg.GetDevices()
	r.settle(s, started)
	r.record(CheckReregistration, Pass, started, fmt.Sprintf("registered again %s after kubelet.sock was created again (limit %s); ListAndWatch sent %d devices",
		seconds(took), seconds(r.t.Reregistration), len(msg.GetDevices())))
}

func (r *run) checkStop() {
	started := time.Now()
	socket := r.socket
	err := r.opts.Target.Stop(r.t.Stop)
	var problems []string
	if err != nil {
		problems = append(problems, "stopping the plugin: "+err.Error())
	}
	if _, statErr := os.Lstat(socket); statErr == nil {
		problems = append(problems, fmt.Sprintf("its socket %s is still there after it stopped", socket))
	}
	r.verdict(CheckStop, started, problems, fmt.Sprintf("exited %s after it was asked to stop and removed %s", seconds(time.Since(started)), filepath.Base(socket)))
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
