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

package registration

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// socketRetryInterval is how long the server waits before trying again to
// re-create a socket it could not create.
const socketRetryInterval = time.Second

var (
	errServerStopped = errors.New("device plugin registration server is stopped")
	errSuperseded    = errors.New("superseded by a newer registration of the same device plugin socket")
)

// Config configures a Server.
type Config struct {
	// PluginDir holds the registration socket and the plugins' sockets. It
	// must be absolute. It is created with mode 0750.
	PluginDir string
	// PluginsRegistryDir is the pluginwatcher directory; empty disables the
	// pluginwatcher path.
	PluginsRegistryDir string
	// Handler receives the plugins' lifecycle. Required.
	Handler Handler
	// OnRegistration, if set, is called with the resource name of every
	// registration attempt on either path, before any validation (the
	// kubelet's registration counter).
	OnRegistration func(resourceName string)
	// DialTimeout bounds dialing a plugin. Defaults to DefaultDialTimeout.
	DialTimeout time.Duration
	// MaxResources bounds the resources connected at once; defaults to
	// DefaultMaxResources.
	MaxResources int
	// MaxEndpoints bounds the plugin connections at once, over all
	// resources; defaults to DefaultMaxEndpoints.
	MaxEndpoints int
	// RegistrationRate and RegistrationBurst bound registration attempts on
	// both paths (a token bucket); default DefaultRegistrationRate and
	// DefaultRegistrationBurst.
	RegistrationRate  rate.Limit
	RegistrationBurst int
}

// Server is the registration side of the node agent: the v1beta1
// Registration service on <PluginDir>/kubelet.sock, the pluginwatcher, and
// the set of connected plugin clients.
type Server struct {
	cfg        Config
	socketPath string
	nextID     atomic.Uint64
	limiter    *rate.Limiter

	mu      sync.Mutex
	started bool
	stopped bool
	clients map[ClientID]*client
	health  error // nil when serving; see Check

	// lifecycle serializes Start and Stop.
	lifecycle sync.Mutex
	stopOnce  sync.Once
	ctx       context.Context // cancelled by Stop
	cancel    context.CancelFunc
	grpc      *grpc.Server
	fsw       *fsnotify.Watcher
	watcher   *watcher

	// Owned by the socket supervisor goroutine once Start returns.
	ln     *net.UnixListener
	lnInfo os.FileInfo

	serveErrs      chan serveResult
	supervising    bool // the supervisor goroutine was started
	supervisorDone chan struct{}
	serveWG        sync.WaitGroup // serving goroutines
	runWG          sync.WaitGroup // clients' ListAndWatch goroutines
}

type serveResult struct {
	ln  *net.UnixListener
	err error
}

// NewServer validates cfg and returns a server that is not started.
func NewServer(cfg Config) (*Server, error) {
	if cfg.PluginDir == "" || !filepath.IsAbs(cfg.PluginDir) {
		return nil, fmt.Errorf(errBadSocket, filepath.Join(cfg.PluginDir, SocketName))
	}
	if cfg.PluginsRegistryDir != "" && !filepath.IsAbs(cfg.PluginsRegistryDir) {
		return nil, fmt.Errorf("plugins registry directory %q must be an absolute path", cfg.PluginsRegistryDir)
	}
	if cfg.Handler == nil {
		return nil, errors.New("a registration Handler is required")
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	if cfg.MaxResources <= 0 {
		cfg.MaxResources = DefaultMaxResources
	}
	if cfg.MaxEndpoints <= 0 {
		cfg.MaxEndpoints = DefaultMaxEndpoints
	}
	if cfg.RegistrationRate <= 0 {
		cfg.RegistrationRate = DefaultRegistrationRate
	}
	if cfg.RegistrationBurst <= 0 {
		cfg.RegistrationBurst = DefaultRegistrationBurst
	}
	return &Server{
		cfg:            cfg,
		limiter:        rate.NewLimiter(cfg.RegistrationRate, cfg.RegistrationBurst),
		socketPath:     filepath.Join(cfg.PluginDir, SocketName),
		clients:        make(map[ClientID]*client),
		health:         errors.New(errServerUnhealthy + ": not started"),
		serveErrs:      make(chan serveResult),
		supervisorDone: make(chan struct{}),
	}, nil
}

// SocketPath is the registration socket, <PluginDir>/kubelet.sock.
func (s *Server) SocketPath() string { return s.socketPath }

// Name names the health check, as the kubelet's.
func (s *Server) Name() string { return "device-plugin" }

// Check is the health check: nil while the registration socket is served
// (and after Stop: a stopping agent is not unhealthy, as in the kubelet),
// an error before Start and while the socket cannot be served.
func (s *Server) Check() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.health
}

func (s *Server) setHealth(err error) {
	if err != nil {
		err = fmt.Errorf(errServerUnhealthy+": %w", err)
	}
	s.mu.Lock()
	s.health = err
	s.mu.Unlock()
}

// Start creates the plugin directory, removes stale sockets from it, serves
// the registration socket, keeps it alive, and starts the pluginwatcher.
// ctx supplies the logger; the server runs until Stop.
func (s *Server) Start(ctx context.Context) error {
	s.lifecycle.Lock()
	defer s.lifecycle.Unlock()
	s.mu.Lock()
	if s.started || s.stopped {
		s.mu.Unlock()
		return errors.New("device plugin registration server can only be started once")
	}
	s.started = true
	s.mu.Unlock()

	logger := klog.FromContext(ctx).WithName("registration")
	s.ctx, s.cancel = context.WithCancel(klog.NewContext(context.WithoutCancel(ctx), logger))
	logger.V(2).Info("Starting device plugin registration server", "version", pluginapi.Version, "socketPath", s.socketPath)

	if err := s.start(); err != nil {
		s.stop()
		return err
	}
	return nil
}

func (s *Server) start() error {
	logger := klog.FromContext(s.ctx)
	dir := s.cfg.PluginDir
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("creating device plugin directory: %w", err)
	}
	if err := removeStaleSockets(logger, dir); err != nil {
		return err
	}

	fsw, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("creating watcher for the device plugin directory: %w", err)
	}
	s.fsw = fsw
	if err := fsw.Add(dir); err != nil {
		return fmt.Errorf("watching device plugin directory: %w", err)
	}

	s.grpc = grpc.NewServer(grpc.WaitForHandlers(true))
	pluginapi.RegisterRegistrationServer(s.grpc, &registrationService{s: s})
	if err := s.ensureSocket(); err != nil {
		return err
	}
	s.setHealth(nil)
	s.supervising = true
	go s.superviseSocket()

	if s.cfg.PluginsRegistryDir != "" {
		s.watcher = newWatcher(s, s.cfg.PluginsRegistryDir)
		if err := s.watcher.start(); err != nil {
			return err
		}
	}
	return nil
}

// Stop disconnects every plugin and stops serving. It is idempotent and safe
// without Start. Every connected plugin gets its PluginDisconnected before
// Stop returns.
func (s *Server) Stop() {
	s.lifecycle.Lock()
	defer s.lifecycle.Unlock()
	s.stop()
}

func (s *Server) stop() {
	s.stopOnce.Do(func() {
		s.mu.Lock()
		s.stopped = true
		started := s.started
		s.mu.Unlock()
		if !started {
			s.setHealth(nil)
			return
		}
		logger := klog.FromContext(s.ctx)
		// Cancelling aborts dials in progress and ends the socket supervisor.
		s.cancel()
		if s.supervising {
			<-s.supervisorDone
		}
		if s.fsw != nil {
			s.fsw.Close()
		}
		if s.watcher != nil {
			s.watcher.stop()
		}
		if s.grpc != nil {
			// Waits for Register handlers, so no client is added after this.
			s.grpc.Stop()
		}
		s.serveWG.Wait()
		// The listener does not unlink its path (ListenUnix); remove the
		// socket if it is still ours.
		if s.lnInfo != nil {
			if fi, err := os.Lstat(s.socketPath); err == nil && isOurSocket(fi, s.lnInfo) {
				_ = os.Remove(s.socketPath)
			}
		}

		s.mu.Lock()
		clients := make([]*client, 0, len(s.clients))
		for _, c := range s.clients {
			clients = append(clients, c)
		}
		s.mu.Unlock()
		for _, c := range clients {
			c.close()
		}
		s.runWG.Wait()
		s.setHealth(nil)
		logger.V(2).Info("Stopped device plugin registration server")
	})
}

// removeStaleSockets removes the sockets left in dir by a previous run, and
// nothing else: not the checkpoint, not directories, not symlinks.
func removeStaleSockets(logger klog.Logger, dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("reading device plugin directory: %w", err)
	}
	var errs []error
	for _, e := range entries {
		if e.Type()&os.ModeSocket == 0 {
			continue
		}
		path := filepath.Join(dir, e.Name())
		if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
			errs = append(errs, fmt.Errorf("removing stale socket: %w", err))
			continue
		}
		logger.V(2).Info("Removed stale socket", "path", path)
	}
	return errors.Join(errs...)
}

// superviseSocket keeps the registration socket in place: it re-creates it
// when it is removed or renamed, when the directory itself is removed, and
// when serving it fails.
func (s *Server) superviseSocket() {
	defer close(s.supervisorDone)
	logger := klog.FromContext(s.ctx)
	var retry <-chan time.Time
	check := func() {
		if err := s.ensureSocket(); err != nil {
			logger.Error(err, "Failed to re-create the registration socket")
			s.setHealth(err)
			retry = time.After(socketRetryInterval)
			return
		}
		retry = nil
		s.setHealth(nil)
	}
	for {
		select {
		case <-s.ctx.Done():
			return
		case ev, ok := <-s.fsw.Events:
			if !ok {
				return
			}
			if (ev.Name == s.socketPath || filepath.Clean(ev.Name) == filepath.Clean(s.cfg.PluginDir)) &&
				ev.Has(fsnotify.Remove|fsnotify.Rename|fsnotify.Create) {
				logger.V(4).Info("Registration socket event", "event", ev.String())
				check()
			}
		case err, ok := <-s.fsw.Errors:
			if !ok {
				return
			}
			// An overflow may have hidden the removal of our socket.
			logger.Error(err, "Watching the device plugin directory")
			check()
		case res := <-s.serveErrs:
			if res.ln == s.ln && res.err != nil {
				logger.Error(res.err, "Error while serving device plugin registration gRPC server")
				s.retireListener()
				check()
			}
		case <-retry:
			check()
		}
	}
}

// ensureSocket makes sure our listener is bound to the socket path, creating
// the directory and the socket when they are missing. A foreign socket at our
// path is replaced; anything else at our path is an error.
func (s *Server) ensureSocket() error {
	dir := s.cfg.PluginDir
	fi, err := os.Lstat(s.socketPath)
	switch {
	case err == nil && s.ln != nil && isOurSocket(fi, s.lnInfo):
		return nil
	case err == nil && fi.Mode()&os.ModeSocket != 0:
		if err := os.Remove(s.socketPath); err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("removing foreign socket at %s: %w", s.socketPath, err)
		}
	case err == nil:
		return fmt.Errorf("%s exists and is not a socket", s.socketPath)
	case !os.IsNotExist(err):
		return fmt.Errorf("checking registration socket: %w", err)
	}

	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("creating device plugin directory: %w", err)
	}
	// Adding an existing watch is a no-op; after the directory was removed
	// the old watch is gone and this restores it.
	if err := s.fsw.Add(dir); err != nil {
		return fmt.Errorf("watching device plugin directory: %w", err)
	}
	ln, err := ListenUnix(s.socketPath, SocketMode)
	if err != nil {
		return fmt.Errorf("listening on registration socket: %w", err)
	}
	info, err := os.Lstat(s.socketPath)
	if err != nil {
		ln.Close()
		return fmt.Errorf("checking registration socket: %w", err)
	}
	s.retireListener()
	s.ln, s.lnInfo = ln, info
	klog.FromContext(s.ctx).V(2).Info("Serving registration socket", "socketPath", s.socketPath)
	s.serveWG.Add(1)
	go s.serve(ln)
	return nil
}

// isOurSocket reports whether fi is the socket our listener created. The
// inode alone is not enough: the kernel reuses the number of a deleted file at
// once, so a socket someone else bound after removing ours may carry it. The
// modification time, set when the socket was bound, tells them apart.
func isOurSocket(fi, ours os.FileInfo) bool {
	return os.SameFile(fi, ours) && fi.ModTime().Equal(ours.ModTime())
}

// retireListener closes the current listener without unlinking the path,
// which may already hold its successor.
func (s *Server) retireListener() {
	if s.ln == nil {
		return
	}
	s.ln.SetUnlinkOnClose(false)
	s.ln.Close()
	s.ln, s.lnInfo = nil, nil
}

func (s *Server) serve(ln *net.UnixListener) {
	defer s.serveWG.Done()
	err := s.grpc.Serve(ln)
	select {
	case s.serveErrs <- serveResult{ln: ln, err: err}:
	case <-s.ctx.Done():
	}
}

// registrationService adapts Server to the generated Registration service.
type registrationService struct {
	pluginapi.UnimplementedRegistrationServer
	s *Server
}

// Register is the kubelet's Register: count, validate, dial the plugin back,
// answer. It blocks until the plugin's options are known, so a plugin must
// be serving before it registers.
func (r *registrationService) Register(ctx context.Context, req *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	s := r.s
	logger := klog.FromContext(s.ctx).WithValues("resourceName", req.GetResourceName(), "endpoint", req.GetEndpoint())
	ctx = klog.NewContext(ctx, logger)
	logger.Info("Got registration request from device plugin")
	s.countRegistration(req.GetResourceName())

	if err := validateRequest(req, s.cfg.PluginDir); err != nil {
		logger.Error(err, "Bad registration request from device plugin")
		return &pluginapi.Empty{}, err
	}
	if _, err := s.connect(ctx, req.GetResourceName(), filepath.Join(s.cfg.PluginDir, req.GetEndpoint())); err != nil {
		logger.Error(err, "Error connecting to device plugin client")
		return &pluginapi.Empty{}, err
	}
	return &pluginapi.Empty{}, nil
}

func (s *Server) countRegistration(resourceName string) {
	if s.cfg.OnRegistration != nil {
		s.cfg.OnRegistration(resourceName)
	}
}

// connect dials the plugin at socket, hands it to the Handler and starts its
// ListAndWatch stream. ctx bounds the dial and the options call; the stream
// lives until the plugin goes away or the server stops. No lock is held
// while talking to the plugin.
//
// A newer client for the same resource and socket path replaces an older one
// (see adopt).
func (s *Server) connect(ctx context.Context, resource, socket string) (*client, error) {
	s.mu.Lock()
	stopped := s.stopped
	s.mu.Unlock()
	if stopped {
		return nil, errServerStopped
	}

	if !s.limiter.Allow() {
		return nil, status.Errorf(codes.ResourceExhausted, errRegistrationRate, resource, float64(s.cfg.RegistrationRate), s.cfg.RegistrationBurst)
	}
	if err := s.admit(resource, socket); err != nil {
		return nil, err
	}
	if err := checkEndpoint(socket, s.cfg.PluginDir, s.cfg.PluginsRegistryDir); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}

	// The dial ends with the caller's context or when the server stops.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(s.ctx, cancel)()

	c := newClient(s.ctx, ClientID(s.nextID.Add(1)), resource, socket)
	if err := c.connect(ctx, s.cfg.DialTimeout); err != nil {
		return nil, err
	}
	if err := s.cfg.Handler.PluginConnected(c.ctx, c); err != nil {
		c.close()
		return nil, err
	}
	if err := s.adopt(c); err != nil {
		c.close()
		s.cfg.Handler.PluginDisconnected(c.ctx, c, err)
		return nil, err
	}
	return c, nil
}

// adopt records c as connected and starts its stream, closing any older
// client of the same resource at the same socket path.
//
// The kubelet refuses such a registration ("device plugin already
// connected") and then, because its deregistration goes by socket path only,
// can drop both clients while the manager keeps a stale endpoint: the plugin
// is wedged until it restarts its server. A registration on a socket path we
// already hold means the plugin restarted (or re-registered on purpose, e.g.
// because our socket was re-created): the old connection is at best dead and
// at worst talking to the new process. So the newer registration takes over;
// IDs decide which is newer, so concurrent registrations agree with the
// Handler's view.
func (s *Server) adopt(c *client) error {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return errServerStopped
	}
	var replaced []*client
	for id, other := range s.clients {
		if other.resource != c.resource || other.socket != c.socket {
			continue
		}
		if id > c.id {
			s.mu.Unlock()
			return errSuperseded
		}
		replaced = append(replaced, other)
	}
	if err := s.admitLocked(c.resource, c.socket); err != nil {
		s.mu.Unlock()
		return err
	}
	for _, other := range replaced {
		delete(s.clients, other.id)
	}
	s.clients[c.id] = c
	s.runWG.Add(1)
	s.mu.Unlock()

	logger := klog.FromContext(c.ctx)
	for _, old := range replaced {
		logger.Info("Device plugin registered again on the same socket; closing the older connection", "olderClientID", old.id)
		old.close()
	}
	logger.V(2).Info("Connected to device plugin")
	go s.run(c)
	return nil
}

// run streams ListAndWatch for c, then disconnects it.
func (s *Server) run(c *client) {
	defer s.runWG.Done()
	err := c.listAndWatch(s.cfg.Handler)
	s.mu.Lock()
	if s.clients[c.id] == c {
		delete(s.clients, c.id)
	}
	s.mu.Unlock()
	c.close()
	s.cfg.Handler.PluginDisconnected(c.ctx, c, err)
	klog.FromContext(c.ctx).V(2).Info("Device plugin disconnected")
}

// disconnect closes the client with the given ID, if it is still connected.
// Its PluginDisconnected follows from its stream goroutine.
func (s *Server) disconnect(id ClientID) {
	s.mu.Lock()
	c := s.clients[id]
	s.mu.Unlock()
	if c != nil {
		c.close()
	}
}

// admit refuses a registration that would connect more resources or
// endpoints than the caps allow; one that replaces a connection of the same
// resource and socket is always admitted.
func (s *Server) admit(resource, socket string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.admitLocked(resource, socket)
}

func (s *Server) admitLocked(resource, socket string) error {
	endpoints := 0
	resources := map[string]bool{}
	for _, c := range s.clients {
		if c.resource == resource && c.socket == socket {
			return nil // a replacement
		}
		endpoints++
		resources[c.resource] = true
	}
	if endpoints >= s.cfg.MaxEndpoints {
		return status.Errorf(codes.ResourceExhausted, errTooManyEndpoints, resource, endpoints, s.cfg.MaxEndpoints)
	}
	if !resources[resource] && len(resources) >= s.cfg.MaxResources {
		return status.Errorf(codes.ResourceExhausted, errTooManyResources, resource, len(resources), s.cfg.MaxResources)
	}
	return nil
}

// checkEndpoint refuses a plugin socket that is not a clean absolute path
// inside one of dirs, or that is reached through a symlink, or that is not a
// socket: the agent dials only plugin sockets, never a socket elsewhere on
// the node (the container runtime's, say) that a plugin names or links to.
func checkEndpoint(socket string, dirs ...string) error {
	if !filepath.IsAbs(socket) || filepath.Clean(socket) != socket {
		return fmt.Errorf(errEndpointOutside, socket, joinDirs(dirs))
	}
	for _, dir := range dirs {
		if dir == "" {
			continue
		}
		dir = filepath.Clean(dir)
		rel, err := filepath.Rel(dir, socket)
		if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, "../") {
			continue
		}
		// Every element below the directory must be what it says, not a link.
		p := dir
		for _, elem := range strings.Split(rel, "/") {
			p = filepath.Join(p, elem)
			fi, err := os.Lstat(p)
			if errors.Is(err, fs.ErrNotExist) {
				return nil // The dial fails with the kubelet's error.
			}
			if err != nil {
				return fmt.Errorf("checking device plugin endpoint %s: %w", socket, err)
			}
			if fi.Mode()&os.ModeSymlink != 0 {
				return fmt.Errorf(errEndpointSymlink, socket, p)
			}
			if p == socket && fi.Mode()&os.ModeSocket == 0 {
				return fmt.Errorf(errEndpointNotSocket, socket)
			}
		}
		return nil
	}
	return fmt.Errorf(errEndpointOutside, socket, joinDirs(dirs))
}

func joinDirs(dirs []string) string {
	var out []string
	for _, d := range dirs {
		if d != "" {
			out = append(out, d)
		}
	}
	return strings.Join(out, " or ")
}
