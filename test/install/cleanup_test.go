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
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kubedevice/kubedevice/internal/testutil"
)

// TestCleanupHook checks the chart's post-delete cleanup: with its default values the chart's hooks
// are exactly the cleanup Job and its identity and permissions, all post-delete hooks deleted
// before a new run and once they succeeded, the Job created after what it runs as; the roles grant
// exactly config/rbac/cleanup (generated from internal/cleanup's RBAC markers, which the envtest
// suite runs the cleanup with); the Job runs `kubedevice cleanup` for the release namespace's
// Lease. With cleanup.enabled=false there is no hook at all.
func TestCleanupHook(t *testing.T) {
	for _, ns := range []string{namespace, otherNamespace} {
		t.Run(ns, func(t *testing.T) {
			hooks := map[string]*unstructured.Unstructured{}
			for _, u := range helmTemplate(t, ns) {
				if isHelmHook(u) {
					hooks[u.GetKind()] = u
				}
			}
			kinds := []string{"ClusterRole", "ClusterRoleBinding", "Job", "Role", "RoleBinding", "ServiceAccount"}
			if diff := cmp.Diff(kinds, sortedKeys(hooks)); diff != "" {
				t.Fatalf("the chart's hooks (-want +got):\n%s", diff)
			}
			weights := map[string]int{}
			for kind, u := range hooks {
				a := u.GetAnnotations()
				if a["helm.sh/hook"] != "post-delete" || a["helm.sh/hook-delete-policy"] != "before-hook-creation,hook-succeeded" {
					t.Errorf("%s: hook annotations %v, want a post-delete hook deleted before-hook-creation,hook-succeeded", key(u), a)
				}
				if u.GetName() != "kubedevice-cleanup" {
					t.Errorf("%s: want the name kubedevice-cleanup", key(u))
				}
				w, err := strconv.Atoi(a["helm.sh/hook-weight"])
				if err != nil {
					t.Errorf("%s: hook weight: %v", key(u), err)
				}
				weights[kind] = w
			}
			for _, kind := range []string{"ServiceAccount", "ClusterRole", "Role"} {
				for _, binding := range []string{"ClusterRoleBinding", "RoleBinding"} {
					if weights[kind] > weights[binding] || weights[binding] >= weights["Job"] {
						t.Errorf("hook weights %v: the Job must come after the bindings, which come after the roles and the service account", weights)
					}
				}
			}

			generated, err := testutil.LoadManifests(filepath.Join("config", "rbac", "cleanup", "role.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			for _, g := range generated {
				got := hooks[g.GetKind()]
				if got == nil {
					t.Errorf("no hook %s", g.GetKind())
					continue
				}
				if diff := cmp.Diff(g.Object["rules"], got.Object["rules"]); diff != "" {
					t.Errorf("the rules of hook %s differ from config/rbac/cleanup (run `make manifests`, then copy them) (-generated +chart):\n%s", g.GetKind(), diff)
				}
				if g.GetKind() == "Role" && got.GetNamespace() != ns {
					t.Errorf("hook %s is in namespace %q, want the release namespace %q, where the controller's Lease is", key(got), got.GetNamespace(), ns)
				}
			}

			job := &batchv1.Job{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(hooks["Job"].Object, job, true); err != nil {
				t.Fatal(err)
			}
			pod := job.Spec.Template.Spec
			if pod.ServiceAccountName != "kubedevice-cleanup" {
				t.Errorf("the Job runs as %q, want kubedevice-cleanup", pod.ServiceAccountName)
			}
			c := pod.Containers[0]
			if diff := cmp.Diff([]string{"/usr/local/bin/kubedevice", "cleanup"}, c.Command); diff != "" {
				t.Errorf("the Job's command (-want +got):\n%s", diff)
			}
			if got := flags(c)["lease-namespace"]; got != ns {
				t.Errorf("the Job looks for the controller's Lease in %q, want the release namespace %q", got, ns)
			}
			// cmd/kubedevice links envtest (kubedevice dev), which creates /tmp/kubebuilder-envtest
			// as the program starts: on a read-only root it panics unless /tmp is a volume.
			tmp := false
			for _, m := range c.VolumeMounts {
				tmp = tmp || (m.MountPath == "/tmp" && !m.ReadOnly)
			}
			if !tmp {
				t.Error("the Job's container has a read-only root and no writable /tmp")
			}
			if job.Spec.Template.Labels[noInjectionGateLabel] != "true" {
				t.Errorf("the Job's pods lack %s=true: they must start without the agent", noInjectionGateLabel)
			}
		})
	}

	t.Run("disabled", func(t *testing.T) {
		for _, u := range helmTemplate(t, namespace, "--set", "cleanup.enabled=false") {
			if isHelmHook(u) {
				t.Errorf("cleanup.enabled=false renders hook %s", key(u))
			}
		}
	})
}
