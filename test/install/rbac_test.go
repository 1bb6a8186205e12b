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
	"path/filepath"
	"slices"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// TestOnlyTheControllerMayEvict: of kubedevice's service accounts, only the controller's may create
// pods/eviction (its remediation policy, issue 25); the node agent, which runs on every node, may
// not, in the kustomize install and in the chart alike.
func TestOnlyTheControllerMayEvict(t *testing.T) {
	renders := map[string][]*unstructured.Unstructured{
		"config/default": kustomizeBuild(t, filepath.Join(configDir, "default")),
		"helm template":  helmTemplate(t, namespace),
	}
	for name, objs := range renders {
		for sa, want := range map[string]bool{"kubedevice-controller": true, "kubedevice-agent": false} {
			if got := mayEvict(t, objs, sa); got != want {
				t.Errorf("%s: service account %s may create pods/eviction: %t, want %t", name, sa, got, want)
			}
		}
	}
}

// mayEvict reports whether a rule of a role bound to the service account sa grants create on
// pods/eviction.
func mayEvict(t *testing.T, objs []*unstructured.Unstructured, sa string) bool {
	t.Helper()
	roles := map[string]bool{} // kind/name of the roles bound to sa
	for _, u := range objs {
		if u.GetKind() != "RoleBinding" && u.GetKind() != "ClusterRoleBinding" {
			continue
		}
		var b rbacv1.RoleBinding
		convert(t, u, &b)
		if slices.ContainsFunc(b.Subjects, func(s rbacv1.Subject) bool { return s.Kind == "ServiceAccount" && s.Name == sa }) {
			roles[b.RoleRef.Kind+"/"+b.RoleRef.Name] = true
		}
	}
	if len(roles) == 0 {
		t.Fatalf("no role is bound to service account %s", sa)
	}
	for _, u := range objs {
		if !roles[u.GetKind()+"/"+u.GetName()] {
			continue
		}
		var r rbacv1.ClusterRole
		convert(t, u, &r)
		if slices.ContainsFunc(r.Rules, grantsEviction) {
			return true
		}
	}
	return false
}

func grantsEviction(r rbacv1.PolicyRule) bool {
	match := func(list []string, v string) bool { return slices.Contains(list, v) || slices.Contains(list, "*") }
	return match(r.APIGroups, "") && (match(r.Resources, "pods/eviction") || slices.Contains(r.Resources, "pods/*")) && match(r.Verbs, "create")
}

func convert(t *testing.T, u *unstructured.Unstructured, into any) {
	t.Helper()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, into); err != nil {
		t.Fatalf("%s %s: %v", u.GetKind(), u.GetName(), err)
	}
}
