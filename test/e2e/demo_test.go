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

// Package e2e runs `kubedevice dev` end to end: it builds the four binaries, runs the demo with
// --exit-after-demo, then runs it again until interrupted, and checks what a user sees.
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	goruntime "runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// binaries are the commands kubedevice dev runs, and kubedevice itself.
var binaries = []string{"kubedevice", "kubedevice-agent", "kubedevice-controller", "gopher-device-plugin"}

// runTimeout bounds one run of kubedevice dev: each of its waits has its own 60 s timeout.
const runTimeout = 5 * time.Minute

func repoRoot() string {
	_, file, _, _ := goruntime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// controlPlaneDir returns where etcd, kube-apiserver and kube-scheduler are: $KUBEBUILDER_ASSETS
// (the Makefile sets it), else bin/k8s.
func controlPlaneDir(t *testing.T) string {
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	if dir == "" {
		dir = filepath.Join(repoRoot(), "bin", "k8s")
	}
	for _, b := range []string{"etcd", "kube-apiserver", "kube-scheduler"} {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			t.Fatalf("finding the control plane in %s (run `make envtest-assets`): %v", dir, err)
		}
	}
	return dir
}

// buildBinaries builds the commands into a temporary directory, with the race detector when
// this test runs with it, so a data race in the agent or the controller during the demo fails
// the test (see checkNoRaces).
func buildBinaries(t *testing.T) string {
	dir := t.TempDir()
	args := []string{"build", "-o", dir + "/"}
	if raceEnabled {
		args = append(args, "-race")
	}
	for _, b := range binaries {
		args = append(args, "./cmd/"+b)
	}
	start := time.Now()
	cmd := exec.Command("go", args...)
	cmd.Dir = repoRoot()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Logf("Built %s (race detector: %v) in %s", strings.Join(binaries, ", "), raceEnabled, time.Since(start).Round(time.Second))
	return dir
}

// syncBuffer collects a command's output while the test reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// devCommand returns kubedevice dev with its output going to out and to the test's log as it
// comes, so CI shows the demo.
func devCommand(ctx context.Context, t *testing.T, bin, k8s, workDir string, out io.Writer, extra ...string) *exec.Cmd {
	args := append([]string{"dev", "--workdir=" + workDir, "--k8s-bin-dir=" + k8s}, extra...)
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "kubedevice"), args...)
	cmd.Stdout = io.MultiWriter(out, t.Output())
	cmd.Stderr = cmd.Stdout
	// Out of time, stop it as Ctrl-C does, so it stops what it started.
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = time.Minute
	return cmd
}

// wantLines are lines (regular expressions) the demo prints, the tables' rows among them, in the
// layout kubectl gives them.
var wantLines = []string{
	`^export KUBECONFIG=/.+/kubeconfig$`,
	`^\$ kubectl get nodedevices$`,
	`^NAME +NODE +RESOURCE +PATH +CAPACITY +ALLOCATABLE +ALLOCATED +UNHEALTHY +PLUGIN +AGE$`,
	`^demo-node\.example-com-gopher-[0-9a-f]+ +demo-node +example\.com/gopher +NodeCapacity +1 +1 +1 +0 +Registered +\d+s$`,
	`^\$ kubectl get deviceallocations -A$`,
	`^NAMESPACE +NAME +POD +NODE +RESOURCES +ALLOCATED +HEALTHY +AGE$`,
	`^default +demo-node\.gopher-pod-[0-9a-f]+ +gopher-pod +demo-node +example\.com/gopher=gopher-0 +True +True +\d+s$`,
	`^\$ kubectl get pods -o wide$`,
	`^gopher-pod +0/1 +Pending +0 +\d+s +<none> +demo-node +<none> +<none>$`,
	`^gopher-pod2 +0/1 +Pending +0 +\d+s +<none> +<none> +<none> +<none>$`,
	`^\d+s +Warning +FailedScheduling +pod/gopher-pod2 +0/1 nodes are available: 1 Insufficient example\.com/gopher\.`,
	`^Node demo-node advertises example\.com/gopher: capacity 1, allocatable 1`,
}

func checkOutput(t *testing.T, out string, want []string) {
	t.Helper()
	for _, re := range want {
		if !regexp.MustCompile(`(?m)` + re).MatchString(out) {
			t.Errorf("the output has no line matching %s", re)
		}
	}
}

// checkStopped checks that kubedevice dev left no process behind and removed its sockets, its
// checkpoint and its kubeconfig, and kept the logs.
func checkStopped(t *testing.T, workDir string) {
	t.Helper()
	for _, p := range []string{"device-plugins", "plugins_registry", "dra-plugins", "dra-registry", "cdi", "kubeconfig"} {
		if _, err := os.Stat(filepath.Join(workDir, p)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s is still in the work directory after kubedevice dev ended (%v)", p, err)
		}
	}
	logs, _ := filepath.Glob(filepath.Join(workDir, "logs", "*.log"))
	if len(logs) < 6 {
		t.Errorf("logs %v: want one per component", logs)
	}
	// Every component is started with a path under the work directory; none may still run.
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		data, err := os.ReadFile(p)
		if err == nil && bytes.Contains(data, []byte(workDir)) {
			t.Errorf("a process started by kubedevice dev still runs: %s", bytes.ReplaceAll(data, []byte{0}, []byte{' '}))
		}
	}
}

// checkNoRaces fails the test when a component built with the race detector reported a race.
func checkNoRaces(t *testing.T, workDir string) {
	t.Helper()
	logs, _ := filepath.Glob(filepath.Join(workDir, "logs", "*.log"))
	for _, l := range logs {
		data, err := os.ReadFile(l)
		if err == nil && bytes.Contains(data, []byte("WARNING: DATA RACE")) {
			t.Errorf("%s reports a data race:\n%s", filepath.Base(l), data)
		}
	}
}

func TestDemo(t *testing.T) {
	ctrllog.SetLogger(logr.Discard())
	k8s := controlPlaneDir(t)
	bin := buildBinaries(t)

	t.Run("exit after demo", func(t *testing.T) {
		workDir := filepath.Join(t.TempDir(), "demo")
		ctx, cancel := context.WithTimeout(t.Context(), runTimeout)
		defer cancel()
		var out syncBuffer
		start := time.Now()
		cmd := devCommand(ctx, t, bin, k8s, workDir, &out, "--exit-after-demo")
		if err := cmd.Run(); err != nil {
			t.Fatalf("kubedevice dev --exit-after-demo: %v", err)
		}
		t.Logf("kubedevice dev --exit-after-demo passed in %s", time.Since(start).Round(100*time.Millisecond))
		checkOutput(t, out.String(), append(wantLines, `^Checked: gopher-pod is bound to demo-node and holds gopher-0`))
		checkStopped(t, workDir)
		checkNoRaces(t, workDir)
	})

	// The DRA path: the agent is the DRA driver of example.com/gopher; the scheduler allocates one
	// gopher to a pod with plain limits and the other to a ResourceClaim.
	t.Run("dra", func(t *testing.T) {
		workDir := filepath.Join(t.TempDir(), "demo")
		ctx, cancel := context.WithTimeout(t.Context(), runTimeout)
		defer cancel()
		var out syncBuffer
		start := time.Now()
		cmd := devCommand(ctx, t, bin, k8s, workDir, &out, "--exit-after-demo", "--dra")
		if err := cmd.Run(); err != nil {
			t.Fatalf("kubedevice dev --exit-after-demo --dra: %v", err)
		}
		t.Logf("kubedevice dev --exit-after-demo --dra passed in %s", time.Since(start).Round(100*time.Millisecond))
		checkOutput(t, out.String(), []string{
			`^Publishing example\.com/gopher through DRA \.+ +[0-9.]+s +2 devices in ResourceSlices, DeviceClass gopher\.example\.com$`,
			`^Creating gopher-claim and gopher-claim-pod \.+ +[0-9.]+s +bound to demo-node, claim allocated gopher-1$`,
			`^Creating gopher-pod \(plain limits\) \.+ +[0-9.]+s +bound to demo-node, claim gopher-pod-extended-resources-[a-z0-9]+ allocated gopher-0$`,
			`^demo-node\.example-com-gopher-[0-9a-f]+ +demo-node +example\.com/gopher +DRA +2 +2 +0 +0 +Registered +\d+s$`,
			`^\$ kubectl get resourceslices$`,
			`^NAME +NODE +DRIVER +POOL +AGE$`,
			`^[0-9]+-kubedevice\.io-demo-node-[a-z0-9]+ +demo-node +kubedevice\.io +example\.com/gopher +\d+s$`,
			`^gopher-claim +allocated,reserved +\d+s$`,
			`^gopher-pod-extended-resources-[a-z0-9]+ +allocated,reserved +\d+s$`,
			`^gopher-claim-pod +0/1 +Pending +0 +\d+s +<none> +demo-node +<none> +<none>$`,
			`^gopher-pod +0/1 +Pending +0 +\d+s +<none> +demo-node +<none> +<none>$`,
			`^  gopher-pod +gopher-0  \(plain limits`,
			`^  gopher-claim-pod +gopher-1  \(ResourceClaim gopher-claim`,
			`^Node demo-node advertises example\.com/gopher: capacity <none>`,
			`^No kubelet runs on demo-node: nothing prepares the claims`,
			`^Checked: the ResourceSlices of kubedevice\.io list gopher-0, gopher-1; gopher-pod \(plain limits\) is bound to demo-node and allocated gopher-0; gopher-claim-pod is bound to demo-node and gopher-claim allocated gopher-1`,
		})
		checkStopped(t, workDir)
		checkNoRaces(t, workDir)
	})

	// Plugin authors' plugins beside the Gopher: one started by kubedevice dev (--plugin), the
	// Gopher binary under another resource name pointed at the agent's plugin directory by
	// {plugin-dir}; and one already running (--plugin-socket), the Gopher binary again.
	t.Run("author plugin", func(t *testing.T) {
		tmp := t.TempDir()
		workDir := filepath.Join(tmp, "demo")
		gophers := func(name string, ids ...string) string {
			dir := filepath.Join(tmp, name)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			for _, g := range ids {
				if err := os.WriteFile(filepath.Join(dir, g), []byte("an author's device\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			return dir
		}
		plugin := fmt.Sprintf("%s --plugin-dir={plugin-dir} --resource-name=example.com/author --socket-name=author.sock --gophers-dir=%s",
			filepath.Join(bin, "gopher-device-plugin"), gophers("author-gophers", "a-0", "a-1"))
		ctx, cancel := context.WithTimeout(t.Context(), runTimeout)
		defer cancel()
		ownDir := filepath.Join(tmp, "own")
		running := exec.CommandContext(ctx, filepath.Join(bin, "gopher-device-plugin"), "--plugin-dir="+ownDir,
			"--resource-name=example.com/running", "--socket-name=running.sock", "--gophers-dir="+gophers("running-gophers", "r-0"))
		var runningOut syncBuffer
		running.Stdout, running.Stderr = &runningOut, &runningOut
		defer func() {
			if t.Failed() {
				t.Logf("the running plugin's output:\n%s", runningOut.String())
			}
		}()
		if err := running.Start(); err != nil {
			t.Fatalf("starting the running plugin: %v", err)
		}
		defer func() { _ = running.Process.Signal(os.Interrupt); _ = running.Wait() }()
		socket := filepath.Join(ownDir, "running.sock")
		if err := poll(ctx, time.Minute, func() bool { _, err := os.Stat(socket); return err == nil }); err != nil {
			t.Fatalf("the running plugin's socket %s did not appear: %v", socket, err)
		}
		var out syncBuffer
		cmd := devCommand(ctx, t, bin, k8s, workDir, &out, "--exit-after-demo", "--plugin", plugin,
			"--plugin-socket", "example.com/running="+socket)
		if err := cmd.Run(); err != nil {
			t.Fatalf("kubedevice dev --exit-after-demo --plugin --plugin-socket: %v", err)
		}
		checkOutput(t, out.String(), append(wantLines,
			`^Starting plugin-1 \.+ +[0-9.]+s +example\.com/author: 2 devices, 2 allocatable$`,
			`^Creating plugin-pod-1 \.+ +[0-9.]+s +asks for one example\.com/author: bound to demo-node, holds example\.com/author/a-[01]$`,
			`^demo-node\.example-com-author-[0-9a-f]+ +demo-node +example\.com/author +NodeCapacity +2 +2 +1 +0 +Registered +\d+s$`,
			`^default +demo-node\.plugin-pod-1-[0-9a-f]+ +plugin-pod-1 +demo-node +example\.com/author=a-[01] +True +True +\d+s$`,
			`^plugin-pod-1 +0/1 +Pending +0 +\d+s +<none> +demo-node +<none> +<none>$`,
			`^Registering plugin-2 \(a running plugin\) \.+ +[0-9.]+s +example\.com/running: 1 devices, 1 allocatable$`,
			`^Creating plugin-pod-2 \.+ +[0-9.]+s +asks for one example\.com/running: bound to demo-node, holds example\.com/running/r-0$`,
			`^demo-node\.example-com-running-[0-9a-f]+ +demo-node +example\.com/running +NodeCapacity +1 +1 +1 +0 +Registered +\d+s$`,
			`^default +demo-node\.plugin-pod-2-[0-9a-f]+ +plugin-pod-2 +demo-node +example\.com/running=r-0 +True +True +\d+s$`,
			`^Checked: gopher-pod is bound to demo-node and holds gopher-0`,
		))
		checkStopped(t, workDir)
		checkNoRaces(t, workDir)
	})

	// An author's plugin serving two resources, one through DRA, beside the Gopher through DRA:
	// every resource is exercised and summarized; the plugin's end keeps the cluster running and
	// shows its devices Disconnected, and SIGHUP starts it again.
	t.Run("author plugin restarts", func(t *testing.T) {
		testAuthorPluginRestarts(t, bin, k8s)
	})

	t.Run("until interrupted", func(t *testing.T) {
		workDir := filepath.Join(t.TempDir(), "demo")
		ctx, cancel := context.WithTimeout(t.Context(), runTimeout)
		defer cancel()
		pr, pw := io.Pipe()
		var out syncBuffer
		cmd := devCommand(ctx, t, bin, k8s, workDir, io.MultiWriter(&out, pw))
		if err := cmd.Start(); err != nil {
			t.Fatalf("starting kubedevice dev: %v", err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait(); pw.Close() }()
		waitForLine(t, pr, "Press Ctrl-C to stop everything.")
		go func() { _, _ = io.Copy(io.Discard, pr) }()
		checkOutput(t, out.String(), wantLines)
		kubeconfig := filepath.Join(workDir, "kubeconfig")
		// etcd, kube-apiserver, kube-scheduler, the controller, the agent and the plugin.
		started := descendants(cmd.Process.Pid)
		if len(started) < 6 {
			t.Errorf("kubedevice dev runs %d processes (%v), want at least 6", len(started), started)
		}

		status := runStatus(t, bin, kubeconfig)
		checkOutput(t, status, []string{
			`^Node demo-node +agent Ready \(AgentLeaseValid\)$`,
			`^  example\.com/gopher +1 +1 +1 +0 +0 +Registered$`,
			`^  example\.com/gopher +gopher-0 +Healthy +- +default/gopher-pod/gopher$`,
		})

		// As the demo suggests: delete gopher-pod, and gopher-pod2 gets the gopher.
		c := newClient(t, kubeconfig)
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "gopher-pod"}}
		if err := c.Delete(ctx, pod); err != nil {
			t.Fatalf("deleting gopher-pod: %v", err)
		}
		var last string
		if err := poll(ctx, time.Minute, func() bool {
			last = runStatus(t, bin, kubeconfig)
			return strings.Contains(last, "default/gopher-pod2/gopher")
		}); err != nil {
			t.Fatalf("gopher-pod2 did not get the gopher after gopher-pod was deleted: %v; kubedevice status says:\n%s", err, last)
		}

		if err := cmd.Process.Signal(os.Interrupt); err != nil {
			t.Fatalf("interrupting kubedevice dev: %v", err)
		}
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("kubedevice dev ended with %v after Ctrl-C", err)
			}
		case <-time.After(time.Minute):
			t.Fatal("kubedevice dev did not stop within a minute of Ctrl-C")
		}
		// The agent first, so it sees no plugin go away.
		checkOutput(t, out.String(), []string{`^Stopping kubedevice-agent, gopher-device-plugin, kubedevice-controller, kube-scheduler, kube-apiserver, etcd \.\.\. done`})
		for pid, name := range started {
			if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
				t.Errorf("%s (pid %d) still runs after kubedevice dev stopped", name, pid)
			}
		}
		checkStopped(t, workDir)
		checkNoRaces(t, workDir)
	})
}

// authorRestartLines are the lines of the demo with a plugin serving example.com/alpha on the
// device plugin path and example.com/beta through DRA, beside the Gopher through DRA.
var authorRestartLines = []string{
	`^DRA: the agent is the DRA driver kubedevice\.io for example\.com/gopher, example\.com/beta; `,
	`^Starting plugin-1 \.+ +[0-9.]+s +example\.com/alpha: 2 devices, 2 allocatable; example\.com/beta: 1 devices, 1 allocatable$`,
	`^Creating plugin-pod-1 \.+ +[0-9.]+s +asks for one example\.com/alpha: bound to demo-node, holds example\.com/alpha/a-[01]$`,
	`^Publishing example\.com/beta through DRA \.+ +[0-9.]+s +1 devices in ResourceSlices, DeviceClass beta\.example\.com$`,
	`^Creating plugin-pod-1-2 \.+ +[0-9.]+s +asks for one example\.com/beta: bound to demo-node, claim plugin-pod-1-2-extended-resources-[a-z0-9]+ allocated b-0$`,
	`^[0-9]+-kubedevice\.io-demo-node-[a-z0-9]+ +demo-node +kubedevice\.io +example\.com/beta +\d+s$`,
	`^\$ kubectl get deviceallocations -A$`,
	`^default +demo-node\.plugin-pod-1-[0-9a-f]+ +plugin-pod-1 +demo-node +example\.com/alpha=a-[01] +True +True +\d+s$`,
	`^Node demo-node advertises example\.com/gopher: capacity <none> \(DRA serves it; no node capacity\)\.$`,
	`^Node demo-node advertises example\.com/alpha: capacity 2, allocatable 2 \(published by kubedevice-controller\)\.$`,
	`^Node demo-node advertises example\.com/beta: capacity <none> \(DRA serves it; no node capacity\); kube-scheduler allocated b-0 to plugin-pod-1-2's claim plugin-pod-1-2-extended-resources-[a-z0-9]+\.$`,
	`^  kill -HUP \d+ +# restarts your --plugin commands`,
}

func testAuthorPluginRestarts(t *testing.T, bin, k8s string) {
	tmp := t.TempDir()
	workDir := filepath.Join(tmp, "demo")
	gophers := func(name string, ids ...string) string {
		dir := filepath.Join(tmp, name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, g := range ids {
			if err := os.WriteFile(filepath.Join(dir, g), []byte("an author's device\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	gopher := filepath.Join(bin, "gopher-device-plugin")
	plugin := fmt.Sprintf("%s --plugin-dir={plugin-dir} --resource-name=example.com/alpha --socket-name=alpha.sock --gophers-dir=%s & "+
		"%s --plugin-dir={plugin-dir} --resource-name=example.com/beta --socket-name=beta.sock --gophers-dir=%s & wait",
		gopher, gophers("alpha", "a-0", "a-1"), gopher, gophers("beta", "b-0"))
	ctx, cancel := context.WithTimeout(t.Context(), runTimeout)
	defer cancel()
	var out syncBuffer
	cmd := devCommand(ctx, t, bin, k8s, workDir, &out, "--dra", "--plugin", plugin, "--plugin-dra", "example.com/beta")
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting kubedevice dev: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	waitOutput(ctx, t, &out, `^Press Ctrl-C to stop everything\.$`)
	checkOutput(t, out.String(), authorRestartLines)

	// The plugin's shell and both plugins end, as when the author stops them.
	shell := 0
	for pid, name := range descendants(cmd.Process.Pid) {
		if name == "sh" {
			shell = pid
		}
	}
	if shell == 0 {
		t.Fatalf("no sh -c of the plugin among kubedevice dev's processes %v", descendants(cmd.Process.Pid))
	}
	if err := syscall.Kill(-shell, syscall.SIGTERM); err != nil {
		t.Fatalf("stopping the plugin: %v", err)
	}
	waitOutput(ctx, t, &out, `^Start it again: kill -HUP \d+$`)
	checkOutput(t, out.String(), []string{
		`^plugin-1 exited \(signal: terminated\); the cluster keeps running\.$`,
		`^last lines of plugin-1's log \(.+plugin-1\.log\):$`,
		`^Showing plugin-1's devices Disconnected \.+ +[0-9.]+s +example\.com/alpha: plugin Disconnected, .*; example\.com/beta: plugin Disconnected, `,
	})
	restarted := `^Restarting plugin-1 \.+ +[0-9.]+s +example\.com/alpha: 2 devices, 2 allocatable; example\.com/beta: 1 devices, 1 allocatable$`
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatalf("SIGHUP: %v", err)
	}
	waitOutput(ctx, t, &out, restarted)
	// Running, it is stopped first.
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatalf("SIGHUP: %v", err)
	}
	waitOutput(ctx, t, &out, `^Stopped plugin-1 \(signal: terminated\)\.\n(.*\n)*`+restarted[1:])

	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatalf("interrupting kubedevice dev: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("kubedevice dev ended with %v after Ctrl-C", err)
	}
	checkOutput(t, out.String(), []string{`^Stopping kubedevice-agent, plugin-1, gopher-device-plugin, kubedevice-controller, kube-scheduler, kube-apiserver, etcd \.\.\. done`})
	checkStopped(t, workDir)
	checkNoRaces(t, workDir)
	checkNoPluginErrors(t, workDir)
}

// waitOutput waits until the output has a line matching re (multi-line mode).
func waitOutput(ctx context.Context, t *testing.T, out *syncBuffer, re string) {
	t.Helper()
	r := regexp.MustCompile(`(?m)` + re)
	if err := poll(ctx, 2*time.Minute, func() bool { return r.MatchString(out.String()) }); err != nil {
		t.Fatalf("kubedevice dev printed no line matching %s: %v", re, err)
	}
}

// checkNoPluginErrors fails when the agent logged a plugin's stream ending, a plugin's restart
// or stop, as an error.
func checkNoPluginErrors(t *testing.T, workDir string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(workDir, "logs", "kubedevice-agent.log"))
	if err != nil {
		t.Fatalf("reading the agent's log: %v", err)
	}
	ended := 0
	for _, line := range strings.Split(string(data), "\n") {
		if !strings.Contains(line, "ListAndWatch") {
			continue
		}
		if strings.Contains(line, `"level":"error"`) || strings.Contains(line, "stacktrace") {
			t.Errorf("the agent logs a plugin's stream ending as an error: %s", line)
		}
		if strings.Contains(line, "ListAndWatch stream of device plugin ended") && strings.Contains(line, `"level":"info"`) {
			ended++
		}
	}
	// alpha and beta, each stopped twice.
	if ended < 4 {
		t.Errorf("the agent logged %d ends of a plugin's stream at info level, want at least 4", ended)
	}
}

// descendants returns the processes below pid, by pid, with their names.
func descendants(pid int) map[int]string {
	type proc struct {
		ppid int
		name string
	}
	procs := map[int]proc{}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range stats {
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...; comm may hold spaces and parentheses.
		open, end := bytes.IndexByte(data, '('), bytes.LastIndexByte(data, ')')
		if open < 0 || end < open {
			continue
		}
		var id, ppid int
		var state string
		if _, err := fmt.Sscan(string(data[:open]), &id); err != nil {
			continue
		}
		if _, err := fmt.Sscan(string(data[end+1:]), &state, &ppid); err != nil {
			continue
		}
		procs[id] = proc{ppid: ppid, name: string(data[open+1 : end])}
	}
	out := map[int]string{}
	for changed := true; changed; {
		changed = false
		for id, p := range procs {
			if _, seen := out[id]; seen {
				continue
			}
			if _, parent := out[p.ppid]; p.ppid == pid || parent {
				out[id] = p.name
				changed = true
			}
		}
	}
	return out
}

// waitForLine reads r until a line equal to want, failing after runTimeout.
func waitForLine(t *testing.T, r io.Reader, want string) {
	t.Helper()
	found := make(chan bool, 1)
	go func() {
		s := bufio.NewScanner(r)
		for s.Scan() {
			if s.Text() == want {
				found <- true
				return
			}
		}
		found <- false
	}()
	select {
	case ok := <-found:
		if !ok {
			t.Fatalf("kubedevice dev ended before printing %q", want)
		}
	case <-time.After(runTimeout):
		t.Fatalf("kubedevice dev did not print %q within %s", want, runTimeout)
	}
}

// runStatus runs kubedevice status and returns its output.
func runStatus(t *testing.T, bin, kubeconfig string) string {
	t.Helper()
	out, err := exec.Command(filepath.Join(bin, "kubedevice"), "status", "--kubeconfig="+kubeconfig).CombinedOutput()
	if err != nil {
		t.Fatalf("kubedevice status: %v\n%s", err, out)
	}
	return string(out)
}

func newClient(t *testing.T, kubeconfig string) client.Client {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatalf("loading %s: %v", kubeconfig, err)
	}
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatalf("creating a client: %v", err)
	}
	return c
}

// poll calls cond every half second until it is true or timeout passes.
func poll(ctx context.Context, timeout time.Duration, cond func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for !cond() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("after %s: %w", timeout, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
	return nil
}
