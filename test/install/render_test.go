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

// Package install checks kubedevice's two installs, config/default (kustomize) and
// charts/kubedevice (Helm): the chart lints and renders with its default values and with every
// value switched away from its default; the two render the same objects; the agent's flags, host
// paths and identity fit together; and every render is accepted, with a server-side dry run and
// strict field validation, by a real kube-apiserver with the CRDs installed (envtest, bin/k8s).
// It runs bin/helm and bin/kustomize, which `make test` installs.
package install

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/kubedevice/kubedevice/internal/testutil"
)

const (
	// namespace is where config/default installs, and the namespace the chart is rendered for.
	namespace = "kubedevice-system"
	// releaseName is the Helm release name docs/install.md uses.
	releaseName = "kubedevice"
)

var (
	root      = testutil.RepoRoot()
	chartDir  = filepath.Join(root, "charts", "kubedevice")
	configDir = filepath.Join(root, "config")
)

// tool returns the path of a tool the Makefile installs into bin/ ($HELM or $KUSTOMIZE override it).
// A missing tool fails the test: `make test` installs both, and a skip would hide the checks.
func tool(t *testing.T, name string) string {
	t.Helper()
	p := os.Getenv(strings.ToUpper(name))
	if p == "" {
		p = filepath.Join(root, "bin", name)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s not found at %s (run `make helm kustomize`, or set $%s): %v", name, p, strings.ToUpper(name), err)
	}
	return p
}

// run runs a tool and returns its standard output; a non-zero exit is returned as an error that
// carries the tool's standard error.
func run(t *testing.T, name string, args ...string) ([]byte, error) {
	t.Helper()
	cmd := exec.Command(tool(t, name), args...)
	cmd.Dir = root
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, stderr.String())
	}
	return stdout.Bytes(), nil
}

// helmTemplate renders the chart, CRDs included, as `helm install kubedevice charts/kubedevice -n
// <ns>` would install it, with extra helm arguments (--values, --set-json, ...).
func helmTemplate(t *testing.T, ns string, extra ...string) []*unstructured.Unstructured {
	t.Helper()
	out, err := helmTemplateErr(t, ns, extra...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func helmTemplateErr(t *testing.T, ns string, extra ...string) ([]*unstructured.Unstructured, error) {
	t.Helper()
	args := append([]string{"template", releaseName, chartDir, "--namespace", ns, "--include-crds"}, extra...)
	out, err := run(t, "helm", args...)
	if err != nil {
		return nil, err
	}
	objs, err := decode(out)
	if err != nil {
		return nil, fmt.Errorf("helm %s: %w", strings.Join(args, " "), err)
	}
	return objs, nil
}

// kustomizeBuild renders a kustomization directory.
func kustomizeBuild(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	out, err := run(t, "kustomize", "build", dir)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := decode(out)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	return objs
}

// decode splits a YAML stream into objects, skipping empty documents.
func decode(data []byte) ([]*unstructured.Unstructured, error) {
	d := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var objs []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := d.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return objs, nil
			}
			return nil, fmt.Errorf("decoding the rendered objects: %w", err)
		}
		if len(m) == 0 {
			continue
		}
		u := &unstructured.Unstructured{Object: m}
		if u.GetKind() == "" || u.GetName() == "" {
			return nil, fmt.Errorf("a rendered object without kind or name: %v", m)
		}
		objs = append(objs, u)
	}
}

// key names an object in a render: group/kind namespace/name.
func key(u *unstructured.Unstructured) string {
	gvk := u.GroupVersionKind()
	return fmt.Sprintf("%s/%s %s/%s", gvk.Group, gvk.Kind, u.GetNamespace(), u.GetName())
}

// index maps the objects of a render by key and fails on duplicates.
func index(t *testing.T, what string, objs []*unstructured.Unstructured) map[string]*unstructured.Unstructured {
	t.Helper()
	m := map[string]*unstructured.Unstructured{}
	for _, u := range objs {
		k := key(u)
		if _, dup := m[k]; dup {
			t.Fatalf("%s renders %s twice", what, k)
		}
		m[k] = u
	}
	return m
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// find returns the one object of a kind and name in a render.
func find(t *testing.T, objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	t.Helper()
	for _, u := range objs {
		if u.GetKind() == kind && u.GetName() == name {
			return u
		}
	}
	t.Fatalf("no %s %s in the render", kind, name)
	return nil
}

// ciValuesFiles lists the chart's ci/*-values.yaml files.
func ciValuesFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(chartDir, "ci", "*-values.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no values files in %s/ci: %v", chartDir, err)
	}
	return files
}
