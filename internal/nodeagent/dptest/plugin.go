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

// Package dptest provides a stub device plugin for tests: a real gRPC
// DevicePlugin server on a unix socket that also serves the pluginwatcher
// Registration service, so it can register directly on kubelet.sock or
// announce itself in a plugins_registry directory. Tests push device updates,
// end streams, inject failures and read the calls it received.
package dptest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// Names of the RPCs recorded by Calls.
const (
	CallGetDevicePluginOptions   = "GetDevicePluginOptions"
	CallListAndWatch             = "ListAndWatch"
	CallGetPreferredAllocation   = "GetPreferredAllocation"
	CallAllocate                 = "Allocate"
	CallPreStartContainer        = "PreStartContainer"
	CallGetInfo                  = "GetInfo"
	CallNotifyRegistrationStatus = "NotifyRegistrationStatus"
)

// Plugin is a stub device plugin. Its zero value is not usable; use New.
type Plugin struct {
	socket   string
	resource string

	mu            sync.Mutex
	devices       []*pluginapi.Device
	options       *pluginapi.DevicePluginOptions
	optionsErr    error
	listWatchErr  error
	info          *registerapi.PluginInfo
	calls         []string
	statuses      []*registerapi.RegistrationStatus
	sends         []time.Time
	streams       map[*stream]struct{}
	allocate      func(*pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error)
	preferred     func(*pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error)
	preStart      func(*pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error)
	server        *grpc.Server
	stopped       chan struct{}
	wg            sync.WaitGroup
	socketWatcher *fsnotify.Watcher

	pluginapi.UnimplementedDevicePluginServer
	registration registrationServer
}

type stream struct {
	updates chan []*pluginapi.Device
	end     chan error
}

// New returns a stub plugin for resource that will serve on socket and
// advertise devs. Options default to all false.
func New(socket, resource string, devs []*pluginapi.Device) *Plugin {
	p := &Plugin{
		socket:   socket,
		resource: resource,
		devices:  cloneDevices(devs),
		options:  &pluginapi.DevicePluginOptions{},
		info: &registerapi.PluginInfo{
			Type:              registerapi.DevicePlugin,
			Name:              resource,
			SupportedVersions: []string{pluginapi.Version},
		},
		streams: make(map[*stream]struct{}),
		stopped: make(chan struct{}),
	}
	p.registration.p = p
	return p
}

// Device returns a device with the given ID and health and, if numa is not
// empty, a topology on those NUMA nodes.
func Device(id, health string, numa ...int64) *pluginapi.Device {
	d := &pluginapi.Device{ID: id, Health: health}
	if len(numa) > 0 {
		d.Topology = &pluginapi.TopologyInfo{}
		for _, n := range numa {
			d.Topology.Nodes = append(d.Topology.Nodes, &pluginapi.NUMANode{ID: n})
		}
	}
	return d
}

// SocketPath is the plugin's socket.
func (p *Plugin) SocketPath() string { return p.socket }

// SetOptions sets what GetDevicePluginOptions returns.
func (p *Plugin) SetOptions(preStartRequired, getPreferredAllocationAvailable bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.options = &pluginapi.DevicePluginOptions{
		PreStartRequired:                preStartRequired,
		GetPreferredAllocationAvailable: getPreferredAllocationAvailable,
	}
}

// FailGetDevicePluginOptions makes GetDevicePluginOptions return err (nil
// restores success).
func (p *Plugin) FailGetDevicePluginOptions(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.optionsErr = err
}

// FailListAndWatch makes new ListAndWatch calls return err at once (nil
// restores success).
func (p *Plugin) FailListAndWatch(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.listWatchErr = err
}

// SetInfo replaces what GetInfo returns (pluginwatcher path).
func (p *Plugin) SetInfo(info *registerapi.PluginInfo) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.info = proto.Clone(info).(*registerapi.PluginInfo)
}

// SetAllocateFunc sets the Allocate implementation (default: empty response).
func (p *Plugin) SetAllocateFunc(f func(*pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.allocate = f
}

// SetGetPreferredAllocationFunc sets the GetPreferredAllocation
// implementation (default: empty response).
func (p *Plugin) SetGetPreferredAllocationFunc(f func(*pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.preferred = f
}

// SetPreStartContainerFunc sets the PreStartContainer implementation
// (default: empty response).
func (p *Plugin) SetPreStartContainerFunc(f func(*pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.preStart = f
}

// Calls returns the RPCs received so far, in order.
func (p *Plugin) Calls() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.calls)
}

// RegistrationStatuses returns the NotifyRegistrationStatus calls received.
func (p *Plugin) RegistrationStatuses() []*registerapi.RegistrationStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*registerapi.RegistrationStatus, len(p.statuses))
	for i, s := range p.statuses {
		out[i] = proto.Clone(s).(*registerapi.RegistrationStatus)
	}
	return out
}

// SendTimes returns when each ListAndWatch message was about to be handed
// to gRPC.
func (p *Plugin) SendTimes() []time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.sends)
}

// OpenStreams is the number of ListAndWatch streams being served.
func (p *Plugin) OpenStreams() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.streams)
}

func (p *Plugin) record(call string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls = append(p.calls, call)
}

// Start serves the plugin on its socket, replacing a stale socket there.
func (p *Plugin) Start() error {
	if err := os.Remove(p.socket); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("removing old plugin socket: %w", err)
	}
	ln, err := net.Listen("unix", p.socket)
	if err != nil {
		return fmt.Errorf("listening on plugin socket: %w", err)
	}
	srv := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(srv, p)
	registerapi.RegisterRegistrationServer(srv, &p.registration)
	p.mu.Lock()
	p.server = srv
	p.mu.Unlock()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		_ = srv.Serve(ln)
	}()
	return nil
}

// Stop ends every stream, stops serving and removes the socket. It is
// idempotent.
func (p *Plugin) Stop() {
	p.mu.Lock()
	select {
	case <-p.stopped:
		p.mu.Unlock()
		return
	default:
	}
	close(p.stopped)
	srv, w := p.server, p.socketWatcher
	p.mu.Unlock()
	if w != nil {
		w.Close()
	}
	if srv != nil {
		srv.Stop()
	}
	p.wg.Wait()
	_ = os.Remove(p.socket)
}

// Update replaces the device list and sends it on every open stream.
func (p *Plugin) Update(devs []*pluginapi.Device) {
	p.mu.Lock()
	p.devices = cloneDevices(devs)
	streams := make([]*stream, 0, len(p.streams))
	for s := range p.streams {
		streams = append(streams, s)
	}
	p.mu.Unlock()
	for _, s := range streams {
		s.updates <- cloneDevices(devs)
	}
}

// EndStreams ends every open ListAndWatch stream with err (nil ends them
// cleanly). The server keeps running.
func (p *Plugin) EndStreams(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for s := range p.streams {
		select {
		case s.end <- err:
		default:
		}
	}
}

// Register registers the plugin on the registration socket regSocket, with
// its socket's file name as endpoint, as a v1beta1 plugin does.
func (p *Plugin) Register(ctx context.Context, regSocket string) error {
	p.mu.Lock()
	opts := proto.Clone(p.options).(*pluginapi.DevicePluginOptions)
	p.mu.Unlock()
	return Register(ctx, regSocket, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     filepath.Base(p.socket),
		ResourceName: p.resource,
		Options:      opts,
	})
}

// RegisterOnSocketCreation registers the plugin again whenever regSocket is
// created (as real plugins watch kubelet.sock), until Stop.
func (p *Plugin) RegisterOnSocketCreation(regSocket string) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("creating watcher: %w", err)
	}
	if err := w.Add(filepath.Dir(regSocket)); err != nil {
		w.Close()
		return fmt.Errorf("watching %s: %w", filepath.Dir(regSocket), err)
	}
	p.mu.Lock()
	p.socketWatcher = w
	p.mu.Unlock()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for ev := range w.Events {
			if ev.Name != regSocket || !ev.Has(fsnotify.Create) {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_ = p.Register(ctx, regSocket)
			cancel()
		}
	}()
	return nil
}

// Register sends req to the registration socket regSocket.
func Register(ctx context.Context, regSocket string, req *pluginapi.RegisterRequest) error {
	conn, err := grpc.NewClient("passthrough:///"+regSocket,
		grpc.WithAuthority("localhost"),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", addr)
		}))
	if err != nil {
		return fmt.Errorf("creating registration client: %w", err)
	}
	defer conn.Close()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, req, grpc.WaitForReady(true))
	return err
}

// HangingListener accepts connections on a unix socket and never answers:
// a plugin whose dial hangs.
type HangingListener struct {
	ln    net.Listener
	done  chan struct{}
	mu    sync.Mutex
	conns []net.Conn
}

// ListenAndHang starts a HangingListener on path.
func ListenAndHang(path string) (*HangingListener, error) {
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", path, err)
	}
	h := &HangingListener{ln: ln, done: make(chan struct{})}
	go func() {
		defer close(h.done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			h.mu.Lock()
			h.conns = append(h.conns, c)
			h.mu.Unlock()
		}
	}()
	return h, nil
}

// Accepted is the number of connections accepted so far.
func (h *HangingListener) Accepted() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.conns)
}

// Close stops listening and closes the accepted connections.
func (h *HangingListener) Close() {
	h.ln.Close()
	<-h.done
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range h.conns {
		c.Close()
	}
}

// GetDevicePluginOptions implements the DevicePlugin service.
func (p *Plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	p.record(CallGetDevicePluginOptions)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.optionsErr != nil {
		return nil, p.optionsErr
	}
	return proto.Clone(p.options).(*pluginapi.DevicePluginOptions), nil
}

// ListAndWatch implements the DevicePlugin service: the current list, then
// every Update, until EndStreams, Stop or the client goes away.
func (p *Plugin) ListAndWatch(_ *pluginapi.Empty, srv grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	p.record(CallListAndWatch)
	p.mu.Lock()
	if err := p.listWatchErr; err != nil {
		p.mu.Unlock()
		return err
	}
	s := &stream{updates: make(chan []*pluginapi.Device, 1024), end: make(chan error, 1)}
	p.streams[s] = struct{}{}
	initial := cloneDevices(p.devices)
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.streams, s)
		p.mu.Unlock()
	}()

	send := func(devs []*pluginapi.Device) error {
		p.mu.Lock()
		p.sends = append(p.sends, time.Now())
		p.mu.Unlock()
		return srv.Send(&pluginapi.ListAndWatchResponse{Devices: devs})
	}
	if err := send(initial); err != nil {
		return err
	}
	for {
		select {
		case devs := <-s.updates:
			if err := send(devs); err != nil {
				return err
			}
		case err := <-s.end:
			return err
		case <-srv.Context().Done():
			return srv.Context().Err()
		case <-p.stopped:
			return nil
		}
	}
}

// GetPreferredAllocation implements the DevicePlugin service.
func (p *Plugin) GetPreferredAllocation(_ context.Context, r *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	p.record(CallGetPreferredAllocation)
	p.mu.Lock()
	f := p.preferred
	p.mu.Unlock()
	if f != nil {
		return f(r)
	}
	return &pluginapi.PreferredAllocationResponse{}, nil
}

// Allocate implements the DevicePlugin service.
func (p *Plugin) Allocate(_ context.Context, r *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	p.record(CallAllocate)
	p.mu.Lock()
	f := p.allocate
	p.mu.Unlock()
	if f != nil {
		return f(r)
	}
	return &pluginapi.AllocateResponse{}, nil
}

// PreStartContainer implements the DevicePlugin service.
func (p *Plugin) PreStartContainer(_ context.Context, r *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	p.record(CallPreStartContainer)
	p.mu.Lock()
	f := p.preStart
	p.mu.Unlock()
	if f != nil {
		return f(r)
	}
	return &pluginapi.PreStartContainerResponse{}, nil
}

// registrationServer serves the pluginwatcher Registration service for p.
type registrationServer struct {
	registerapi.UnimplementedRegistrationServer
	p *Plugin
}

func (r *registrationServer) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	r.p.record(CallGetInfo)
	r.p.mu.Lock()
	defer r.p.mu.Unlock()
	return proto.Clone(r.p.info).(*registerapi.PluginInfo), nil
}

func (r *registrationServer) NotifyRegistrationStatus(_ context.Context, s *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	r.p.record(CallNotifyRegistrationStatus)
	r.p.mu.Lock()
	defer r.p.mu.Unlock()
	r.p.statuses = append(r.p.statuses, proto.Clone(s).(*registerapi.RegistrationStatus))
	return &registerapi.RegistrationStatusResponse{}, nil
}

func cloneDevices(devs []*pluginapi.Device) []*pluginapi.Device {
	if devs == nil {
		return nil
	}
	out := make([]*pluginapi.Device, len(devs))
	for i, d := range devs {
		out[i] = proto.Clone(d).(*pluginapi.Device)
	}
	return out
}

// ErrInjected is a convenient error for failure injection.
var ErrInjected = errors.New("injected failure")
