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

package controller

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
	kdcontroller "github.com/kubedevice/kubedevice/internal/controller"
	"github.com/kubedevice/kubedevice/internal/testutil"
)

// agentFieldOwner is the field manager the node agent writes with.
const agentFieldOwner = "kubedevice-agent"

// gopher is the resource most specs publish.
const gopher corev1.ResourceName = "example.com/gopher"

// controllers are the names of the controller's reconcilers.
var controllers = []string{"node-capacity", "nodedevice", "deviceallocation", "deviceclass", "remediation"}

var nodeCounter atomic.Int64

// uniqueName returns prefix with a suffix no other spec uses, for cluster-scoped objects.
func uniqueName(prefix string) string {
	return fmt.Sprintf("%s-%d-%d", prefix, GinkgoParallelProcess(), nodeCounter.Add(1))
}

// newNamespace creates a namespace for one spec and deletes it afterwards.
func newNamespace() string {
	GinkgoHelper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "kd-"}}
	Expect(k8sClient.Create(ctx, ns)).To(Succeed())
	DeferCleanup(func() {
		Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, ns))).To(Succeed())
	})
	return ns.Name
}

// createNode creates the Node and sets its status through the status subresource, as a kubelet
// would (envtest has none); the Node is deleted after the spec.
func createNode(w *testutil.NodeWrapper) *corev1.Node {
	GinkgoHelper()
	node := w.Obj()
	status := *node.Status.DeepCopy()
	Expect(k8sClient.Create(ctx, node)).To(Succeed())
	DeferCleanup(func() {
		Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, node))).To(Succeed())
	})
	node.Status = status
	Expect(k8sClient.Status().Update(ctx, node)).To(Succeed())
	return node
}

// applyAsAgent writes obj as the node agent does: server-side apply of the object, then of its
// status, under the agent's field owner.
func applyAsAgent(obj client.Object) {
	GinkgoHelper()
	applyAs(k8sClient, obj)
}

// applyAs server-side applies obj, then its status when it has one, with c under the agent's field
// owner; a DeviceAllocation (no status subresource) whole, in one apply, as the agent writes it.
func applyAs(c client.Client, obj client.Object) {
	GinkgoHelper()
	Expect(tryApplyAs(c, obj)).To(Succeed())
}

func tryApplyAs(c client.Client, obj client.Object) error {
	u := toApplyObject(obj)
	if _, ok := obj.(*kdv1alpha1.DeviceAllocation); ok {
		return c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(agentFieldOwner), client.ForceOwnership)
	}
	status, hasStatus := u.Object["status"]
	delete(u.Object, "status")
	if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(agentFieldOwner), client.ForceOwnership); err != nil {
		return err
	}
	if m, ok := status.(map[string]any); !hasStatus || (ok && len(m) == 0) {
		return nil
	}
	return tryApplyStatusAs(c, obj, status)
}

func tryApplyStatusAs(c client.Client, obj client.Object, status any) error {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvkOf(obj))
	u.SetNamespace(obj.GetNamespace())
	u.SetName(obj.GetName())
	u.Object["status"] = status
	return c.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(u),
		client.FieldOwner(agentFieldOwner), client.ForceOwnership)
}

// toApplyObject converts obj to the unstructured body of an apply request.
func toApplyObject(obj client.Object) *unstructured.Unstructured {
	GinkgoHelper()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	Expect(err).NotTo(HaveOccurred())
	u := &unstructured.Unstructured{Object: m}
	u.SetGroupVersionKind(gvkOf(obj))
	unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
	return u
}

func gvkOf(obj client.Object) schema.GroupVersionKind {
	GinkgoHelper()
	gvk, err := apiutil.GVKForObject(obj, testEnv.Scheme)
	Expect(err).NotTo(HaveOccurred())
	return gvk
}

// renewLease renews the agent Lease of node at the fake clock's now, as the agent does.
func renewLease(node string) {
	GinkgoHelper()
	lease := testutil.MakeLease(kdcontroller.AgentLeaseName(node), agentNamespace).RenewTime(fakeClock.Now()).Obj()
	applyAsAgent(lease)
	DeferCleanup(func() {
		Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: agentNamespace, Name: lease.Name},
		}))).To(Succeed())
	})
}

// published returns what node publishes for resource, as "capacity/allocatable", "-" for a
// missing key.
func published(node string, resource corev1.ResourceName) func() string {
	return func() string {
		n := &corev1.Node{}
		if err := k8sClient.Get(ctx, client.ObjectKey{Name: node}, n); err != nil {
			return err.Error()
		}
		str := func(l corev1.ResourceList) string {
			if q, ok := l[resource]; ok {
				return q.String()
			}
			return "-"
		}
		return str(n.Status.Capacity) + "/" + str(n.Status.Allocatable)
	}
}

// nodeDevice returns a function reading the NodeDevice named name.
func nodeDevice(name string) func() (*kdv1alpha1.NodeDevice, error) {
	return func() (*kdv1alpha1.NodeDevice, error) {
		nd := &kdv1alpha1.NodeDevice{}
		return nd, k8sClient.Get(ctx, client.ObjectKey{Name: name}, nd)
	}
}

// deviceAllocation returns a function reading the DeviceAllocation ns/name.
func deviceAllocation(ns, name string) func() (*kdv1alpha1.DeviceAllocation, error) {
	return func() (*kdv1alpha1.DeviceAllocation, error) {
		da := &kdv1alpha1.DeviceAllocation{}
		return da, k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, da)
	}
}

// ndCondition returns a function giving "status/reason" of condition t of NodeDevice name,
// "absent" when it has none.
func ndCondition(name, t string) func() (string, error) {
	return func() (string, error) {
		nd, err := nodeDevice(name)()
		if err != nil {
			return "", err
		}
		return describeCondition(nd.Status.Conditions, t), nil
	}
}

// daCondition returns a function giving "status/reason" of condition t of DeviceAllocation
// ns/name, "absent" when it has none.
func daCondition(ns, name, t string) func() (string, error) {
	return func() (string, error) {
		da, err := deviceAllocation(ns, name)()
		if err != nil {
			return "", err
		}
		return describeCondition(da.Status.Conditions, t), nil
	}
}

// conditionAt returns a True condition of type t for reason, as the agent would write it.
func conditionAt(t, reason string) metav1.Condition {
	return metav1.Condition{Type: t, Status: metav1.ConditionTrue, Reason: reason, LastTransitionTime: metav1.Now()}
}

func describeCondition(conds []metav1.Condition, t string) string {
	c := meta.FindStatusCondition(conds, t)
	if c == nil {
		return "absent"
	}
	return string(c.Status) + "/" + c.Reason
}

// isNotFound reports whether get finds nothing.
func isNotFound[T any](get func() (T, error)) func() bool {
	return func() bool {
		_, err := get()
		return apierrors.IsNotFound(err)
	}
}

// metricValue sums the samples of the metric name, in the controller-runtime registry the
// controller's metrics go to, whose labels include labels.
func metricValue(name string, labels map[string]string) float64 {
	GinkgoHelper()
	families, err := metrics.Registry.Gather()
	Expect(err).NotTo(HaveOccurred())
	var sum float64
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	metric:
		for _, m := range f.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if got[k] != v {
					continue metric
				}
			}
			switch {
			case m.GetCounter() != nil:
				sum += m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				sum += m.GetGauge().GetValue()
			}
		}
	}
	return sum
}

// capacityPatches is kubedevice_node_capacity_patches_total.
func capacityPatches() float64 {
	GinkgoHelper()
	return metricValue("kubedevice_node_capacity_patches_total", nil)
}

// reconciles counts the reconciles of the named controller so far.
func reconciles(controller string) float64 {
	GinkgoHelper()
	return metricValue("controller_runtime_reconcile_total", map[string]string{"controller": controller})
}

// waitIdle waits until no reconciler is working and no queue holds a ready item: every reconcile
// triggered so far has finished, including its RequeueAfter, which is then waiting on the fake
// clock. Step the fake clock only after this, or a reconcile that read the clock before the step
// could schedule its requeue after it.
func waitIdle() {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		for _, c := range controllers {
			g.Expect(metricValue("controller_runtime_active_workers", map[string]string{"controller": c})).To(BeZero(), c)
			g.Expect(metricValue("workqueue_depth", map[string]string{"name": c})).To(BeZero(), c)
		}
	}).Should(Succeed())
}

// eventsFor lists the events.k8s.io Events about the object with uid.
func eventsFor(uid types.UID) func() ([]eventsv1.Event, error) {
	return func() ([]eventsv1.Event, error) {
		list := &eventsv1.EventList{}
		if err := k8sClient.List(ctx, list); err != nil {
			return nil, err
		}
		var out []eventsv1.Event
		for _, e := range list.Items {
			if e.Regarding.UID == uid {
				out = append(out, e)
			}
		}
		return out, nil
	}
}

// loadManifests reads the Kubernetes objects of the YAML files at paths, relative to the
// repository root.
func loadManifests(paths ...string) []*unstructured.Unstructured {
	GinkgoHelper()
	objs, err := testutil.LoadManifests(paths...)
	Expect(err).NotTo(HaveOccurred())
	return objs
}

// controllerWrites counts the controller's status writes to NodeDevices, by object name, from its
// HTTP transport: what the API server is asked, whether or not the write changes anything.
var controllerWrites = &statusWrites{counts: map[string]int{}, objects: map[string]int{}, nodes: map[string]int{}}

type statusWrites struct {
	mu     sync.Mutex
	counts map[string]int
	// objects counts the writes of the NodeDevices themselves (metadata, spec), by name.
	objects map[string]int
	// nodes counts the writes of Nodes' status, by node name.
	nodes map[string]int
}

// wrap is a rest.Config WrapTransport.
func (w *statusWrites) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
		// /apis/kubedevice.io/v1alpha1/nodedevices/<name>/status
		if req.Method == http.MethodPatch && len(parts) == 6 && parts[3] == "nodedevices" && parts[5] == "status" {
			w.mu.Lock()
			w.counts[parts[4]]++
			w.mu.Unlock()
		}
		// /apis/kubedevice.io/v1alpha1/nodedevices/<name>
		if (req.Method == http.MethodPatch || req.Method == http.MethodPut) && len(parts) == 5 && parts[3] == "nodedevices" {
			w.mu.Lock()
			w.objects[parts[4]]++
			w.mu.Unlock()
		}
		// /api/v1/nodes/<name>/status
		if (req.Method == http.MethodPatch || req.Method == http.MethodPut) && len(parts) == 5 && parts[0] == "api" &&
			parts[2] == "nodes" && parts[4] == "status" {
			w.mu.Lock()
			w.nodes[parts[3]]++
			w.mu.Unlock()
		}
		return rt.RoundTrip(req)
	})
}

// of returns the status writes to the NodeDevice named name so far.
func (w *statusWrites) of(name string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.counts[name]
}

// objectWrites returns the writes of the NodeDevice named name itself (not its status) so far.
func (w *statusWrites) objectWrites(name string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.objects[name]
}

// nodeStatus returns the writes of node's status so far.
func (w *statusWrites) nodeStatus(node string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.nodes[node]
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }
