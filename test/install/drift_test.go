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
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// helmBookkeepingLabels are the labels the chart adds to every object for Helm's own bookkeeping;
// config/ has no equivalent, so the drift test ignores them (and only them).
var helmBookkeepingLabels = []string{
	"helm.sh/chart",
	"app.kubernetes.io/managed-by",
	"app.kubernetes.io/instance",
	"app.kubernetes.io/version",
}

// withoutHelmBookkeeping returns a copy of u without the Helm bookkeeping labels.
func withoutHelmBookkeeping(u *unstructured.Unstructured) *unstructured.Unstructured {
	u = u.DeepCopy()
	labels := u.GetLabels()
	for _, l := range helmBookkeepingLabels {
		delete(labels, l)
	}
	if len(labels) == 0 {
		unstructured.RemoveNestedField(u.Object, "metadata", "labels")
	} else {
		u.SetLabels(labels)
	}
	return u
}

// isHelmHook tells the objects Helm runs as hooks rather than installs with the release.
func isHelmHook(u *unstructured.Unstructured) bool {
	_, ok := u.GetAnnotations()["helm.sh/hook"]
	return ok
}

// withoutEmptyNamespace returns a copy of u without an empty metadata.namespace, which
// config/default sets on the cluster-scoped admission policies (see its kustomization) and which
// the API server treats as absent.
func withoutEmptyNamespace(u *unstructured.Unstructured) *unstructured.Unstructured {
	if ns, found, _ := unstructured.NestedString(u.Object, "metadata", "namespace"); !found || ns != "" {
		return u
	}
	u = u.DeepCopy()
	unstructured.RemoveNestedField(u.Object, "metadata", "namespace")
	return u
}

// celFields are the fields of admission policies that hold CEL.
var celFields = map[string]bool{"expression": true, "messageExpression": true}

// normalizeCEL returns a copy of an admission policy with the white space in its CEL expressions
// collapsed. kustomize (go-yaml v3) and Helm (sigs.k8s.io/yaml, go-yaml v2) read a folded block
// scalar with more-indented lines differently (v3 keeps an extra line break); CEL ignores white
// space, so only that difference is forgiven. Other objects are returned unchanged.
func normalizeCEL(u *unstructured.Unstructured) *unstructured.Unstructured {
	if u.GroupVersionKind().Group != "admissionregistration.k8s.io" {
		return u
	}
	u = u.DeepCopy()
	var walk func(v any) any
	walk = func(v any) any {
		switch v := v.(type) {
		case map[string]any:
			for k, e := range v {
				if s, ok := e.(string); ok && celFields[k] {
					v[k] = strings.Join(strings.Fields(s), " ")
					continue
				}
				v[k] = walk(e)
			}
		case []any:
			for i, e := range v {
				v[i] = walk(e)
			}
		}
		return v
	}
	walk(u.Object)
	return u
}

// TestChartAndKustomizeDoNotDrift renders the chart with its default values and config/default,
// and requires the same set of objects, equal field by field. Three differences are expected and
// ignored: config/default also creates the Namespace (Helm users pass --create-namespace, and the
// release namespace cannot be an object of the release), the chart adds Helm's bookkeeping
// labels to every object, and the chart's hooks (the uninstall cleanup) exist only in the chart. White space in admission policies' CEL is compared collapsed (see
// normalizeCEL), and an empty namespace is no namespace. Everything else — kinds, names, namespaces, RBAC rules, admission policy
// specs, CRDs, workloads (args, env, ports, probes, volumes, security contexts, resources, labels,
// tolerations, images) — must be equal.
//
// Observe mode is the same option in both installs: config/observe (config/default with the
// observe component) renders what the chart renders with agent.mode=observe.
func TestChartAndKustomizeDoNotDrift(t *testing.T) {
	t.Run("config/default", func(t *testing.T) { checkNoDrift(t, "default") })
	t.Run("config/observe", func(t *testing.T) { checkNoDrift(t, "observe", "--set", "agent.mode=observe") })
}

// checkNoDrift compares config/<dir> with the chart rendered with helmArgs.
func checkNoDrift(t *testing.T, dir string, helmArgs ...string) {
	kust := kustomizeBuild(t, filepath.Join(configDir, dir))
	helm := helmTemplate(t, namespace, helmArgs...)

	var kustObjs []*unstructured.Unstructured
	namespaces := 0
	for _, u := range kust {
		if u.GetKind() == "Namespace" {
			namespaces++
			if u.GetName() != namespace {
				t.Errorf("config/%s creates namespace %q, want %q", dir, u.GetName(), namespace)
			}
			continue
		}
		kustObjs = append(kustObjs, u)
	}
	if namespaces != 1 {
		t.Errorf("config/%s creates %d namespaces, want 1 (%s)", dir, namespaces, namespace)
	}
	var helmObjs []*unstructured.Unstructured
	for _, u := range helm {
		if u.GetKind() == "Namespace" {
			t.Errorf("the chart renders Namespace %s: the release namespace is created by helm --create-namespace", u.GetName())
		}
		// Hooks are not part of the installed release: Helm creates them around an operation
		// (the post-delete cleanup Job and its RBAC, after an uninstall) and deletes them again.
		// config/default has no such moment; its users run `kubedevice cleanup` themselves.
		// TestCleanupHook checks the hooks.
		if isHelmHook(u) {
			continue
		}
		helmObjs = append(helmObjs, u)
	}

	k := index(t, "config/"+dir, kustObjs)
	h := index(t, "the chart", helmObjs)
	for _, name := range sortedKeys(k) {
		if _, ok := h[name]; !ok {
			t.Errorf("only config/%s has %s", dir, name)
		}
	}
	for _, name := range sortedKeys(h) {
		want, ok := k[name]
		if !ok {
			t.Errorf("only the chart has %s", name)
			continue
		}
		got := normalizeCEL(withoutHelmBookkeeping(h[name]))
		if diff := cmp.Diff(normalizeCEL(withoutEmptyNamespace(want)).Object, got.Object); diff != "" {
			t.Errorf("%s differs between config/%s and the chart (-kustomize +helm):\n%s", name, dir, diff)
		}
	}
}

// TestChartCRDsAreTheGeneratedOnes requires charts/kubedevice/crds to hold exactly the CRD files
// `make manifests` generates into config/crd/bases, byte for byte.
func TestChartCRDsAreTheGeneratedOnes(t *testing.T) {
	generated, err := filepath.Glob(filepath.Join(configDir, "crd", "bases", "*.yaml"))
	if err != nil || len(generated) == 0 {
		t.Fatalf("no CRDs in config/crd/bases: %v", err)
	}
	inChart, err := filepath.Glob(filepath.Join(chartDir, "crds", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	names := func(files []string) []string {
		var n []string
		for _, f := range files {
			n = append(n, filepath.Base(f))
		}
		return n
	}
	if diff := cmp.Diff(names(generated), names(inChart)); diff != "" {
		t.Fatalf("charts/kubedevice/crds does not hold the files of config/crd/bases (run `make manifests`) (-want +got):\n%s", diff)
	}
	for _, f := range generated {
		want, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(chartDir, "crds", filepath.Base(f)))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(want, got) {
			t.Errorf("charts/kubedevice/crds/%s differs from config/crd/bases (run `make manifests`)", filepath.Base(f))
		}
	}
}
