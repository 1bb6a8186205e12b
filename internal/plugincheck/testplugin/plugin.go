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

// Package testplugin is a device plugin for the checker's own tests, written against the raw
// gRPC API so that it can break each rule on purpose: with no Faults it passes every check of
// package plugincheck, each fault breaks the rule of one check (a check that cannot fail is a
// defect), and each quirk is legitimately unusual and must pass (a check that fails a correct
// plugin is a defect too). It is used only by tests.
package testplugin

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// Fault is one rule the plugin breaks.
type Fault string

// The faults, each named after what the plugin does wrong.
const (
	NeverRegisters         Fault = "never-registers"
	BadVersion             Fault = "bad-version"
	BadResourceName        Fault = "bad-resource-name"
	EndpointInSubdir       Fault = "endpoint-in-subdir"
	OptionsMismatch        Fault = "options-mismatch"
	SilentList             Fault = "silent-list"
	DuplicateIDs           Fault = "duplicate-ids"
	BadHealth              Fault = "bad-health"
	AllocateNoResponse     Fault = "allocate-no-response"
	AllocateOneDevice      Fault = "allocate-one-device"
	AcceptsUnknown         Fault = "accepts-unknown"
	RelativePath           Fault = "relative-path"
	BadPermissions         Fault = "bad-permissions"
	BadCDIName             Fault = "bad-cdi-name"
	PreStartUnimplemented  Fault = "pre-start-unimplemented"
	PreferredUnimplemented Fault = "preferred-unimplemented"
	PreferredNoMustInclude Fault = "preferred-no-must-include"
	PreferredWrongSize     Fault = "preferred-wrong-size"
	PreferredUnavailable   Fault = "preferred-unavailable"
	NoHealthUpdate         Fault = "no-health-update"
	PartialHealthUpdate    Fault = "partial-health-update"
	EndsStream             Fault = "ends-stream"
	NoReregistration       Fault = "no-reregistration"
	LeavesSocket           Fault = "leaves-socket"
	// SocketElsewhere creates its socket in another directory (<dir>.elsewhere, standing for a
	// hard-coded /var/lib/kubelet/device-plugins) and registers its file name.
	SocketElsewhere Fault = "socket-elsewhere"
	// ConflictingMount puts two mounts with different host paths at one container path.
	ConflictingMount Fault = "conflicting-mount"
	// PreferredNoResponse answers GetPreferredAllocation with no container response (the
	// kubelet's "no preference": a warning).
	PreferredNoResponse Fault = "preferred-no-response"
	// SlowEndStream returns from ListAndWatch a second after its first list, on every stream.
	SlowEndStream Fault = "slow-end-stream"
	// EndsStreamAfterRestart keeps its first ListAndWatch stream open but returns from every
	// later one right after its first list.
	EndsStreamAfterRestart Fault = "ends-stream-after-restart"
	// StaleStreamAfterRestart sends its changes to its first ListAndWatch stream only: after the
	// kubelet restart they go nowhere (old goroutines that swallow changes).
	StaleStreamAfterRestart Fault = "stale-stream-after-restart"
	// DeviceOutsideDev answers device nodes outside /dev in the container (/testplugin/<id>):
	// the kubelet would pass them on, kubedevice's agent refuses the allocation.
	DeviceOutsideDev Fault = "device-outside-dev"
	// SecondNoReregistration, with TwoResources, registers only the first resource again after
	// the kubelet restart.
	SecondNoReregistration Fault = "second-no-reregistration"
)

// Quirks are legitimately unusual behaviours: with one of them the plugin still passes every
// check (or has checks skipped, with the reason).
const (
	// SharedDeviceNode answers one identical device node for every device ID.
	SharedDeviceNode Fault = "shared-device-node"
	// DropsDevices has no Unhealthy state: FlipHealth removes dev-0 from the list (and adds it
	// back the next time).
	DropsDevices Fault = "drops-devices"
	// DuplicateMount repeats each mount identically (the kubelet merges the repeats).
	DuplicateMount Fault = "duplicate-mount"
	// ControlCharIDs names its devices "\x00" to "\x03", as a widely deployed plugin for host
	// device files does (the kubelet accepts any ID); its paths and CDI names use the hex of the
	// ID.
	ControlCharIDs Fault = "control-char-ids"
	// EmptyFirstList sends an empty list and, a moment later, its full list (as a GPU vendor's
	// plugin does while it enumerates).
	EmptyFirstList Fault = "empty-first-list"
	// SlowFirstList sends its first list 1.5 s after ListAndWatch is called.
	SlowFirstList Fault = "slow-first-list"
	// EnvOnly answers Allocate with environment variables only: no mount, device node or CDI
	// device.
	EnvOnly Fault = "env-only"
	// TwoResources serves a second resource, SecondResourceName, on a socket of its own
	// (SecondSocketName) from the same process, as a GPU plugin serves one resource per GPU model.
	TwoResources Fault = "two-resources"
	// ViaPluginWatcher registers through the kubelet's plugin watcher: the plugin's directory is
	// then the plugins registry directory, where its socket serves the pluginregistration
	// Registration service (GetInfo, type DevicePlugin) beside the device plugin service, as the
	// kubelet's own stub plugin does; it never calls Register on kubelet.sock.
	ViaPluginWatcher Fault = "via-plugin-watcher"
)

const (
	// ResourceName is what the plugin advertises.
	ResourceName = "example.com/testplugin"
	// SocketName is its socket's file name.
	SocketName = "testplugin.sock"
	// SecondResourceName and SecondSocketName are the second resource's, with TwoResources.
	SecondResourceName = "example.com/testplugin-b"
	SecondSocketName   = "testplugin-b.sock"
	// Devices is how many devices it lists, dev-0 to dev-3: enough for the checker to tell a
	// preferred allocation that ignores must_include from one that honours it.
	Devices = 4
	// pollInterval is how often it looks at kubelet.sock and at its own socket.
	pollInterval = 50 * time.Millisecond
)

// Plugin is the test plugin.
type Plugin struct {
	v1beta1.UnimplementedDevicePluginServer
	registerapi.UnimplementedRegistrationServer
	dir      string
	resource string
	socket   string
	faults   map[Fault]bool
	// second is the second resource's plugin, with TwoResources.
	second *Plugin

	mu      sync.Mutex
	devices []*v1beta1.Device
	streams map[chan []*v1beta1.Device]bool
	// first is the first stream's channel, and served how many ListAndWatch calls there were.
	first  chan []*v1beta1.Device
	served int
	quit   chan struct{}
}

// New returns a plugin for the plugin directory dir (the plugins registry directory with
// ViaPluginWatcher) that breaks the rules faults name.
func New(dir string, faults ...Fault) *Plugin {
	p := newPlugin(dir, ResourceName, SocketName, faults)
	if p.faults[TwoResources] {
		var second []Fault
		for _, f := range faults {
			if f != TwoResources && f != SecondNoReregistration {
				second = append(second, f)
			}
		}
		if p.faults[SecondNoReregistration] {
			second = append(second, NoReregistration)
		}
		p.second = newPlugin(dir, SecondResourceName, SecondSocketName, second)
	}
	return p
}

func newPlugin(dir, resource, socket string, faults []Fault) *Plugin {
	p := &Plugin{dir: dir, resource: resource, socket: socket, faults: map[Fault]bool{},
		streams: map[chan []*v1beta1.Device]bool{}, quit: make(chan struct{})}
	for _, f := range faults {
		p.faults[f] = true
	}
	if p.faults[BadResourceName] {
		p.resource = "testplugin"
	}
	for i := range Devices {
		id := fmt.Sprintf("dev-%d", i)
		if p.faults[ControlCharIDs] {
			id = string(rune(i))
		}
		p.devices = append(p.devices, &v1beta1.Device{ID: id, Health: v1beta1.Healthy})
	}
	if p.faults[DuplicateIDs] {
		p.devices = append(p.devices, &v1beta1.Device{ID: "dev-0", Health: v1beta1.Healthy})
	}
	if p.faults[BadHealth] {
		p.devices[Devices-1].Health = "OK"
	}
	return p
}

func (p *Plugin) socketPath() string {
	if p.faults[SocketElsewhere] {
		return filepath.Join(p.dir+".elsewhere", p.socket)
	}
	if p.faults[EndpointInSubdir] {
		return filepath.Join(p.dir, "sub", p.socket)
	}
	return filepath.Join(p.dir, p.socket)
}

func (p *Plugin) endpoint() string {
	if p.faults[SocketElsewhere] {
		return p.socket
	}
	rel, _ := filepath.Rel(p.dir, p.socketPath())
	return rel
}

// Run serves and registers until ctx ends, registering again whenever kubelet.sock is created
// again or its socket is removed; then it removes its socket. With TwoResources it runs the
// second resource's plugin beside it.
func (p *Plugin) Run(ctx context.Context) error {
	if p.second == nil {
		return p.run(ctx)
	}
	errs := make(chan error, 1)
	go func() { errs <- p.second.run(ctx) }()
	return errors.Join(p.run(ctx), <-errs)
}

func (p *Plugin) run(ctx context.Context) error {
	if err := os.MkdirAll(filepath.Dir(p.socketPath()), 0o750); err != nil {
		return err
	}
	server, err := p.serve()
	if err != nil {
		return err
	}
	defer func() {
		close(p.quit)
		server.Stop()
		if !p.faults[LeavesSocket] {
			_ = os.Remove(p.socketPath())
		}
		if p.faults[SocketElsewhere] {
			_ = os.Remove(filepath.Dir(p.socketPath()))
		}
	}()
	kubelet := filepath.Join(p.dir, "kubelet.sock")
	// Through the plugin watcher, the kubelet finds the socket: there is nothing to call.
	registered := p.faults[ViaPluginWatcher] || p.register(ctx)
	lastKubelet := inode(kubelet)
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		if p.faults[NoReregistration] && registered {
			continue
		}
		if inode(p.socketPath()) == "" {
			server.Stop()
			if server, err = p.serve(); err != nil {
				return err
			}
			registered = p.faults[ViaPluginWatcher]
		}
		if k := inode(kubelet); k != lastKubelet && !p.faults[ViaPluginWatcher] {
			lastKubelet, registered = k, false
		}
		if !registered && lastKubelet != "" {
			registered = p.register(ctx)
		}
	}
}

func (p *Plugin) serve() (*grpc.Server, error) {
	_ = os.Remove(p.socketPath())
	ln, err := net.Listen("unix", p.socketPath())
	if err != nil {
		return nil, err
	}
	if p.faults[LeavesSocket] {
		// A process killed or exiting without cleaning up leaves its socket.
		ln.(*net.UnixListener).SetUnlinkOnClose(false)
	}
	s := grpc.NewServer()
	v1beta1.RegisterDevicePluginServer(s, p)
	if p.faults[ViaPluginWatcher] {
		registerapi.RegisterRegistrationServer(s, p)
	}
	go func() { _ = s.Serve(ln) }()
	return s, nil
}

// register calls Register on kubelet.sock; it says whether the kubelet accepted.
func (p *Plugin) register(ctx context.Context) bool {
	if p.faults[NeverRegisters] {
		return true
	}
	req := &v1beta1.RegisterRequest{
		Version: v1beta1.Version, Endpoint: p.endpoint(), ResourceName: p.resource,
		Options: p.options(),
	}
	if p.faults[BadVersion] {
		req.Version = "v1alpha1"
	}

	if p.faults[OptionsMismatch] {
		req.Options = &v1beta1.DevicePluginOptions{PreStartRequired: !req.Options.PreStartRequired}
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := grpc.NewClient("unix://"+filepath.Join(p.dir, "kubelet.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return false
	}
	defer conn.Close()
	_, err = v1beta1.NewRegistrationClient(conn).Register(ctx, req)
	// A rejected registration is not retried: the API says the plugin should terminate.
	return err == nil || status.Code(err) == codes.Unknown
}

func (p *Plugin) options() *v1beta1.DevicePluginOptions {
	return &v1beta1.DevicePluginOptions{PreStartRequired: true, GetPreferredAllocationAvailable: true}
}

// GetInfo answers the plugin watcher, with ViaPluginWatcher: a device plugin for the resource,
// served on this socket.
func (p *Plugin) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return &registerapi.PluginInfo{Type: registerapi.DevicePlugin, Name: p.resource, SupportedVersions: []string{v1beta1.Version}}, nil
}

// NotifyRegistrationStatus takes the plugin watcher's verdict.
func (p *Plugin) NotifyRegistrationStatus(context.Context, *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	return &registerapi.RegistrationStatusResponse{}, nil
}

// FlipHealthOf flips the health of dev-0 of resource ("" for every resource the process serves).
func (p *Plugin) FlipHealthOf(resource string) {
	if resource == "" || resource == p.resource {
		p.FlipHealth()
	}
	if p.second != nil && (resource == "" || resource == p.second.resource) {
		p.second.FlipHealth()
	}
}

// FlipHealth flips the health of dev-0 and sends the new list to every stream.
func (p *Plugin) FlipHealth() {
	p.mu.Lock()
	defer p.mu.Unlock()
	devs := p.flipped()
	p.devices = devs
	if p.faults[NoHealthUpdate] {
		return
	}
	send := devs
	if p.faults[PartialHealthUpdate] {
		send = devs[:1]
	}
	for ch := range p.streams {
		if p.faults[StaleStreamAfterRestart] && ch != p.first {
			continue
		}
		select {
		case ch <- send:
		default:
		}
	}
	if p.faults[StaleStreamAfterRestart] && !p.streams[p.first] {
		// The first stream is gone; the change is sent to it all the same, and lost.
		select {
		case p.first <- send:
		default:
		}
	}
}

// flipped returns the list with dev-0's health flipped, or (DropsDevices) dev-0 removed or added
// back.
func (p *Plugin) flipped() []*v1beta1.Device {
	devs := make([]*v1beta1.Device, 0, len(p.devices)+1)
	if p.faults[DropsDevices] {
		has := slices.ContainsFunc(p.devices, func(d *v1beta1.Device) bool { return d.GetID() == "dev-0" })
		if !has {
			devs = append(devs, &v1beta1.Device{ID: "dev-0", Health: v1beta1.Healthy})
		}
		for _, d := range p.devices {
			if d.GetID() != "dev-0" {
				devs = append(devs, d)
			}
		}
		return devs
	}
	devs = append(devs, p.devices...)
	health := v1beta1.Unhealthy
	if devs[0].GetHealth() != v1beta1.Healthy {
		health = v1beta1.Healthy
	}
	for i, d := range devs {
		if d.GetID() == devs[0].GetID() {
			devs[i] = &v1beta1.Device{ID: d.GetID(), Health: health}
		}
	}
	return devs
}

// GetDevicePluginOptions answers pre_start_required and get_preferred_allocation_available.
func (p *Plugin) GetDevicePluginOptions(context.Context, *v1beta1.Empty) (*v1beta1.DevicePluginOptions, error) {
	return p.options(), nil
}

// ListAndWatch sends the list, then every change.
func (p *Plugin) ListAndWatch(_ *v1beta1.Empty, s v1beta1.DevicePlugin_ListAndWatchServer) error {
	ch := make(chan []*v1beta1.Device, 4)
	p.mu.Lock()
	first := p.devices
	p.streams[ch] = true
	p.served++
	later := p.served > 1
	if !later {
		p.first = ch
	}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.streams, ch)
		p.mu.Unlock()
	}()
	if p.faults[EmptyFirstList] {
		if err := s.Send(&v1beta1.ListAndWatchResponse{}); err != nil {
			return err
		}
		time.Sleep(time.Millisecond)
	}
	if p.faults[SlowFirstList] {
		time.Sleep(1500 * time.Millisecond)
	}
	if !p.faults[SilentList] {
		if err := s.Send(&v1beta1.ListAndWatchResponse{Devices: first}); err != nil {
			return err
		}
	}
	if p.faults[EndsStream] || (p.faults[EndsStreamAfterRestart] && later) {
		return nil
	}
	var end <-chan time.Time
	if p.faults[SlowEndStream] {
		end = time.After(time.Second)
	}
	for {
		select {
		case <-end:
			return nil
		case devs := <-ch:
			if err := s.Send(&v1beta1.ListAndWatchResponse{Devices: devs}); err != nil {
				return err
			}
		case <-s.Context().Done():
			return nil
		case <-p.quit:
			return nil
		}
	}
}

func (p *Plugin) known(id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.ContainsFunc(p.devices, func(d *v1beta1.Device) bool { return d.GetID() == id })
}

// Allocate answers, per container, an env, a device node and a mount per device, and a CDI
// device per device.
func (p *Plugin) Allocate(_ context.Context, req *v1beta1.AllocateRequest) (*v1beta1.AllocateResponse, error) {
	resp := &v1beta1.AllocateResponse{}
	for _, c := range req.GetContainerRequests() {
		for _, id := range c.GetDevicesIds() {
			if !p.faults[AcceptsUnknown] && !p.known(id) {
				return nil, status.Errorf(codes.NotFound, "no device %q", id)
			}
		}
	}
	if p.faults[AllocateNoResponse] {
		return resp, nil
	}
	if p.faults[EnvOnly] {
		for _, c := range req.GetContainerRequests() {
			resp.ContainerResponses = append(resp.ContainerResponses,
				&v1beta1.ContainerAllocateResponse{Envs: map[string]string{"TESTPLUGIN_DEVICES": strings.Join(c.GetDevicesIds(), ",")}})
		}
		return resp, nil
	}
	for _, c := range req.GetContainerRequests() {
		ids := c.GetDevicesIds()
		if p.faults[AllocateOneDevice] && len(ids) > 1 {
			return nil, status.Errorf(codes.InvalidArgument, "one device per container, not %d", len(ids))
		}
		resp.ContainerResponses = append(resp.ContainerResponses, p.containerResponse(ids))
	}
	return resp, nil
}

// containerResponse is one container's answer: a device node, a mount and a CDI device per ID,
// each broken as the plugin's faults say.
func (p *Plugin) containerResponse(ids []string) *v1beta1.ContainerAllocateResponse {
	r := &v1beta1.ContainerAllocateResponse{Envs: map[string]string{"TESTPLUGIN_DEVICES": strings.Join(ids, ",")}}
	for _, id := range ids {
		if p.faults[ControlCharIDs] {
			id = hex.EncodeToString([]byte(id))
		}
		dev := &v1beta1.DeviceSpec{ContainerPath: "/dev/testplugin/" + id, HostPath: "/dev/null", Permissions: "rw"}
		mount := &v1beta1.Mount{ContainerPath: "/var/run/testplugin/" + id, HostPath: "/etc/hostname", ReadOnly: true}
		cdi := &v1beta1.CDIDevice{Name: "example.com/testplugin=" + id}
		if p.faults[DeviceOutsideDev] {
			dev.ContainerPath = "/testplugin/" + id
		}
		if p.faults[RelativePath] {
			mount.ContainerPath = "testplugin/" + id
		}
		if p.faults[BadPermissions] {
			dev.Permissions = "rx"
		}
		if p.faults[BadCDIName] {
			cdi.Name = id
		}
		if p.faults[SharedDeviceNode] {
			// One device node serves every ID: identical repeats, which the kubelet merges.
			dev.ContainerPath = "/dev/testplugin/shared"
		}
		r.Devices = append(r.Devices, dev)
		r.Mounts = append(r.Mounts, mount)
		if p.faults[DuplicateMount] {
			r.Mounts = append(r.Mounts, mount)
		}
		if p.faults[ConflictingMount] {
			r.Mounts = append(r.Mounts, &v1beta1.Mount{ContainerPath: mount.ContainerPath, HostPath: "/etc/hosts", ReadOnly: true})
		}
		r.CdiDevices = append(r.CdiDevices, cdi)
	}
	return r
}

// PreStartContainer checks the devices are known.
func (p *Plugin) PreStartContainer(_ context.Context, req *v1beta1.PreStartContainerRequest) (*v1beta1.PreStartContainerResponse, error) {
	if p.faults[PreStartUnimplemented] {
		return nil, status.Error(codes.Unimplemented, "method PreStartContainer not implemented")
	}
	for _, id := range req.GetDevicesIds() {
		if !p.known(id) {
			return nil, status.Errorf(codes.NotFound, "no device %q", id)
		}
	}
	return &v1beta1.PreStartContainerResponse{}, nil
}

// GetPreferredAllocation picks the devices that must be included, then the available ones in
// order.
func (p *Plugin) GetPreferredAllocation(_ context.Context, req *v1beta1.PreferredAllocationRequest) (*v1beta1.PreferredAllocationResponse, error) {
	if p.faults[PreferredUnimplemented] {
		return nil, status.Error(codes.Unimplemented, "method GetPreferredAllocation not implemented")
	}
	resp := &v1beta1.PreferredAllocationResponse{}
	for _, c := range req.GetContainerRequests() {
		size := int(c.GetAllocationSize())
		var ids []string
		from := c.GetAvailableDeviceIDs()
		switch {
		case p.faults[PreferredWrongSize]:
			size++
		case p.faults[PreferredUnavailable]:
			from = nil
			for _, d := range p.devices {
				from = append(from, d.GetID())
			}
		}
		if !p.faults[PreferredNoMustInclude] {
			ids = append(ids, c.GetMustIncludeDeviceIDs()...)
		}
		for _, id := range from {
			if len(ids) >= size {
				break
			}
			if !slices.Contains(ids, id) {
				ids = append(ids, id)
			}
		}
		resp.ContainerResponses = append(resp.ContainerResponses, &v1beta1.ContainerPreferredAllocationResponse{DeviceIDs: ids})
	}
	if p.faults[PreferredNoResponse] {
		resp.ContainerResponses = nil
	}
	return resp, nil
}

// inode identifies the file at path, "" when there is none: a socket created again is another
// file. Inode numbers are reused at once, so the creation time is part of it.
func inode(path string) string {
	st, err := os.Stat(path)
	if err != nil {
		return ""
	}
	var ino uint64
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		ino = sys.Ino
	}
	return fmt.Sprintf("%d@%d", ino, st.ModTime().UnixNano())
}
