package agent

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
	"github.com/kubedevice/kubedevice/internal/nodeagent"
)

// mirrorReconcileTimeout bounds a resource's reconcile, and with it every API call it makes.
const mirrorReconcileTimeout = 30 * time.Second

// nodeDeviceReconciler mirrors the core's resources into NodeDevices. Its work queue is keyed by
// resource name (reconcile.Request.Name), fed by the core's subscription, by changes to the
// node's NodeDevices (cordons, drift, deletion) and by the Node's creation, and lets changes
// settle before a run. A run that comes less than WriteInterval after the last run that wrote
// anything for the resource waits for the rest of the interval, so each NodeDevice is written at
// most once per interval, while a change after a quiet interval is written at once.
type nodeDeviceReconciler struct {
	*Agent

	mu sync.Mutex
	// cordons are the cordons last handed to the core, per resource.
	cordons map[string][]string
	// lastWrite is when the last run that wrote ended, per resource.
	lastWrite map[string]time.Time
}

func (r *nodeDeviceReconciler) setupWithManager(mgr manager.Manager) error {
	r.cordons = map[string][]string{}
	r.lastWrite = map[string]time.Time{}
	b := ctrl.NewControllerManagedBy(mgr).
		Named("nodedevice-mirror").
		WatchesRawSource(source.Func(r.subscribe))
	if r.injection.runner != nil {
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
				return newSettlingQueue(name, rl, r.clock, r.opts.WriteSettle)
			},
		}).
		Complete(r)
}

// Reconcile makes the NodeDevices of one resource say what the core says: shards created or
// fixed, their status applied when it changed, surplus shards and the objects of a resource the
// core removed deleted. It hands the resource's cordons to the core first.
func (r *nodeDeviceReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	if err := r.waitReady(ctx); err != nil {
		return reconcile.Result{}, err
	}
	resource := req.Name
	// Before any wait: the NRI hook admits containers by it. A resource restored from the
	// checkpoint keeps what its NodeDevice said (startup) until its plugin registers again.
	if required, known := r.dm.PreStartRequired(resource); known {
		r.grants.SetRequired(resource, required)
	}
	if wait := r.writeWait(resource); wait > 0 {
		return reconcile.Result{RequeueAfter: wait}, nil
	}
	lg := log.FromContext(ctx).WithValues("resourceName", resource)
	ctx = log.IntoContext(ctx, lg)
	writes := 0
	defer func() {
		if writes > 0 {
			r.wrote(resource)
		}
	}()

	existing, err := r.nodeDevicesOf(ctx, resource)
	if err != nil {
		return reconcile.Result{}, err
	}
	r.setCordons(resource, cordonedIDs(existing))
	snap, ok := r.dm.Snapshot(resource)
	r.setServed(resource, ok)
	if !ok {
		r.grants.SetRequired(resource, false)
	}
	if !ok {
		r.forgetCordons(resource)
		for i := range existing {
			if existing[i].DeletionTimestamp.IsZero() {
				if err := deleteObject(ctx, r.client, nodeDeviceGVK.Kind, &existing[i]); err != nil {
					return reconcile.Result{}, err
				}
				writes++
				lg.Info("Deleted the NodeDevice of a removed resource", "nodeDevice", existing[i].Name)
			}
		}
		return reconcile.Result{}, nil
	}
	if wait := r.holdRestored(snap, existing); wait > 0 {
		lg.V(2).Info("Holding back a restored resource until its plugin registers", "for", wait)
		return reconcile.Result{RequeueAfter: wait}, nil
	}

	node, err := r.node(ctx)
	if err != nil {
		return reconcile.Result{}, err
	}
	info := r.dm.CheckpointInfo()
	keep, remove := planShards(r.opts.NodeName, snap, existing)
	for _, p := range keep {
		n, err := r.syncShard(ctx, node, snap, p, info)
		writes += n
		if err != nil {
			return reconcile.Result{}, err
		}
	}
	for _, nd := range remove {
		if err := deleteObject(ctx, r.client, nodeDeviceGVK.Kind, nd); err != nil {
			return reconcile.Result{}, err
		}
		writes++
		lg.Info("Deleted a surplus NodeDevice shard", "nodeDevice", nd.Name)
	}
	return reconcile.Result{}, nil
}

// syncShard creates or fixes one shard's metadata and spec, then its status, each only if it
// differs from the object, and returns the number of writes. The cached object decides when
// nothing differs; otherwise the object is read from the API server first, as the cache may not
// have seen the agent's own last write.
func (r *nodeDeviceReconciler) syncShard(ctx context.Context, node *corev1.Node, snap nodeagent.ResourceSnapshot,
	p shardPlan, info nodeagent.CheckpointInfo) (int, error) {
	now := r.clock.Now()
	upToDate := func(current *kdv1alpha1.NodeDevice) bool {
		return current != nil && nodeDeviceMetaUpToDate(current, node, snap.ResourceName, p.shard) &&
			nodeDeviceStatusUpToDate(current, r.desiredStatus(snap, p.devices, current, info, current.Generation, now))
	}
	if upToDate(p.current) {
		return 0, nil
	}
	current := &kdv1alpha1.NodeDevice{}
	if err := r.apiReader.Get(ctx, client.ObjectKey{Name: p.name}, current); apierrors.IsNotFound(err) {
		current = nil
	} else if err != nil {
		return 0, fmt.Errorf("getting NodeDevice %q: %w", p.name, err)
	}
	if upToDate(current) {
		return 0, nil
	}

	writes := 0
	var generation int64
	if current != nil {
		generation = current.Generation
	}
	if current == nil || !nodeDeviceMetaUpToDate(current, node, snap.ResourceName, p.shard) {
		nd := &kdv1alpha1.NodeDevice{
			ObjectMeta: metav1.ObjectMeta{
				Name:   p.name,
				Labels: nodeDeviceLabels(node.Name, snap.ResourceName),
				OwnerReferences: []metav1.OwnerReference{{
					APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID,
				}},
			},
			Spec: kdv1alpha1.NodeDeviceSpec{NodeName: node.Name, ResourceName: snap.ResourceName, Shard: p.shard},
		}
		gen, err := applyObject(ctx, r.client, nodeDeviceGVK, nd)
		if err != nil {
			return writes, err
		}
		writes++
		generation = gen
		log.FromContext(ctx).V(1).Info("Applied NodeDevice", "nodeDevice", p.name, "created", current == nil)
	}

	want := r.desiredStatus(snap, p.devices, current, info, generation, now)
	if nodeDeviceStatusUpToDate(current, want) {
		return writes, nil
	}
	nd := &kdv1alpha1.NodeDevice{ObjectMeta: metav1.ObjectMeta{Name: p.name}, Status: want}
	if err := applyStatus(ctx, r.client, nodeDeviceGVK, nd); err != nil {
		return writes, err
	}
	writes++
	log.FromContext(ctx).V(1).Info("Applied NodeDevice status", "nodeDevice", p.name,
		"capacity", want.Capacity, "allocatable", want.Allocatable, "allocated", want.Allocated, "unhealthy", want.Unhealthy)
	return writes, nil
}

// desiredStatus is the status of one shard: the devices' (nodeDeviceStatus) with the node's
// runtime injection condition.
func (r *nodeDeviceReconciler) desiredStatus(snap nodeagent.ResourceSnapshot, devices []nodeagent.DeviceSnapshot, current *kdv1alpha1.NodeDevice,
	info nodeagent.CheckpointInfo, generation int64, now time.Time) kdv1alpha1.NodeDeviceStatus {
	return withRuntimeInjection(nodeDeviceStatus(snap, devices, current, info, generation, now), current, r.InjectionStatus(), generation, now)
}

// nodeDevicesOf returns the cached NodeDevices of the node for resource.
func (r *nodeDeviceReconciler) nodeDevicesOf(ctx context.Context, resource string) ([]kdv1alpha1.NodeDevice, error) {
	list := &kdv1alpha1.NodeDeviceList{}
	if err := r.client.List(ctx, list); err != nil {
		return nil, fmt.Errorf("listing the NodeDevices of node %q: %w", r.opts.NodeName, err)
	}
	var out []kdv1alpha1.NodeDevice
	for _, nd := range list.Items {
		if nd.Spec.NodeName == r.opts.NodeName && nd.Spec.ResourceName == resource {
			out = append(out, nd)
		}
	}
	return out, nil
}

// writeWait returns how long resource must wait before its NodeDevices may be written again.
func (r *nodeDeviceReconciler) writeWait(resource string) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	last, ok := r.lastWrite[resource]
	if !ok {
		return 0
	}
	wait := last.Add(r.opts.WriteInterval).Sub(r.clock.Now())
	if wait <= 0 {
		delete(r.lastWrite, resource)
	}
	return wait
}

// wrote records that a run wrote the NodeDevices of resource.
func (r *nodeDeviceReconciler) wrote(resource string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lastWrite[resource] = r.clock.Now()
}

// setCordons hands ids to the core when they changed since the last time.
func (r *nodeDeviceReconciler) setCordons(resource string, ids []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if prev, ok := r.cordons[resource]; ok && slices.Equal(prev, ids) {
		return
	}
	r.dm.SetCordons(resource, ids)
	r.cordons[resource] = ids
}

func (r *nodeDeviceReconciler) forgetCordons(resource string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.cordons, resource)
}

// holdRestored returns how long to leave the NodeDevices of a resource restored from the
// checkpoint alone: while its plugin has not registered again, for RestartHold after start, when
// the cluster already lists it. Zero means: write now.
func (r *nodeDeviceReconciler) holdRestored(snap nodeagent.ResourceSnapshot, existing []kdv1alpha1.NodeDevice) time.Duration {
	if r.opts.RestartHold <= 0 || len(existing) == 0 || snap.State == nodeagent.PluginRegistered {
		return 0
	}
	if !slices.ContainsFunc(snap.Devices, func(d nodeagent.DeviceSnapshot) bool { return d.Reason == nodeagent.ReasonAwaitingPlugin }) {
		return 0
	}
	return r.started.Add(r.opts.RestartHold).Sub(r.clock.Now())
}

// subscribe feeds the queue from the core's subscription until ctx ends.
func (r *nodeDeviceReconciler) subscribe(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	sub := r.dm.Subscribe()
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
func (r *nodeDeviceReconciler) watchInjection(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-r.injection.runner.Changed():
				for _, req := range r.allResources(ctx, nil) {
					q.Add(req)
				}
			}
		}
	}()
	return nil
}

// allResources maps the Node to every resource the core or the cluster knows on it.
func (r *nodeDeviceReconciler) allResources(ctx context.Context, _ client.Object) []reconcile.Request {
	var reqs []reconcile.Request
	seen := map[string]bool{}
	add := func(name string) {
		if !seen[name] {
			seen[name] = true
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Name: name}})
		}
	}
	for _, s := range r.dm.Snapshots() {
		add(s.ResourceName)
	}
	list := &kdv1alpha1.NodeDeviceList{}
	if err := r.client.List(ctx, list); err != nil {
		log.FromContext(ctx).Error(err, "Listing the NodeDevices of the node")
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
