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

package main

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kubedevice/kubedevice/internal/plugincheck"
	"github.com/kubedevice/kubedevice/internal/plugincheck/testplugin"
)

// envFaults makes the test binary run testplugin, with these faults, as the plugin under test.
const envFaults = "KUBEDEVICE_TEST_PLUGIN_FAULTS"

func TestMain(m *testing.M) {
	if faults, ok := os.LookupEnv(envFaults); ok {
		os.Exit(runTestPlugin(faults))
	}
	os.Exit(m.Run())
}

func runTestPlugin(faults string) int {
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

type junitDoc struct {
	Tests    int `xml:"tests,attr"`
	Failures int `xml:"failures,attr"`
	Skipped  int `xml:"skipped,attr"`
}

// runPluginTest runs `kubedevice plugin test` on this test binary as a plugin with faults.
func runPluginTest(t *testing.T, faults string, extra ...string) (string, junitDoc, error) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	junit := filepath.Join(t.TempDir(), "report.xml")
	args := append([]string{"plugin", "test", "--junit", junit, "--reregistration-timeout=5s",
		"--health-change-cmd", `kill -USR1 "$KUBEDEVICE_PLUGIN_PID"`}, extra...)
	args = append(args, "--", "env", envFaults+"="+faults, exe, "-test.run=^$")
	cmd := newRootCommand()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	runErr := cmd.ExecuteContext(ctx)
	var doc junitDoc
	data, err := os.ReadFile(junit)
	if err != nil {
		t.Fatalf("reading the JUnit report: %v\n%s", err, out.String())
	}
	if err := xml.Unmarshal(data, &doc); err != nil {
		t.Fatalf("parsing the JUnit report: %v\n%s", err, data)
	}
	return out.String(), doc, runErr
}

func TestPluginTestPasses(t *testing.T) {
	out, doc, err := runPluginTest(t, "")
	if err != nil {
		t.Fatalf("plugin test: %v\n%s", err, out)
	}
	if want := len(plugincheck.AllChecks); doc.Tests != want || doc.Failures != 0 || doc.Skipped != 0 {
		t.Errorf("JUnit: %+v, want %d tests, no failures or skips\n%s", doc, want, out)
	}
	if !strings.Contains(out, fmt.Sprintf("%d passed, 0 failed, 0 warned, 0 skipped", len(plugincheck.AllChecks))) {
		t.Errorf("the report lacks its summary:\n%s", out)
	}
}

func TestPluginTestFailsABrokenPlugin(t *testing.T) {
	out, doc, err := runPluginTest(t, string(testplugin.LeavesSocket))
	if !errors.Is(err, errPluginFailed) {
		t.Fatalf("plugin test = %v, want %v\n%s", err, errPluginFailed, out)
	}
	if doc.Failures != 1 || !strings.Contains(out, "FAIL  stop/socket-removed") {
		t.Errorf("JUnit %+v, want 1 failure, stop/socket-removed\n%s", doc, out)
	}
}

func TestPluginTestStrictFailsOnWarnings(t *testing.T) {
	if _, _, err := runPluginTest(t, string(testplugin.AcceptsUnknown)); err != nil {
		t.Errorf("without --strict, a warning does not fail: %v", err)
	}
	out, doc, err := runPluginTest(t, string(testplugin.AcceptsUnknown), "--strict")
	if !errors.Is(err, errPluginFailed) || doc.Failures != 1 {
		t.Errorf("with --strict: %v, JUnit %+v; want %v and 1 failure\n%s", err, doc, errPluginFailed, out)
	}
}

func TestPluginTestArguments(t *testing.T) {
	for name, args := range map[string][]string{
		"nothing": {"plugin", "test"},
		"both":    {"plugin", "test", "--socket", "/tmp/x.sock", "--", "true"},
	} {
		cmd := newRootCommand()
		cmd.SetArgs(args)
		cmd.SetOut(&bytes.Buffer{})
		if err := cmd.Execute(); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// A checker flag after -- reaches the plugin: the checker says so.
func TestPluginTestWarnsAboutCheckerFlagsAfterDash(t *testing.T) {
	cmd := newRootCommand()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs([]string{"plugin", "test", "--registration-timeout=200ms", "--", "true", "--plugin-dir={plugin-dir}", "--junit", "r.xml", "--strict"})
	_ = cmd.Execute()
	for _, want := range []string{"warning: --junit comes after --", "warning: --strict comes after --"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the output lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "warning: --plugin-dir") {
		t.Errorf("--plugin-dir={plugin-dir} is the plugin's own flag, not worth a warning:\n%s", out.String())
	}
}
