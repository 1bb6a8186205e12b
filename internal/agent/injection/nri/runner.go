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

package nri

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	stdnet "net"
	"os"
	"sync"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
	"github.com/go-logr/logr"
	"k8s.io/utils/clock"
)

// Defaults of Options.
const (
	// DefaultSocketPath is containerd's and CRI-O's default NRI socket.
	DefaultSocketPath = api.DefaultSocketPath
	// PluginName is the name the agent registers under, which the required-plugins annotation
	// names.
	PluginName = "kubedevice"
	// DefaultPluginIndex orders the agent among the runtime's NRI plugins (00–99, lower first).
	DefaultPluginIndex = "10"
	// DefaultInitialRetryDelay and DefaultMaxRetryDelay bound the delay before connecting again:
	// doubling from the first after each failure, back to it after a connection that was
	// established.
	DefaultInitialRetryDelay = 250 * time.Millisecond
	DefaultMaxRetryDelay     = 5 * time.Second
	// DefaultRegistrationTimeout bounds one connection attempt: dial, registration and the
	// runtime's configuration of the plugin.
	DefaultRegistrationTimeout = 10 * time.Second
)

// State is the state of the connection to the runtime's NRI socket.
type State string

// The states of the connection.
const (
	// StateUnknown: no connection attempt has ended yet.
	StateUnknown State = ""
	// StateConnected: registered with the runtime; containers are adjusted at creation.
	StateConnected State = "Connected"
	// StateSocketMissing: no socket at the path; the runner keeps looking.
	StateSocketMissing State = "SocketMissing"
	// StateDisconnected: the connection failed or closed; the runner reconnects.
	StateDisconnected State = "Disconnected"
	// StateDisabled: runtime injection is off (--runtime-injection=none); no runner runs.
	StateDisabled State = "Disabled"
)

// Status is what the agent reports of runtime injection.
type Status struct {
	State State
	// SocketPath is the NRI socket the runner connects to.
	SocketPath string
	// Plugin is the plugin's registered name, index-name (10-kubedevice).
	Plugin string
}

// Options configure the NRI plugin and its connection.
type Options struct {
	// SocketPath is the runtime's NRI socket; empty means DefaultSocketPath.
	SocketPath string
	// PluginIndex is the plugin's two-digit index; empty means DefaultPluginIndex.
	PluginIndex string
	// InitialRetryDelay and MaxRetryDelay bound the reconnection delay; zero means the defaults.
	InitialRetryDelay, MaxRetryDelay time.Duration
	// RegistrationTimeout bounds a connection attempt; zero means the default.
	RegistrationTimeout time.Duration
	// HostRoot is where the host's device nodes are seen in the agent's container: a device's
	// host path is looked up under it. Empty when the agent sees the host's /dev (a privileged
	// container, or /dev mounted at /dev).
	HostRoot string
	// Clock times the reconnection delays; nil means the real clock.
	Clock clock.WithTicker
}

// Complete returns the options with the defaults filled in, or an error for invalid ones.
func (o Options) Complete() (Options, error) {
	if o.SocketPath == "" {
		o.SocketPath = DefaultSocketPath
	}
	if o.PluginIndex == "" {
		o.PluginIndex = DefaultPluginIndex
	}
	if err := api.CheckPluginIndex(o.PluginIndex); err != nil {
		return o, fmt.Errorf("checking the NRI plugin index: %w", err)
	}
	if o.InitialRetryDelay <= 0 {
		o.InitialRetryDelay = DefaultInitialRetryDelay
	}
	if o.MaxRetryDelay <= 0 {
		o.MaxRetryDelay = DefaultMaxRetryDelay
	}
	o.MaxRetryDelay = max(o.MaxRetryDelay, o.InitialRetryDelay)
	if o.RegistrationTimeout <= 0 {
		o.RegistrationTimeout = DefaultRegistrationTimeout
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	return o, nil
}

// AddFlags registers the NRI plugin's flags on flagSet, bound to o.
func (o *Options) AddFlags(flagSet *flag.FlagSet) {
	flagSet.StringVar(&o.SocketPath, "nri-socket", DefaultSocketPath,
		"The container runtime's NRI socket (--runtime-injection=nri).")
	flagSet.StringVar(&o.PluginIndex, "nri-plugin-index", DefaultPluginIndex,
		"Two-digit index of the agent's NRI plugin, registered as <index>-"+PluginName+"; the runtime calls plugins in index order.")
	flagSet.StringVar(&o.HostRoot, "nri-host-root", "",
		"Where the host's device nodes are seen in the agent's container: a device's host path (e.g. /dev/foo) is stat'ed as <root>/dev/foo for its type and numbers. Empty when the agent sees the host's /dev (privileged, or /dev mounted at /dev).")
}

// Runner keeps the agent's NRI plugin connected to the runtime: it connects, serves
// CreateContainer from the index while connected, and reconnects with backoff when the socket is
// missing or the connection fails or closes (a runtime restart closes it). It reports the state
// of the connection (Status, Changed, and the kubedevice_agent_nri_connected gauge).
type Runner struct {
	opts   Options
	plugin *plugin

	mu      sync.Mutex
	status  Status
	changed chan struct{}
}

// NewRunner returns a runner for the plugin that serves index and admits the containers whose
// plugin requires PreStartContainer by grants (nil: none requires it), asking pods about the pods
// the index has not recorded. opts must be completed.
func NewRunner(opts Options, index *Index, grants *Grants, pods PodChecker) *Runner {
	return &Runner{
		opts:    opts,
		plugin:  &plugin{name: PluginName, index: index, grants: grants, pods: pods, logger: logr.Discard()},
		status:  Status{State: StateUnknown, SocketPath: opts.SocketPath, Plugin: opts.PluginIndex + "-" + PluginName},
		changed: make(chan struct{}, 1),
	}
}

// Status returns the state of the connection.
func (r *Runner) Status() Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.status
}

// Changed receives after the state changed; changes that come while nobody receives are
// coalesced.
func (r *Runner) Changed() <-chan struct{} { return r.changed }

// Run connects and reconnects until ctx ends, then disconnects.
func (r *Runner) Run(ctx context.Context) {
	logger := logr.FromContextOrDiscard(ctx).WithValues("socket", r.opts.SocketPath, "plugin", r.status.Plugin)
	r.plugin.logger = logger.WithName("create-container")
	ctx = logr.NewContext(ctx, logger)
	delay := r.opts.InitialRetryDelay
	for {
		established := r.connect(ctx)
		if ctx.Err() != nil {
			return
		}
		if established {
			delay = r.opts.InitialRetryDelay
		}
		t := r.opts.Clock.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
		if !established {
			delay = min(2*delay, r.opts.MaxRetryDelay)
		}
	}
}

// connect makes one connection attempt and, when it succeeds, serves until the connection
// closes or ctx ends. It reports whether a connection was established.
func (r *Runner) connect(ctx context.Context) bool {
	logger := logr.FromContextOrDiscard(ctx)
	if _, err := os.Stat(r.opts.SocketPath); errors.Is(err, fs.ErrNotExist) {
		if r.setState(StateSocketMissing) {
			logger.Info("No NRI socket: containers are created without their devices until the container runtime serves one; pods that require the kubedevice plugin are held")
		}
		return false
	}

	closed := make(chan struct{})
	var closeOnce sync.Once
	var conn stdnet.Conn
	var connMu sync.Mutex
	st, err := stub.New(r.plugin,
		stub.WithPluginName(PluginName),
		stub.WithPluginIdx(r.opts.PluginIndex),
		stub.WithSocketPath(r.opts.SocketPath),
		stub.WithLogger(stubLogger{logger: logger.WithName("stub")}),
		stub.WithOnClose(func() { closeOnce.Do(func() { close(closed) }) }),
		stub.WithDialer(func(path string) (stdnet.Conn, error) {
			c, err := (&stdnet.Dialer{Timeout: r.opts.RegistrationTimeout}).DialContext(ctx, "unix", path)
			connMu.Lock()
			conn = c
			connMu.Unlock()
			return c, err
		}),
	)
	if err != nil {
		// Only invalid options fail here, and Complete checked them.
		r.disconnected(logger, fmt.Errorf("creating the NRI plugin: %w", err))
		return false
	}
	closeConn := func() {
		connMu.Lock()
		defer connMu.Unlock()
		if conn != nil {
			_ = conn.Close()
		}
	}
	if !r.register(ctx, logger, st, closed, closeConn) {
		return false
	}
	if r.setState(StateConnected) {
		logger.Info("Connected to the container runtime's NRI socket: containers get their devices at creation")
	}
	select {
	case <-closed:
		r.disconnected(logger, errors.New("the runtime closed the NRI connection"))
	case <-ctx.Done():
		st.Stop()
	}
	return true
}

// register starts st and waits, at most the registration timeout, for the runtime to register
// and configure it; it reports whether the runtime did. closed is closed when the runtime closes
// the connection; closeConn closes the connection dialled.
func (r *Runner) register(ctx context.Context, logger logr.Logger, st stub.Stub, closed <-chan struct{}, closeConn func()) bool {
	started := make(chan error, 1)
	go func() { started <- st.Start(ctx) }()
	timer := r.opts.Clock.NewTimer(r.opts.RegistrationTimeout)
	defer timer.Stop()
	select {
	case err := <-started:
		if err != nil {
			r.disconnected(logger, fmt.Errorf("registering with the NRI socket: %w", err))
		}
		return err == nil
	case <-closed:
		r.disconnected(logger, errors.New("registering with the NRI socket: the runtime closed the connection"))
	case <-timer.C():
		r.disconnected(logger, fmt.Errorf("registering with the NRI socket: no answer within %s", r.opts.RegistrationTimeout))
		// Closing the connection ends a registration in progress. The stub waits for the
		// runtime's configuration without a deadline: if the runtime never sends it, that
		// goroutine stays, with a closed connection.
		closeConn()
	case <-ctx.Done():
		closeConn()
	}
	return false
}

// disconnected records a failed or closed connection; it logs the first of a series at Info and
// the rest at V(1), so a runtime that stays away does not flood the log.
func (r *Runner) disconnected(logger logr.Logger, err error) {
	if r.setState(StateDisconnected) {
		logger.Info("Not connected to the NRI socket: containers are created without their devices until the agent reconnects; pods that require the kubedevice plugin are held", "err", err.Error())
		return
	}
	logger.V(1).Info("Connecting to the NRI socket failed; retrying", "err", err.Error())
}

// setState records the state and reports whether it changed.
func (r *Runner) setState(s State) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.status.State == s {
		return false
	}
	r.status.State = s
	if s == StateConnected {
		connectedGauge.Set(1)
	} else {
		connectedGauge.Set(0)
	}
	select {
	case r.changed <- struct{}{}:
	default:
	}
	return true
}

// stubLogger passes the NRI stub's messages to the agent's logger: its informational messages
// (registration, configuration) at V(1), its debug messages at V(4).
type stubLogger struct{ logger logr.Logger }

func (l stubLogger) Debugf(_ context.Context, format string, args ...any) {
	l.logger.V(4).Info("NRI stub", "message", fmt.Sprintf(format, args...))
}

func (l stubLogger) Infof(_ context.Context, format string, args ...any) {
	l.logger.V(1).Info("NRI stub", "message", fmt.Sprintf(format, args...))
}

func (l stubLogger) Warnf(_ context.Context, format string, args ...any) {
	l.logger.Info("NRI stub warning", "message", fmt.Sprintf(format, args...))
}

func (l stubLogger) Errorf(_ context.Context, format string, args ...any) {
	l.logger.Info("NRI stub error", "message", fmt.Sprintf(format, args...))
}
