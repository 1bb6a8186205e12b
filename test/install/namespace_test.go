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
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

const otherNamespace = "devices-elsewhere"

// copyTree copies the regular files under src to dst.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// checkNamespace requires a render for namespace ns to mention kubedevice-system nowhere, and the
// admission policies to name the service accounts in ns.
func checkNamespace(t *testing.T, objs []*unstructured.Unstructured, ns string) {
	t.Helper()
	for _, u := range objs {
		data, err := yaml.Marshal(u.Object)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(data, []byte(namespace)) {
			t.Errorf("%s still names %s:\n%s", key(u), namespace, data)
		}
		if u.GetKind() == "ValidatingAdmissionPolicy" {
			conds, _, _ := unstructured.NestedSlice(u.Object, "spec", "matchConditions")
			users := 0
			for _, c := range conds {
				expr, _ := c.(map[string]any)["expression"].(string)
				users += strings.Count(expr, "system:serviceaccount:"+ns+":kubedevice-")
			}
			if users == 0 {
				t.Errorf("%s does not name a kubedevice service account in %s", key(u), ns)
			}
		}
	}
}

// TestInstallsFollowTheNamespace installs into another namespace: the chart with
// `-n devices-elsewhere`, config/default with its `namespace:` changed. Nothing may still name
// kubedevice-system — in particular not the admission policies' CEL, which names the service
// accounts, nor the role bindings' subjects.
func TestInstallsFollowTheNamespace(t *testing.T) {
	t.Run("helm", func(t *testing.T) {
		checkNamespace(t, helmTemplate(t, otherNamespace), otherNamespace)
	})
	t.Run("kustomize", func(t *testing.T) {
		dir := t.TempDir()
		copyTree(t, configDir, dir)
		k := filepath.Join(dir, "default", "kustomization.yaml")
		data, err := os.ReadFile(k)
		if err != nil {
			t.Fatal(err)
		}
		line := "\nnamespace: " + namespace + "\n"
		if !bytes.Contains(data, []byte(line)) {
			t.Fatalf("config/default/kustomization.yaml has no line %q", strings.TrimSpace(line))
		}
		data = bytes.Replace(data, []byte(line), []byte("\nnamespace: "+otherNamespace+"\n"), 1)
		if err := os.WriteFile(k, data, 0o644); err != nil {
			t.Fatal(err)
		}
		objs := kustomizeBuild(t, filepath.Join(dir, "default"))
		checkNamespace(t, objs, otherNamespace)
		find(t, objs, "Namespace", otherNamespace)
	})
}
