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

package plugincheck_test

import (
	"bytes"
	"context"
	"encoding/xml"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	"k8s.io/klog/v2"
	"k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kubedevice/kubedevice/internal/gopher"
	"github.com/kubedevice/kubedevice/internal/plugincheck"
	"github.com/kubedevice/kubedevice/internal/plugincheck/testplugin"
	"github.com/kubedevice/kubedevice/pkg/deviceplugin"
)

// envFaults makes the test binary run testplugin as a process (see TestMain): the command line
// target's tests start it.
const envFaults = "PLUGINCHECK_TESTPLUGIN_FAULTS"

func TestMain(m *testing.M) {
	if faults, ok := os.LookupEnv(envFaults); ok {
		os.Exit(runTestPluginProcess(faults))
	}
	os.Exit(m.Run())
}

// runTestPluginProcess runs testplugin in the plugin directory KUBEDEVICE_PLUGIN_DIR until
// SIGTERM; SIGUSR1 flips a device's health.
func runTestPluginProcess(faults string) int {
	var fs []testplugin.Fault
	for _, f := range strings.Fields(faults) {
		fs = append(fs, testplugin.Fault(f))
	}
	dir := os.Getenv(plugincheck.EnvPluginDir)
	if slices.Contains(fs, testplugin.ViaPluginWatcher) {
		dir = os.Getenv(plugincheck.EnvRegistryDir)
	}
	p := testplugin.New(dir, fs...)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	flips := make(chan os.Signal, 1)
	signal.Notify(flips, syscall.SIGUSR1)
	go func() {
		for range flips {
			p.FlipHealthOf("")
		}
	}()
	if err := p.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// fastTimeouts keep the waits of failing checks short; passing checks do not wait for them, and
// 5 s leaves room for a loaded CI machine running the race detector.
var fastTimeouts = plugincheck.Timeouts{
	Registration: 5 * time.Second, RegistrationSettle: 300 * time.Millisecond, FirstList: 5 * time.Second, HealthUpdate: 5 * time.Second,
	Reregistration: 5 * time.Second, Stop: 5 * time.Second, StreamHold: 2 * time.Second, ListSettle: 300 * time.Millisecond,
}

// testPluginTarget runs testplugin in this process; its health hook flips dev-0 of the resource
// it is given (KUBEDEVICE_RESOURCE_NAME).
func testPluginTarget(faults ...testplugin.Fault) (*plugincheck.FuncTarget, func(context.Context, []string) error) {
	var p *testplugin.Plugin
	ready := make(chan struct{})
	target := &plugincheck.FuncTarget{Name: fmt.Sprintf("testplugin %v", faults), Run: func(ctx context.Context, dirs plugincheck.Dirs) error {
		dir := dirs.Plugins
		if slices.Contains(faults, testplugin.ViaPluginWatcher) {
			dir = dirs.Registry
		}
		p = testplugin.New(dir, faults...)
		close(ready)
		return p.Run(ctx)
	}}
	hook := func(_ context.Context, env []string) error {
		<-ready
		var resource string
		for _, e := range env {
			if v, ok := strings.CutPrefix(e, plugincheck.EnvResourceName+"="); ok {
				resource = v
			}
		}
		p.FlipHealthOf(resource)
		return nil
	}
	return target, hook
}

// outcomes maps each check's ID to its outcome.
func outcomes(r *plugincheck.Report) map[string]plugincheck.Outcome {
	m := map[string]plugincheck.Outcome{}
	for _, res := range r.Results {
		m[res.Check.ID] = res.Outcome
	}
	return m
}

// notPassedBy returns the IDs of the checks that failed or warned, by resource.
func notPassedBy(r *plugincheck.Report) map[string][]string {
	m := map[string][]string{}
	for _, res := range r.Results {
		if res.Outcome == plugincheck.Fail || res.Outcome == plugincheck.Warn {
			m[res.Resource] = append(m[res.Resource], res.Check.ID)
		}
	}
	return m
}

// notPassed returns the IDs of the checks that failed or warned.
func notPassed(r *plugincheck.Report) []string {
	var ids []string
	for _, res := range r.Results {
		if res.Outcome == plugincheck.Fail || res.Outcome == plugincheck.Warn {
			ids = append(ids, res.Check.ID)
		}
	}
	return ids
}

func runCheck(t *testing.T, opts plugincheck.Options) *plugincheck.Report {
	t.Helper()
	if opts.Timeouts == (plugincheck.Timeouts{}) {
		opts.Timeouts = fastTimeouts
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	report, err := plugincheck.Run(ctx, opts)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	resources, sections := report.Sections()
	for i, results := range sections {
		if len(results) != len(plugincheck.AllChecks) {
			t.Errorf("%q: %d results for %d checks", resources[i], len(results), len(plugincheck.AllChecks))
		}
		for j, res := range results {
			if j < len(plugincheck.AllChecks) && res.Check.ID != plugincheck.AllChecks[j].ID {
				t.Errorf("%q: result %d is %s, want %s", resources[i], j, res.Check.ID, plugincheck.AllChecks[j].ID)
			}
		}
	}
	return report
}

func logReport(t *testing.T, r *plugincheck.Report) {
	t.Helper()
	var b bytes.Buffer
	_ = r.WriteText(&b)
	t.Log("\n" + b.String())
}

func TestConformingPluginPassesEveryCheck(t *testing.T) {
	t.Parallel()
	target, hook := testPluginTarget()
	r := runCheck(t, plugincheck.Options{Target: target, HealthChange: hook, Strict: true})
	for _, res := range r.Results {
		if res.Outcome != plugincheck.Pass {
			t.Errorf("%s: %s %v", res.Check.ID, res.Outcome, res.Evidence)
		}
	}
	if r.Failed() {
		t.Error("Failed() = true for a run where every check passed")
	}
	if diff := cmp.Diff([]string{testplugin.ResourceName}, r.Resources); diff != "" {
		t.Errorf("Resources (-want +got):\n%s", diff)
	}
	if t.Failed() {
		logReport(t, r)
	}
}

// Every check has a broken plugin that fails it: a check that cannot fail is a defect.
func TestEachCheckCatchesItsBrokenPlugin(t *testing.T) {
	t.Parallel()
	tests := []struct {
		fault testplugin.Fault
		// notPassed are the checks that must fail or warn, and no other.
		notPassed []string
		// noHook runs without a health change hook: the fault's timing would race with it.
		noHook bool
	}{
		{testplugin.NeverRegisters, []string{"registration/registered"}, false},
		{testplugin.BadVersion, []string{"registration/registered", "registration/version"}, false},
		{testplugin.BadResourceName, []string{"registration/registered", "registration/resource-name"}, false},
		{testplugin.EndpointInSubdir, []string{"registration/endpoint"}, false},
		{testplugin.OptionsMismatch, []string{"registration/options"}, false},
		{testplugin.SilentList, []string{"list-and-watch/first-response"}, false},
		{testplugin.DuplicateIDs, []string{"list-and-watch/device-ids"}, false},
		{testplugin.BadHealth, []string{"list-and-watch/health-values"}, false},
		{testplugin.AllocateNoResponse, []string{"allocate/each-device", "allocate/several"}, false},
		{testplugin.AllocateOneDevice, []string{"allocate/several"}, false},
		{testplugin.AcceptsUnknown, []string{"allocate/unknown-device"}, false},
		{testplugin.RelativePath, []string{"allocate/paths"}, false},
		{testplugin.BadPermissions, []string{"allocate/permissions"}, false},
		{testplugin.ConflictingMount, []string{"allocate/duplicates"}, false},
		{testplugin.BadCDIName, []string{"allocate/cdi-names"}, false},
		{testplugin.PreStartUnimplemented, []string{"pre-start-container"}, false},
		{testplugin.PreferredUnimplemented, []string{"preferred-allocation/answers"}, false},
		{testplugin.PreferredNoResponse, []string{"preferred-allocation/answers"}, false},
		{testplugin.PreferredNoMustInclude, []string{"preferred-allocation/must-include"}, false},
		{testplugin.PreferredWrongSize, []string{"preferred-allocation/size"}, false},
		{testplugin.PreferredUnavailable, []string{"preferred-allocation/available"}, false},
		{testplugin.NoHealthUpdate, []string{"list-and-watch/health-update"}, false},
		{testplugin.PartialHealthUpdate, []string{"list-and-watch/health-update"}, false},
		{testplugin.EndsStream, []string{"list-and-watch/health-update", "list-and-watch/stream-open"}, false},
		{testplugin.SlowEndStream, []string{"list-and-watch/stream-open"}, true},
		{testplugin.EndsStreamAfterRestart, []string{"list-and-watch/health-update", "list-and-watch/stream-open"}, false},
		{testplugin.StaleStreamAfterRestart, []string{"list-and-watch/health-update"}, false},
		{testplugin.NoReregistration, []string{"registration/after-kubelet-restart"}, false},
		{testplugin.LeavesSocket, []string{"stop/socket-removed"}, false},
		{testplugin.DeviceOutsideDev, []string{"allocate/paths"}, false},
	}
	caught := map[string]bool{}
	for _, tc := range tests {
		for _, id := range tc.notPassed {
			caught[id] = true
		}
	}
	for _, c := range plugincheck.AllChecks {
		if !caught[c.ID] {
			t.Errorf("no broken plugin fails %s", c.ID)
		}
	}
	for _, tc := range tests {
		t.Run(string(tc.fault), func(t *testing.T) {
			t.Parallel()
			target, hook := testPluginTarget(tc.fault)
			if tc.noHook {
				hook = nil
			}
			r := runCheck(t, plugincheck.Options{Target: target, HealthChange: hook, Strict: true})
			if diff := cmp.Diff(tc.notPassed, notPassed(r)); diff != "" {
				t.Errorf("checks that did not pass (-want +got):\n%s", diff)
				logReport(t, r)
			}
			if !r.Failed() {
				t.Error("Failed() = false")
			}
		})
	}
}

func TestUnknownDeviceIsAWarningUnlessStrict(t *testing.T) {
	t.Parallel()
	target, hook := testPluginTarget(testplugin.AcceptsUnknown)
	r := runCheck(t, plugincheck.Options{Target: target, HealthChange: hook})
	if got := outcomes(r)["allocate/unknown-device"]; got != plugincheck.Warn {
		t.Errorf("allocate/unknown-device = %s, want WARN", got)
	}
	if r.Failed() {
		t.Error("Failed() = true without --strict for a warning only")
	}
}

// A plugin whose socket is not in the checker's directory (it hard-codes the kubelet's) is told
// why its registration fails, and what to do.
func TestSocketElsewhereIsExplained(t *testing.T) {
	t.Parallel()
	target, hook := testPluginTarget(testplugin.SocketElsewhere)
	timeouts := fastTimeouts
	timeouts.Registration = 20 * time.Second // the kubelet's dial back takes 10 s to give up
	r := runCheck(t, plugincheck.Options{Target: target, HealthChange: hook, Timeouts: timeouts})
	want := []string{"registration/registered", "registration/endpoint", "registration/options"}
	if diff := cmp.Diff(want, notPassed(r)); diff != "" {
		t.Errorf("checks that did not pass (-want +got):\n%s", diff)
	}
	res, _ := r.Result("registration/registered")
	if !slices.ContainsFunc(res.Evidence, func(e string) bool {
		return strings.Contains(e, `the plugin's socket "testplugin.sock" is not in the checker's plugin directory`) && strings.Contains(e, "--mount-namespace")
	}) {
		t.Errorf("registration/registered does not explain the socket's place: %q", res.Evidence)
	}
}

// An interrupted run (Ctrl-C) says so and fails no check: what the interruption cut short says
// nothing about the plugin.
func TestInterruptedRunFailsNoCheck(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	target, _ := testPluginTarget()
	hook := func(ctx context.Context, _ []string) error {
		cancel() // Ctrl-C while the health change runs
		<-ctx.Done()
		return ctx.Err()
	}
	opts := plugincheck.Options{Target: target, HealthChange: hook, Strict: true, Timeouts: fastTimeouts}
	r, err := plugincheck.Run(ctx, opts)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if !r.Interrupted {
		t.Error("Interrupted = false")
	}
	if ids := notPassed(r); len(ids) > 0 {
		t.Errorf("checks failed or warned after the interruption: %v", ids)
		logReport(t, r)
	}
	got := outcomes(r)
	if got["registration/registered"] != plugincheck.Pass || got["list-and-watch/health-update"] != plugincheck.Skip {
		t.Errorf("registration/registered = %s, list-and-watch/health-update = %s; want PASS, SKIP", got["registration/registered"], got["list-and-watch/health-update"])
	}
	var b bytes.Buffer
	_ = r.WriteText(&b)
	if !strings.Contains(b.String(), "INTERRUPTED") {
		t.Errorf("the report does not say it was interrupted:\n%s", b.String())
	}
}

// A GetPreferredAllocation answer without container responses is the kubelet's "no preference":
// a warning, which fails only with --strict.
func TestPreferredNoResponseIsAWarningUnlessStrict(t *testing.T) {
	t.Parallel()
	target, hook := testPluginTarget(testplugin.PreferredNoResponse)
	r := runCheck(t, plugincheck.Options{Target: target, HealthChange: hook})
	if diff := cmp.Diff([]string{"preferred-allocation/answers"}, notPassed(r)); diff != "" {
		t.Errorf("checks that did not pass (-want +got):\n%s", diff)
	}
	if got := outcomes(r)["preferred-allocation/answers"]; got != plugincheck.Warn {
		t.Errorf("preferred-allocation/answers = %s, want WARN", got)
	}
	if r.Failed() {
		t.Error("Failed() = true without --strict for a warning only")
	}
}

// Legitimately unusual plugins pass: a check that fails a correct plugin is a defect. Each quirk
// has its full verdict set: every check passes but those skipped, with the reason.
func TestUnusualPluginsPass(t *testing.T) {
	t.Parallel()
	tests := []struct {
		quirk testplugin.Fault
		// skipped are the checks with nothing to look at; every other one passes.
		skipped []string
		// evidence is a line that says what the checker saw.
		evidence string
	}{
		{testplugin.SharedDeviceNode, nil, `device node "/dev/testplugin/shared" is listed 4 times, identically`},
		{testplugin.DuplicateMount, nil, `mount "/var/run/testplugin/dev-0" is listed 2 times, identically`},
		{testplugin.DropsDevices, nil, `devices removed ("dev-0")`},
		{testplugin.ControlCharIDs, nil, "4 IDs hold control characters: the kubelet accepts them (quoted here)"},
		{testplugin.EmptyFirstList, nil, "the checks use the latest list, as the kubelet does"},
		{testplugin.SlowFirstList, nil, "first list after 1."},
		{testplugin.EnvOnly, []string{"allocate/permissions", "allocate/duplicates", "allocate/cdi-names"}, "no device node: no permissions to check"},
		{testplugin.ViaPluginWatcher, nil, "through the plugin watcher (socket testplugin.sock)"},
	}
	for _, tc := range tests {
		t.Run(string(tc.quirk), func(t *testing.T) {
			t.Parallel()
			target, hook := testPluginTarget(tc.quirk)
			r := runCheck(t, plugincheck.Options{Target: target, HealthChange: hook, Strict: true})
			want := map[string]plugincheck.Outcome{}
			for _, c := range plugincheck.AllChecks {
				want[c.ID] = plugincheck.Pass
			}
			for _, id := range tc.skipped {
				want[id] = plugincheck.Skip
			}
			if diff := cmp.Diff(want, outcomes(r)); diff != "" {
				t.Errorf("outcomes (-want +got):\n%s", diff)
			}
			var b bytes.Buffer
			_ = r.WriteText(&b)
			if !strings.Contains(b.String(), tc.evidence) {
				t.Errorf("the report lacks %q", tc.evidence)
			}
			if t.Failed() {
				logReport(t, r)
			}
		})
	}
}

// The command line target: the plugin is a process (this test binary running testplugin),
// pointed at the plugin directory by KUBEDEVICE_PLUGIN_DIR, stopped with SIGTERM, and its health
// flipped by a shell hook that signals $KUBEDEVICE_PLUGIN_PID.
func TestCommandTarget(t *testing.T) {
	t.Parallel()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// env(1) execs the plugin: the process ID the hook signals is the plugin's.
	target := &plugincheck.CommandTarget{Args: []string{"env", envFaults + "=", exe, "-test.run=^$"}}
	r := runCheck(t, plugincheck.Options{Target: target, HealthChange: plugincheck.ShellHook(`kill -USR1 "$KUBEDEVICE_PLUGIN_PID"`)})
	for _, res := range r.Results {
		if res.Outcome != plugincheck.Pass {
			t.Errorf("%s: %s %v", res.Check.ID, res.Outcome, res.Evidence)
		}
	}
	var junit bytes.Buffer
	if err := r.WriteJUnit(&junit); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Tests    int `xml:"tests,attr"`
		Failures int `xml:"failures,attr"`
		Suites   []struct {
			Cases []struct {
				Name string `xml:"name,attr"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	if err := xml.Unmarshal(junit.Bytes(), &doc); err != nil {
		t.Fatalf("the JUnit report does not parse: %v\n%s", err, junit.String())
	}
	if doc.Tests != len(plugincheck.AllChecks) || doc.Failures != 0 || len(doc.Suites) != 1 || len(doc.Suites[0].Cases) != len(plugincheck.AllChecks) {
		t.Errorf("JUnit report: %d tests, %d failures, %d suites; want %d tests, 0 failures, 1 suite", doc.Tests, doc.Failures, len(doc.Suites), len(plugincheck.AllChecks))
	}
	if t.Failed() {
		logReport(t, r)
	}
}

func TestCommandTargetStopTimeout(t *testing.T) {
	t.Parallel()
	target := &plugincheck.CommandTarget{Args: []string{"sh", "-c", `trap "" TERM; sleep 30`}}
	r := runCheck(t, plugincheck.Options{Target: target, Timeouts: plugincheck.Timeouts{Registration: 500 * time.Millisecond, Stop: time.Second}})
	if got := outcomes(r)["registration/registered"]; got != plugincheck.Fail {
		t.Errorf("registration/registered = %s, want FAIL", got)
	}
	select {
	case <-target.Exited():
	default:
		t.Error("the plugin process still runs after Run returned")
	}
}

// A running plugin given by its socket: no registration, no restart, no stop.
func TestSocketMode(t *testing.T) {
	t.Parallel()
	dir, err := os.MkdirTemp("", "kdpt-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	p := testplugin.New(dir)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- p.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("the plugin: %v", err)
		}
	}()
	socket := filepath.Join(dir, testplugin.SocketName)
	r := runCheck(t, plugincheck.Options{Socket: socket, HealthChange: func(context.Context, []string) error { p.FlipHealth(); return nil }})
	want := map[string]plugincheck.Outcome{}
	for _, c := range plugincheck.AllChecks {
		want[c.ID] = plugincheck.Pass
	}
	for _, id := range []string{"registration/registered", "registration/version", "registration/resource-name", "registration/endpoint",
		"registration/options", "registration/after-kubelet-restart", "stop/socket-removed"} {
		want[id] = plugincheck.Skip
	}
	if diff := cmp.Diff(want, outcomes(r)); diff != "" {
		t.Errorf("outcomes (-want +got):\n%s", diff)
	}
}

// The Gopher sample plugin (internal/gopher, cmd/gopher-device-plugin) passes every check,
// unknown devices included, but those it gives nothing to look at.
func TestGopherPlugin(t *testing.T) {
	t.Parallel()
	gophers := t.TempDir()
	for _, g := range []string{"gopher-0", "gopher-1", "gopher-2", "gopher-10"} {
		if err := os.WriteFile(filepath.Join(gophers, g), []byte("a gopher\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	target := &plugincheck.FuncTarget{Name: "gopher", Run: func(ctx context.Context, dirs plugincheck.Dirs) error {
		p, err := gopher.New(gopher.Options{GophersDir: gophers, PluginDir: dirs.Plugins, ResyncPeriod: time.Minute})
		if err != nil {
			return err
		}
		return p.Run(klog.NewContext(ctx, logr.Discard()))
	}}
	// The hook runs before and after the kubelet restart: it flips gopher-0's health.
	hook := func(context.Context, []string) error {
		path := filepath.Join(gophers, "gopher-0")
		content, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		next := "unhealthy\n"
		if strings.TrimSpace(string(content)) == "unhealthy" {
			next = "a gopher\n"
		}
		return os.WriteFile(path, []byte(next), 0o644)
	}
	r := runCheck(t, plugincheck.Options{Target: target, HealthChange: hook, Strict: true})
	want := map[string]plugincheck.Outcome{}
	for _, c := range plugincheck.AllChecks {
		want[c.ID] = plugincheck.Pass
	}
	// The Gopher answers a mount and an env per gopher: no device node, no CDI device.
	want["allocate/permissions"] = plugincheck.Skip
	want["allocate/cdi-names"] = plugincheck.Skip
	if diff := cmp.Diff(want, outcomes(r)); diff != "" {
		t.Errorf("outcomes (-want +got):\n%s", diff)
		logReport(t, r)
	}
}

// pkg/deviceplugin's Example plugin: it has no PreStartContainer or GetPreferredAllocation (so
// those checks are skipped), its Allocate answers environment variables only (so there are no
// permissions, duplicates or CDI names to check), and its Allocate hook accepts any ID (a
// warning).
func TestDevicePluginExample(t *testing.T) {
	t.Parallel()
	var p *deviceplugin.Plugin
	ready := make(chan struct{})
	target := &plugincheck.FuncTarget{Name: "pkg/deviceplugin Example", Run: func(ctx context.Context, dirs plugincheck.Dirs) error {
		var err error
		p, err = deviceplugin.New(deviceplugin.Config{
			ResourceName: "example.com/gopher",
			SocketDir:    dirs.Plugins,
			SocketName:   "gopher.sock",
			Devices:      []*v1beta1.Device{deviceplugin.Device("gopher-1", true), deviceplugin.Device("gopher-0", true)},
			Hooks: deviceplugin.Hooks{
				Allocate: func(_ context.Context, ids []string) (*v1beta1.ContainerAllocateResponse, error) {
					return &v1beta1.ContainerAllocateResponse{Envs: map[string]string{"GOPHER": strings.Join(ids, ",")}}, nil
				},
			},
		})
		close(ready)
		if err != nil {
			return err
		}
		return p.Run(klog.NewContext(ctx, logr.Discard()))
	}}
	healthy := true
	hook := func(context.Context, []string) error {
		<-ready
		healthy = !healthy
		return p.SetHealth("gopher-1", healthy)
	}
	r := runCheck(t, plugincheck.Options{Target: target, HealthChange: hook})
	got := outcomes(r)
	want := map[string]plugincheck.Outcome{}
	for _, c := range plugincheck.AllChecks {
		want[c.ID] = plugincheck.Pass
	}
	for _, id := range []string{"allocate/permissions", "allocate/duplicates", "allocate/cdi-names",
		"pre-start-container", "preferred-allocation/answers", "preferred-allocation/must-include",
		"preferred-allocation/size", "preferred-allocation/available"} {
		want[id] = plugincheck.Skip
	}
	want["allocate/unknown-device"] = plugincheck.Warn
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("outcomes (-want +got):\n%s", diff)
		logReport(t, r)
	}
	if r.Failed() {
		t.Error("Failed() = true")
	}
}

func TestReportText(t *testing.T) {
	r := &plugincheck.Report{Plugin: "my-plugin", Resources: []string{"example.com/x"}, Duration: time.Second, Results: []plugincheck.Result{
		{Check: plugincheck.CheckVersion, Resource: "example.com/x", Outcome: plugincheck.Pass, Evidence: []string{`version "v1beta1"`}},
		{Check: plugincheck.CheckEndpoint, Resource: "example.com/x", Outcome: plugincheck.Fail, Evidence: []string{"endpoint bad"}},
		{Check: plugincheck.CheckHealthUpdate, Resource: "example.com/x", Outcome: plugincheck.Skip, Evidence: []string{"no hook"}},
	}}
	var b bytes.Buffer
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"kubedevice plugin test: my-plugin (example.com/x)",
		"PASS  registration/version\n      version \"v1beta1\"\n",
		"FAIL  registration/endpoint\n      endpoint bad\n      rule: " + plugincheck.CheckEndpoint.Rule,
		"SKIP  list-and-watch/health-update\n      no hook\n",
		"\n1 resource (example.com/x); 1 passed, 1 failed, 0 warned, 1 skipped in 1.0s",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the report lacks %q:\n%s", want, out)
		}
	}
	if !r.Failed() {
		t.Error("Failed() = false with a failure")
	}
}

func TestCheckIDsAreUniqueAndCiteARule(t *testing.T) {
	var ids []string
	for _, c := range plugincheck.AllChecks {
		if slices.Contains(ids, c.ID) {
			t.Errorf("check %s is listed twice", c.ID)
		}
		ids = append(ids, c.ID)
		if c.Rule == "" {
			t.Errorf("check %s cites no rule", c.ID)
		}
	}
}

// A plugin that hard-codes its plugin directory runs in a private mount namespace where the
// checker's directory is bind-mounted on that path (here a temporary one standing for
// /var/lib/kubelet/device-plugins, so the test leaves nothing on the host).
func TestCommandTargetMountNamespace(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("a private mount namespace needs root")
	}
	if err := exec.Command("unshare", "--mount", "--propagation", "private", "--", "true").Run(); err != nil {
		t.Skipf("unshare --mount does not work here: %v", err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	hardCoded := filepath.Join(t.TempDir(), "device-plugins")
	target := &plugincheck.CommandTarget{Args: []string{"env", envFaults + "=", exe, "-test.run=^$"}, MountAt: hardCoded}
	r := runCheck(t, plugincheck.Options{Target: target, HealthChange: plugincheck.ShellHook(`kill -USR1 "$KUBEDEVICE_PLUGIN_PID"`)})
	for _, res := range r.Results {
		if res.Outcome != plugincheck.Pass {
			t.Errorf("%s: %s %v", res.Check.ID, res.Outcome, res.Evidence)
		}
	}
	if entries, err := os.ReadDir(hardCoded); err != nil || len(entries) != 0 {
		t.Errorf("the hard-coded directory on the host holds %v (%v): the plugin's sockets went there, not through the bind mount", entries, err)
	}
	if t.Failed() {
		logReport(t, r)
	}
}

// The checker never takes over a plugin directory that a device manager serves: it would remove
// the manager's sockets.
func TestRefusesALiveDeviceManagersDirectory(t *testing.T) {
	t.Parallel()
	dir, err := os.MkdirTemp("", "kdpt-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ln, err := net.Listen("unix", filepath.Join(dir, "kubelet.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	target, _ := testPluginTarget()
	_, err = plugincheck.Run(context.Background(), plugincheck.Options{Target: target, Dir: dir})
	if err == nil || !strings.Contains(err.Error(), "a device manager serves") {
		t.Errorf("Run in a live manager's directory = %v, want a refusal", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "kubelet.sock")); err != nil {
		t.Errorf("the manager's socket: %v", err)
	}
}

// A plugin process that serves two resources, one socket each (legitimately unusual): each
// resource is checked and reported in a section of its own, and passes every check.
func TestTwoResourcesPass(t *testing.T) {
	t.Parallel()
	target, hook := testPluginTarget(testplugin.TwoResources)
	r := runCheck(t, plugincheck.Options{Target: target, HealthChange: hook, Strict: true})
	resources := []string{testplugin.ResourceName, testplugin.SecondResourceName}
	if diff := cmp.Diff(resources, r.Resources); diff != "" {
		t.Errorf("Resources (-want +got):\n%s", diff)
	}
	for _, resource := range resources {
		for _, c := range plugincheck.AllChecks {
			if res, ok := r.ResultFor(resource, c.ID); !ok || res.Outcome != plugincheck.Pass {
				t.Errorf("%s %s: %s %v", resource, c.ID, res.Outcome, res.Evidence)
			}
		}
	}
	var text, junit bytes.Buffer
	_ = r.WriteText(&text)
	for _, want := range []string{"== example.com/testplugin ==\n", "== example.com/testplugin-b ==\n", "removed testplugin-b.sock",
		fmt.Sprintf("\n2 resources (example.com/testplugin, example.com/testplugin-b); %d passed, 0 failed", 2*len(plugincheck.AllChecks))} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("the report lacks %q", want)
		}
	}
	if err := r.WriteJUnit(&junit); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Tests  int `xml:"tests,attr"`
		Suites []struct {
			Name  string `xml:"name,attr"`
			Cases []struct {
				Classname string `xml:"classname,attr"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	if err := xml.Unmarshal(junit.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Tests != 2*len(plugincheck.AllChecks) || len(doc.Suites) != 2 || doc.Suites[1].Name != "kubedevice plugin test: example.com/testplugin-b" ||
		doc.Suites[1].Cases[0].Classname != "kubedevice.plugin-test.example.com/testplugin-b" {
		t.Errorf("JUnit: %d tests, suites %+v", doc.Tests, doc.Suites)
	}
	if t.Failed() {
		logReport(t, r)
	}
}

// Of a plugin's two resources, only the first registers again after the kubelet restart: that
// check of the second resource fails, and nothing else.
func TestTwoResourcesOneNotReregistered(t *testing.T) {
	t.Parallel()
	target, hook := testPluginTarget(testplugin.TwoResources, testplugin.SecondNoReregistration)
	r := runCheck(t, plugincheck.Options{Target: target, HealthChange: hook, Strict: true})
	want := map[string][]string{testplugin.SecondResourceName: {"registration/after-kubelet-restart"}}
	if diff := cmp.Diff(want, notPassedBy(r)); diff != "" {
		t.Errorf("checks that did not pass, by resource (-want +got):\n%s", diff)
		logReport(t, r)
	}
	if len(r.Results) != 2*len(plugincheck.AllChecks) {
		t.Errorf("%d results for two resources of %d checks", len(r.Results), len(plugincheck.AllChecks))
	}
}

// A device node outside /dev: the kubelet would pass it on, the agent refuses the allocation, and
// the checker says so.
func TestDeviceOutsideDevIsTheAgentsRule(t *testing.T) {
	t.Parallel()
	target, hook := testPluginTarget(testplugin.DeviceOutsideDev)
	r := runCheck(t, plugincheck.Options{Target: target, HealthChange: hook})
	res, _ := r.Result("allocate/paths")
	if res.Outcome != plugincheck.Fail || !slices.ContainsFunc(res.Evidence, func(e string) bool {
		return strings.Contains(e, `"/testplugin/dev-0": a device node must be a path under /dev/`) && strings.Contains(e, "kubedevice's stricter trust model")
	}) {
		t.Errorf("allocate/paths = %s %q, want a failure naming the agent's /dev rule", res.Outcome, res.Evidence)
	}
}
