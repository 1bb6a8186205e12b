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

// Package upgrade checks what the agent of this version does to DeviceAllocations an earlier agent
// and controller wrote while the kind had a status subresource, across the CRD's change: an
// envtest API server of its own, as the CRD is switched under it.
package upgrade

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/yaml"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
	"github.com/kubedevice/kubedevice/internal/agent/kube"
	"github.com/kubedevice/kubedevice/internal/contract"
	kdcontroller "github.com/kubedevice/kubedevice/internal/controller"
	"github.com/kubedevice/kubedevice/internal/indexer"
	"github.com/kubedevice/kubedevice/internal/nodeagent"
	"github.com/kubedevice/kubedevice/internal/testutil"
)

// TestDeviceAllocationWrittenBeforeTheStatusSubresourceWent writes a DeviceAllocation as the
// previous agent and controller did (the agent: an apply of metadata and spec, then of status
// through the status subresource, its conditions observing generation 1; the controller: its
// Conflict condition through the status subresource), then serves the CRD of this version, without
// the subresource, and writes it as this agent does.
func TestDeviceAllocationWrittenBeforeTheStatusSubresourceWent(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	env, err := testutil.NewEnvironment()
	if err != nil {
		t.Fatal(err)
	}
	crd := deviceAllocationCRD(t)
	old := crd.DeepCopy()
	old.Spec.Versions[0].Subresources = &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{}}
	env.CRDDirectoryPaths = nil
	env.CRDs = []*apiextensionsv1.CustomResourceDefinition{old, loadCRD(t, "kubedevice.io_nodedevices.yaml")}
	cfg, err := env.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = env.Stop() }()
	scheme := testutil.Scheme()
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "upgrade"}}
	if err := c.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	pod := testutil.MakePod("p", ns.Name).UID("0b5d9a52-3c1e-4b8e-9a51-0d4e6c1f7a20").Node("n1").Request("example.com/gopher", 2).Obj()
	if err := c.Create(ctx, pod.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	live := &corev1.Pod{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(pod), live); err != nil {
		t.Fatal(err)
	}
	pod.UID = live.UID
	alloc := &nodeagent.PodAllocation{PodUID: string(pod.UID), Namespace: pod.Namespace, Name: pod.Name, Containers: []nodeagent.ContainerAllocation{
		{Name: "app", Resources: []nodeagent.ResourceAllocation{{ResourceName: "example.com/gopher", DeviceIDs: []string{"gopher-0", "gopher-1"}}}},
	}}
	allocated := allocatedStatus(pod, alloc, time.Now())

	// The previous agent: metadata and spec, then status with observedGeneration.
	da := kube.NewDeviceAllocation(pod)
	key := client.ObjectKeyFromObject(da)
	if _, err := kube.Apply(ctx, c, kube.DeviceAllocationGVK, da); err != nil {
		t.Fatal(err)
	}
	oldStatus := *allocated.DeepCopy()
	oldStatus.Conditions[0].ObservedGeneration = 1
	if err := kube.ApplyStatus(ctx, c, kube.DeviceAllocationGVK, &kdv1alpha1.DeviceAllocation{ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace}, Status: oldStatus}); err != nil {
		t.Fatal(err)
	}
	// The previous controller: a Conflict through the status subresource.
	conflict := metav1.Condition{Type: kdv1alpha1.DeviceAllocationConflict, Status: metav1.ConditionTrue, Reason: kdv1alpha1.ReasonDeviceHeldTwice,
		Message: "held twice", ObservedGeneration: 1, LastTransitionTime: metav1.Now()}
	if err := c.Status().Apply(ctx, conditionsApply(t, key, conflict), client.FieldOwner(contract.ControllerFieldOwner), client.ForceOwnership); err != nil {
		t.Fatal(err)
	}
	before := get(ctx, t, c, key)
	t.Logf("written by the previous agent and controller: generation %d, managed fields:\n%s", before.Generation, managedFields(before))

	// This version's CRD, as `helm upgrade` or `kubectl apply -k` installs it.
	liveCRD := &apiextensionsv1.CustomResourceDefinition{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(crd), liveCRD); err != nil {
		t.Fatal(err)
	}
	liveCRD.Spec = crd.Spec
	if err := c.Update(ctx, liveCRD); err != nil {
		t.Fatal(err)
	}
	// Served once a status write of the object itself is kept.
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		err := c.Status().Update(ctx, get(ctx, t, c, key))
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Fatalf("the status subresource is still served: %v", err)
	}

	switched := get(ctx, t, c, key)
	if switched.Generation != before.Generation || !equalStatus(switched.Status, before.Status) {
		t.Fatalf("the CRD's change changed the object: generation %d → %d, status %+v → %+v", before.Generation, switched.Generation, before.Status, switched.Status)
	}

	// This agent at start-up: the same allocation is up to date, whatever observedGeneration the
	// previous agent stamped. No write.
	if !kube.DeviceAllocationMetaUpToDate(switched, pod) || !kube.DeviceAllocationStatusUpToDate(switched, kube.StampDeviceAllocation(allocatedStatus(pod, alloc, time.Now()), switched)) {
		t.Fatal("an object the previous agent wrote for the same allocation is not up to date: the new agent would rewrite every DeviceAllocation at its upgrade")
	}

	// A change (after a node reboot, its plugin not back yet): one apply of the whole object.
	refused := kube.StampDeviceAllocation(refusedStatus(time.Now()), switched)
	if _, err := kube.WriteDeviceAllocation(ctx, c, pod, refused); err != nil {
		t.Fatalf("the first write of this agent over the previous agent's object: %v", err)
	}
	first := get(ctx, t, c, key)
	t.Logf("after the first write of this agent: generation %d, managed fields:\n%s", first.Generation, managedFields(first))
	got := meta.FindStatusCondition(first.Status.Conditions, kdv1alpha1.DeviceAllocationAllocated)
	if got == nil || got.Status != metav1.ConditionFalse || got.Reason != kdv1alpha1.ReasonPluginUnavailable {
		t.Errorf("Allocated after the write = %+v, want False/%s", got, kdv1alpha1.ReasonPluginUnavailable)
	}
	if len(first.Status.Containers) != 0 || first.Status.Summary != "" {
		t.Errorf("the previous agent's devices stayed after a write without them: summary %q, %d containers (owned by its status entry)",
			first.Status.Summary, len(first.Status.Containers))
	}
	if got != nil && got.ObservedGeneration != 0 {
		t.Errorf("Allocated keeps the previous agent's observedGeneration %d at generation %d", got.ObservedGeneration, first.Generation)
	}
	for _, m := range first.ManagedFields {
		if m.Manager == contract.AgentFieldOwner && m.Subresource != "" {
			t.Errorf("the agent still has a field manager entry of subresource %q", m.Subresource)
		}
	}
	if c := meta.FindStatusCondition(first.Status.Conditions, kdv1alpha1.DeviceAllocationConflict); c == nil || c.Reason != kdv1alpha1.ReasonDeviceHeldTwice {
		t.Errorf("the previous controller's Conflict went with the agent's write: %+v", first.Status.Conditions)
	}

	// Not two owners fighting: the same write again changes nothing, and compares up to date.
	if !kube.DeviceAllocationStatusUpToDate(first, kube.StampDeviceAllocation(refused, first)) {
		t.Errorf("the object the agent just wrote is not up to date: %+v", first.Status)
	}
	if _, err := kube.WriteDeviceAllocation(ctx, c, pod, kube.StampDeviceAllocation(refused, first)); err != nil {
		t.Fatal(err)
	}
	if again := get(ctx, t, c, key); again.ResourceVersion != first.ResourceVersion {
		t.Errorf("the same apply again changed the object: generation %d → %d, status %+v", first.Generation, again.Generation, again.Status)
	}

	// Allocated again: the devices and the Allocated condition come back, owned by this agent.
	if _, err := kube.WriteDeviceAllocation(ctx, c, pod, kube.StampDeviceAllocation(allocatedStatus(pod, alloc, time.Now()), first)); err != nil {
		t.Fatal(err)
	}
	last := get(ctx, t, c, key)
	if !kube.DeviceAllocationStatusUpToDate(last, kube.StampDeviceAllocation(allocatedStatus(pod, alloc, time.Now()), last)) {
		t.Errorf("allocated again: status %+v", last.Status)
	}
	t.Logf("allocated again: generation %d, managed fields:\n%s", last.Generation, managedFields(last))

	// This controller, over the previous controller's Conflict: the object holds the device alone,
	// so the condition goes, although an apply of the resource could not remove it.
	stop := startController(ctx, t, cfg, scheme)
	defer stop()
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return meta.FindStatusCondition(get(ctx, t, c, key).Status.Conditions, kdv1alpha1.DeviceAllocationConflict) == nil, nil
	}); err != nil {
		t.Errorf("the previous controller's Conflict stayed: %+v", get(ctx, t, c, key).Status.Conditions)
	}
	done := get(ctx, t, c, key)
	if !kube.DeviceAllocationStatusUpToDate(done, kube.StampDeviceAllocation(allocatedStatus(pod, alloc, time.Now()), done)) {
		t.Errorf("the controller's removal of its condition changed the agent's status: %+v", done.Status)
	}
	t.Logf("after this controller: generation %d, managed fields:\n%s", done.Generation, managedFields(done))
}

// startController runs the controller's reconcilers as cmd/kubedevice-controller wires them
// (without leader election), and returns the function that stops them.
func startController(ctx context.Context, t *testing.T, cfg *rest.Config, scheme *runtime.Scheme) func() {
	t.Helper()
	opts := kdcontroller.Options{AgentNamespace: "kubedevice-system", AgentLeaseDuration: 40 * time.Second, Clock: clock.RealClock{}}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  kdcontroller.CacheOptions(opts),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := indexer.Setup(ctx, mgr.GetFieldIndexer()); err != nil {
		t.Fatal(err)
	}
	if err := kdcontroller.Setup(mgr, opts); err != nil {
		t.Fatal(err)
	}
	mgrCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mgrCtx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("controller manager: %v", err)
		}
	}
}

func allocatedStatus(pod *corev1.Pod, alloc *nodeagent.PodAllocation, now time.Time) kdv1alpha1.DeviceAllocationStatus {
	st := kdv1alpha1.DeviceAllocationStatus{Containers: kube.DeviceAllocationContainers(pod, alloc)}
	st.Summary = kube.DeviceAllocationSummary(st.Containers)
	st.Conditions = []metav1.Condition{{Type: kdv1alpha1.DeviceAllocationAllocated, Status: metav1.ConditionTrue, Reason: kdv1alpha1.ReasonAllocated,
		Message: "allocated", LastTransitionTime: metav1.NewTime(now.Truncate(time.Second))}}
	return st
}

func refusedStatus(now time.Time) kdv1alpha1.DeviceAllocationStatus {
	return kdv1alpha1.DeviceAllocationStatus{Conditions: []metav1.Condition{{Type: kdv1alpha1.DeviceAllocationAllocated, Status: metav1.ConditionFalse,
		Reason: kdv1alpha1.ReasonPluginUnavailable, Message: "plugin away", LastTransitionTime: metav1.NewTime(now.Truncate(time.Second))}}}
}

func deviceAllocationCRD(t *testing.T) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	crd := loadCRD(t, "kubedevice.io_deviceallocations.yaml")
	if len(crd.Spec.Versions) != 1 {
		t.Fatalf("the DeviceAllocation CRD serves %d versions; this test knows one", len(crd.Spec.Versions))
	}
	return crd
}

func loadCRD(t *testing.T, file string) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(testutil.RepoRoot(), "config", "crd", "bases", file))
	if err != nil {
		t.Fatal(err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(data, crd); err != nil {
		t.Fatal(err)
	}
	return crd
}

func conditionsApply(t *testing.T, key client.ObjectKey, conds ...metav1.Condition) runtime.ApplyConfiguration {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(kube.DeviceAllocationGVK)
	u.SetNamespace(key.Namespace)
	u.SetName(key.Name)
	list := make([]any, 0, len(conds))
	for i := range conds {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&conds[i])
		if err != nil {
			t.Fatal(err)
		}
		list = append(list, m)
	}
	if err := unstructured.SetNestedSlice(u.Object, list, "status", "conditions"); err != nil {
		t.Fatal(err)
	}
	return client.ApplyConfigurationFromUnstructured(u)
}

func get(ctx context.Context, t *testing.T, c client.Client, key client.ObjectKey) *kdv1alpha1.DeviceAllocation {
	t.Helper()
	da := &kdv1alpha1.DeviceAllocation{}
	if err := c.Get(ctx, key, da); err != nil {
		t.Fatal(err)
	}
	return da
}

func equalStatus(a, b kdv1alpha1.DeviceAllocationStatus) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// managedFields renders an object's field managers, one a line: manager, operation, subresource,
// and the fields it owns.
func managedFields(da *kdv1alpha1.DeviceAllocation) string {
	var out string
	for _, m := range da.ManagedFields {
		fields := string(m.FieldsV1.GetRawBytes())
		out += "  " + m.Manager + " " + string(m.Operation) + " subresource=" + m.Subresource + " " + fields + "\n"
	}
	return out
}
