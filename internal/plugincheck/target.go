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
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/pflag"
)

// The environment a plugin started by the checker or by kubedevice dev gets, and the placeholder
// replaced in its arguments.
const (
	// EnvPluginDir is the device manager's plugin directory: kubelet.sock is there, and the
	// plugin's socket goes there.
	EnvPluginDir = "KUBEDEVICE_PLUGIN_DIR"
	// EnvKubeletSocket is <plugin dir>/kubelet.sock.
	EnvKubeletSocket = "KUBEDEVICE_KUBELET_SOCKET"
	// EnvPluginPID is the plugin's process ID, given to --health-change-cmd.
	EnvPluginPID = "KUBEDEVICE_PLUGIN_PID"
	// EnvRegistryDir is the plugins registry directory the checker watches, as the kubelet's
	// plugin watcher does: a plugin that registers that way creates its socket there.
	EnvRegistryDir = "KUBEDEVICE_PLUGINS_REGISTRY_DIR"
	// EnvResourceName is the resource whose device --health-change-cmd is to change.
	EnvResourceName = "KUBEDEVICE_RESOURCE_NAME"
	// PluginDirPlaceholder in a plugin's arguments is replaced by the plugin directory.
	PluginDirPlaceholder = "{plugin-dir}"
	// RegistryDirPlaceholder in a plugin's arguments is replaced by the plugins registry
	// directory.
	RegistryDirPlaceholder = "{plugins-registry-dir}"
	// KubeletPluginDir is where an unmodified plugin looks for kubelet.sock.
	KubeletPluginDir = "/var/lib/kubelet/device-plugins"
	// KubeletRegistryDir is the kubelet's plugin watcher directory.
	KubeletRegistryDir = "/var/lib/kubelet/plugins_registry"
)

// Dirs are the directories a plugin under test is pointed at.
type Dirs struct {
	// Plugins is the device plugin directory, where kubelet.sock is.
	Plugins string
	// Registry is the plugins registry directory the plugin watcher watches; "" when there is
	// none.
	Registry string
}

var errNotRoot = errors.New("running a plugin in a private mount namespace needs root (CAP_SYS_ADMIN)")

// Target is a plugin the checker starts and stops.
type Target interface {
	// Start starts the plugin pointed at the directories.
	Start(ctx context.Context, dirs Dirs) error
	// Stop asks the plugin to stop (SIGTERM for a process) and waits at most timeout for it to
	// end. It returns an error when it did not end in time or ended with an error.
	Stop(timeout time.Duration) error
	// Exited is closed when the plugin has ended.
	Exited() <-chan struct{}
	// Env is the environment of --health-change-cmd: the plugin directory and process ID.
	Env() []string
	// Output is the end of what the plugin printed, if known.
	Output() string
	// String describes the plugin for the report.
	String() string
}

// CommandLine returns the argv and the extra environment that run a plugin's command line pointed
// at the plugin directory dir: {plugin-dir} in the arguments is replaced by dir, and
// KUBEDEVICE_PLUGIN_DIR and KUBEDEVICE_KUBELET_SOCKET are set. With mountAt (KubeletPluginDir, for
// plugins that cannot be told where the plugin directory is), the command runs in a private mount
// namespace where dir is bind-mounted on mountAt, and the plugin directory it is told of is
// mountAt. That needs Linux, root and util-linux's unshare; mountAt is created on the host if it
// is missing (an empty directory), and nothing is mounted outside the namespace.
func CommandLine(args []string, dir, mountAt string) (argv, env []string, err error) {
	return commandLine(args, Dirs{Plugins: dir}, mountAt)
}

// commandLine is CommandLine with a plugins registry directory too: {plugins-registry-dir} and
// KUBEDEVICE_PLUGINS_REGISTRY_DIR, and in the private mount namespace it is bind-mounted on
// KubeletRegistryDir.
func commandLine(args []string, dirs Dirs, mountAt string) (argv, env []string, err error) {
	if len(args) == 0 {
		return nil, nil, errors.New("no plugin command")
	}
	argv = make([]string, len(args))
	for i, a := range args {
		argv[i] = strings.NewReplacer(PluginDirPlaceholder, dirs.Plugins, RegistryDirPlaceholder, dirs.Registry).Replace(a)
	}
	if mountAt != "" {
		if argv, err = inMountNamespace(argv, dirs, mountAt); err != nil {
			return nil, nil, err
		}
		dirs.Plugins = mountAt
		if dirs.Registry != "" {
			dirs.Registry = registryMountAt(mountAt)
		}
	}
	env = []string{EnvPluginDir + "=" + dirs.Plugins, EnvKubeletSocket + "=" + dirs.Plugins + "/" + kubeletSocketName}
	if dirs.Registry != "" {
		env = append(env, EnvRegistryDir+"="+dirs.Registry)
	}
	return argv, env, nil
}

// registryMountAt is where the plugins registry directory is bind-mounted beside a plugin
// directory bind-mounted on mountAt: plugins_registry in the same parent, as the kubelet lays them
// out (KubeletRegistryDir beside KubeletPluginDir).
func registryMountAt(mountAt string) string {
	return filepath.Join(filepath.Dir(mountAt), filepath.Base(KubeletRegistryDir))
}

// inMountNamespace wraps argv to run in a private mount namespace where dirs.Plugins is
// bind-mounted on mountAt and dirs.Registry (if any) beside it (registryMountAt).
func inMountNamespace(argv []string, dirs Dirs, mountAt string) ([]string, error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("%w; run the plugin with its own flag or environment variable for the plugin directory instead", errNotRoot)
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		return nil, fmt.Errorf("running a plugin in a private mount namespace needs unshare (util-linux): %w", err)
	}
	script, mounts := `mkdir -p "$2" && mount --bind "$1" "$2" && shift 2 && exec "$@"`, []string{dirs.Plugins, mountAt}
	if dirs.Registry != "" {
		script = `mkdir -p "$2" "$4" && mount --bind "$1" "$2" && mount --bind "$3" "$4" && shift 4 && exec "$@"`
		mounts = append(mounts, dirs.Registry, registryMountAt(mountAt))
	}
	wrapped := append([]string{"unshare", "--mount", "--propagation", "private", "--", "sh", "-c", script, "sh"}, mounts...)
	return append(wrapped, argv...), nil
}

// CommandTarget runs a plugin's command line.
type CommandTarget struct {
	// Args is the command line; {plugin-dir} is replaced by the plugin directory.
	Args []string
	// MountAt, if set (KubeletPluginDir), runs it with the plugin directory bind-mounted there in
	// a private mount namespace (see CommandLine).
	MountAt string
	// Log, if set, also receives what the plugin prints.
	Log io.Writer
	// LogFile, if set, also receives what the plugin prints (created at Start).
	LogFile string

	cmd    *exec.Cmd
	dir    string
	log    *os.File
	exited chan struct{}
	err    error
	tail   tailBuffer
}

var _ Target = &CommandTarget{}

// AddFlags registers --mount-namespace and --plugin-log.
func (t *CommandTarget) AddFlags(f *pflag.FlagSet) {
	f.Var(mountNamespaceFlag{&t.MountAt}, "mount-namespace", "Run the plugin in a private mount namespace with the plugin directory bind-mounted on "+
		KubeletPluginDir+" and the plugins registry directory on "+KubeletRegistryDir+" (Linux, root).")
	f.Lookup("mount-namespace").NoOptDefVal = "true"
	f.StringVar(&t.LogFile, "plugin-log", "", "Write what the plugin prints to this file (its end is in the report when it does not register).")
}

// mountNamespaceFlag is --mount-namespace: a bool that sets CommandTarget.MountAt.
type mountNamespaceFlag struct{ mountAt *string }

func (f mountNamespaceFlag) String() string {
	return strconv.FormatBool(f.mountAt != nil && *f.mountAt != "")
}
func (f mountNamespaceFlag) Type() string { return "bool" }

func (f mountNamespaceFlag) Set(v string) error {
	on, err := strconv.ParseBool(v)
	if err != nil {
		return err
	}
	*f.mountAt = ""
	if on {
		*f.mountAt = KubeletPluginDir
	}
	return nil
}

// Start starts the command.
func (t *CommandTarget) Start(_ context.Context, dirs Dirs) error {
	argv, env, err := commandLine(t.Args, dirs, t.MountAt)
	if err != nil {
		return err
	}
	t.dir = dirs.Plugins
	// Not CommandContext: the checker stops the plugin itself, with SIGTERM, to see it clean up.
	cmd := exec.Command(argv[0], argv[1:]...) //nolint:gosec // G204: running the author's plugin is the point.
	cmd.Env = append(os.Environ(), env...)
	out, err := t.output()
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = out, out
	// Its own process group, so that a plugin killed after the stop timeout takes its children
	// along; and do not wait for children that keep its output open.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	cmd.WaitDelay = time.Second
	if err := cmd.Start(); err != nil {
		if t.log != nil {
			_ = t.log.Close()
		}
		return fmt.Errorf("starting %s: %w", argv[0], err)
	}
	t.cmd, t.exited = cmd, make(chan struct{})
	go func() {
		t.err = cmd.Wait()
		if t.log != nil {
			_ = t.log.Close()
		}
		close(t.exited)
	}()
	return nil
}

// output is where the plugin's output goes: the tail kept for the report, Log and LogFile.
func (t *CommandTarget) output() (io.Writer, error) {
	outs := []io.Writer{&t.tail}
	if t.Log != nil {
		outs = append(outs, t.Log)
	}
	if t.LogFile != "" {
		f, err := os.Create(t.LogFile)
		if err != nil {
			return nil, fmt.Errorf("creating the plugin's log: %w", err)
		}
		t.log = f
		outs = append(outs, f)
	}
	return io.MultiWriter(outs...), nil
}

// Stop sends SIGTERM and waits; after timeout it kills the plugin.
func (t *CommandTarget) Stop(timeout time.Duration) error {
	if t.cmd == nil {
		return nil
	}
	select {
	case <-t.exited:
		return fmt.Errorf("it had already exited: %w", t.err)
	default:
	}
	if err := t.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return fmt.Errorf("sending SIGTERM: %w", err)
	}
	select {
	case <-t.exited:
		if t.err != nil {
			return fmt.Errorf("it exited with %w", t.err)
		}
		return nil
	case <-time.After(timeout):
		_ = syscall.Kill(-t.cmd.Process.Pid, syscall.SIGKILL)
		<-t.exited
		return fmt.Errorf("it had not exited %s after SIGTERM, and was killed", timeout)
	}
}

// Exited is closed when the process has ended.
func (t *CommandTarget) Exited() <-chan struct{} { return t.exited }

// Env gives the plugin directory and the process ID.
func (t *CommandTarget) Env() []string {
	env := []string{EnvPluginDir + "=" + t.dir}
	if t.cmd != nil {
		env = append(env, EnvPluginPID+"="+strconv.Itoa(t.cmd.Process.Pid))
	}
	return env
}

// Output is the end of what the plugin printed.
func (t *CommandTarget) Output() string { return t.tail.String() }

func (t *CommandTarget) String() string { return strings.Join(t.Args, " ") }

// FuncTarget runs a plugin in this process: Run serves until its context ends. Stopping it
// cancels the context, as SIGTERM does to a plugin built on signal.NotifyContext.
type FuncTarget struct {
	Name string
	Run  func(ctx context.Context, dirs Dirs) error

	cancel context.CancelFunc
	exited chan struct{}
	err    error
	dir    string
}

var _ Target = &FuncTarget{}

// Start runs Run in a goroutine.
func (t *FuncTarget) Start(ctx context.Context, dirs Dirs) error {
	ctx, t.cancel = context.WithCancel(context.WithoutCancel(ctx))
	t.exited, t.dir = make(chan struct{}), dirs.Plugins
	go func() {
		t.err = t.Run(ctx, dirs)
		close(t.exited)
	}()
	return nil
}

// Stop cancels Run's context and waits for it to return.
func (t *FuncTarget) Stop(timeout time.Duration) error {
	if t.cancel == nil {
		return nil
	}
	t.cancel()
	select {
	case <-t.exited:
		return t.err
	case <-time.After(timeout):
		return fmt.Errorf("it had not returned %s after its context ended", timeout)
	}
}

// Exited is closed when Run has returned.
func (t *FuncTarget) Exited() <-chan struct{} { return t.exited }

// Env gives the plugin directory.
func (t *FuncTarget) Env() []string { return []string{EnvPluginDir + "=" + t.dir} }

// Output is empty: the plugin logs where it logs.
func (t *FuncTarget) Output() string { return "" }

func (t *FuncTarget) String() string { return t.Name }

// tailBuffer keeps the last tailSize bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

const tailSize = 4096

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Write(p)
	if over := b.buf.Len() - tailSize; over > 0 {
		b.buf.Next(over)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
