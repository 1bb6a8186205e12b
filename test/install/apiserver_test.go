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

package install

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/kubedevice/kubedevice/internal/testutil"
)

// fieldManager applies the renders, as `kubectl apply --server-side` would under its own name.
const fieldManager = "kubedevice-install-test"

// apiServer is one envtest control plane (the real kube-apiserver and etcd from bin/k8s, with the
// kubedevice CRDs installed for real from config/crd/bases), started by the first test that needs
// it and stopped by TestMain.
var apiServer struct {
	once   sync.Once
	env    *envtest.Environment
	cfg    *rest.Config
	dyn    dynamic.Interface
	mapper meta.ResettableRESTMapper
	err    error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if apiServer.env != nil {
		if err := apiServer.env.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stopping the test API server: %v\n", err)
			if code == 0 {
				code = 1
			}
		}
	}
	os.Exit(code)
}

// startAPIServer returns the shared API server's config, starting it the first time.
func startAPIServer(t *testing.T) *rest.Config {
	t.Helper()
	apiServer.once.Do(func() {
		env, err := testutil.NewEnvironment()
		if err != nil {
			apiServer.err = err
			return
		}
		cfg, err := env.Start()
		if err != nil {
			apiServer.err = fmt.Errorf("starting the test API server: %w", err)
			return
		}
		apiServer.env, apiServer.cfg = env, cfg
		if apiServer.err = testutil.CheckServerVersion(cfg); apiServer.err != nil {
			return
		}
		if apiServer.dyn, err = dynamic.NewForConfig(cfg); err != nil {
			apiServer.err = err
			return
		}
		dc, err := discovery.NewDiscoveryClientForConfig(cfg)
		if err != nil {
			apiServer.err = err
			return
		}
		apiServer.mapper = restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	})
	if apiServer.err != nil {
		t.Fatal(apiServer.err)
	}
	return apiServer.cfg
}

// resourceClient returns the dynamic client of an object's resource, in its namespace if namespaced.
func resourceClient(u *unstructured.Unstructured) (dynamic.ResourceInterface, error) {
	gvk := u.GroupVersionKind()
	mapping, err := apiServer.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if meta.IsNoMatchError(err) {
		// A CRD applied since the last discovery.
		apiServer.mapper.Reset()
		mapping, err = apiServer.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", key(u), err)
	}
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		return apiServer.dyn.Resource(mapping.Resource).Namespace(u.GetNamespace()), nil
	}
	return apiServer.dyn.Resource(mapping.Resource), nil
}

// apply server-side applies an object with strict field validation: an unknown or duplicate field
// is an error, as with `kubectl apply --server-side`. dryRun persists nothing.
func apply(ctx context.Context, u *unstructured.Unstructured, dryRun bool) error {
	ri, err := resourceClient(u)
	if err != nil {
		return err
	}
	data, err := json.Marshal(u.Object)
	if err != nil {
		return err
	}
	opts := metav1.PatchOptions{
		FieldManager:    fieldManager,
		FieldValidation: metav1.FieldValidationStrict,
		Force:           ptr.To(true),
	}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	if _, err := ri.Patch(ctx, u.GetName(), types.ApplyPatchType, data, opts); err != nil {
		return fmt.Errorf("applying %s: %w", key(u), err)
	}
	return nil
}

// ensureNamespace creates a namespace for real (a dry run cannot create objects in a namespace
// that does not exist).
func ensureNamespace(ctx context.Context, t *testing.T, ns string) {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("v1")
	u.SetKind("Namespace")
	u.SetName(ns)
	ri, err := resourceClient(u)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ri.Create(ctx, u, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating namespace %s: %v", ns, err)
	}
}

// isServiceMonitor tells the Prometheus Operator's ServiceMonitor, whose CRD the test API server
// does not have; TestServiceMonitorsSelectTheMetricsPorts checks those instead.
func isServiceMonitor(u *unstructured.Unstructured) bool {
	return u.GroupVersionKind().Group == "monitoring.coreos.com" && u.GetKind() == "ServiceMonitor"
}

// isPrometheusOperatorObject tells an object of the Prometheus Operator's API (ServiceMonitor,
// PrometheusRule), whose CRDs the test API server does not have: `make test-rules` checks the
// rules.
func isPrometheusOperatorObject(u *unstructured.Unstructured) bool {
	return u.GroupVersionKind().Group == "monitoring.coreos.com"
}

// applyRender applies a render the way `kubectl apply --server-side` does: namespaces for real
// first (the release namespace too, as `helm install --create-namespace` does), CRDs next, then
// everything else. dryRun applies all but the namespaces with a server-side dry run.
func applyRender(ctx context.Context, t *testing.T, objs []*unstructured.Unstructured, dryRun bool) {
	t.Helper()
	namespaces := map[string]bool{}
	for _, u := range objs {
		if u.GetKind() == "Namespace" {
			if err := apply(ctx, u, false); err != nil {
				t.Fatal(err)
			}
			namespaces[u.GetName()] = true
		}
	}
	for _, u := range objs {
		if ns := u.GetNamespace(); ns != "" && !namespaces[ns] {
			ensureNamespace(ctx, t, ns)
			namespaces[ns] = true
		}
	}
	var crds, rest []*unstructured.Unstructured
	for _, u := range objs {
		switch {
		case u.GetKind() == "Namespace":
		case isPrometheusOperatorObject(u):
			t.Logf("not applied (no CRD in the test API server): %s", key(u))
		case u.GetKind() == "CustomResourceDefinition":
			crds = append(crds, u)
		default:
			rest = append(rest, u)
		}
	}
	for _, u := range append(crds, rest...) {
		if err := apply(ctx, u, dryRun); err != nil {
			t.Error(err)
		}
	}
}

// waitFor polls cond every 100 ms until it returns nil or the timeout passes; it returns cond's
// last error.
func waitFor(timeout time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// newNode returns a minimal Node.
func newNode(name string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
}
