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

package nritest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"
	validator "github.com/containerd/nri/plugins/default-validator/builtin"
)

// Runtime is an NRI runtime serving a socket. Stop and Start again are a runtime restart: the
// socket goes away, every plugin connection closes, and a new runtime serves the socket.
//
// The adaptation serves a private socket beside the public one, and a proxy forwards the
// public socket's connections to it, so that Stop can close the plugins' connections: the
// adaptation's own Stop leaves external plugins connected (in containerd, the process exits).
type Runtime struct {
	socket string

	mu    sync.Mutex
	r     *adaptation.Adaptation
	l     net.Listener
	conns []net.Conn
	// synced counts the plugins that connected to the socket and synchronized since the last
	// Start; each Start counts anew, so a late synchronization of a stopped runtime's plugin
	// does not count.
	synced *atomic.Int64
}

// New returns a runtime that will serve socket; its directory holds the runtime's own files.
func New(socket string) *Runtime {
	return &Runtime{socket: socket}
}

// Socket is the socket plugins connect to.
func (rt *Runtime) Socket() string { return rt.socket }

// Start starts the runtime.
func (rt *Runtime) Start() error {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.r != nil {
		return errors.New("starting the NRI runtime: already running")
	}
	private := rt.socket + ".runtime"
	synced := new(atomic.Int64)
	sync := func(ctx context.Context, cb adaptation.SyncCB) error {
		_, err := cb(ctx, nil, nil)
		if err == nil {
			synced.Add(1)
		}
		return err
	}
	update := func(context.Context, []*adaptation.ContainerUpdate) ([]*adaptation.ContainerUpdate, error) {
		return nil, nil
	}
	r, err := adaptation.New("containerd", "v2.4.2", sync, update,
		adaptation.WithSocketPath(private),
		adaptation.WithPluginPath(rt.socket+".plugins"),
		adaptation.WithPluginConfigPath(rt.socket+".conf.d"),
		adaptation.WithDefaultValidator(&validator.DefaultValidatorConfig{Enable: true}),
	)
	if err != nil {
		return fmt.Errorf("creating the NRI runtime: %w", err)
	}
	if err := r.Start(); err != nil {
		return fmt.Errorf("starting the NRI runtime: %w", err)
	}
	// Start called sync once for the pre-launched plugins (the default validator), which is no
	// plugin connecting: those count from here, as the public socket is served from here.
	synced.Store(0)
	_ = os.Remove(rt.socket)
	l, err := net.Listen("unix", rt.socket)
	if err != nil {
		r.Stop()
		return fmt.Errorf("listening on %s: %w", rt.socket, err)
	}
	rt.r, rt.l, rt.synced = r, l, synced
	go rt.serve(l, private)
	return nil
}

// Stop stops the runtime: its socket is removed and its plugins' connections close.
func (rt *Runtime) Stop() {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.r == nil {
		return
	}
	_ = rt.l.Close()
	for _, c := range rt.conns {
		_ = c.Close()
	}
	rt.conns = nil
	rt.r.Stop()
	rt.r, rt.l, rt.synced = nil, nil, nil
}

// WaitForPlugins waits until n plugins have connected to the socket and synchronized with the
// runtime since it started, and the runtime lists them, so that CreateContainer reaches them. A
// plugin counts itself connected once it has answered the runtime's Configure, before the runtime
// synchronizes it; the runtime adds it to its list a moment after synchronizing it.
func (rt *Runtime) WaitForPlugins(ctx context.Context, n int64) error {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		rt.mu.Lock()
		r, count := rt.r, rt.synced
		rt.mu.Unlock()
		if r == nil {
			return errors.New("waiting for NRI plugins: the runtime is stopped")
		}
		synced := count.Load()
		if synced >= n {
			// The adaptation holds its sync lock from synchronizing a plugin until it lists it.
			r.BlockPluginSync().Unblock()
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %d NRI plugins, %d synchronized: %w", n, synced, ctx.Err())
		case <-tick.C:
		}
	}
}

// CreateContainer asks the plugins to adjust the creation of a container of pod, as containerd
// does, and returns the adjustment they made together (validated by the default validator). The
// container's ID is the pod's UID and the container's name: asked again, it is the same creation.
func (rt *Runtime) CreateContainer(ctx context.Context, pod *api.PodSandbox, container string) (*api.ContainerAdjustment, error) {
	return rt.CreateContainerWithID(ctx, pod, container, pod.GetUid()+"-"+container)
}

// CreateContainerWithID is CreateContainer for the container with the runtime ID id: a container
// restarted, or created again after a failed creation, has a new ID.
func (rt *Runtime) CreateContainerWithID(ctx context.Context, pod *api.PodSandbox, container, id string) (*api.ContainerAdjustment, error) {
	rt.mu.Lock()
	r := rt.r
	rt.mu.Unlock()
	if r == nil {
		return nil, errors.New("creating a container: the NRI runtime is stopped")
	}
	resp, err := r.CreateContainer(ctx, &adaptation.CreateContainerRequest{
		Pod:       pod,
		Container: &api.Container{Id: id, PodSandboxId: pod.GetId(), Name: container},
	})
	if err != nil {
		return nil, err
	}
	return resp.GetAdjust(), nil
}

// serve forwards the connections of l to the adaptation's socket until l closes.
func (rt *Runtime) serve(l net.Listener, private string) {
	for {
		in, err := l.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("unix", private)
		if err != nil {
			_ = in.Close()
			continue
		}
		rt.mu.Lock()
		if rt.l != l {
			rt.mu.Unlock()
			_ = in.Close()
			_ = out.Close()
			return
		}
		rt.conns = append(rt.conns, in, out)
		rt.mu.Unlock()
		go func() { _, _ = io.Copy(out, in); _ = out.Close() }()
		go func() { _, _ = io.Copy(in, out); _ = in.Close() }()
	}
}
