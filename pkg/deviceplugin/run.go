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

	ln     *net.UnixListener
	lnInfo os.FileInfo
	// owned is false when another process replaced our socket: we then
	// neither register nor touch the path until it is free again.
	owned bool
	// broken: the socket could not be created; retry with the backoff.
	broken bool

	backoff backoff
	delay   time.Duration
	// force: attempt at once, even with streams open (kubelet.sock was
	// created again, or we re-created our socket).
	force bool
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
	if r.direct {
		r.force = true
	}
	r.timer = time.NewTimer(time.Hour)
	defer r.timer.Stop()
	for {
		r.schedule(time.Now())
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-r.fsw.Events:
			if !ok {
				return errors.New("watching the socket directory: watcher closed")
			}
			r.handleEvent(ev)
		case err, ok := <-r.fsw.Errors:
			if !ok {
				return errors.New("watching the socket directory: watcher closed")
			}
			// An overflow may have hidden the removal of our socket or the
			// creation of kubelet.sock: check both.
			r.logger.Error(err, "Watching the socket directory; checking the socket and registering again")
			r.checkSocket()
			if r.direct {
				r.force = true
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

// handleEvent reacts to a change in the socket directory.
func (r *runner) handleEvent(ev fsnotify.Event) {
	switch {
	case ev.Name == r.path && ev.Has(fsnotify.Create|fsnotify.Remove|fsnotify.Rename):
		r.logger.V(4).Info("Socket event", "event", ev.String())
		r.checkSocket()
	case r.direct && filepath.Base(ev.Name) == KubeletSocketName && filepath.Dir(ev.Name) == r.dir && ev.Has(fsnotify.Create):
		r.logger.Info("Device manager's registration socket created; registering")
		r.force = true
	case filepath.Clean(ev.Name) == r.dir && ev.Has(fsnotify.Remove|fsnotify.Rename):
		r.logger.Error(nil, "Socket directory removed; re-creating it")
		r.broken = true
	}
}

// checkSocket re-creates our socket if it is gone. A socket we create while
// running is a registration signal: on the direct path we register at once;
// on the plugin watcher path the new socket is the announcement.
func (r *runner) checkSocket() {
	created, err := r.ensureSocket(false)
	if err != nil {
		r.logger.Error(err, "Re-creating the device plugin socket")
		r.broken = true
		return
	}
	if created {
		r.logger.Info("Re-created the device plugin socket")
		if r.direct {
			r.force = true
		}
	}
}

// ensureSocket makes our listener serve the socket path. With replace, any
// socket at the path is removed first (the start of Run); without it, a
// socket of another process means we yield (owned = false). It reports
// whether it created the socket.
func (r *runner) ensureSocket(replace bool) (bool, error) {
	fi, err := os.Lstat(r.path)
	switch {
	case err == nil && r.ln != nil && os.SameFile(fi, r.lnInfo):
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
		if err := os.Remove(r.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return false, fmt.Errorf("removing stale socket: %w", err)
		}
		r.logger.V(2).Info("Removed stale socket")
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
	r.serveWG.Add(1)
	go r.serve(ln)
	return true, nil
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
}

// drop closes our listener and removes the socket path if it still holds
// our socket.
func (r *runner) drop() {
	if r.ln == nil {
		return
	}
	if fi, err := os.Lstat(r.path); err == nil && os.SameFile(fi, r.lnInfo) {
		if err := os.Remove(r.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			r.logger.Error(err, "Removing the device plugin socket")
		}
	}
	r.retire()
}

// registrationState is what the loop reads of the plugin's shared state.
type registrationState struct {
	streams           int
	streamEnds        uint64
	registrations     int
	lastSuccess       time.Time
	successStreamEnds uint64
}

func (p *Plugin) registrationState() registrationState {
	p.mu.Lock()
	defer p.mu.Unlock()
	return registrationState{
		streams:           len(p.streams),
		streamEnds:        p.streamEnds,
		registrations:     p.registrations,
		lastSuccess:       p.lastSuccess,
		successStreamEnds: p.successStreamEnds,
	}
}

// evaluate says whether an attempt is needed now and, if not, when to look
// again (zero: only when something happens).
func (r *runner) evaluate(st registrationState, now time.Time) (need bool, recheck time.Time) {
	switch {
	case r.broken:
		return true, time.Time{}
	case !r.owned:
		return false, time.Time{}
	case r.force:
		return true, time.Time{}
	case st.streams > 0:
		return false, time.Time{}
	}
	// Registered, and no stream ended since: the manager is about to open
	// its stream. Give it streamWait.
	if st.registrations > 0 && st.successStreamEnds == st.streamEnds {
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
		r.seenRegistrations = st.registrations
		r.delay = r.backoff.initial
	}
	need, recheck := r.evaluate(st, now)
	var at time.Time
	switch {
	case need && r.force:
		r.nextAttempt = now
		at = now
	case need:
		if r.nextAttempt.IsZero() {
			r.nextAttempt = now.Add(r.delay)
		}
		at = r.nextAttempt
	default:
		r.nextAttempt = time.Time{}
		at = recheck
	}
	if at.IsZero() {
		r.timer.Stop()
		return
	}
	r.timer.Reset(max(at.Sub(now), 0))
}

// tick makes an attempt if one is due.
func (r *runner) tick(ctx context.Context, now time.Time) {
	need, _ := r.evaluate(r.p.registrationState(), now)
	if !need || r.nextAttempt.IsZero() || now.Before(r.nextAttempt) {
		return
	}
	forced := r.force
	r.force, r.nextAttempt = false, time.Time{}

	created, err := r.ensureSocket(false)
	if err != nil {
		r.logger.Error(err, "Re-creating the device plugin socket", "retryIn", r.delay)
		r.broken = true
		r.fail()
		return
	}
	if !r.owned {
		return
	}
	if !r.direct {
		if !created {
			r.announce()
		}
		// Whether the manager registers us is told by
		// NotifyRegistrationStatus; until then, back off.
		r.fail()
		return
	}
	if !forced {
		r.logger.Info("No device manager is watching the plugin; registering again")
	}
	r.registerDirect(ctx)
}

// fail advances the backoff.
func (r *runner) fail() {
	r.delay = min(2*r.delay, r.backoff.max)
}

// registerDirect calls Register on kubelet.sock and records the outcome.
func (r *runner) registerDirect(ctx context.Context) {
	err := r.register(ctx)
	switch {
	case err == nil:
		r.waiting = false
		r.p.recordSuccess(time.Now())
		r.logger.Info("Registered with the device manager")
	case errors.Is(err, fs.ErrNotExist):
		r.p.recordFailure(err)
		if !r.waiting {
			r.logger.Info("Waiting for the device manager's registration socket", "path", filepath.Join(r.cfg.SocketDir, KubeletSocketName))
		}
		r.waiting = true
		r.fail()
	default:
		r.p.recordFailure(err)
		r.logger.Error(err, "Registering with the device manager", "retryIn", r.delay)
		r.fail()
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
