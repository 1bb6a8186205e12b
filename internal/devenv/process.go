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

package devenv

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Stopping a component: SIGTERM, then SIGKILL if it is still running after stopTimeout.
const stopTimeout = 10 * time.Second

// tailLines is how much of a component's log an error shows.
const tailLines = 25

var errStillRunning = errors.New("still running after SIGKILL")

// component is a subprocess of kubedevice dev: one of kube-scheduler, the kubedevice controller,
// agent and Gopher plugin. Its stdout and stderr go to its log file.
type component struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	log     *os.File
	done    chan struct{}
	// err is how the process ended; read after done is closed.
	err error
	// stopping is set when kubedevice dev asked the process to stop.
	stopping bool
	mu       sync.Mutex
}

// startComponent starts path with args, logging to logPath (truncated). The process gets its own
// process group, so a Ctrl-C in the terminal reaches only kubedevice dev, which stops the
// components in order; and SIGTERM when kubedevice dev dies, so none outlives it.
func startComponent(name, path string, args []string, logPath string) (*component, error) {
	return startComponentEnv(name, path, args, nil, logPath)
}

// startComponentEnv is startComponent with env added to kubedevice dev's environment.
func startComponentEnv(name, path string, args, env []string, logPath string) (*component, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("creating the log of %s: %w", name, err)
	}
	fmt.Fprintf(f, "# %s %s\n", path, strings.Join(args, " "))
	cmd := exec.Command(path, args...)
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	c := &component{name: name, logPath: logPath, cmd: cmd, log: f, done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		c.mu.Lock()
		c.err = err
		c.mu.Unlock()
		f.Close()
		close(c.done)
	}()
	return c, nil
}

// exited returns a non-nil error when the component has ended without being asked to.
func (c *component) exited() error {
	select {
	case <-c.done:
	default:
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopping {
		return nil
	}
	how := "exited"
	if c.err != nil {
		how = c.err.Error()
	}
	return fmt.Errorf("%s stopped unexpectedly (%s)%s", c.name, how, logTail(c.name, c.logPath))
}

// ended says whether the process has ended, and how ("exit status 0", "signal: terminated").
func (c *component) ended() (bool, string) {
	select {
	case <-c.done:
		return true, c.cmd.ProcessState.String()
	default:
		return false, ""
	}
}

// stop sends SIGTERM, waits for the process to end, and kills it after stopTimeout.
func (c *component) stop() error {
	c.mu.Lock()
	c.stopping = true
	c.mu.Unlock()
	select {
	case <-c.done:
		return c.stopGroup()
	default:
	}
	// The whole process group: a --plugin command runs under sh -c, which does not pass SIGTERM on.
	if err := syscall.Kill(-c.cmd.Process.Pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("stopping %s: %w", c.name, err)
	}
	select {
	case <-c.done:
		return c.stopGroup()
	case <-time.After(stopTimeout):
	}
	if err := syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("killing %s: %w", c.name, err)
	}
	select {
	case <-c.done:
		return fmt.Errorf("stopping %s: killed after %s without exiting on SIGTERM", c.name, stopTimeout)
	case <-time.After(stopTimeout):
		return fmt.Errorf("stopping %s: %w", c.name, errStillRunning)
	}
}

// stopGroup waits, after the component's process ended, for the rest of its process group (the
// children of a --plugin command's shell) to end on the SIGTERM they got, and kills what remains
// after stopTimeout.
func (c *component) stopGroup() error {
	pgid := c.cmd.Process.Pid
	deadline := time.Now().Add(stopTimeout)
	for syscall.Kill(-pgid, 0) == nil {
		if time.Now().After(deadline) {
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			return fmt.Errorf("stopping %s: its children were killed after %s without exiting on SIGTERM", c.name, stopTimeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// logTail returns the last lines of a component's log, formatted to follow an error message;
// empty when the log is empty or unreadable.
func logTail(name, path string) string {
	data, err := os.ReadFile(path)
	if err != nil || len(bytes.TrimSpace(data)) == 0 {
		return ""
	}
	return fmt.Sprintf("\n\nlast lines of %s's log (%s):\n%s", name, displayPath(path), lastLines(data, tailLines))
}

// lastLines returns the last n lines of data, each indented by two spaces.
func lastLines(data []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "  " + strings.Join(lines, "\n  ")
}

// displayPath returns path relative to the working directory when it is below it, so messages
// name bin/demo/logs/... rather than a long absolute path.
func displayPath(path string) string {
	wd, err := os.Getwd()
	if err != nil {
		return path
	}
	rel, err := filepath.Rel(wd, path)
	if err != nil || strings.HasPrefix(rel, "..") {
		return path
	}
	return rel
}
