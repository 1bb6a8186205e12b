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

package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/klog/v2"
	"k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

const (
	// registerTimeout bounds one Register call on kubelet.sock. The manager
	// dials the plugin back (10 s in the kubelet) and asks for its options
	// before it answers.
	registerTimeout = 30 * time.Second
	// streamWait is how long after a successful registration the plugin
	// waits for the manager's ListAndWatch stream before registering again.
	streamWait = 10 * time.Second
	// gracefulStopTimeout bounds how long Stop waits for RPCs in flight.
	gracefulStopTimeout = 5 * time.Second
	// socketMode lets only the plugin's user (and root, as which the kubelet
	// and the kubedevice agent dial) connect.
	socketMode = 0o600
	// dirMode is used when the plugin has to create its socket directory;
	// the kubelet creates its own with the same mode.
	dirMode = 0o750
	// recreateDelay is how long the plugin waits before re-creating its
	// socket after it was removed. A newer instance of the plugin removes the
	// socket and creates its own right away; the pause lets it, so the older
	// instance sees the path taken and yields instead of racing it.
	recreateDelay = 200 * time.Millisecond
	// listenAttempts bounds how often ensureSocket tries again when the path
	// was taken between its check and its listen.
	listenAttempts = 5
	// listenDelay is how long after kubelet.sock appears the plugin
	// registers: a socket file exists from bind, before the manager listens,
	// and a Register sent in between is refused.
	listenDelay = 20 * time.Millisecond
)

// backoff paces registration attempts: initial after the first failure,
// doubling up to max. The plugin watcher path starts slower, because the
// kubelet's plugin manager takes up to a second to act on a new socket and
// every attempt re-creates the socket.
type backoff struct{ initial, max time.Duration }

var (
	directBackoff  = backoff{initial: 250 * time.Millisecond, max: 30 * time.Second}
	watcherBackoff = backoff{initial: 5 * time.Second, max: time.Minute}
)

// runner is one Run of a Plugin. Everything in it is owned by the run loop's
// goroutine, except what the serving goroutines use (grpc, serveErrs, quit).
type runner struct {
	p      *Plugin
	cfg    Config
	logger klog.Logger
	path   string // the plugin's socket
	dir    string // the directory the socket is in, watched
	direct bool

	grpc      *grpc.Server
	fsw       *fsnotify.Watcher
	quit      chan struct{} // closed at shutdown: streams end
	serveErrs chan serveResult
	serveWG   sync.WaitGroup

	// ln serves our socket, whose file lnInfo describes; nil while we have
	// no socket in place.
	ln     *net.UnixListener
	lnInfo os.FileInfo
	// ownRemovals counts the removals of the socket path we made and have
	// not seen the event of yet; any other removal is another process's.
	ownRemovals int
	// owned is false when another process replaced our socket: we then
	// neither register nor touch the path until it is free again.
	owned bool
	// broken: the socket could not be created; retry with the backoff.
	broken bool
	// recheckSocket is when to look at a removed socket again; zero when
	// no check is due.
	recheckSocket time.Time

	backoff backoff
	delay   time.Duration
	// required: register even though streams are open (kubelet.sock was
	// created again, or we re-created our socket); cleared by a success.
	required bool
	// nextAttempt is when the next attempt is due; zero when none is.
	nextAttempt time.Time
	// seenRegistrations is Plugin.registrations as the loop last saw it.
	seenRegistrations int
	// waiting is set while kubelet.sock is missing, to log that once.
	waiting bool
	timer   *time.Timer
}

type serveResult struct {
	ln  *net.UnixListener
	err error
}

func newRunner(ctx context.Context, p *Plugin) *runner {
	r := &runner{
		p:         p,
		cfg:       p.cfg,
		path:      p.cfg.socketPath(),
		direct:    p.cfg.Registration == RegistrationDirect,
		quit:      make(chan struct{}),
		serveErrs: make(chan serveResult),
		backoff:   directBackoff,
	}
	r.dir = filepath.Dir(r.path)
	if !r.direct {
		r.backoff = watcherBackoff
	}
	r.delay = r.backoff.initial
	r.logger = klog.FromContext(ctx).WithName("deviceplugin").WithValues("resourceName", p.cfg.ResourceName, "socketPath", r.path)
	return r
}

// run serves and registers until ctx ends.
func (r *runner) run(ctx context.Context) error {
	ctx = klog.NewContext(ctx, r.logger)
	defer r.shutdown()
	if err := r.start(); err != nil {
		return err
	}
	r.logger.Info("Serving device plugin", "registration", r.cfg.Registration, "options", r.p.Options())
	now := time.Now()
	if r.direct {
		r.require(now)
	} else {
		// The new socket is the announcement.
		r.p.markAttempt()
	}
	r.timer = time.NewTimer(time.Hour)
	defer r.timer.Stop()
	for {
		r.schedule(now)
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-r.fsw.Events:
			if !ok {
				return errors.New("watching the socket directory: watcher closed")
			}
			r.handleEvent(ev, time.Now())
		case err, ok := <-r.fsw.Errors:
			if !ok {
				return errors.New("watching the socket directory: watcher closed")
			}
			// An overflow may have hidden the removal of our socket or the
			// creation of kubelet.sock: check both.
			r.logger.Error(err, "Watching the socket directory; checking the socket and registering again")
			r.checkSocket(time.Now())
			if r.direct {
				r.require(time.Now())
			}
		case res := <-r.serveErrs:
			if res.ln == r.ln {
				r.logger.Error(res.err, "Serving the device plugin socket failed; re-creating it")
				r.drop()
				r.broken = true
			}
		case <-r.p.changed:
			// Streams or registration status changed: schedule decides.
		case <-r.timer.C:
			r.tick(ctx, time.Now())
		}
		now = time.Now()
	}
}

// start serves the socket, replacing a stale one, and watches its directory.
func (r *runner) start() error {
	r.grpc = grpc.NewServer(withLogger(r.logger)...)
	v1beta1.RegisterDevicePluginServer(r.grpc, &devicePluginService{p: r.p, quit: r.quit})
	if !r.direct {
		registerapi.RegisterRegistrationServer(r.grpc, &registrationService{p: r.p})
	}
	if err := os.MkdirAll(r.dir, dirMode); err != nil {
		return fmt.Errorf("creating socket directory: %w", err)
	}
	fsw, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("creating socket directory watcher: %w", err)
	}
	r.fsw = fsw
	if err := fsw.Add(r.dir); err != nil {
		return fmt.Errorf("watching socket directory: %w", err)
	}
	if _, err := r.ensureSocket(true); err != nil {
		return err
	}
	return nil
}

// require asks for a registration at the given time, even with streams
// open, and resets the backoff.
func (r *runner) require(at time.Time) {
	r.required = true
	r.delay = r.backoff.initial
	r.nextAttempt = at
}

// handleEvent reacts to a change in the socket directory.
func (r *runner) handleEvent(ev fsnotify.Event, now time.Time) {
	switch {
	case ev.Name == r.path && ev.Has(fsnotify.Remove|fsnotify.Rename):
		r.logger.V(4).Info("Socket event", "event", ev.String())
		if r.ownRemovals > 0 {
			r.ownRemovals--
			return
		}
		// inotify names paths, not files: when the socket we serve is at the path, the event is
		// about an earlier one (removed by a manager cleaning up before we re-created ours, and
		// read only now). Closing our listener would leave a dead socket behind.
		if fi, err := os.Lstat(r.path); err == nil && r.ln != nil && sameSocket(fi, r.lnInfo) {
			return
		}
		// Someone else removed our socket: a manager cleaning stale
		// sockets as it starts, or a newer instance of this plugin taking
		// the path over. Look again shortly, and re-create it if the path
		// is still free.
		if r.ln != nil {
			r.logger.Info("Device plugin socket removed by another process")
			r.retire()
		}
		if r.recheckSocket.IsZero() {
			r.recheckSocket = now.Add(recreateDelay)
		}
	case ev.Name == r.path && ev.Has(fsnotify.Create):
		r.logger.V(4).Info("Socket event", "event", ev.String())
		r.checkSocket(now)
	case r.direct && filepath.Base(ev.Name) == KubeletSocketName && filepath.Dir(ev.Name) == r.dir && ev.Has(fsnotify.Create):
		r.logger.Info("Device manager's registration socket created; registering")
		// The socket is created when it is bound; give the manager the
		// moment it needs to listen on it.
		r.require(now.Add(listenDelay))
	case filepath.Clean(ev.Name) == r.dir && ev.Has(fsnotify.Remove|fsnotify.Rename):
		r.logger.Error(nil, "Socket directory removed; re-creating it")
		r.retire()
		r.broken = true
	}
}

// checkSocket re-creates our socket if the path is free. A socket we create
// while running is a registration signal: on the direct path we register at
// once; on the plugin watcher path the new socket is the announcement.
func (r *runner) checkSocket(now time.Time) {
	created, err := r.ensureSocket(false)
	if err != nil {
		r.logger.Error(err, "Re-creating the device plugin socket")
		r.broken = true
		return
	}
	if !created {
		return
	}
	r.logger.Info("Re-created the device plugin socket")
	if r.direct {
		r.require(now)
	} else {
		r.p.markAttempt()
	}
}

// ensureSocket makes our listener serve the socket path. With replace, any
// socket at the path is removed first (the start of Run); without it, a
// socket of another process means we yield (owned = false). It reports
// whether it created the socket.
func (r *runner) ensureSocket(replace bool) (bool, error) {
	for attempt := 1; ; attempt++ {
		created, err := r.ensureSocketOnce(replace)
		if errors.Is(err, syscall.EADDRINUSE) && attempt < listenAttempts {
			// Another process created a socket since we looked.
			continue
		}
		r.p.setServing(r.ln != nil)
		return created, err
	}
}

func (r *runner) ensureSocketOnce(replace bool) (bool, error) {
	fi, err := os.Lstat(r.path)
	switch {
	case err == nil && r.ln != nil && sameSocket(fi, r.lnInfo):
		r.owned, r.broken = true, false
		return false, nil
	case err == nil && fi.Mode()&os.ModeSocket != 0 && !replace:
		if r.owned {
			r.logger.Info("Another process took over the device plugin socket; not registering until the path is free again")
		}
		r.retire()
		r.owned, r.broken = false, false
		return false, nil
	case err == nil && fi.Mode()&os.ModeSocket != 0:
		switch err := os.Remove(r.path); {
		case err == nil:
			r.ownRemovals++
			r.logger.V(2).Info("Removed stale socket")
		case !errors.Is(err, fs.ErrNotExist):
			return false, fmt.Errorf("removing stale socket: %w", err)
		}
	case err == nil:
		return false, fmt.Errorf("checking socket path: %s exists and is not a socket", r.path)
	case !errors.Is(err, fs.ErrNotExist):
		return false, fmt.Errorf("checking socket path: %w", err)
	}

	if err := os.MkdirAll(r.dir, dirMode); err != nil {
		return false, fmt.Errorf("creating socket directory: %w", err)
	}
	// A no-op if the directory is watched; after it was removed and created
	// again this restores the watch.
	if err := r.fsw.Add(r.dir); err != nil {
		return false, fmt.Errorf("watching socket directory: %w", err)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: r.path, Net: "unix"})
	if err != nil {
		return false, fmt.Errorf("listening on socket: %w", err)
	}
	// Never unlink on close: by then the path may hold a successor's socket.
	ln.SetUnlinkOnClose(false)
	if err := os.Chmod(r.path, socketMode); err != nil {
		ln.Close()
		return false, fmt.Errorf("setting socket permissions: %w", err)
	}
	info, err := os.Lstat(r.path)
	if err != nil {
		ln.Close()
		return false, fmt.Errorf("checking socket path: %w", err)
	}
	r.retire()
	r.ln, r.lnInfo = ln, info
	r.owned, r.broken = true, false
	r.recheckSocket = time.Time{}
	r.serveWG.Add(1)
	go r.serve(ln)
	return true, nil
}

// sameSocket tells whether two file infos describe the same socket file. An
// inode number is reused as soon as a file is removed, so the modification
// time (the socket's creation) must match too.
func sameSocket(a, b os.FileInfo) bool {
	return os.SameFile(a, b) && a.ModTime().Equal(b.ModTime())
}

func (r *runner) serve(ln *net.UnixListener) {
	defer r.serveWG.Done()
	err := r.grpc.Serve(ln)
	select {
	case r.serveErrs <- serveResult{ln: ln, err: err}:
	case <-r.quit:
	}
}

// retire closes our listener, leaving the path alone. Accepted connections,
// such as open ListAndWatch streams, stay.
func (r *runner) retire() {
	if r.ln == nil {
		return
	}
	r.ln.Close()
	r.ln, r.lnInfo = nil, nil
	r.p.setServing(false)
}

// drop closes our listener and removes the socket path if it still holds
// our socket.
func (r *runner) drop() {
	if r.ln == nil {
		return
	}
	if fi, err := os.Lstat(r.path); err == nil && sameSocket(fi, r.lnInfo) {
		switch err := os.Remove(r.path); {
		case err == nil:
			r.ownRemovals++
		case !errors.Is(err, fs.ErrNotExist):
			r.logger.Error(err, "Removing the device plugin socket")
		}
	}
	r.retire()
}

// registrationState is what the loop reads of the plugin's shared state.
type registrationState struct {
	streams       int
	marks         streamMarks
	successMarks  streamMarks
	registrations int
	lastSuccess   time.Time
}

func (p *Plugin) registrationState() registrationState {
	p.mu.Lock()
	defer p.mu.Unlock()
	return registrationState{
		streams:       len(p.streams),
		marks:         p.streamMarks,
		successMarks:  p.successMarks,
		registrations: p.registrations,
		lastSuccess:   p.lastSuccess,
	}
}

// evaluate says whether a registration attempt is needed and, if not, when
// to look again (zero: only when something happens).
func (r *runner) evaluate(st registrationState, now time.Time) (need bool, recheck time.Time) {
	switch {
	case r.broken:
		return true, time.Time{}
	case !r.owned:
		return false, time.Time{}
	case r.required:
		return true, time.Time{}
	case st.streams > 0:
		return false, time.Time{}
	}
	// Registered, and no stream opened or ended since that attempt began:
	// the manager is about to open its stream. Give it streamWait.
	if st.registrations > 0 && st.marks == st.successMarks {
		if deadline := st.lastSuccess.Add(streamWait); now.Before(deadline) {
			return false, deadline
		}
	}
	return true, time.Time{}
}

// schedule arms the timer for the next attempt or check.
func (r *runner) schedule(now time.Time) {
	st := r.p.registrationState()
	if st.registrations != r.seenRegistrations {
		// A success, possibly told by NotifyRegistrationStatus.
		r.seenRegistrations = st.registrations
		r.delay = r.backoff.initial
		if !r.direct {
			r.nextAttempt = time.Time{}
		}
	}
	need, at := r.evaluate(st, now)
	if need {
		if r.nextAttempt.IsZero() {
			r.nextAttempt = now.Add(r.delay)
		}
		at = r.nextAttempt
	} else {
		r.nextAttempt = time.Time{}
	}
	if !r.recheckSocket.IsZero() && (at.IsZero() || r.recheckSocket.Before(at)) {
		at = r.recheckSocket
	}
	if at.IsZero() {
		r.timer.Stop()
		return
	}
	r.timer.Reset(max(at.Sub(now), 0))
}

// tick re-creates a removed socket and makes an attempt, if either is due.
func (r *runner) tick(ctx context.Context, now time.Time) {
	if !r.recheckSocket.IsZero() && !now.Before(r.recheckSocket) {
		r.recheckSocket = time.Time{}
		r.checkSocket(now)
	}
	need, _ := r.evaluate(r.p.registrationState(), now)
	if !need || r.nextAttempt.IsZero() || now.Before(r.nextAttempt) {
		return
	}
	r.nextAttempt = time.Time{}

	created, err := r.ensureSocket(false)
	if err != nil {
		r.logger.Error(err, "Re-creating the device plugin socket", "retryIn", r.delay)
		r.broken = true
		r.fail(time.Now())
		return
	}
	if !r.owned {
		return
	}
	if !r.direct {
		if !created {
			r.announce()
		} else {
			r.p.markAttempt()
		}
		// Whether the manager registers us is told by
		// NotifyRegistrationStatus; until then, back off.
		r.fail(time.Now())
		return
	}
	if !r.required {
		r.logger.Info("No device manager is watching the plugin; registering again")
	}
	r.registerDirect(ctx)
}

// fail schedules the next attempt after the current backoff delay and
// doubles the delay.
func (r *runner) fail(now time.Time) {
	r.nextAttempt = now.Add(r.delay)
	r.delay = min(2*r.delay, r.backoff.max)
}

// registerDirect calls Register on kubelet.sock and records the outcome.
func (r *runner) registerDirect(ctx context.Context) {
	r.p.markAttempt()
	err := r.register(ctx)
	switch {
	case err == nil:
		r.waiting, r.required = false, false
		r.p.recordSuccess(time.Now())
		r.logger.Info("Registered with the device manager")
	case errors.Is(err, fs.ErrNotExist):
		r.p.recordFailure(err)
		if !r.waiting {
			r.logger.Info("Waiting for the device manager's registration socket", "path", filepath.Join(r.cfg.SocketDir, KubeletSocketName))
		}
		r.waiting = true
		r.fail(time.Now())
	default:
		r.p.recordFailure(err)
		r.logger.Error(err, "Registering with the device manager", "retryIn", r.delay)
		r.fail(time.Now())
	}
}

// register calls Register on kubelet.sock, bounded by registerTimeout.
func (r *runner) register(ctx context.Context) error {
	sock := filepath.Join(r.cfg.SocketDir, KubeletSocketName)
	if _, err := os.Stat(sock); err != nil {
		return fmt.Errorf("checking the device manager's registration socket: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, registerTimeout)
	defer cancel()
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("creating registration client: %w", err)
	}
	defer conn.Close()
	_, err = v1beta1.NewRegistrationClient(conn).Register(ctx, &v1beta1.RegisterRequest{
		Version:      v1beta1.Version,
		Endpoint:     r.cfg.SocketName,
		ResourceName: r.cfg.ResourceName,
		Options:      r.p.Options(),
	})
	if err != nil {
		return fmt.Errorf("registering with %s: %w", sock, err)
	}
	return nil
}

// announce re-creates our socket in the plugins registry, which the plugin
// watcher takes as a new plugin.
func (r *runner) announce() {
	r.drop()
	if _, err := r.ensureSocket(false); err != nil {
		r.logger.Error(err, "Re-creating the device plugin socket", "retryIn", r.delay)
		r.broken = true
		return
	}
	r.p.markAttempt()
	r.logger.Info("No device manager is watching the plugin; announced it again in the plugins registry")
}

// shutdown ends the streams, stops serving and removes our socket.
func (r *runner) shutdown() {
	close(r.quit)
	if r.grpc != nil {
		stopped := make(chan struct{})
		go func() {
			r.grpc.GracefulStop()
			close(stopped)
		}()
		select {
		case <-stopped:
		case <-time.After(gracefulStopTimeout):
			r.logger.Info("RPCs still running after the graceful stop timeout; stopping now", "timeout", gracefulStopTimeout)
			r.grpc.Stop()
			<-stopped
		}
	}
	r.drop()
	if r.fsw != nil {
		r.fsw.Close()
	}
	r.serveWG.Wait()
	r.logger.Info("Stopped device plugin")
}
