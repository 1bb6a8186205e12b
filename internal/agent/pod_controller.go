package agent

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
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
	"github.com/kubedevice/kubedevice/internal/indexer"
	"github.com/kubedevice/kubedevice/internal/nodeagent"
	"github.com/kubedevice/kubedevice/internal/nodeagent/registration"
)

// Retry delays of an allocation the core refused as retryable (its plugin has not registered
// yet): doubling from the first to the last. The plugin's registration retriggers the pod at once
// anyway.
const (
	retryBaseDelay = time.Second
	retryMaxDelay  = 2 * time.Minute
)

// podWorkers is the number of pods reconciled at once: a plugin that hangs in Allocate (up to its
// 30 s deadline) holds one worker, not the allocations of every other pod. The core serializes
// the allocations of one pod and lets different pods' run concurrently.
const podWorkers = 4

// podReconcileTimeout bounds a pod's reconcile, and with it every plugin call and API call it
// makes: Allocate and PreStartContainer have 30 s deadlines of their own, per resource.
const podReconcileTimeout = 2 * time.Minute

// podReconciler allocates the devices of the pods bound to the node, frees them when the pods
// end, and mirrors each pod's devices into its DeviceAllocation. Keyed by pod namespace/name, so
// a pod, the pod recreated under the same name, and their DeviceAllocations are reconciled
// together.
type podReconciler struct {
	*Agent
	backoff workqueue.TypedRateLimiter[reconcile.Request]
}

func (r *podReconciler) setupWithManager(mgr manager.Manager) error {
	r.backoff = workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](retryBaseDelay, retryMaxDelay)
	return ctrl.NewControllerManagedBy(mgr).
		Named("pod-devices").
		For(&corev1.Pod{}, builder.WithPredicates(predicate.Funcs{UpdateFunc: podChanged})).
		Watches(&kdv1alpha1.DeviceAllocation{}, handler.EnqueueRequestsFromMapFunc(podOf)).
		WatchesRawSource(source.Func(r.retriggerWaiting)).
		WithOptions(crcontroller.Options{
			MaxConcurrentReconciles: podWorkers,
			NeedLeaderElection:      ptr.To(false),
			ReconciliationTimeout:   podReconcileTimeout,
		}).
		Complete(r)
}

// Reconcile frees what the core still holds for an ended or replaced pod and releases its
// DeviceAllocations, or allocates the devices of an active pod and mirrors them.
func (r *podReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	if err := r.waitReady(ctx); err != nil {
		return reconcile.Result{}, err
	}
	lg := log.FromContext(ctx)

	pod := &corev1.Pod{}
	if err := r.client.Get(ctx, req.NamespacedName, pod); apierrors.IsNotFound(err) {
		pod = nil
	} else if err != nil {
		return reconcile.Result{}, fmt.Errorf("getting pod %s: %w", req, err)
	}
	if pod != nil && pod.Spec.NodeName != r.opts.NodeName {
		pod = nil
	}
	active := pod != nil && !isTerminal(pod)
	if active {
		r.forgetInjection(req.NamespacedName, pod)
	} else {
		r.forgetInjection(req.NamespacedName, nil)
	}

	if r.holdsStale(req.NamespacedName, pod, active) {
		if err := r.free(ctx); err != nil {
			return reconcile.Result{}, err
		}
	}

	das, err := r.allocationsOf(ctx, req.NamespacedName)
	if err != nil {
		return reconcile.Result{}, err
	}
	var current *kdv1alpha1.DeviceAllocation
	for i := range das {
		da := &das[i]
		if active && da.Spec.PodUID == string(pod.UID) {
			current = da
			continue
		}
		reason, message := kdv1alpha1.ReasonPodDeleted, fmt.Sprintf("Pod %s no longer exists; its devices were freed.", klog.KRef(da.Namespace, da.Spec.PodName))
		if pod != nil && da.Spec.PodUID == string(pod.UID) {
			reason, message = kdv1alpha1.ReasonPodTerminated, fmt.Sprintf("Pod %s is %s; its devices were freed.", klog.KObj(pod), pod.Status.Phase)
		}
		if err := r.release(ctx, da, reason, message); err != nil {
			return reconcile.Result{}, err
		}
	}
	if !active {
		return reconcile.Result{}, nil
	}
	if len(requestedResources(pod)) == 0 {
		r.recordInjection(pod, nil, nil)
		return reconcile.Result{}, nil
	}
	ctx = log.IntoContext(ctx, lg.WithValues("pod", klog.KObj(pod), "podUID", pod.UID))
	return r.allocate(ctx, req, pod, current)
}

// allocate allocates pod's devices through the core, mirrors the result into its
// DeviceAllocation, and reports a refusal with a Warning event once the DeviceAllocation says it.
func (r *podReconciler) allocate(ctx context.Context, req reconcile.Request, pod *corev1.Pod, current *kdv1alpha1.DeviceAllocation) (reconcile.Result, error) {
	lg := log.FromContext(ctx)
	if current == nil && !pod.DeletionTimestamp.IsZero() {
		if _, held := r.dm.PodAllocation(string(pod.UID)); !held {
			// A pod being deleted is not admitted any more.
			if slices.ContainsFunc(requestedResources(pod), r.serves) {
				r.recordNotReady(pod, "the pod is being deleted; its devices were never allocated")
			} else {
				r.recordInjection(pod, nil, nil)
			}
			return reconcile.Result{}, nil
		}
	}

	allocErr := r.dm.AllocatePod(ctx, pod)
	alloc, held := r.dm.PodAllocation(string(pod.UID))
	if allocErr == nil && !held && current == nil {
		// The pod holds nothing from a device plugin: nothing to record.
		r.recordInjection(pod, nil, nil)
		return reconcile.Result{}, nil
	}
	var allocPtr *nodeagent.PodAllocation
	if held {
		allocPtr = &alloc
	}
	now := r.clock.Now()
	upToDate := func(current *kdv1alpha1.DeviceAllocation) bool {
		return current != nil && deviceAllocationMetaUpToDate(current, pod) &&
			deviceAllocationStatusUpToDate(current, deviceAllocationStatus(pod, allocPtr, allocErr, current, current.Generation, now))
	}
	if upToDate(current) {
		r.recordInjection(pod, allocPtr, allocErr)
		return r.allocated(ctx, req, allocErr)
	}
	// The cache may not have seen the agent's own last write yet: decide on the object as the
	// API server has it, so a write is never repeated.
	current, err := r.freshAllocation(ctx, pod)
	if err != nil {
		return reconcile.Result{}, err
	}
	if upToDate(current) {
		r.recordInjection(pod, allocPtr, allocErr)
		return r.allocated(ctx, req, allocErr)
	}

	var generation int64
	if current != nil {
		generation = current.Generation
	}
	if want := deviceAllocationStatus(pod, allocPtr, allocErr, current, generation, now); allocErr == nil && !preStartDone(current, want) {
		// Newly allocated: prepare the first start of the containers whose plugin requires
		// PreStartContainer.
		r.preStartAllocated(ctx, pod, alloc)
	}
	// The devices are allocated and prepared (or refused): containers may be created with them,
	// whether or not the API server takes the DeviceAllocation.
	r.recordInjection(pod, allocPtr, allocErr)
	if current == nil || !deviceAllocationMetaUpToDate(current, pod) {
		gen, err := applyObject(ctx, r.client, deviceAllocationGVK, newDeviceAllocation(pod))
		if err != nil {
			return reconcile.Result{}, err
		}
		generation = gen
	}
	want := deviceAllocationStatus(pod, allocPtr, allocErr, current, generation, now)
	if !deviceAllocationStatusUpToDate(current, want) {
		da := &kdv1alpha1.DeviceAllocation{
			ObjectMeta: metav1.ObjectMeta{Name: DeviceAllocationName(pod.Spec.NodeName, pod.Name, string(pod.UID)), Namespace: pod.Namespace},
			Status:     want,
		}
		if err := applyStatus(ctx, r.client, deviceAllocationGVK, da); err != nil {
			return reconcile.Result{}, err
		}
		lg.Info("Recorded the pod's devices", "deviceAllocation", da.Name, "summary", want.Summary, "allocated", allocErr == nil)
		if allocErr != nil && conditionChanged(current, want, kdv1alpha1.DeviceAllocationAllocated) {
			allocationFailures.WithLabelValues(string(nodeagent.AllocationReasonOf(allocErr))).Inc()
			r.recorder.Eventf(pod, nil, corev1.EventTypeWarning, kdv1alpha1.EventReasonDeviceAllocationFailed, "AllocateDevices", "%s", allocErr.Error())
		}
	}
	return r.allocated(ctx, req, allocErr)
}

// allocated ends a reconcile of an active pod: a retryable refusal comes back with backoff;
// anything else is done (a refused pod is retriggered by any change of a resource it asks for).
func (r *podReconciler) allocated(ctx context.Context, req reconcile.Request, allocErr error) (reconcile.Result, error) {
	lg := log.FromContext(ctx)
	if allocErr == nil {
		r.backoff.Forget(req)
		return reconcile.Result{}, nil
	}
	if nodeagent.IsRetryable(allocErr) {
		wait := r.backoff.When(req)
		lg.V(1).Info("Allocation refused, retrying", "reason", nodeagent.AllocationReasonOf(allocErr), "after", wait, "err", allocErr.Error())
		return reconcile.Result{RequeueAfter: wait}, nil
	}
	// Not retried on a timer: a change of any resource the pod asks for retriggers it.
	r.backoff.Forget(req)
	lg.V(1).Info("Allocation refused", "reason", nodeagent.AllocationReasonOf(allocErr), "err", allocErr.Error())
	return reconcile.Result{}, nil
}

// freshAllocation reads pod's DeviceAllocation from the API server; nil when there is none.
func (r *podReconciler) freshAllocation(ctx context.Context, pod *corev1.Pod) (*kdv1alpha1.DeviceAllocation, error) {
	da := &kdv1alpha1.DeviceAllocation{}
	key := client.ObjectKey{Namespace: pod.Namespace, Name: DeviceAllocationName(pod.Spec.NodeName, pod.Name, string(pod.UID))}
	if err := r.apiReader.Get(ctx, key, da); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("getting DeviceAllocation %s: %w", key, err)
	}
	return da, nil
}

// preStartAllocated calls PreStartContainer for the first start of each container of a newly
// allocated pod whose plugin requires it, as the kubelet does before that start, and records the
// grants the NRI hook admits the containers by. A container that already has a record (the
// DeviceAllocation write failed after an earlier call) is left to the PreStartContainer
// controller: it may run. A failed call does not fail the allocation: the container's creation
// waits while the PreStartContainer controller retries it.
func (r *podReconciler) preStartAllocated(ctx context.Context, pod *corev1.Pod, alloc nodeagent.PodAllocation) {
	uid := runtimeUID(pod)
	for _, ca := range alloc.Containers {
		resources := resourceNames(ca)
		for _, res := range resources {
			// The core says it first: the NodeDevice mirror records it a moment later.
			if required, known := r.dm.PreStartRequired(res); known {
				r.grants.SetRequired(res, required)
			}
		}
		c := containerNamed(pod, ca.Name)
		if c == nil || !r.grants.Required(resources) || r.grants.Has(uid, c.Name) {
			continue
		}
		if !r.preStart(ctx, pod, c, preStartAllocation, "") {
			r.requestPreStart(pod.Namespace, pod.Name)
		}
	}
}

// release marks da Released and deletes it: two writes, so that a watcher sees why it went. It
// decides on the object as the API server has it, as the cache may still show one already gone.
func (r *podReconciler) release(ctx context.Context, cached *kdv1alpha1.DeviceAllocation, reason, message string) error {
	if !cached.DeletionTimestamp.IsZero() {
		return nil
	}
	da := &kdv1alpha1.DeviceAllocation{}
	if err := r.apiReader.Get(ctx, client.ObjectKeyFromObject(cached), da); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("getting DeviceAllocation %s: %w", klog.KObj(cached), err)
	}
	if !da.DeletionTimestamp.IsZero() || da.UID != cached.UID {
		return nil
	}
	if !meta.IsStatusConditionTrue(da.Status.Conditions, kdv1alpha1.DeviceAllocationReleased) {
		rel := &kdv1alpha1.DeviceAllocation{
			ObjectMeta: metav1.ObjectMeta{Name: da.Name, Namespace: da.Namespace},
			Status:     releasedStatus(da, reason, message, r.clock.Now()),
		}
		if err := applyStatus(ctx, r.client, deviceAllocationGVK, rel); err != nil {
			if apierrors.IsNotFound(err) {
				return nil
			}
			return err
		}
	}
	if err := deleteObject(ctx, r.client, deviceAllocationGVK.Kind, da); err != nil {
		return err
	}
	log.FromContext(ctx).Info("Released and deleted a DeviceAllocation", "deviceAllocation", klog.KObj(da), "reason", reason)
	return nil
}

// holdsStale reports whether the core holds devices for a pod of this name that is not the
// active pod: one that ended, disappeared, or was replaced by a pod of the same name.
func (r *podReconciler) holdsStale(key types.NamespacedName, pod *corev1.Pod, active bool) bool {
	for _, uid := range r.dm.PodsHolding(key.Namespace, key.Name) {
		if !active || uid != string(pod.UID) {
			return true
		}
	}
	return false
}

// free hands the core the node's active pods, so it frees the devices of every other pod.
func (r *podReconciler) free(ctx context.Context) error {
	active, err := r.activePods(ctx)
	if err != nil {
		return err
	}
	if err := r.dm.UpdateAllocatedDevices(ctx, active); err != nil {
		return fmt.Errorf("freeing the devices of ended pods: %w", err)
	}
	return nil
}

// allocationsOf returns the cached DeviceAllocations of the node for pods named key.
func (r *podReconciler) allocationsOf(ctx context.Context, key types.NamespacedName) ([]kdv1alpha1.DeviceAllocation, error) {
	list := &kdv1alpha1.DeviceAllocationList{}
	if err := r.client.List(ctx, list, client.InNamespace(key.Namespace), client.MatchingFields{indexer.DeviceAllocationPodName: key.Name}); err != nil {
		return nil, fmt.Errorf("listing the DeviceAllocations of pod %s: %w", key, err)
	}
	out := list.Items[:0]
	for _, da := range list.Items {
		if da.Spec.NodeName == r.opts.NodeName {
			out = append(out, da)
		}
	}
	return out, nil
}

// retriggerWaiting requeues, whenever resources change in the core (a plugin registers, devices
// become healthy, are freed or uncordoned), the active pods asking for one of them that do not
// hold their devices yet.
func (r *podReconciler) retriggerWaiting(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	sub := r.dm.Subscribe()
	go func() {
		defer sub.Close()
		for {
			select {
			case <-ctx.Done():
				return
			case <-sub.Ready():
			}
			changed := sub.Changed()
			if err := r.waitReady(ctx); err != nil {
				return
			}
			for _, key := range r.waiting(ctx, changed) {
				q.Add(reconcile.Request{NamespacedName: key})
			}
		}
	}()
	return nil
}

// waiting returns the active pods that ask for one of resources and whose DeviceAllocation does
// not say Allocated.
func (r *podReconciler) waiting(ctx context.Context, resources []string) []types.NamespacedName {
	pods, err := r.activePods(ctx)
	if err != nil {
		log.FromContext(ctx).Error(err, "Listing the pods waiting for devices")
		return nil
	}
	var keys []types.NamespacedName
	for _, pod := range pods {
		if !slices.ContainsFunc(requestedResources(pod), func(res string) bool { return slices.Contains(resources, res) }) {
			continue
		}
		da := &kdv1alpha1.DeviceAllocation{}
		err := r.client.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: DeviceAllocationName(pod.Spec.NodeName, pod.Name, string(pod.UID))}, da)
		if err == nil && meta.IsStatusConditionTrue(da.Status.Conditions, kdv1alpha1.DeviceAllocationAllocated) {
			continue
		}
		keys = append(keys, client.ObjectKeyFromObject(pod))
	}
	return keys
}

// deviceAllocationMetaUpToDate reports whether da already has the labels, owner reference and
// spec the agent applies for pod.
func deviceAllocationMetaUpToDate(da *kdv1alpha1.DeviceAllocation, pod *corev1.Pod) bool {
	want := newDeviceAllocation(pod)
	for k, v := range want.Labels {
		if da.Labels[k] != v {
			return false
		}
	}
	return hasOwner(da.OwnerReferences, pod.UID) && da.Spec == want.Spec
}

// newDeviceAllocation returns the metadata and spec the agent applies for pod's DeviceAllocation.
func newDeviceAllocation(pod *corev1.Pod) *kdv1alpha1.DeviceAllocation {
	return &kdv1alpha1.DeviceAllocation{
		ObjectMeta: metav1.ObjectMeta{
			Name:      DeviceAllocationName(pod.Spec.NodeName, pod.Name, string(pod.UID)),
			Namespace: pod.Namespace,
			Labels: map[string]string{
				kdv1alpha1.LabelNodeName: LabelValue(pod.Spec.NodeName),
				kdv1alpha1.LabelPodUID:   string(pod.UID),
			},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID}},
		},
		Spec: kdv1alpha1.DeviceAllocationSpec{NodeName: pod.Spec.NodeName, PodName: pod.Name, PodUID: string(pod.UID)},
	}
}

// conditionChanged reports whether want's condition of type t differs from current's in status,
// reason or message.
func conditionChanged(current *kdv1alpha1.DeviceAllocation, want kdv1alpha1.DeviceAllocationStatus, t string) bool {
	w := meta.FindStatusCondition(want.Conditions, t)
	if current == nil {
		return w != nil
	}
	g := meta.FindStatusCondition(current.Status.Conditions, t)
	if g == nil || w == nil {
		return (g == nil) != (w == nil)
	}
	return g.Status != w.Status || g.Reason != w.Reason || g.Message != w.Message
}

// requestedResources returns the extended resources the pod's containers limit, sorted: those a
// device plugin may serve.
func requestedResources(pod *corev1.Pod) []string {
	var out []string
	for i := range pod.Spec.InitContainers {
		out = append(out, containerResources(&pod.Spec.InitContainers[i])...)
	}
	for i := range pod.Spec.Containers {
		out = append(out, containerResources(&pod.Spec.Containers[i])...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// containerResources returns the extended resources c limits, unsorted.
func containerResources(c *corev1.Container) []string {
	var out []string
	for name, q := range c.Resources.Limits {
		if !q.IsZero() && registration.IsExtendedResourceName(string(name)) {
			out = append(out, string(name))
		}
	}
	return out
}

func containerNamed(pod *corev1.Pod, name string) *corev1.Container {
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == name {
			return &pod.Spec.InitContainers[i]
		}
	}
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == name {
			return &pod.Spec.Containers[i]
		}
	}
	return nil
}

func isTerminal(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

// podChanged passes the pod updates that matter to devices: the phase (a pod ending) and the
// start of its deletion.
func podChanged(e event.UpdateEvent) bool {
	oldPod, okOld := e.ObjectOld.(*corev1.Pod)
	newPod, okNew := e.ObjectNew.(*corev1.Pod)
	if !okOld || !okNew {
		return true
	}
	return oldPod.Status.Phase != newPod.Status.Phase || oldPod.DeletionTimestamp.IsZero() != newPod.DeletionTimestamp.IsZero()
}

// podOf maps a DeviceAllocation to its pod's key.
func podOf(_ context.Context, o client.Object) []reconcile.Request {
	da, ok := o.(*kdv1alpha1.DeviceAllocation)
	if !ok {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: da.Namespace, Name: da.Spec.PodName}}}
}
