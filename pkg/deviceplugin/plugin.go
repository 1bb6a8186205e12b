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
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

var errAlreadyRun = errors.New("a device plugin can only be run once")

// Plugin is one device plugin: one resource, one socket. Create it with New,
// run it with Run; its methods are safe for concurrent use.
type Plugin struct {
	cfg     Config
	options *v1beta1.DevicePluginOptions

	// mu guards everything below.
	mu sync.Mutex
	// devices is sorted by ID and never modified once installed.
	devices []*v1beta1.Device
	// version grows with every change of devices.
	version uint64
	// streams are the open ListAndWatch streams.
	streams map[*stream]struct{}
	// streamMarks count the ListAndWatch streams opened and ended.
	streamMarks streamMarks
	// attemptMarks are streamMarks when the latest registration attempt
	// began, successMarks those of the attempt that last succeeded.
	attemptMarks streamMarks
	successMarks streamMarks
	// registrations counts successful registrations; lastSuccess is when
	// the latest happened.
	registrations int
	lastSuccess   time.Time
	lastErr       error
	// serving: our socket is in place and served.
	serving bool
	// changed wakes the run loop when streams or registration status change.
	changed chan struct{}

	started  atomic.Bool
	stopOnce sync.Once
	stopped  chan struct{} // closed by Stop
	done     chan struct{} // closed when Run returns
}

// Status is what a plugin knows of its registration.
type Status struct {
	// Streams is the number of open ListAndWatch streams: device managers
	// currently watching the plugin's devices.
	Streams int
	// Registrations counts successful registrations since Run started: a
	// Register call that returned OK, or a NotifyRegistrationStatus that
	// reported the plugin registered.
	Registrations int
	// LastError is the error of the latest registration attempt when it
	// failed (the device manager refused or could not be reached); nil once
	// an attempt succeeds.
	LastError error
	// Serving says the plugin's socket is in place and served. It is false
	// before Run, after it, while a removed socket is being re-created, and
	// while another process holds the socket path (see "Sharing the socket
	// name" in the package documentation).
	Serving bool
}

// streamMarks count ListAndWatch streams, to tell whether one opened or ended
// since a point in time.
type streamMarks struct{ opened, ended uint64 }

// New validates cfg, fills in its defaults and returns a plugin that is not
// running yet.
func New(cfg Config) (*Plugin, error) {
	cfg, err := cfg.complete()
	if err != nil {
		return nil, err
	}
	devs, err := normalizeDevices(cfg.Devices)
	if err != nil {
		return nil, err
	}
	cfg.Devices = nil
	return &Plugin{
		cfg:     cfg,
		options: cfg.options(),
		devices: devs,
		streams: make(map[*stream]struct{}),
		changed: make(chan struct{}, 1),
		stopped: make(chan struct{}),
		done:    make(chan struct{}),
	}, nil
}

// ResourceName is the resource the plugin advertises.
func (p *Plugin) ResourceName() string { return p.cfg.ResourceName }

// SocketPath is the absolute path of the plugin's socket.
func (p *Plugin) SocketPath() string { return p.cfg.socketPath() }

// Options are what the plugin answers to GetDevicePluginOptions.
func (p *Plugin) Options() *v1beta1.DevicePluginOptions {
	return &v1beta1.DevicePluginOptions{
		PreStartRequired:                p.options.GetPreStartRequired(),
		GetPreferredAllocationAvailable: p.options.GetGetPreferredAllocationAvailable(),
	}
}

// Status reports the plugin's registration.
func (p *Plugin) Status() Status {
	p.mu.Lock()
	defer p.mu.Unlock()
	return Status{Streams: len(p.streams), Registrations: p.registrations, LastError: p.lastErr, Serving: p.serving}
}

// Run serves the plugin and keeps it registered until ctx is cancelled or
// Stop is called; then it ends the ListAndWatch streams, stops serving,
// removes its socket and returns nil. ctx supplies the logger. It returns an
// error only if the plugin cannot start: its directory or socket cannot be
// created or watched. A Plugin runs once.
func (p *Plugin) Run(ctx context.Context) error {
	if !p.started.CompareAndSwap(false, true) {
		return errAlreadyRun
	}
	defer close(p.done)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-p.stopped:
			cancel()
		case <-ctx.Done():
		}
	}()
	select {
	case <-p.stopped:
		return nil
	default:
	}
	return newRunner(ctx, p).run(ctx)
}

// Stop makes Run return and waits until it has: the streams are ended and the
// socket removed. It is idempotent, and safe before or without Run.
func (p *Plugin) Stop() {
	p.stopOnce.Do(func() { close(p.stopped) })
	if p.started.Load() {
		<-p.done
	}
}

// signal wakes the run loop. The caller may hold p.mu.
func (p *Plugin) signal() {
	select {
	case p.changed <- struct{}{}:
	default:
	}
}

// recordSuccess notes a successful registration.
func (p *Plugin) recordSuccess(now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.registrations++
	p.lastSuccess = now
	p.successMarks = p.attemptMarks
	p.lastErr = nil
	p.signal()
}

// recordFailure notes a failed registration.
func (p *Plugin) recordFailure(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lastErr = err
	p.signal()
}

// markAttempt notes that a registration attempt begins.
func (p *Plugin) markAttempt() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.attemptMarks = p.streamMarks
}

// setServing records whether our socket is served.
func (p *Plugin) setServing(serving bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.serving = serving
}
