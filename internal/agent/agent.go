package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
	"github.com/kubedevice/kubedevice/internal/agent/nri"
	"github.com/kubedevice/kubedevice/internal/indexer"
	"github.com/kubedevice/kubedevice/internal/nodeagent/checkpoint"
	"github.com/kubedevice/kubedevice/internal/nodeagent/podresources"
)

// startupTimeout bounds the start-up's API calls (listing the node's DeviceAllocations,
// NodeDevices and pods) and checkpoint work.
const startupTimeout = 2 * time.Minute

// errNotReady is the readiness check's answer until the checkpoint is restored and the device
// manager serves plugins.
var errNotReady = errors.New("the device manager has not started yet")

// Agent runs the device manager core for one node and mirrors it into the cluster. Setup creates
// it; the manager runs it.
type Agent struct {
	opts      Options
	dm        DeviceManager
	client    client.Client
	apiReader client.Reader
	recorder  recorder.EventRecorder
	clock     clock.WithTicker

	// ready is closed once the checkpoint is restored, the cordons are handed to the core and the
	// core serves plugins: nothing is allocated, freed or mirrored before.
	ready chan struct{}
	// started is when ready was closed.
	started time.Time

	// injection gives containers their devices at creation (RuntimeInjectionNRI).
	injection injection
	// grants record the PreStartContainer calls made ahead of container starts, which the NRI
	// hook admits containers by (with RuntimeInjectionNone, only to prepare each restart once).
	grants *nri.Grants
	// podResources serves the PodResources API; nil when disabled.
	podResources *podresources.Server
	// preStartQueue is the PreStartContainer controller's queue, once it runs.
	preStartQueue atomic.Pointer[workqueue.TypedRateLimitingInterface[reconcile.Request]]
}

// Setup adds the agent to mgr: the start-up runnable that restores the core's checkpoint and
// starts it, the NRI plugin (with RuntimeInjectionNRI), the PodResources API server (unless its
// socket path is empty), the pod controller that allocates and
// frees devices and mirrors DeviceAllocations, the controller that calls PreStartContainer ahead
// of container restarts, the NodeDevice mirror, and the Lease. The manager's cache must be built with
// CacheOptions(opts.NodeName), and the field indexes of package indexer registered on it
// (indexer.Setup). The agent starts and stops dm; it must not have been started.
func Setup(mgr ctrl.Manager, dm DeviceManager, opts Options) (*Agent, error) {
	opts, err := opts.complete()
	if err != nil {
		return nil, fmt.Errorf("setting up the agent: %w", err)
	}
	a := &Agent{
		opts:      opts,
		dm:        dm,
		client:    mgr.GetClient(),
		apiReader: mgr.GetAPIReader(),
		recorder:  mgr.GetEventRecorder(FieldOwner),
		clock:     opts.Clock,
		ready:     make(chan struct{}),
	}
	a.grants = nri.NewGrants(a.requestPreStart)
	if err := mgr.Add(startup{a}); err != nil {
		return nil, fmt.Errorf("adding the agent's start-up: %w", err)
	}
	if err := a.setupInjection(mgr); err != nil {
		return nil, err
	}
	if err := a.setupPodResources(mgr); err != nil {
		return nil, err
	}
	if err := (&podReconciler{Agent: a}).setupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("setting up the pod controller: %w", err)
	}
	if err := (&preStartReconciler{Agent: a}).setupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("setting up the PreStartContainer controller: %w", err)
	}
	if err := (&nodeDeviceReconciler{Agent: a}).setupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("setting up the NodeDevice mirror: %w", err)
	}
	if err := mgr.Add(&leaseRenewer{Agent: a}); err != nil {
		return nil, fmt.Errorf("adding the agent's Lease: %w", err)
	}
	return a, nil
}

// ReadyCheck is a readiness check (healthz.Checker): ready once the device manager has started
// and while plugins can register.
func (a *Agent) ReadyCheck(*http.Request) error {
	select {
	case <-a.ready:
		return a.dm.Check()
	default:
		return errNotReady
	}
}

// waitReady blocks until the agent is ready or ctx ends.
func (a *Agent) waitReady(ctx context.Context) error {
	select {
	case <-a.ready:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// startup restores the core's state and starts it; it stops the core when the manager stops.
type startup struct{ *Agent }

// NeedLeaderElection is false: every node's agent runs.
func (startup) NeedLeaderElection() bool { return false }

// Start restores the checkpoint (rebuilding it from this node's DeviceAllocations when it is
// corrupt), hands the administrators' cordons to the core, frees the devices of pods that ended
// while the agent was away, starts the core, and marks the agent ready. Listing from the cache
// waits for its informers to sync, so the view of pods it frees against is complete.
func (s startup) Start(ctx context.Context) error {
	log := ctrl.LoggerFrom(ctx).WithName("startup")
	ctx = ctrl.LoggerInto(ctx, log)
	if err := s.restore(ctx); err != nil {
		return err
	}
	if err := s.dm.Start(ctx); err != nil {
		return fmt.Errorf("starting the device manager: %w", err)
	}
	s.started = s.clock.Now()
	close(s.ready)
	log.Info("Agent ready", "node", s.opts.NodeName)

	<-ctx.Done()
	s.dm.Stop()
	return nil
}

// restore brings the core's state back before it starts, within startupTimeout.
func (s startup) restore(ctx context.Context) error {
	log := ctrl.LoggerFrom(ctx)
	ctx, cancel := context.WithTimeout(ctx, startupTimeout)
	defer cancel()
	res, err := s.dm.RestoreCheckpoint(ctx)
	var corrupt *checkpoint.CorruptError
	switch {
	case errors.As(err, &corrupt):
		if err := s.rebuild(ctx, err, corrupt); err != nil {
			return err
		}
	case err != nil:
		return fmt.Errorf("restoring the device manager checkpoint: %w", err)
	default:
		log.Info("Restored the device manager checkpoint", "rebooted", res.Rebooted, "allocations", res.Allocations, "bootID", res.BootID)
	}

	if err := s.restoreCordons(ctx); err != nil {
		return err
	}
	return s.freeEnded(ctx)
}

// rebuild restores the allocations from this node's DeviceAllocations after the checkpoint was
// found corrupt (and quarantined, and counted, by the core), and reports it: a Warning event on
// the Node and kubedevice_agent_checkpoint_rebuilds_total. Allocations the core could not restore
// are reported, not fatal: the others are restored.
func (s startup) rebuild(ctx context.Context, restoreErr error, corrupt *checkpoint.CorruptError) error {
	log := ctrl.LoggerFrom(ctx)
	list := &kdv1alpha1.DeviceAllocationList{}
	if err := s.apiReader.List(ctx, list, client.MatchingFields{indexer.DeviceAllocationNodeName: s.opts.NodeName}); err != nil {
		return fmt.Errorf("listing the DeviceAllocations of node %q to rebuild the corrupt checkpoint: %w", s.opts.NodeName, err)
	}
	allocs := podAllocationsOf(list.Items)
	result, note := "Rebuilt", fmt.Sprintf("%v; rebuilt the allocations of %d pods from this node's DeviceAllocations", restoreErr, len(allocs))
	if err := s.dm.RestoreAllocations(allocs); err != nil {
		result, note = "Partial", fmt.Sprintf("%s, with errors: %v", note, err)
		log.Error(err, "Rebuilding the corrupt checkpoint from the DeviceAllocations")
	}
	checkpointRebuilds.WithLabelValues(result).Inc()
	log.Info("Rebuilt the corrupt checkpoint from the DeviceAllocations", "pods", len(allocs), "result", result,
		"reason", corrupt.Reason, "quarantinedPath", corrupt.QuarantinedPath)

	node, err := s.node(ctx)
	if err != nil {
		// The event still names the node; only its UID is missing.
		log.Error(err, "Reporting the corrupt checkpoint without the Node's UID")
		node = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: s.opts.NodeName}}
	}
	s.recorder.Eventf(node, nil, corev1.EventTypeWarning, kdv1alpha1.EventReasonCheckpointCorrupt, "RestoreCheckpoint", "%s", truncate(note, 1024))
	return nil
}

// restoreCordons hands the cordons of every NodeDevice of the node to the core, before anything
// is allocated, and records which resources' plugins required PreStartContainer; the NodeDevice
// mirror keeps both current afterwards.
func (s startup) restoreCordons(ctx context.Context) error {
	list := &kdv1alpha1.NodeDeviceList{}
	if err := s.client.List(ctx, list); err != nil {
		return fmt.Errorf("listing the NodeDevices of node %q: %w", s.opts.NodeName, err)
	}
	byResource := map[string][]kdv1alpha1.NodeDevice{}
	for _, nd := range list.Items {
		if nd.Spec.NodeName == s.opts.NodeName {
			byResource[nd.Spec.ResourceName] = append(byResource[nd.Spec.ResourceName], nd)
		}
	}
	for resource, objs := range byResource {
		if ids := cordonedIDs(objs); len(ids) > 0 {
			s.dm.SetCordons(resource, ids)
		}
		// The plugin's options are not in the checkpoint: until it registers again, its
		// containers need PreStartContainer if it asked for it before the restart. A call
		// before it is back fails (stopped endpoint), so a creation waits for it.
		if slices.ContainsFunc(objs, func(nd kdv1alpha1.NodeDevice) bool {
			return nd.Status.Plugin != nil && nd.Status.Plugin.PreStartRequired
		}) {
			s.grants.SetRequired(resource, true)
		}
	}
	return nil
}

// freeEnded frees the devices of the pods that ended or disappeared while the agent was away.
func (s startup) freeEnded(ctx context.Context) error {
	active, err := s.activePods(ctx)
	if err != nil {
		return err
	}
	if err := s.dm.UpdateAllocatedDevices(ctx, active); err != nil {
		return fmt.Errorf("freeing the devices of ended pods: %w", err)
	}
	return nil
}

// activePods lists the pods of the node that are not terminal, from the cache. Listing a cached
// kind waits for its informer to sync, so the list is never an empty, unsynced view.
func (a *Agent) activePods(ctx context.Context) ([]*corev1.Pod, error) {
	list := &corev1.PodList{}
	if err := a.client.List(ctx, list); err != nil {
		return nil, fmt.Errorf("listing the pods of node %q: %w", a.opts.NodeName, err)
	}
	active := make([]*corev1.Pod, 0, len(list.Items))
	for i := range list.Items {
		if p := &list.Items[i]; p.Spec.NodeName == a.opts.NodeName && !isTerminal(p) {
			active = append(active, p)
		}
	}
	return active, nil
}

// node returns the agent's Node from the cache.
func (a *Agent) node(ctx context.Context) (*corev1.Node, error) {
	node := &corev1.Node{}
	if err := a.client.Get(ctx, client.ObjectKey{Name: a.opts.NodeName}, node); err != nil {
		return nil, fmt.Errorf("getting node %q: %w", a.opts.NodeName, err)
	}
	return node, nil
}
