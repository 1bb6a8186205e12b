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

package mirror

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
	"sigs.k8s.io/controller-runtime/pkg/source"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
	"github.com/kubedevice/kubedevice/internal/agent/kube"
	"github.com/kubedevice/kubedevice/internal/contract"
	"github.com/kubedevice/kubedevice/internal/nodeagent"
)

// mirrorReconcileTimeout bounds a resource's reconcile, and with it every API call it makes.
const mirrorReconcileTimeout = 30 * time.Second

// Core is what the mirror reads of the device manager core, *nodeagent.Manager.
type Core interface {
	// Snapshots and Snapshot are the state of every resource, and of one (false: the core does
	// not know it).
	Snapshots() []nodeagent.ResourceSnapshot
	Snapshot(name string) (nodeagent.ResourceSnapshot, bool)
	// Subscribe tells which resources changed.
	Subscribe() *nodeagent.Subscription
	// CheckpointInfo is the checkpoint's provenance, which every NodeDevice carries.
	CheckpointInfo() nodeagent.CheckpointInfo
}

// Injection is runtime injection as the mirror sees it: a condition every NodeDevice carries, and
// the state of each resource the NRI hook admits containers by, which the mirror keeps current.
type Injection interface {
	// Condition is the RuntimeInjectionReady condition, without generation and transition time;
	// false while the state is not known yet.
	Condition() (metav1.Condition, bool)
	// Changed is signalled when Condition changes; nil when it never does.
	Changed() <-chan struct{}
	// RefreshPreStart takes from the core whether resource's plugin requires PreStartContainer.
	RefreshPreStart(resource string)
	// Served records whether the core serves resource.
	Served(resource string, served bool)
}

// noInjection is the runtime injection of an agent that injects nothing (observe mode): no
// condition, no change, nothing to tell.
type noInjection struct{}

func (noInjection) Condition() (metav1.Condition, bool) { return metav1.Condition{}, false }
func (noInjection) Changed() <-chan struct{}            { return nil }
func (noInjection) RefreshPreStart(string)              {}
func (noInjection) Served(string, bool)                 {}

// Options are the mirror's settings and dependencies, all required.
type Options struct {
	// NodeName is the agent's node, whose NodeDevices the mirror owns.
	NodeName string
	// WriteInterval is the least time between two writes of a resource's NodeDevices, and
	// WriteSettle how long a change waits before it is written.
	WriteInterval time.Duration
	WriteSettle   time.Duration
	// Core is read; Cordons take NodeDevice.spec.cordons (the core too). In observe mode Core is
	// the kubelet's device manager as the agent observes it, and Cordons is nil: nothing on the
	// node could enforce a cordon (the API refuses new ones on an Observed NodeDevice).
	Core    Core
	Cordons Cordoner
	// Injection is told each resource's state and read for the RuntimeInjectionReady condition;
	// nil in observe mode, where the agent injects nothing and the condition is not written.
	Injection Injection
	// Path is written as every NodeDevice's status.path: DevicePathNodeCapacity for the resources
	// the agent manages (written out, not left empty: the Path printer column and the cells after
	// it would shift in kubectl's output; NodeDevices of an earlier agent get it in one status
	// write), DevicePathObserved for those it observes. A resource the core serves through DRA
	// (ResourceSnapshot.ServedByDRA) is written as DevicePathDRA whatever this says.
	Path kdv1alpha1.DevicePath
	// LeaseNamespace is where the agent renews its Lease. When set, the mirror writes the
	// AgentReady condition the controller would write for a valid Lease
	// (contract.AgentReadyCondition) with a shard's first status, and keeps it in later writes,
	// as the kubelet posts its node's Ready condition and the node lifecycle controller marks it
	// when the heartbeats stop: the controller still judges the Lease and writes False when it
	// expires, but a new shard no longer costs it a write of the whole object. Empty: AgentReady
	// is left to the controller alone.
	LeaseNamespace string
	// Gate holds every reconcile until the agent has started.
	Gate *kube.Gate
	// Clock drives the pacing, the settling queue and the conditions.
	Clock clock.WithTicker
	// Recorder reports a refused device list with a Warning Event on the resource's NodeDevice
	// (once per distinct refusal); nil reports none.
	Recorder recorder.EventRecorder
}

// reconciler mirrors the core's resources into NodeDevices. Its work queue is keyed by resource
// name (reconcile.Request.Name), fed by the core's subscription, by changes to the node's
// NodeDevices (cordons, drift, deletion), by the Node's creation and by changes of runtime
// injection, and lets changes settle before a run; the pacer spaces the writes.
type reconciler struct {
	Options
	client    client.Client
	apiReader client.Reader
	cordons   *cordonPush
	pace      *pacer
	// written lets kube.Fresh skip reading a shard the agent has not written lately: a first
	// registration creates its shards, and a restart rewrites them, without reading them first.
	written *kube.Written
	// injects is false when the agent injects nothing (observe mode): no NodeDevice carries
	// RuntimeInjectionReady, not even one a managing agent wrote before.
	injects bool
	// rejections reports refused device lists with Events.
	rejections *rejectionEvents
}

// Setup adds the NodeDevice mirror to mgr, whose cache must hold the node's NodeDevices and its
// Node.
func Setup(mgr ctrl.Manager, opts Options) error {
	injects := opts.Injection != nil
	if !injects {
		opts.Injection = noInjection{}
	}
	r := &reconciler{
		injects:   injects,
		Options:   opts,
		client:    mgr.GetClient(),
		apiReader: mgr.GetAPIReader(),
		cordons:   newCordonPush(opts.Cordons),
		pace:      newPacer(opts.WriteInterval, opts.Clock),
		written:   kube.NewWritten(opts.Clock),

		rejections: newRejectionEvents(opts.Recorder),
	}
	if err := mgr.Add(deviceInfoRunnable{src: &deviceInfoSource{node: opts.NodeName, core: opts.Core}}); err != nil {
		return fmt.Errorf("adding the %s metric: %w", DeviceInfoMetric, err)
	}
	b := ctrl.NewControllerManagedBy(mgr).
		Named("nodedevice-mirror").
		WatchesRawSource(source.Func(r.subscribe))
	if r.Injection.Changed() != nil {
		b = b.WatchesRawSource(source.Func(r.watchInjection))
	}
	return b.
		Watches(&kdv1alpha1.NodeDevice{}, handler.EnqueueRequestsFromMapFunc(resourceOf)).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(r.allResources),
			builder.WithPredicates(predicate.Funcs{UpdateFunc: nodeUIDChanged})).
		WithOptions(crcontroller.Options{
			MaxConcurrentReconciles: 1,
			NeedLeaderElection:      ptr.To(false),
			ReconciliationTimeout:   mirrorReconcileTimeout,
			NewQueue: func(name string, rl workqueue.TypedRateLimiter[reconcile.Request]) workqueue.TypedRateLimitingInterface[reconcile.Request] {
				return newSettlingQueue(name, rl, opts.Clock, opts.WriteSettle)
			},
		}).
		Complete(r)
}

// Reconcile makes the NodeDevices of one resource say what the core says: shards created or
// fixed, their status applied when it changed, surplus shards and the objects of a resource the
// core removed deleted. On its way it hands what it learns to the node: the resource's
// PreStartContainer requirement and whether it is served to runtime injection, the cordons of its
// NodeDevices to the core.
func (r *reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	if err := r.Gate.Wait(ctx); err != nil {
		return reconcile.Result{}, err
	}
	resource := req.Name
	// Before any wait: the NRI hook admits containers by it. A resource restored from the
	// checkpoint keeps what its NodeDevice said (start-up) until its plugin registers again, and
	// so does its NodeDevice (nodeDeviceStatus).
	r.Injection.RefreshPreStart(resource)
	if wait := r.pace.wait(resource); wait > 0 {
		return reconcile.Result{RequeueAfter: wait}, nil
	}
	logger := ctrl.LoggerFrom(ctx).WithValues("resourceName", resource)
	ctx = ctrl.LoggerInto(ctx, logger)
	writes := 0
	defer func() {
		if writes > 0 {
			r.pace.wrote(resource)
		}
	}()

	existing, err := r.nodeDevicesOf(ctx, resource)
	if err != nil {
		return reconcile.Result{}, err
	}
	r.cordons.push(resource, existing)
	snap, ok := r.Core.Snapshot(resource)
	r.Injection.Served(resource, ok)
	if !ok {
		r.cordons.forget(resource)
		r.rejections.forget(resource)
		n, err := r.deleteAll(ctx, existing)
		writes += n
		return reconcile.Result{}, err
	}
	n, err := r.writeShards(ctx, snap, existing)
	writes += n
	return reconcile.Result{}, err
}

// writeShards brings the resource's NodeDevices to its snapshot: each shard it plans written, the
// surplus ones deleted. It returns how many writes it made.
func (r *reconciler) writeShards(ctx context.Context, snap nodeagent.ResourceSnapshot, existing []kdv1alpha1.NodeDevice) (int, error) {
	node := &corev1.Node{}
	if err := r.client.Get(ctx, client.ObjectKey{Name: r.NodeName}, node); err != nil {
		return 0, fmt.Errorf("getting node %q: %w", r.NodeName, err)
	}
	info := r.Core.CheckpointInfo()
	keep, remove := planShards(r.NodeName, snap, existing)
	writes := 0
	// One shard after another: writing 8 at once was measured slower on a busy API server (10 000
	// devices in 8.5–13.0 s against 6.7–7.5 s, and a higher heap peak) — server-side applies of
	// 128-device objects compete for its CPU, and with the allocations' writes.
	for _, p := range keep {
		n, err := r.syncShard(ctx, node, snap, p, info)
		writes += n
		if err != nil {
			return writes, err
		}
	}
	r.rejections.report(snap, keep)
	for _, nd := range remove {
		r.written.Wrote(client.ObjectKeyFromObject(nd))
		if err := kube.Delete(ctx, r.client, kube.NodeDeviceGVK.Kind, nd); err != nil {
			return writes, err
		}
		writes++
		ctrl.LoggerFrom(ctx).Info("Deleted a surplus NodeDevice shard", "nodeDevice", nd.Name)
	}
	return writes, nil
}

func (r *reconciler) deleteAll(ctx context.Context, existing []kdv1alpha1.NodeDevice) (int, error) {
	writes := 0
	for i := range existing {
		if !existing[i].DeletionTimestamp.IsZero() {
			continue
		}
		r.written.Wrote(client.ObjectKeyFromObject(&existing[i]))
		if err := kube.Delete(ctx, r.client, kube.NodeDeviceGVK.Kind, &existing[i]); err != nil {
			return writes, err
		}
		writes++
		ctrl.LoggerFrom(ctx).Info("Deleted the NodeDevice of a removed resource", "nodeDevice", existing[i].Name)
	}
	return writes, nil
}

// syncShard creates or fixes one shard's metadata and spec, then its status, each only if it
// differs from the object, and returns the number of writes. The cached object decides when
// nothing differs; otherwise the object is read from the API server first, as the cache may not
// have seen the agent's own last write.
func (r *reconciler) syncShard(ctx context.Context, node *corev1.Node, snap nodeagent.ResourceSnapshot,
	p shardPlan, info nodeagent.CheckpointInfo) (int, error) {
	now := r.Clock.Now()
	// The status computed for the object last compared, kept for the write: computing a shard's
	// status (128 devices) is most of what mirroring allocates.
	var compared *kdv1alpha1.NodeDevice
	var comparedWant kdv1alpha1.NodeDeviceStatus
	current, upToDate, err := kube.Fresh(ctx, r.apiReader, r.written, kube.NodeDeviceGVK.Kind, client.ObjectKey{Name: p.name}, p.current,
		func(nd *kdv1alpha1.NodeDevice) bool {
			if !nodeDeviceMetaUpToDate(nd, node, snap.ResourceName, p.shard) {
				return false
			}
			compared, comparedWant = nd, r.desiredStatus(snap, p.devices, nd, info, nd.Generation, now)
			return nodeDeviceStatusUpToDate(nd, comparedWant)
		})
	if err != nil || upToDate {
		return 0, err
	}

	writes := 0
	var generation int64
	if current != nil {
		generation = current.Generation
	}
	if current == nil || !nodeDeviceMetaUpToDate(current, node, snap.ResourceName, p.shard) {
		r.written.Wrote(client.ObjectKey{Name: p.name})
		gen, err := kube.Apply(ctx, r.client, kube.NodeDeviceGVK, newNodeDevice(node, snap.ResourceName, p))
		if err != nil {
			return writes, err
		}
		writes++
		generation = gen
		ctrl.LoggerFrom(ctx).V(1).Info("Applied NodeDevice", "nodeDevice", p.name, "created", current == nil)
	}

	want := comparedWant
	if current == nil || current != compared || generation != current.Generation {
		want = r.desiredStatus(snap, p.devices, current, info, generation, now)
	}
	if nodeDeviceStatusUpToDate(current, want) {
		return writes, nil
	}
	nd := &kdv1alpha1.NodeDevice{ObjectMeta: metav1.ObjectMeta{Name: p.name}, Status: want}
	r.written.Wrote(client.ObjectKey{Name: p.name})
	if err := kube.ApplyStatus(ctx, r.client, kube.NodeDeviceGVK, nd); err != nil {
		return writes, err
	}
	writes++
	ctrl.LoggerFrom(ctx).V(1).Info("Applied NodeDevice status", "nodeDevice", p.name,
		"capacity", want.Capacity, "allocatable", want.Allocatable, "allocated", want.Allocated, "unhealthy", want.Unhealthy)
	return writes, nil
}

// newNodeDevice returns the metadata and spec the agent applies for one shard.
func newNodeDevice(node *corev1.Node, resource string, p shardPlan) *kdv1alpha1.NodeDevice {
	return &kdv1alpha1.NodeDevice{
		ObjectMeta: metav1.ObjectMeta{
			Name:   p.name,
			Labels: nodeDeviceLabels(node.Name, resource),
			// The controller's finalizer, put on with the object: the controller zeroes the
			// resource on the node before it lets a NodeDevice go, and adding the finalizer itself
			// would cost a write of the object (of up to 128 devices, once its status is written)
			// per new shard.
			Finalizers: []string{contract.NodeCapacityFinalizer},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID,
			}},
		},
		Spec: kdv1alpha1.NodeDeviceSpec{NodeName: node.Name, ResourceName: resource, Shard: p.shard},
	}
}

// desiredStatus is the status of one shard: the devices' (nodeDeviceStatus) with the node's
// runtime injection condition.
func (r *reconciler) desiredStatus(snap nodeagent.ResourceSnapshot, devices []nodeagent.DeviceSnapshot, current *kdv1alpha1.NodeDevice,
	info nodeagent.CheckpointInfo, generation int64, now time.Time) kdv1alpha1.NodeDeviceStatus {
	st := nodeDeviceStatus(snap, devices, current, info, generation, now)
	if st.Path == "" {
		// A resource the core serves through DRA says so itself; every other takes the mirror's.
		st.Path = r.Path
	}
	if r.LeaseNamespace != "" {
		st = withAgentReady(st, current, r.LeaseNamespace, r.NodeName, generation, now)
	}
	if !r.injects {
		return st
	}
	c, known := r.Injection.Condition()
	return withRuntimeInjection(st, current, c, known, generation, now)
}

// nodeDevicesOf returns the cached NodeDevices of the node for resource. They are the cache's
// own objects, not copies, and must not be modified: the mirror only reads them (and deletes
// some, which leaves the object alone). Deep-copying every shard of the node, 128 devices each, on
// every reconcile of one resource was a tenth of what the agent allocated while a plugin
// registered.
func (r *reconciler) nodeDevicesOf(ctx context.Context, resource string) ([]kdv1alpha1.NodeDevice, error) {
	list := &kdv1alpha1.NodeDeviceList{}
	if err := r.client.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing the NodeDevices of node %q: %w", r.NodeName, err)
	}
	var out []kdv1alpha1.NodeDevice
	for _, nd := range list.Items {
		if nd.Spec.NodeName == r.NodeName && nd.Spec.ResourceName == resource {
			out = append(out, nd)
		}
	}
	return out, nil
}

// subscribe feeds the queue from the core's subscription until ctx ends.
func (r *reconciler) subscribe(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	sub := r.Core.Subscribe()
	go func() {
		defer sub.Close()
		for {
			select {
			case <-ctx.Done():
				return
			case <-sub.Ready():
				for _, name := range sub.Changed() {
					q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Name: name}})
				}
			}
		}
	}()
	return nil
}

// watchInjection queues every resource of the node whenever the state of runtime injection
// changes, as every NodeDevice carries it, until ctx ends.
func (r *reconciler) watchInjection(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	changed := r.Injection.Changed()
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-changed:
				for _, req := range r.allResources(ctx, nil) {
					q.Add(req)
				}
			}
		}
	}()
	return nil
}

// allResources maps the Node to every resource the core or the cluster knows on it.
func (r *reconciler) allResources(ctx context.Context, _ client.Object) []reconcile.Request {
	var reqs []reconcile.Request
	seen := map[string]bool{}
	add := func(name string) {
		if !seen[name] {
			seen[name] = true
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Name: name}})
		}
	}
	for _, s := range r.Core.Snapshots() {
		add(s.ResourceName)
	}
	list := &kdv1alpha1.NodeDeviceList{}
	if err := r.client.List(ctx, list); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing the NodeDevices of the node")
		return reqs
	}
	for _, nd := range list.Items {
		add(nd.Spec.ResourceName)
	}
	return reqs
}

// resourceOf maps a NodeDevice to its resource.
func resourceOf(_ context.Context, o client.Object) []reconcile.Request {
	nd, ok := o.(*kdv1alpha1.NodeDevice)
	if !ok {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: nd.Spec.ResourceName}}}
}

// nodeUIDChanged passes Node updates that replace the object (a Node deleted and created again),
// not the kubelet's status updates.
func nodeUIDChanged(e event.UpdateEvent) bool {
	return e.ObjectOld.GetUID() != e.ObjectNew.GetUID()
}
