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
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
	"k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

var errRegistrationRefused = errors.New("device manager refused the registration")

// devicePluginService serves the v1beta1 DevicePlugin service for one Run.
type devicePluginService struct {
	v1beta1.UnimplementedDevicePluginServer
	p *Plugin
	// quit is closed when Run stops: streams end.
	quit <-chan struct{}
}

func (s *devicePluginService) GetDevicePluginOptions(context.Context, *v1beta1.Empty) (*v1beta1.DevicePluginOptions, error) {
	return s.p.Options(), nil
}

// stream is one open ListAndWatch stream.
type stream struct {
	changed chan struct{}
}

func (s *stream) wake() {
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// ListAndWatch sends the full device list, then the full list again after
// every change, until the manager goes away or the plugin stops.
func (s *devicePluginService) ListAndWatch(_ *v1beta1.Empty, srv grpc.ServerStreamingServer[v1beta1.ListAndWatchResponse]) error {
	ctx := srv.Context()
	logger := klog.FromContext(ctx)
	p := s.p
	st := &stream{changed: make(chan struct{}, 1)}
	p.mu.Lock()
	p.streams[st] = struct{}{}
	p.streamMarks.opened++
	open := len(p.streams)
	p.signal()
	p.mu.Unlock()
	logger.Info("ListAndWatch stream opened", "openStreams", open)
	defer func() {
		p.mu.Lock()
		delete(p.streams, st)
		p.streamMarks.ended++
		open := len(p.streams)
		p.signal()
		p.mu.Unlock()
		logger.Info("ListAndWatch stream closed", "openStreams", open)
	}()

	var sent uint64
	first := true
	for {
		devs, version := p.currentDevices()
		if first || version != sent {
			if err := srv.Send(&v1beta1.ListAndWatchResponse{Devices: devs}); err != nil {
				return fmt.Errorf("sending device list: %w", err)
			}
			logger.V(2).Info("Sent device list", "devices", len(devs))
			first, sent = false, version
		}
		select {
		case <-st.changed:
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case <-s.quit:
			return nil
		}
	}
}

func (s *devicePluginService) GetPreferredAllocation(ctx context.Context, req *v1beta1.PreferredAllocationRequest) (*v1beta1.PreferredAllocationResponse, error) {
	hook := s.p.cfg.Hooks.GetPreferredAllocation
	resp := &v1beta1.PreferredAllocationResponse{}
	for _, c := range req.GetContainerRequests() {
		out := &v1beta1.ContainerPreferredAllocationResponse{}
		if hook != nil {
			ids, err := hook(ctx, c.GetAvailableDeviceIDs(), c.GetMustIncludeDeviceIDs(), int(c.GetAllocationSize()))
			if err != nil {
				return nil, hookError("GetPreferredAllocation", err)
			}
			out.DeviceIDs = ids
		}
		resp.ContainerResponses = append(resp.ContainerResponses, out)
	}
	return resp, nil
}

func (s *devicePluginService) Allocate(ctx context.Context, req *v1beta1.AllocateRequest) (*v1beta1.AllocateResponse, error) {
	hook := s.p.cfg.Hooks.Allocate
	resp := &v1beta1.AllocateResponse{}
	for _, c := range req.GetContainerRequests() {
		var out *v1beta1.ContainerAllocateResponse
		if hook != nil {
			r, err := hook(ctx, c.GetDevicesIds())
			if err != nil {
				return nil, hookError("Allocate", err)
			}
			out = r
		}
		if out == nil {
			out = &v1beta1.ContainerAllocateResponse{}
		}
		resp.ContainerResponses = append(resp.ContainerResponses, out)
	}
	return resp, nil
}

func (s *devicePluginService) PreStartContainer(ctx context.Context, req *v1beta1.PreStartContainerRequest) (*v1beta1.PreStartContainerResponse, error) {
	if hook := s.p.cfg.Hooks.PreStartContainer; hook != nil {
		if err := hook(ctx, req.GetDevicesIds()); err != nil {
			return nil, hookError("PreStartContainer", err)
		}
	}
	return &v1beta1.PreStartContainerResponse{}, nil
}

// hookError keeps a gRPC status the hook returned and otherwise reports the
// error as Unknown, with the RPC's name.
func hookError(rpc string, err error) error {
	if st, ok := status.FromError(err); ok {
		return st.Err()
	}
	return status.Errorf(codes.Unknown, "%s: %v", rpc, err)
}

// registrationService serves the pluginregistration Registration service
// (the plugin watcher path) for one Run.
type registrationService struct {
	registerapi.UnimplementedRegistrationServer
	p *Plugin
}

// GetInfo announces a device plugin for the resource, served on this very
// socket (an empty endpoint), speaking v1beta1.
func (s *registrationService) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return &registerapi.PluginInfo{
		Type:              registerapi.DevicePlugin,
		Name:              s.p.cfg.ResourceName,
		Endpoint:          "",
		SupportedVersions: []string{v1beta1.Version},
	}, nil
}

// NotifyRegistrationStatus records the plugin watcher's verdict. A refusal
// is logged and retried by the run loop.
func (s *registrationService) NotifyRegistrationStatus(ctx context.Context, st *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	logger := klog.FromContext(ctx)
	if st.GetPluginRegistered() {
		s.p.recordSuccess(time.Now())
		logger.Info("Registered with the device manager's plugin watcher")
		return &registerapi.RegistrationStatusResponse{}, nil
	}
	err := fmt.Errorf("%w: %s", errRegistrationRefused, st.GetError())
	s.p.recordFailure(err)
	logger.Error(err, "Device manager's plugin watcher refused the registration")
	return &registerapi.RegistrationStatusResponse{}, nil
}

// withLogger gives every RPC's context the plugin's logger and logs failed
// calls, so hooks can log with klog.FromContext and their errors show in the
// plugin's log as well as the manager's.
func withLogger(logger klog.Logger) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
			l := logger.WithValues("rpc", info.FullMethod)
			resp, err := handler(klog.NewContext(ctx, l), req)
			if err != nil {
				l.Error(err, "RPC failed")
			} else {
				l.V(4).Info("RPC served")
			}
			return resp, err
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
			l := logger.WithValues("rpc", info.FullMethod)
			return handler(srv, &loggedStream{ServerStream: ss, ctx: klog.NewContext(ss.Context(), l)})
		}),
	}
}

type loggedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *loggedStream) Context() context.Context { return s.ctx }
