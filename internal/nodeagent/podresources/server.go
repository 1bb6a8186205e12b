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

package podresources

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/klog/v2"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
	"k8s.io/utils/clock"

	"github.com/kubedevice/kubedevice/internal/nodeagent"
	"github.com/kubedevice/kubedevice/internal/nodeagent/poddevices"
	"github.com/kubedevice/kubedevice/internal/nodeagent/registration"
)

const (
	// DefaultSocketPath is where the agent serves the API unless told otherwise: the kubelet's
	// socket name (pod-resources/kubelet.sock) under kubedevice's own host directory, so a
	// monitoring agent is pointed at it by mounting that directory in place of the kubelet's.
	DefaultSocketPath = "/var/lib/kubedevice/pod-resources/kubelet.sock"
	// DefaultQPS and DefaultBurst are the kubelet's rate limit of the API
	// (pkg/kubelet/apis/podresources/constants.go).
	DefaultQPS   = 100
	DefaultBurst = 10
	// APIVersion is the served version, the server_api_version label of the metrics.
	APIVersion = "v1"

	// requestTimeout bounds the work of one call: reading the pods and the devices.
	requestTimeout = 10 * time.Second
)

// errRateLimited is the kubelet's answer to a call beyond the rate limit, code and message.
var errRateLimited = status.Error(codes.ResourceExhausted, "rejected by rate limit")

// PodsProvider is the view of the node's pods the API answers from (the agent's informer cache).
type PodsProvider interface {
	// ActivePods returns the pods bound to the node that are not terminal (Succeeded or Failed),
	// the kubelet's GetActivePods.
	ActivePods(ctx context.Context) ([]*corev1.Pod, error)
	// Pod returns the pod namespace/name bound to the node, in any phase; nil when there is none.
	Pod(ctx context.Context, namespace, name string) (*corev1.Pod, error)
}

// DevicesProvider is what the API reads of the device manager core, *nodeagent.Manager.
type DevicesProvider interface {
	// GetDevices returns the devices committed to a container, one value per (device, NUMA
	// node); allocations in flight are not shown.
	GetDevices(podUID, container string) []poddevices.ContainerDevice
	// GetAllocatableDevices returns the healthy, uncordoned devices with their topology.
	GetAllocatableDevices() nodeagent.ResourceDeviceInstances
}

var _ DevicesProvider = (*nodeagent.Manager)(nil)

// Options configure a Server.
type Options struct {
	// SocketPath is the unix socket the API is served on. Required by Start.
	SocketPath string
	// QPS and Burst rate-limit the calls of each client connection on its own; zero means
	// DefaultQPS and DefaultBurst.
	QPS   float32
	Burst int
	// Registerer, if set, receives the server's metrics.
	Registerer prometheus.Registerer
	// Clock drives the rate limiter; nil means the real clock.
	Clock clock.Clock
}

// AddFlags registers the server's flag on flagSet, bound to o.
func (o *Options) AddFlags(flagSet *flag.FlagSet) {
	flagSet.StringVar(&o.SocketPath, "pod-resources-socket", DefaultSocketPath,
		"Unix socket on which the agent serves the kubelet's PodResources API (v1: List, Get, GetAllocatableResources) for the devices it manages, so node monitoring agents (dcgm-exporter, nfd-topology-updater) can map them to pods; the kubelet's own socket lists none of them. Its directory is created (0750) if missing. Empty disables it.")
}

// Server serves the kubelet's PodResources API (k8s.io/kubelet/pkg/apis/podresources/v1) for the
// devices kubedevice manages. See the package documentation.
type Server struct {
	podresourcesapi.UnimplementedPodResourcesListerServer

	pods    PodsProvider
	devices DevicesProvider
	opts    Options
	metrics *metrics

	mu       sync.Mutex
	grpc     *grpc.Server
	listener net.Listener
	// socket is the socket file Start created, to remove at Stop only if it is still ours.
	socket  fs.FileInfo
	started bool
	served  chan struct{}
}

var _ podresourcesapi.PodResourcesListerServer = (*Server)(nil)

// New returns a server that is not started.
func New(pods PodsProvider, devices DevicesProvider, opts Options) (*Server, error) {
	if opts.QPS <= 0 {
		opts.QPS = DefaultQPS
	}
	if opts.Burst <= 0 {
		opts.Burst = DefaultBurst
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	s := &Server{
		pods:    pods,
		devices: devices,
		opts:    opts,
		metrics: newMetrics(),
	}
	if opts.Registerer != nil {
		if err := s.metrics.register(opts.Registerer); err != nil {
			return nil, fmt.Errorf("registering the PodResources API metrics: %w", err)
		}
	}
	return s, nil
}

// SocketPath is the socket the server listens on.
func (s *Server) SocketPath() string { return s.opts.SocketPath }

// Start creates the socket's directory (0750), removes a socket a previous run left, listens and
// serves in the background until Stop. ctx supplies the logger.
func (s *Server) Start(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithName("podresources")
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return errors.New("the PodResources API server can only be started once")
	}
	s.started = true
	socket := s.opts.SocketPath
	if socket == "" {
		return errors.New("the PodResources API socket path is empty")
	}
	if err := os.MkdirAll(filepath.Dir(socket), 0o750); err != nil {
		return fmt.Errorf("creating the PodResources API socket directory: %w", err)
	}
	if err := removeStaleSocket(socket); err != nil {
		return err
	}
	// Mode 0600 from the start, and never unlinked by the listener: Stop removes the file
	// itself, and only if it is still this listener's (a newer agent may have replaced it).
	lis, err := registration.ListenUnix(socket, registration.SocketMode)
	if err != nil {
		return fmt.Errorf("listening on the PodResources API socket: %w", err)
	}
	if s.socket, err = os.Lstat(socket); err != nil {
		lis.Close()
		return fmt.Errorf("reading the PodResources API socket: %w", err)
	}
	s.listener = lis
	s.grpc = grpc.NewServer(grpc.UnaryInterceptor(s.intercept), grpc.StatsHandler(connLimits{s}))
	podresourcesapi.RegisterPodResourcesListerServer(s.grpc, s)
	s.served = make(chan struct{})
	go func() {
		defer close(s.served)
		if err := s.grpc.Serve(lis); err != nil {
			logger.Error(err, "Serving the PodResources API ended", "socketPath", socket)
		}
	}()
	logger.Info("Serving the PodResources API", "socketPath", socket, "version", APIVersion, "qpsPerConnection", s.opts.QPS, "burstPerConnection", s.opts.Burst)
	return nil
}

// Stop stops serving, ending the calls in progress, and removes the socket. It is idempotent and
// safe without Start.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.grpc == nil {
		return
	}
	s.grpc.Stop()
	<-s.served
	if fi, err := os.Lstat(s.opts.SocketPath); err == nil && os.SameFile(fi, s.socket) {
		// Best effort: a socket left behind is removed by the next Start.
		_ = os.Remove(s.opts.SocketPath)
	}
	s.grpc = nil
}

// removeStaleSocket removes the socket at path that a previous run left; anything else at path
// is an error, never removed.
func removeStaleSocket(path string) error {
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("checking the PodResources API socket path: %w", err)
	case fi.Mode()&fs.ModeSocket == 0:
		return fmt.Errorf("the PodResources API socket path %s exists and is not a socket", path)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing the stale PodResources API socket: %w", err)
	}
	return nil
}

// connLimiterKey is the context key of a connection's rate limiter.
type connLimiterKey struct{}

// connLimits gives each client connection its own token bucket, which the calls on it inherit in
// their context: the kubelet's one bucket for every client lets a client calling in a loop take
// every token, and every other client's calls are refused.
type connLimits struct{ s *Server }

var _ stats.Handler = connLimits{}

func (l connLimits) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return context.WithValue(ctx, connLimiterKey{},
		flowcontrol.NewTokenBucketRateLimiterWithClock(l.s.opts.QPS, l.s.opts.Burst, l.s.opts.Clock))
}

func (connLimits) HandleConn(context.Context, stats.ConnStats)                     {}
func (connLimits) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (connLimits) HandleRPC(context.Context, stats.RPCStats)                       {}

// intercept rate-limits every call by its connection's bucket, bounds its work, and counts it and
// its failure. A call without a bucket (none is: every connection gets one) is refused.
func (s *Server) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	method := path.Base(info.FullMethod)
	s.metrics.requests.WithLabelValues(APIVersion, method).Inc()
	limiter, ok := ctx.Value(connLimiterKey{}).(flowcontrol.RateLimiter)
	if !ok || !limiter.TryAccept() {
		s.metrics.errors.WithLabelValues(APIVersion, method).Inc()
		return nil, errRateLimited
	}
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	resp, err := handler(ctx, req)
	if err != nil {
		s.metrics.errors.WithLabelValues(APIVersion, method).Inc()
	}
	return resp, err
}
