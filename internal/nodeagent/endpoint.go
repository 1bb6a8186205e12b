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

package nodeagent

import (
	"context"
	"fmt"
	"sync"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kubedevice/kubedevice/internal/nodeagent/registration"
)

// errEndpointStopped is the kubelet's error for an RPC on a stopped endpoint.
const errEndpointStopped = "endpoint %v has been stopped"

// Default deadlines of the plugin RPCs, applied when the caller's context
// has none. The kubelet has none for Allocate and GetPreferredAllocation
// (issue #117435: a stuck plugin blocks admission); PreStartContainer has
// the kubelet's 30 s.
const (
	defaultAllocateTimeout               = 30 * time.Second
	defaultGetPreferredAllocationTimeout = 10 * time.Second
	defaultPreStartContainerTimeout      = pluginapi.KubeletPreStartContainerRPCTimeoutInSecs * time.Second
)

// endpoint is one registered connection to a device plugin of a resource, or,
// restored from a checkpoint, a stopped endpoint with no client that holds the
// resource's place until its plugin registers again. The manager sends
// Allocate, GetPreferredAllocation and PreStartContainer to the resource's
// primary endpoint.
type endpoint struct {
	resourceName string
	socket       string // empty for a restored endpoint
	clientID     registration.ClientID
	api          pluginapi.DevicePluginClient   // nil for a restored endpoint
	options      *pluginapi.DevicePluginOptions // nil for a restored endpoint

	mu       sync.Mutex
	stopTime time.Time
}

// newEndpoint returns a live endpoint for a connected plugin.
func newEndpoint(p registration.DevicePlugin) *endpoint {
	return &endpoint{
		resourceName: p.Resource(),
		socket:       p.SocketPath(),
		clientID:     p.ID(),
		api:          p.API(),
		options:      p.Options(),
	}
}

// newStoppedEndpoint returns an endpoint without a client, stopped at
// stoppedAt, for a resource restored from the checkpoint: the resource
// exists (capacity 0) until its plugin registers or the grace period ends.
func newStoppedEndpoint(resourceName string, stoppedAt time.Time) *endpoint {
	return &endpoint{resourceName: resourceName, stopTime: stoppedAt}
}

func (e *endpoint) String() string {
	if e.socket == "" {
		return e.resourceName
	}
	return e.resourceName + " at " + e.socket
}

func (e *endpoint) socketPath() string { return e.socket }

// opts returns the options from GetDevicePluginOptions; nil for a restored
// endpoint. The generated getters are nil-safe:
// e.opts().GetPreStartRequired().
func (e *endpoint) opts() *pluginapi.DevicePluginOptions { return e.options }

func (e *endpoint) setStopTime(t time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.stopTime = t
}

func (e *endpoint) stoppedAt() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.stopTime
}

func (e *endpoint) isStopped() bool { return !e.stoppedAt().IsZero() }

// stopGracePeriodExpired reports whether the endpoint stopped at least grace
// before now.
func (e *endpoint) stopGracePeriodExpired(now time.Time, grace time.Duration) bool {
	stopped := e.stoppedAt()
	return !stopped.IsZero() && now.Sub(stopped) >= grace
}

// allocate calls Allocate for one container.
func (e *endpoint) allocate(ctx context.Context, devs []string) (*pluginapi.AllocateResponse, error) {
	if e.isStopped() {
		return nil, fmt.Errorf(errEndpointStopped, e)
	}
	ctx, cancel := withDefaultTimeout(ctx, defaultAllocateTimeout)
	defer cancel()
	return e.api.Allocate(ctx, &pluginapi.AllocateRequest{
		ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: devs}},
	})
}

// getPreferredAllocation calls GetPreferredAllocation for one container.
func (e *endpoint) getPreferredAllocation(ctx context.Context, available, mustInclude []string, size int) (*pluginapi.PreferredAllocationResponse, error) {
	if e.isStopped() {
		return nil, fmt.Errorf(errEndpointStopped, e)
	}
	ctx, cancel := withDefaultTimeout(ctx, defaultGetPreferredAllocationTimeout)
	defer cancel()
	return e.api.GetPreferredAllocation(ctx, &pluginapi.PreferredAllocationRequest{
		ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{
			AvailableDeviceIDs:   available,
			MustIncludeDeviceIDs: mustInclude,
			AllocationSize:       int32(size),
		}},
	})
}

// preStartContainer calls PreStartContainer. Its response is empty by
// definition, so only the error is returned.
func (e *endpoint) preStartContainer(ctx context.Context, devs []string) error {
	if e.isStopped() {
		return fmt.Errorf(errEndpointStopped, e)
	}
	ctx, cancel := withDefaultTimeout(ctx, defaultPreStartContainerTimeout)
	defer cancel()
	_, err := e.api.PreStartContainer(ctx, &pluginapi.PreStartContainerRequest{DevicesIds: devs})
	return err
}

// withDefaultTimeout bounds ctx by d unless it already has a deadline.
func withDefaultTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, d)
}
