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

package cleanup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
	"github.com/kubedevice/kubedevice/internal/contract"
)

const (
	// FieldOwner is the field manager of the cleanup's writes.
	FieldOwner = contract.CleanupFieldOwner

	// DefaultTimeout is how long Run waits for the controller to stop by default.
	DefaultTimeout = 2 * time.Minute

	// DefaultLeaseNamespace is the namespace of the controller's leader election Lease when the
	// options name none: where both installs put the controller.
	DefaultLeaseNamespace = contract.Namespace

	// defaultPollInterval is how often Run reads the Lease while it waits: as often as a
	// candidate of client-go's leader election tries to acquire it.
	defaultPollInterval = 2 * time.Second
)

// ErrControllerRunning is returned when a kubedevice controller still holds its leader election
// Lease after the timeout.
var ErrControllerRunning = errors.New("a kubedevice controller is still running")

// Options configure Run.
type Options struct {
	// LeaseNamespace is the namespace of the controller's leader election Lease; empty means
	// DefaultLeaseNamespace.
	LeaseNamespace string

	// LeaseName is the name of that Lease; empty means contract.LeaderElectionID.
	LeaseName string

	// Force skips the wait for the controller to stop.
	Force bool

	// Timeout bounds the wait for the controller to stop; zero means DefaultTimeout.
	Timeout time.Duration

	// PollInterval is how often the Lease is read while Run waits; zero means every 2 s.
	PollInterval time.Duration

	// Clock times the wait; nil means the real clock.
	Clock clock.WithTicker
}

func (o Options) complete() Options {
	if o.LeaseNamespace == "" {
		o.LeaseNamespace = DefaultLeaseNamespace
	}
	if o.LeaseName == "" {
		o.LeaseName = contract.LeaderElectionID
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.PollInterval <= 0 {
		o.PollInterval = defaultPollInterval
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	return o
}

// Result is what Run did.
type Result struct {
	// Controller is how the wait for the controller ended.
	Controller ControllerState

	// Nodes lists, per Node that was changed, the resources removed from its status.capacity and
	// status.allocatable.
	Nodes map[string][]corev1.ResourceName

	// NodeDevices is the number of NodeDevices deleted, FinalizersRemoved the number of them
	// whose node-capacity finalizer was removed.
	NodeDevices, FinalizersRemoved int

	// DeviceAllocations is the number of DeviceAllocations deleted.
	DeviceAllocations int

	// DeviceClasses is the number of kubedevice's DeviceClasses deleted, ResourceSlices the
	// number of ResourceSlices of its DRA driver deleted.
	DeviceClasses, ResourceSlices int
}

// String is the one-line summary `kubedevice cleanup` prints.
func (r Result) String() string {
	resources := 0
	for _, names := range r.Nodes {
		resources += len(names)
	}
	return fmt.Sprintf("Removed %s from %s, deleted %s (%s removed), %s, %s and %s; the controller: %s.",
		plural(resources, "kubedevice resource"), plural(len(r.Nodes), "node"),
		plural(r.NodeDevices, "NodeDevice"), plural(r.FinalizersRemoved, "finalizer"),
		plural(r.DeviceAllocations, "DeviceAllocation"), plural(r.DeviceClasses, "DeviceClass"),
		plural(r.ResourceSlices, "ResourceSlice"), r.Controller)
}

func plural(n int, noun string) string {
	if n == 1 {
		return fmt.Sprintf("1 %s", noun)
	}
	if strings.HasSuffix(noun, "s") {
		return fmt.Sprintf("%d %ses", n, noun)
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// Run removes every trace of kubedevice from the cluster c talks to, once no controller runs (see
// the package documentation). It is safe to run again, and after a partial run.
func Run(ctx context.Context, c client.Client, opts Options) (Result, error) {
	opts = opts.complete()
	res := Result{Nodes: map[string][]corev1.ResourceName{}}

	state, err := waitForController(ctx, c, opts)
	if err != nil {
		return res, err
	}
	res.Controller = state

	nds := &kdv1alpha1.NodeDeviceList{}
	if err := listInstalled(ctx, c, nds, "NodeDevices"); err != nil {
		return res, err
	}
	if err := cleanNodes(ctx, c, resourcesByNode(nds.Items), res.Nodes); err != nil {
		return res, err
	}
	if res.DeviceAllocations, err = deleteDeviceAllocations(ctx, c); err != nil {
		return res, err
	}
	if res.NodeDevices, res.FinalizersRemoved, err = deleteNodeDevices(ctx, c, nds.Items); err != nil {
		return res, err
	}
	if res.DeviceClasses, err = deleteDeviceClasses(ctx, c); err != nil {
		return res, err
	}
	res.ResourceSlices, err = deleteResourceSlices(ctx, c)
	return res, err
}

// deleteDeviceClasses deletes the DeviceClasses kubedevice's controller keeps (labelled
// app.kubernetes.io/managed-by=kubedevice) and returns how many it deleted. Claims already
// allocated keep their devices: an allocation does not need its class any more.
func deleteDeviceClasses(ctx context.Context, c client.Client) (int, error) {
	classes := &resourcev1.DeviceClassList{}
	if err := c.List(ctx, classes, client.MatchingLabels{contract.ManagedByLabel: contract.ManagedByValue}); err != nil {
		return 0, fmt.Errorf("listing kubedevice's DeviceClasses: %w", err)
	}
	deleted := 0
	for i := range classes.Items {
		dc := &classes.Items[i]
		err := c.Delete(ctx, dc, client.Preconditions{UID: &dc.UID})
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			return deleted, fmt.Errorf("deleting DeviceClass %s: %w", dc.Name, err)
		}
		deleted++
		ctrl.LoggerFrom(ctx).Info("Deleted a DeviceClass", "deviceClass", dc.Name)
	}
	return deleted, nil
}

// deleteResourceSlices deletes the ResourceSlices of kubedevice's DRA driver that its agents left
// (an agent that is stopped leaves its slices for the next one to take over) and returns how many
// it deleted.
func deleteResourceSlices(ctx context.Context, c client.Client) (int, error) {
	list := &resourcev1.ResourceSliceList{}
	if err := c.List(ctx, list, client.MatchingFields{resourcev1.ResourceSliceSelectorDriver: contract.DRADriverName}); err != nil {
		return 0, fmt.Errorf("listing the ResourceSlices of driver %s: %w", contract.DRADriverName, err)
	}
	deleted := 0
	for i := range list.Items {
		rs := &list.Items[i]
		if rs.Spec.Driver != contract.DRADriverName {
			continue
		}
		err := c.Delete(ctx, rs, client.Preconditions{UID: &rs.UID})
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			return deleted, fmt.Errorf("deleting ResourceSlice %s: %w", rs.Name, err)
		}
		deleted++
	}
	if deleted > 0 {
		ctrl.LoggerFrom(ctx).Info("Deleted the ResourceSlices of kubedevice's DRA driver", "count", deleted)
	}
	return deleted, nil
}

// listInstalled lists every object of a kubedevice.io kind into list, which stays empty when the
// CRD is not installed (or is gone by the time the list is made).
func listInstalled(ctx context.Context, c client.Reader, list client.ObjectList, what string) error {
	err := c.List(ctx, list)
	if meta.IsNoMatchError(err) || apierrors.IsNotFound(err) {
		ctrl.LoggerFrom(ctx).Info("The CRD is not installed: nothing to delete", "kind", what)
		return nil
	}
	if err != nil {
		return fmt.Errorf("listing the %s: %w", what, err)
	}
	return nil
}

// resourcesByNode returns the resource names of the NodeDevices, per node, but those of Observed
// NodeDevices: the kubelet publishes them (observe mode), and they stay the kubelet's.
func resourcesByNode(nds []kdv1alpha1.NodeDevice) map[string][]corev1.ResourceName {
	out := map[string][]corev1.ResourceName{}
	for i := range nds {
		if nds[i].Status.EffectivePath() == kdv1alpha1.DevicePathObserved {
			continue
		}
		name := corev1.ResourceName(nds[i].Spec.ResourceName)
		if !slices.Contains(out[nds[i].Spec.NodeName], name) {
			out[nds[i].Spec.NodeName] = append(out[nds[i].Spec.NodeName], name)
		}
	}
	return out
}

// cleanNodes removes kubedevice's resources from every Node, recording in removed what it removed
// from which.
func cleanNodes(ctx context.Context, c client.Client, devices map[string][]corev1.ResourceName, removed map[string][]corev1.ResourceName) error {
	nodes := &corev1.NodeList{}
	if err := c.List(ctx, nodes); err != nil {
		return fmt.Errorf("listing the nodes: %w", err)
	}
	for i := range nodes.Items {
		node := &nodes.Items[i]
		names, err := cleanNode(ctx, c, node, devices[node.Name])
		if err != nil {
			return err
		}
		if len(names) > 0 {
			removed[node.Name] = names
			ctrl.LoggerFrom(ctx).Info("Removed kubedevice's resources from the node", "node", klog.KObj(node), "resources", names)
		}
	}
	return nil
}

// cleanNode removes from the node's status.capacity and status.allocatable the resources
// kubedevice published there, devices among them, and returns their names. The patch carries the
// resourceVersion it was computed from; on a conflict the node is read again and the patch
// computed anew.
func cleanNode(ctx context.Context, c client.Client, node *corev1.Node, devices []corev1.ResourceName) ([]corev1.ResourceName, error) {
	var names []corev1.ResourceName
	key := client.ObjectKeyFromObject(node)
	fresh := false
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if fresh {
			node = &corev1.Node{}
			if err := c.Get(ctx, key, node); err != nil {
				return err
			}
		}
		fresh = true
		var err error
		if names, err = publishedResources(node, devices); err != nil || len(names) == 0 {
			return err
		}
		patched := node.DeepCopy()
		for _, name := range names {
			delete(patched.Status.Capacity, name)
			delete(patched.Status.Allocatable, name)
		}
		return c.Status().Patch(ctx, patched, client.MergeFromWithOptions(node, client.MergeFromWithOptimisticLock{}),
			client.FieldOwner(FieldOwner))
	})
	switch {
	case apierrors.IsNotFound(err):
		// Deleted meanwhile: nothing left to clean.
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("removing kubedevice's resources from node %q: %w", key.Name, err)
	}
	return names, nil
}

// publishedResources returns the extended resources, in the node's status.capacity or
// status.allocatable, that the controller's field manager owns or that devices names, sorted.
func publishedResources(node *corev1.Node, devices []corev1.ResourceName) ([]corev1.ResourceName, error) {
	owned, err := ownedStatusResources(node.ManagedFields, contract.ControllerFieldOwner)
	if err != nil {
		return nil, fmt.Errorf("reading the managed fields of node %q: %w", node.Name, err)
	}
	candidates := map[corev1.ResourceName]bool{}
	for _, name := range append(owned, devices...) {
		candidates[name] = true
	}
	var names []corev1.ResourceName
	for _, name := range slices.Sorted(maps.Keys(candidates)) {
		if !isExtendedResource(name) {
			continue
		}
		_, inCapacity := node.Status.Capacity[name]
		_, inAllocatable := node.Status.Allocatable[name]
		if inCapacity || inAllocatable {
			names = append(names, name)
		}
	}
	return names, nil
}

// isExtendedResource reports whether name is an extended resource, the only kind the controller
// may publish (config/admission/controller_node_status.yaml): a name with a "/" outside the
// kubernetes.io domains, and not a quota's requests. name.
func isExtendedResource(name corev1.ResourceName) bool {
	s := string(name)
	return strings.Contains(s, "/") && !strings.Contains(s, "kubernetes.io/") &&
		!strings.HasPrefix(s, corev1.DefaultResourceRequestsPrefix)
}

// deleteDeviceAllocations deletes every DeviceAllocation and returns how many it deleted.
func deleteDeviceAllocations(ctx context.Context, c client.Client) (int, error) {
	das := &kdv1alpha1.DeviceAllocationList{}
	if err := listInstalled(ctx, c, das, "DeviceAllocations"); err != nil {
		return 0, err
	}
	deleted := 0
	for i := range das.Items {
		da := &das.Items[i]
		if !da.DeletionTimestamp.IsZero() {
			continue
		}
		err := c.Delete(ctx, da, client.Preconditions{UID: &da.UID})
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			// Gone, or replaced by a newer object, which the list did not hold.
			continue
		}
		if err != nil {
			return deleted, fmt.Errorf("deleting DeviceAllocation %s: %w", klog.KObj(da), err)
		}
		deleted++
		ctrl.LoggerFrom(ctx).Info("Deleted a DeviceAllocation", "deviceAllocation", klog.KObj(da),
			"pod", klog.KRef(da.Namespace, da.Spec.PodName), "node", da.Spec.NodeName)
	}
	return deleted, nil
}

// deleteNodeDevices removes the node-capacity finalizer from the NodeDevices and deletes them; it
// returns how many it deleted (or released, when they were deleted already) and from how many it
// removed the finalizer.
func deleteNodeDevices(ctx context.Context, c client.Client, nds []kdv1alpha1.NodeDevice) (deleted, unfinalized int, err error) {
	logger := ctrl.LoggerFrom(ctx)
	for i := range nds {
		nd := &nds[i]
		removed, err := removeFinalizer(ctx, c, nd)
		if err != nil {
			return deleted, unfinalized, err
		}
		if removed {
			unfinalized++
		}
		if !nd.DeletionTimestamp.IsZero() {
			// Already deleted, and held only by the finalizer: it goes now.
			if removed {
				deleted++
				logger.Info("Released a deleted NodeDevice", "nodeDevice", klog.KObj(nd), "node", nd.Spec.NodeName, "resource", nd.Spec.ResourceName)
			}
			continue
		}
		err = c.Delete(ctx, nd, client.Preconditions{UID: &nd.UID})
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			return deleted, unfinalized, fmt.Errorf("deleting NodeDevice %q: %w", nd.Name, err)
		}
		deleted++
		kv := []any{"nodeDevice", klog.KObj(nd), "node", nd.Spec.NodeName, "resource", nd.Spec.ResourceName}
		if len(nd.Spec.Cordons) > 0 {
			cordons := make([]string, 0, len(nd.Spec.Cordons))
			for _, cd := range nd.Spec.Cordons {
				cordons = append(cordons, cd.DeviceID)
			}
			kv = append(kv, "droppedCordons", cordons)
		}
		logger.Info("Deleted a NodeDevice", kv...)
	}
	return deleted, unfinalized, nil
}

// removeFinalizer removes the node-capacity finalizer from nd, leaving any other finalizer, with
// a patch that carries the resourceVersion it was computed from; it reports whether it removed
// it. nd is updated to what the API server returned.
func removeFinalizer(ctx context.Context, c client.Client, nd *kdv1alpha1.NodeDevice) (bool, error) {
	removed := false
	fresh := false
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if fresh {
			latest := &kdv1alpha1.NodeDevice{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(nd), latest); err != nil {
				return err
			}
			*nd = *latest
		}
		fresh = true
		if !controllerutil.ContainsFinalizer(nd, contract.NodeCapacityFinalizer) {
			return nil
		}
		patched := nd.DeepCopy()
		controllerutil.RemoveFinalizer(patched, contract.NodeCapacityFinalizer)
		if err := c.Patch(ctx, patched, client.MergeFromWithOptions(nd, client.MergeFromWithOptimisticLock{}),
			client.FieldOwner(FieldOwner)); err != nil {
			return err
		}
		removed = true
		*nd = *patched
		return nil
	})
	if apierrors.IsNotFound(err) {
		return removed, nil
	}
	if err != nil {
		return removed, fmt.Errorf("removing the finalizer of NodeDevice %q: %w", nd.Name, err)
	}
	return removed, nil
}

// ownedStatusResources returns the resource names under status.capacity and status.allocatable
// that manager owns through the status subresource, from a Node's managed fields.
func ownedStatusResources(managed []metav1.ManagedFieldsEntry, manager string) ([]corev1.ResourceName, error) {
	var names []corev1.ResourceName
	for _, entry := range managed {
		if entry.Manager != manager || entry.Subresource != "status" || entry.FieldsV1 == nil {
			continue
		}
		// FieldsV1 is a tree of JSON objects whose keys are "f:<field name>" (or "." for the
		// field itself); a map's keys are fields too.
		var fields struct {
			Status map[string]map[string]json.RawMessage `json:"f:status"`
		}
		if err := json.Unmarshal(entry.FieldsV1.GetRawBytes(), &fields); err != nil {
			return nil, fmt.Errorf("decoding the fields of manager %s: %w", manager, err)
		}
		for _, list := range []string{"f:capacity", "f:allocatable"} {
			for key := range fields.Status[list] {
				if name, ok := strings.CutPrefix(key, "f:"); ok && !slices.Contains(names, corev1.ResourceName(name)) {
					names = append(names, corev1.ResourceName(name))
				}
			}
		}
	}
	return names, nil
}
