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
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"sigs.k8s.io/yaml"
)

// TestHelmLint lints the chart strictly with its default values and with each ci/ values file.
func TestHelmLint(t *testing.T) {
	cases := map[string][]string{"default values": nil}
	for _, f := range ciValuesFiles(t) {
		cases[filepath.Base(f)] = []string{"--values", f}
	}
	for name, extra := range cases {
		t.Run(name, func(t *testing.T) {
			args := append([]string{"lint", "--strict", chartDir, "--namespace", namespace}, extra...)
			if _, err := run(t, "helm", args...); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestHelmTemplateRenders renders the chart with its default values and with each ci/ values file.
// (The renders are applied to a real API server by TestRendersAreAcceptedByTheAPIServer.)
func TestHelmTemplateRenders(t *testing.T) {
	if objs := helmTemplate(t, namespace); len(objs) == 0 {
		t.Fatal("the chart renders nothing with its default values")
	}
	for _, f := range ciValuesFiles(t) {
		t.Run(filepath.Base(f), func(t *testing.T) {
			if objs := helmTemplate(t, namespace, "--values", f); len(objs) == 0 {
				t.Fatal("the chart renders nothing")
			}
		})
	}
}

// loadValues reads a values file as a map.
func loadValues(t *testing.T, file string) map[string]any {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]any{}
	if err := yaml.Unmarshal(data, &m); err != nil {
		t.Fatalf("parsing %s: %v", file, err)
	}
	return m
}

// leaves returns the dotted paths of the values a user sets: scalars, lists and empty maps. A map
// with entries (such as agent.resources) is a group of values, not a value.
func leaves(m map[string]any, prefix string) []string {
	var out []string
	for k, v := range m {
		p := k
		if prefix != "" {
			p = prefix + "." + k
		}
		if sub, ok := v.(map[string]any); ok && len(sub) > 0 {
			out = append(out, leaves(sub, p)...)
			continue
		}
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

func get(m map[string]any, path string) (any, bool) {
	var cur any = m
	for _, k := range strings.Split(path, ".") {
		mm, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = mm[k]; !ok {
			return nil, false
		}
	}
	return cur, true
}

func set(m map[string]any, path string, v any) {
	keys := strings.Split(path, ".")
	for _, k := range keys[:len(keys)-1] {
		next, ok := m[k].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[k] = next
		}
		m = next
	}
	m[keys[len(keys)-1]] = v
}

// TestEveryValueIsExercised requires the ci/ values files, together, to switch every value of
// values.yaml away from its default, and every such switch to change the render: reverting any
// one value of a ci file to its default must change what the chart renders. A value that the
// templates ignore fails here.
func TestEveryValueIsExercised(t *testing.T) {
	defaults := loadValues(t, filepath.Join(chartDir, "values.yaml"))
	changed := map[string]bool{}
	for _, f := range ciValuesFiles(t) {
		ci := loadValues(t, f)
		base, err := run(t, "helm", "template", releaseName, chartDir, "--namespace", namespace, "--values", f)
		if err != nil {
			t.Fatal(err)
		}
		for _, leaf := range leaves(defaults, "") {
			def, _ := get(defaults, leaf)
			v, ok := get(ci, leaf)
			if !ok || cmp.Equal(v, def) {
				continue
			}
			changed[leaf] = true
			t.Run(filepath.Base(f)+"/"+leaf, func(t *testing.T) {
				reverted := loadValues(t, f)
				set(reverted, leaf, def)
				data, err := yaml.Marshal(reverted)
				if err != nil {
					t.Fatal(err)
				}
				tmp := filepath.Join(t.TempDir(), "values.yaml")
				if err := os.WriteFile(tmp, data, 0o600); err != nil {
					t.Fatal(err)
				}
				out, err := run(t, "helm", "template", releaseName, chartDir, "--namespace", namespace, "--values", tmp)
				if err != nil {
					t.Fatal(err)
				}
				if bytes.Equal(out, base) {
					t.Errorf("%s: setting %s back to its default %v does not change the render: the value has no effect", filepath.Base(f), leaf, def)
				}
			})
		}
	}
	for _, leaf := range leaves(defaults, "") {
		if !changed[leaf] {
			t.Errorf("no ci/*-values.yaml file switches %s away from its default", leaf)
		}
	}
}

// documentedValues returns the paths of values.yaml keys that carry a `# --` doc comment.
func documentedValues(t *testing.T) []string {
	t.Helper()
	f, err := os.Open(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	keyLine := regexp.MustCompile(`^( *)([A-Za-z0-9_]+):`)
	type level struct {
		indent int
		key    string
	}
	var (
		stack      []level
		documented []string
		doc        bool
	)
	s := bufio.NewScanner(f)
	for s.Scan() {
		line := s.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(trimmed, "# --"):
			doc = true
			continue
		case strings.HasPrefix(trimmed, "#"):
			continue
		case trimmed == "":
			doc = false
			continue
		}
		m := keyLine.FindStringSubmatch(line)
		if m == nil {
			doc = false
			continue
		}
		indent := len(m[1])
		for len(stack) > 0 && stack[len(stack)-1].indent >= indent {
			stack = stack[:len(stack)-1]
		}
		stack = append(stack, level{indent, m[2]})
		if doc {
			var p []string
			for _, l := range stack {
				p = append(p, l.key)
			}
			documented = append(documented, strings.Join(p, "."))
		}
		doc = false
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	sort.Strings(documented)
	return documented
}

// TestEveryValueIsDocumented requires a `# --` comment in values.yaml on every value (or on the
// group it belongs to, such as agent.resources), and the chart README's values table to list
// exactly the documented values.
func TestEveryValueIsDocumented(t *testing.T) {
	defaults := loadValues(t, filepath.Join(chartDir, "values.yaml"))
	documented := documentedValues(t)
	isDocumented := map[string]bool{}
	for _, d := range documented {
		isDocumented[d] = true
	}
	for _, leaf := range leaves(defaults, "") {
		ok := false
		for p := leaf; p != ""; {
			if isDocumented[p] {
				ok = true
				break
			}
			i := strings.LastIndex(p, ".")
			if i < 0 {
				break
			}
			p = p[:i]
		}
		if !ok {
			t.Errorf("values.yaml: %s has no `# --` comment", leaf)
		}
	}

	readme, err := os.ReadFile(filepath.Join(chartDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `([A-Za-z0-9_.]+)` \\|")
	var listed []string
	for _, m := range row.FindAllStringSubmatch(string(readme), -1) {
		listed = append(listed, m[1])
	}
	sort.Strings(listed)
	if diff := cmp.Diff(documented, listed); diff != "" {
		t.Errorf("the values table of charts/kubedevice/README.md does not list the documented values (-values.yaml +README):\n%s", diff)
	}
}

// TestChartRefusesBadValues checks that values.schema.json and the templates reject values the
// agent or the controller would refuse at start, so they fail at `helm install` instead.
func TestChartRefusesBadValues(t *testing.T) {
	cases := map[string]struct {
		set  []string
		want string
	}{
		"unknown runtime injection":     {set: []string{"agent.runtimeInjection=cdi"}, want: "runtimeInjection"},
		"unknown topology policy":       {set: []string{"agent.topologyPolicy=strict"}, want: "topologyPolicy"},
		"unknown topology scope":        {set: []string{"agent.topologyScope=node"}, want: "topologyScope"},
		"relative plugin dir":           {set: []string{"agent.pluginDir=device-plugins"}, want: "pluginDir"},
		"relative pod resources socket": {set: []string{"agent.podResourcesSocket=kubelet.sock"}, want: "podResourcesSocket"},
		"pod resources socket among the plugins'": {
			set:  []string{"agent.podResourcesSocket=/var/lib/kubedevice/device-plugins/pod-resources.sock"},
			want: "podResourcesSocket",
		},
		"not a duration":            {set: []string{"agent.endpointGracePeriod=5 minutes"}, want: "endpointGracePeriod"},
		"metrics on the probe port": {set: []string{"metrics.port=8081"}, want: "port"},
		"misspelt value":            {set: []string{"agent.pluginsDir=/x"}, want: "pluginsDir"},
		"replicas without leader election": {
			set:  []string{"controller.replicas=2", "controller.leaderElection.enabled=false"},
			want: "leaderElection",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var extra []string
			for _, s := range tc.set {
				extra = append(extra, "--set", s)
			}
			_, err := helmTemplateErr(t, namespace, extra...)
			if err == nil {
				t.Fatalf("helm template --set %v succeeded, want an error", tc.set)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("helm template --set %v failed without naming %q:\n%v", tc.set, tc.want, err)
			}
		})
	}
}

// TestDRANodeSelectorNeedsDRAResources: agent.draNodeSelector becomes --dra-node-selector, quoted
// whole whatever its syntax, only when the agent serves resources through DRA (the agent refuses
// the selector without --dra-resources, and observe mode serves nothing through DRA).
func TestDRANodeSelectorNeedsDRAResources(t *testing.T) {
	const sel = "kubedevice.io/dra=true,pool in (a,b),!legacy"
	cases := map[string]struct {
		agent map[string]any
		want  map[string]string
	}{
		"without draResources": {agent: map[string]any{"draNodeSelector": sel}},
		"with draResources": {
			agent: map[string]any{"draNodeSelector": sel, "draResources": "example.com/*"},
			want:  map[string]string{"dra-resources": "example.com/*", "dra-node-selector": sel},
		},
		"in observe mode": {agent: map[string]any{"draNodeSelector": sel, "draResources": "example.com/*", "mode": "observe"}},
		"empty":           {agent: map[string]any{"draResources": "example.com/*"}, want: map[string]string{"dra-resources": "example.com/*"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			data, err := yaml.Marshal(map[string]any{"agent": tc.agent})
			if err != nil {
				t.Fatal(err)
			}
			values := filepath.Join(t.TempDir(), "values.yaml")
			if err := os.WriteFile(values, data, 0o600); err != nil {
				t.Fatal(err)
			}
			ds := toDaemonSet(t, find(t, helmTemplate(t, namespace, "--values", values), "DaemonSet", "kubedevice-agent"))
			got := map[string]string{}
			for k, v := range flags(ds.Spec.Template.Spec.Containers[0]) {
				if strings.HasPrefix(k, "dra-") {
					got[k] = v
				}
			}
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("the agent's DRA flags (-want +got):\n%s", diff)
			}
		})
	}
}
