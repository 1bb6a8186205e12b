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
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"k8s.io/utils/clock"

	"github.com/kubedevice/kubedevice/internal/allocpolicy"
	"github.com/kubedevice/kubedevice/internal/nodeagent/checkpoint"
	"github.com/kubedevice/kubedevice/internal/nodeagent/poddevices"
	"github.com/kubedevice/kubedevice/internal/nodeagent/registration"
	"github.com/kubedevice/kubedevice/internal/nodeagent/topology"
)

// DefaultEndpointGracePeriod is how long a resource whose plugins are all
// gone stays visible (with nothing allocatable) before it is removed; the
// kubelet's endpointStopGracePeriod.
const DefaultEndpointGracePeriod = 5 * time.Minute

// DefaultStateDir is the agent's own state directory (checkpoint), apart
// from the plugin directory the device plugins mount.
const DefaultStateDir = "/var/lib/kubedevice/state"

// errSupersededConnection refuses a connection older than the one already
// registered on the same socket (two registrations raced).
var errSupersededConnection = errors.New("a newer registration of this device plugin socket is connected")

// Config configures a Manager. Start from DefaultConfig: New fills in the
// zero values of PluginDir, EndpointGracePeriod and Clock, but an empty
// PluginsRegistryDir means "disabled".
type Config struct {
	// PluginDir holds kubelet.sock and the plugins' sockets. Absolute;
	// defaults to registration.DefaultPluginDir.
	PluginDir string
	// PluginsRegistryDir is the pluginwatcher directory, or empty to disable
	// that registration path. DefaultConfig sets
	// registration.DefaultPluginsRegistryDir.
	PluginsRegistryDir string
	// EndpointGracePeriod defaults to DefaultEndpointGracePeriod.
	EndpointGracePeriod time.Duration
	// Clock is used for every timestamp and timer of the device state;
	// defaults to the real clock.
	Clock clock.WithDelayedExecution
	// Registerer, if set, receives the manager's metrics.
	Registerer prometheus.Registerer
	// DialTimeout bounds dialing a plugin; defaults to
	// registration.DefaultDialTimeout.
	DialTimeout time.Duration
	// RegistrationRate and RegistrationBurst are the token bucket that bounds
	// registration attempts on both paths (each dials the plugin back); an
	// attempt beyond it is refused with ResourceExhausted. Zero (or less)
	// means registration.DefaultRegistrationRate (10 a second) and
	// registration.DefaultRegistrationBurst (50); rate.Inf lifts the bound.
	RegistrationRate  rate.Limit
	RegistrationBurst int

	// StateDir holds the manager's checkpoint and reallocation files. It
	// must not be the plugin directory in production: every device plugin
	// mounts that one read-write. DefaultConfig sets DefaultStateDir; empty
	// means PluginDir (the layout of earlier versions, kept for embedders
	// and tests).
	StateDir string
	// CheckpointPath is the manager's checkpoint file; defaults to
	// <StateDir>/kubedevice_checkpoint. When it has no file but
	// <PluginDir>/kubedevice_checkpoint exists (an agent upgraded from one
	// that kept its state there), that one is read, written here and
	// removed (RestoreCheckpoint).
	CheckpointPath string
	// BootIDPath is the file holding the node's boot ID, recorded in the
	// checkpoint to tell an agent restart from a node reboot; defaults to
	// /proc/sys/kernel/random/boot_id.
	BootIDPath string
	// SysRoot is the root under which NUMA nodes are discovered
	// (<SysRoot>/sys/devices/system/node); defaults to "/".
	SysRoot string
	// TopologyPolicy is the topology manager policy applied at allocation;
	// defaults to none (no alignment, as the kubelet without a topology
	// manager).
	TopologyPolicy topology.Policy
	// TopologyScope is the granularity of alignment; defaults to container.
	TopologyScope topology.Scope
	// TopologyPolicyOptions are the kubelet's topology manager policy
	// options (prefer-closest-numa-nodes, max-allowable-numa-nodes); the
	// zero value is the kubelet's default. With prefer-closest-numa-nodes the
	// NUMA distances are read from sysfs under SysRoot; a policy other than
	// none refuses to start on a machine with more NUMA nodes than the max.
	TopologyPolicyOptions topology.PolicyOptions
	// AllocateTimeout bounds the Allocate RPC; defaults to 30 s.
	AllocateTimeout time.Duration
	// PreferredAllocationTimeout bounds the GetPreferredAllocation RPC;
	// defaults to 10 s. When it expires (or the call fails) the manager
	// chooses the devices itself.
	PreferredAllocationTimeout time.Duration
	// PreStartTimeout bounds the PreStartContainer RPC; defaults to 30 s.
	PreStartTimeout time.Duration
	// AllocatePolicy is the administrator's policy on plugins' Allocate responses; nil checks
	// their structure only (internal/allocpolicy).
	AllocatePolicy *allocpolicy.Policy
	// ServedByDRA reports whether a resource is served through DRA on this
	// node (the agent's --dra-resources): its devices are prepared for
	// ResourceClaims (PrepareClaim) and never allocated to a pod that does
	// not hold them already; the other resources' devices are never
	// prepared for a claim. Nil: no resource is.
	ServedByDRA func(resource string) bool
}

// DefaultConfig returns the production configuration.
func DefaultConfig() Config {
	return Config{
		PluginDir:           registration.DefaultPluginDir,
		PluginsRegistryDir:  registration.DefaultPluginsRegistryDir,
		EndpointGracePeriod: DefaultEndpointGracePeriod,
		Clock:               clock.RealClock{},
		Registerer:          prometheus.DefaultRegisterer,
		StateDir:            DefaultStateDir,
		BootIDPath:          checkpoint.DefaultBootIDPath,
		SysRoot:             "/",
		TopologyPolicy:      topology.PolicyNone,
		TopologyScope:       topology.ScopeContainer,
		AllocateTimeout:     defaultAllocateTimeout,

		PreferredAllocationTimeout: defaultGetPreferredAllocationTimeout,
		PreStartTimeout:            defaultPreStartContainerTimeout,
	}
}

// Manager is the device manager core: it accepts device plugins and keeps
// the device state of their resources. See the package documentation.
type Manager struct {
	cfg     Config
	clock   clock.WithDelayedExecution
	grace   time.Duration
	metrics *metrics
	server  *registration.Server

	// logger is set by Start; before that it is klog's background logger.
	logger   klog.Logger
	stopOnce sync.Once

	// removals are the grace timers' removals in flight (startRemoval):
	// Stop waits for them, checkpoint writes included, and once
	// removalsStopped is set no timer starts another.
	removalsMu      sync.Mutex
	removalsStopped bool
	removals        sync.WaitGroup

	// mu guards the device state.
	mu        sync.Mutex
	resources map[string]*resourceState

	subsMu sync.Mutex
	subs   map[*Subscription]struct{}

	// numaNodes are the machine's NUMA nodes (topology hints).
	numaNodes []int
	// numa is the same nodes with their distances (topology admission).
	numa topology.NUMAInfo

	// Allocation state, guarded by mu (allocate.go, checkpoint.go).
	//
	// pods holds every committed allocation and every in-flight
	// reservation; podRefs the namespace and name of the pods that have a
	// committed allocation.
	pods    *poddevices.Store
	podRefs map[string]poddevices.PodRef
	// affinity is the NUMA affinity the topology policy chose, by pod UID
	// and container name (podScopeKey for the pod as a whole).
	affinity map[string]map[string]topology.BitMask
	// stale lists the allocations restored across a node reboot whose
	// plugin Allocate must run again, by pod UID.
	stale map[string]sets.Set[containerResource]
	// cordons are the devices never to allocate, by resource.
	cordons map[string]sets.Set[string]
	// restored is set once the checkpoint was restored (or rebuilt, or
	// imported); no checkpoint is written before, so an existing file is
	// never overwritten with empty state.
	restored bool
	// rebuildPending is set when the checkpoint was corrupt, until
	// RestoreAllocations has rebuilt the state: nothing is allocated
	// meanwhile, so no device a lost allocation held is handed out again.
	rebuildPending bool
	// stateSeq counts the changes to what the checkpoint records;
	// dirtyPods and dirtyResources name what changed since the last write,
	// and needSnapshot asks for the whole state to be written (the first
	// write of the process, after a restore or after a failed write).
	stateSeq       uint64
	dirtyPods      sets.Set[string]
	dirtyResources sets.Set[string]
	needSnapshot   bool
	// ckptInfo is the provenance of the checkpoint on disk.
	ckptInfo CheckpointInfo

	// ckptMu serializes checkpoint writes (group commit, persist.go).
	ckptMu     sync.Mutex
	ckptStore  *checkpoint.Journal
	staleStore *checkpoint.Store
	// ckptWritten is the stateSeq the file was last written at, ckptSynced
	// the one it is durable at (frees are written before they are synced).
	ckptWritten, ckptSynced uint64

	// podLocks serializes the allocations of one pod.
	podLocksMu sync.Mutex
	podLocks   map[string]*podLock
}

// New returns a manager that is not started.
func New(cfg Config) (*Manager, error) {
	numa, err := completeConfig(&cfg)
	if err != nil {
		return nil, err
	}
	m := &Manager{
		cfg:       cfg,
		clock:     cfg.Clock,
		grace:     cfg.EndpointGracePeriod,
		metrics:   newMetrics(),
		logger:    klog.Background(),
		resources: make(map[string]*resourceState),
		subs:      make(map[*Subscription]struct{}),
		numaNodes: numa.Nodes,
		numa:      numa,
		pods:      poddevices.New(),
		podRefs:   make(map[string]poddevices.PodRef),
		affinity:  make(map[string]map[string]topology.BitMask),
		stale:     make(map[string]sets.Set[containerResource]),
		cordons:   make(map[string]sets.Set[string]),
		podLocks:  make(map[string]*podLock),

		dirtyPods:      sets.New[string](),
		dirtyResources: sets.New[string](),
		needSnapshot:   true,
	}
	if cfg.Registerer != nil {
		if err := m.metrics.register(cfg.Registerer); err != nil {
			return nil, fmt.Errorf("registering device manager metrics: %w", err)
		}
	}
	server, err := registration.NewServer(registration.Config{
		PluginDir:          filepath.Clean(cfg.PluginDir),
		PluginsRegistryDir: cfg.PluginsRegistryDir,
		Handler:            pluginHandler{m},
		OnRegistration:     m.metrics.countRegistration,
		DialTimeout:        cfg.DialTimeout,
		RegistrationRate:   cfg.RegistrationRate,
		RegistrationBurst:  cfg.RegistrationBurst,
	})
	if err != nil {
		return nil, fmt.Errorf("creating device plugin registration server: %w", err)
	}
	m.server = server
	return m, nil
}

// completeConfig fills cfg's defaults and checks the machine against its topology policy,
// returning the machine's NUMA information.
func completeConfig(cfg *Config) (topology.NUMAInfo, error) {
	if cfg.PluginDir == "" {
		cfg.PluginDir = registration.DefaultPluginDir
	}
	if cfg.EndpointGracePeriod <= 0 {
		cfg.EndpointGracePeriod = DefaultEndpointGracePeriod
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if err := defaultAllocationConfig(cfg); err != nil {
		return topology.NUMAInfo{}, err
	}
	numa, err := topology.ReadNUMAInfo(cfg.SysRoot, cfg.TopologyPolicyOptions.PreferClosestNUMA)
	if err != nil {
		return topology.NUMAInfo{}, fmt.Errorf("creating device manager: %w", err)
	}
	if err := topology.CheckMachine(cfg.TopologyPolicy, cfg.TopologyPolicyOptions, numa.Nodes); err != nil {
		return topology.NUMAInfo{}, fmt.Errorf("creating device manager: %w", err)
	}
	return numa, nil
}

// Start serves the registration socket and the pluginwatcher. ctx supplies
// the logger; the manager runs until Stop. Restore checkpointed resources
// (RestoreRegisteredResources) before Start.
//
// If RestoreCheckpoint was not called, Start restores the checkpoint itself:
// a missing file means empty state, a corrupt one is quarantined and logged
// (and allocation waits for RestoreAllocations, see RestoreCheckpoint), any
// other failure fails Start.
func (m *Manager) Start(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithName("devicemanager")
	m.mu.Lock()
	m.logger = logger
	restored := m.restored
	m.mu.Unlock()
	if !restored {
		if _, err := m.RestoreCheckpoint(klog.NewContext(ctx, logger)); err != nil {
			if !errors.Is(err, checkpoint.ErrCorrupt) {
				return fmt.Errorf("starting device manager: %w", err)
			}
			logger.Error(err, "Continuing after failing to read the checkpoint; allocation waits for RestoreAllocations")
		}
	}
	if err := m.server.Start(klog.NewContext(ctx, logger)); err != nil {
		return fmt.Errorf("starting device plugin registration server: %w", err)
	}
	logger.Info("Started device manager", "socketPath", m.server.SocketPath(), "pluginsRegistryDir", m.cfg.PluginsRegistryDir)
	return nil
}

// Stop disconnects every plugin and stops serving. It is idempotent and safe
// without Start. Device state stays readable. Nothing writes the checkpoint
// once it has returned: it waits for a removal a grace timer started.
func (m *Manager) Stop() {
	m.stopOnce.Do(func() {
		m.server.Stop()
		m.removalsMu.Lock()
		m.removalsStopped = true
		m.removalsMu.Unlock()
		m.removals.Wait()
		m.mu.Lock()
		defer m.mu.Unlock()
		for _, r := range m.resources {
			r.stopGraceTimer()
		}
		m.logger.V(2).Info("Stopped device manager")
	})
}

// SocketPath is the registration socket.
func (m *Manager) SocketPath() string { return m.server.SocketPath() }

// Check is the registration server's health check (kubelet "device-plugin"
// healthz): nil while plugins can register.
func (m *Manager) Check() error { return m.server.Check() }

// RestoreRegisteredResources restores the resources of the checkpoint
// (resource name → device IDs it had): each gets empty healthy and unhealthy
// sets and a stopped endpoint, so its capacity and allocatable are 0 until a
// plugin registers, and it is removed when the grace period ends, as the
// kubelet's readCheckpoint. The device IDs are shown in snapshots as awaiting
// their plugin (never counted, never allocatable). Resources already known,
// and names that are not extended resource names, are left alone.
func (m *Manager) RestoreRegisteredResources(registered map[string][]string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.clock.Now()
	for name, ids := range registered {
		if _, ok := m.resources[name]; ok {
			continue
		}
		if !registration.IsExtendedResourceName(name) {
			m.logger.Error(nil, "Ignoring invalid resource name from the checkpoint", "resourceName", name)
			continue
		}
		r := newResourceState(name)
		r.primary = newStoppedEndpoint(name, now)
		r.state, r.stateSince = PluginDisconnected, now
		r.awaiting = make(map[string]*device, len(ids))
		for _, id := range ids {
			if id == "" || len(id) > MaxDeviceIDLength || !validIDEncoding(id) {
				continue
			}
			r.awaiting[id] = &device{
				id: id, health: Unhealthy, reason: ReasonAwaitingPlugin, message: msgAwaitingPlugin, lastTransition: now,
			}
		}
		m.resources[name] = r
		m.scheduleRemovalLocked(r)
		m.metrics.setResource(r)
		m.notifyLocked(name)
		m.logger.V(2).Info("Restored device plugin resource from checkpoint", "resourceName", name, "devices", len(r.awaiting))
	}
}

// DeviceInstances are devices by ID.
type DeviceInstances map[string]*pluginapi.Device

// ResourceDeviceInstances are devices by resource name and ID.
type ResourceDeviceInstances map[string]DeviceInstances

// GetAllocatableDevices returns the healthy devices of every resource that
// are not cordoned, with their topology. The result is a copy.
func (m *Manager) GetAllocatableDevices() ResourceDeviceInstances {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(ResourceDeviceInstances, len(m.resources))
	for name, r := range m.resources {
		cordoned := m.cordons[name]
		devs := make(DeviceInstances, r.healthy.Len())
		for id := range r.healthy {
			if cordoned.Has(id) {
				continue
			}
			devs[id] = r.devices[id].proto()
		}
		out[name] = devs
	}
	return out
}

// Snapshot returns a copy of one resource's state; false if the manager does
// not know the resource (never registered, or removed).
func (m *Manager) Snapshot(resourceName string) (ResourceSnapshot, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.resources[resourceName]
	if !ok {
		return ResourceSnapshot{}, false
	}
	return m.snapshotLocked(r), true
}

// Snapshots returns a copy of every resource's state, sorted by name.
func (m *Manager) Snapshots() []ResourceSnapshot {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]ResourceSnapshot, 0, len(m.resources))
	for _, r := range m.resources {
		out = append(out, m.snapshotLocked(r))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ResourceName < out[j].ResourceName })
	return out
}

// The state helpers below are for the code that allocates devices. The
// caller holds m.mu.

// resourceLocked returns the resource's state, or nil.
func (m *Manager) resourceLocked(name string) *resourceState { return m.resources[name] }

// isDevicePluginResourceLocked reports whether a plugin registered the
// resource (or the checkpoint restored it) and it was not removed since.
func (m *Manager) isDevicePluginResourceLocked(name string) bool {
	_, ok := m.resources[name]
	return ok
}

// healthyDevicesLocked returns the resource's healthy device IDs (nil if
// unknown). The set is the manager's: do not modify it.
func (m *Manager) healthyDevicesLocked(name string) sets.Set[string] {
	if r := m.resources[name]; r != nil {
		return r.healthy
	}
	return nil
}

// endpointLocked returns the endpoint that serves the resource's RPCs: the
// newest connected one, else a stopped one (its RPCs fail with
// "endpoint ... has been stopped").
func (m *Manager) endpointLocked(name string) (*endpoint, bool) {
	if r := m.resources[name]; r != nil {
		return r.primary, true
	}
	return nil, false
}

// removeExpiredLocked removes the resources without a plugin whose grace
// period is over, and reports whether it removed any; the caller then
// writes the checkpoint (after releasing the lock), as the kubelet's
// GetCapacity does.
func (m *Manager) removeExpiredLocked(now time.Time) bool {
	removed := false
	for name, r := range m.resources {
		if !r.primary.stopGracePeriodExpired(now, m.grace) {
			continue
		}
		r.stopGraceTimer()
		delete(m.resources, name)
		m.metrics.deleteResource(name)
		m.notifyLocked(name)
		m.resourceChangedLocked(name)
		removed = true
		m.logger.Info("Removed device plugin resource: no plugin registered within the grace period", "resourceName", name, "gracePeriod", m.grace)
	}
	return removed
}

// scheduleRemovalLocked arms the timer that removes r once its grace period
// is over, so subscribers learn of the removal without anyone polling.
func (m *Manager) scheduleRemovalLocked(r *resourceState) {
	r.stopGraceTimer()
	delay := r.primary.stoppedAt().Add(m.grace).Sub(m.clock.Now())
	r.graceTimer = m.clock.AfterFunc(max(delay, 0), m.startRemoval)
}

// startRemoval is the grace timers' callback: it runs removeExpired on a
// goroutine Stop waits for, unless Stop has begun. The callback may run with
// the clock's lock held (fake clocks do), so it must not call back into the
// clock synchronously, nor take m.mu, whose holders read the clock.
func (m *Manager) startRemoval() {
	m.removalsMu.Lock()
	defer m.removalsMu.Unlock()
	if m.removalsStopped {
		return
	}
	m.removals.Add(1)
	go func() {
		defer m.removals.Done()
		m.removeExpired()
	}()
}

func (m *Manager) removeExpired() {
	m.mu.Lock()
	expired := m.removeExpiredLocked(m.clock.Now())
	logger := m.logger
	m.mu.Unlock()
	if expired {
		m.persistLogged(logger)
	}
}

// pluginHandler receives the registration server's callbacks; it keeps them
// off the Manager's exported API.
type pluginHandler struct{ m *Manager }

var _ registration.Handler = pluginHandler{}

func (h pluginHandler) PluginConnected(ctx context.Context, p registration.DevicePlugin) error {
	return h.m.pluginConnected(ctx, p)
}

func (h pluginHandler) PluginListAndWatchReceiver(ctx context.Context, p registration.DevicePlugin, resp *pluginapi.ListAndWatchResponse) {
	h.m.pluginListAndWatchReceiver(ctx, p, resp)
}

func (h pluginHandler) PluginDisconnected(ctx context.Context, p registration.DevicePlugin, cause error) {
	h.m.pluginDisconnected(ctx, p, cause)
}

// pluginConnected adds an endpoint for a plugin that answered
// GetDevicePluginOptions. The newest registration serves the resource's
// RPCs. A registration on a socket path that already has an endpoint takes
// it over (see registration.Server's adopt); the device set is kept until
// the new plugin's first ListAndWatch message replaces it.
func (m *Manager) pluginConnected(ctx context.Context, p registration.DevicePlugin) error {
	logger := klog.FromContext(ctx)
	name, socket := p.Resource(), p.SocketPath()

	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.clock.Now()
	r := m.resources[name]
	if r == nil {
		r = newResourceState(name)
		m.resources[name] = r
	}
	if old := r.endpoints[socket]; old != nil {
		if old.clientID > p.ID() {
			return fmt.Errorf("connecting device plugin at %s: %w", socket, errSupersededConnection)
		}
		old.setStopTime(now)
		logger.Info("Device plugin registered again on the same socket; the new connection takes over", "olderClientID", old.clientID)
	}
	r.endpoints[socket] = newEndpoint(p)
	r.primary = r.newestLiveEndpoint()
	if r.state != PluginRegistered {
		r.state, r.stateSince = PluginRegistered, now
		r.stopGraceTimer()
	}
	m.metrics.setResource(r)
	m.notifyLocked(name)
	logger.V(2).Info("Device plugin connected", "endpoints", len(r.endpoints))
	return nil
}

// pluginListAndWatchReceiver replaces the resource's device set with a
// message from one of its connected endpoints. An invalid message is rejected
// whole; a message from a connection that is no longer registered is
// ignored.
func (m *Manager) pluginListAndWatchReceiver(ctx context.Context, p registration.DevicePlugin, resp *pluginapi.ListAndWatchResponse) {
	logger := klog.FromContext(ctx)
	name, devs := p.Resource(), resp.GetDevices()
	reason, invalid := validateDeviceList(devs)
	if invalid != nil {
		m.metrics.invalidUpdates.WithLabelValues(name, reason).Inc()
		logger.Error(invalid, "Rejected ListAndWatch message from device plugin; keeping the previous devices", "reason", reason)
	}

	m.mu.Lock()
	r := m.resources[name]
	if r == nil || r.endpoints[p.SocketPath()] == nil || r.endpoints[p.SocketPath()].clientID != p.ID() {
		m.mu.Unlock()
		logger.V(2).Info("Ignoring ListAndWatch message from a connection that is no longer registered")
		return
	}
	if invalid != nil {
		// Shown on the resource's NodeDevice (condition Healthy) until a message is accepted.
		r.rejected = &ListRejection{Reason: reason, Message: invalid.Error(), At: m.clock.Now()}
		m.notifyLocked(name)
		m.mu.Unlock()
		return
	}
	before := r.registeredIDs()
	first := !r.reported
	wasRejected := r.rejected != nil
	r.rejected = nil
	if r.applyDevices(devs, m.clock.Now(), func(id string) bool { return m.holderLocked(name, id) != nil }) || wasRejected {
		m.metrics.setResource(r)
		m.notifyLocked(name)
	}
	// The kubelet writes its checkpoint on every ListAndWatch message. The
	// checkpoint records only which devices are registered, not their
	// health, so it is written when that set changes (devices added or
	// removed, or the resource's first message), not on health flaps.
	registeredChanged := first || !before.Equal(r.registeredIDs())
	if registeredChanged {
		m.resourceChangedLocked(name)
	}
	healthy := r.healthy.Len()
	m.mu.Unlock()
	logger.V(2).Info("Processed device updates for resource", "totalCount", len(devs), "healthyCount", healthy)
	if registeredChanged {
		m.persistLogged(logger)
	}
}

// pluginDisconnected removes the endpoint of a connection whose stream ended.
// When it was the resource's last endpoint, every device becomes unhealthy
// and the grace period starts; otherwise the newest remaining endpoint serves
// RPCs and the devices are untouched. The disconnect of a connection that was
// already replaced (a late stream end) changes nothing.
func (m *Manager) pluginDisconnected(ctx context.Context, p registration.DevicePlugin, cause error) {
	logger := klog.FromContext(ctx)
	name, socket := p.Resource(), p.SocketPath()
	if status.Code(cause) == codes.ResourceExhausted {
		m.metrics.invalidUpdates.WithLabelValues(name, invalidMessageTooLarge).Inc()
		logger.Error(cause, "ListAndWatch message from device plugin was too large", "limit", registration.MaxListAndWatchMessageSize)
	}

	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.resources[name]
	if r == nil || r.endpoints[socket] == nil || r.endpoints[socket].clientID != p.ID() {
		logger.V(2).Info("Ignoring disconnect of a connection that is no longer registered")
		return
	}
	now := m.clock.Now()
	e := r.endpoints[socket]
	e.setStopTime(now)
	delete(r.endpoints, socket)

	if len(r.endpoints) > 0 {
		r.primary = r.newestLiveEndpoint()
		logger.V(2).Info("Device plugin disconnected; other endpoints remain", "endpoints", len(r.endpoints))
	} else {
		r.primary = e
		r.markUnhealthy(now, ReasonPluginDisconnected, msgPluginDisconnected)
		r.state, r.stateSince = PluginDisconnected, now
		m.scheduleRemovalLocked(r)
		logger.Info("Last device plugin for this resource disconnected", "gracePeriod", m.grace)
	}
	m.metrics.setResource(r)
	m.notifyLocked(name)
}
