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

package agent

import (
	"errors"
	"flag"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kubedevice/kubedevice/internal/agent/dra"
	"github.com/kubedevice/kubedevice/internal/agent/injection/nri"
	"github.com/kubedevice/kubedevice/internal/nodeagent"
	"github.com/kubedevice/kubedevice/internal/nodeagent/topology"
)

func TestParseRuntimeInjection(t *testing.T) {
	for _, s := range []string{"nri", "none"} {
		if got, err := ParseRuntimeInjection(s); err != nil || string(got) != s {
			t.Errorf("%q: got %q, %v", s, got, err)
		}
	}
	if _, err := ParseRuntimeInjection("cri"); err == nil {
		t.Error("an unknown value was accepted")
	}
}

func TestValidate(t *testing.T) {
	cfg := nodeagent.Config{PluginDir: "/var/lib/kubedevice/device-plugins", PluginsRegistryDir: "/var/lib/kubelet/plugins_registry"}
	opts := func(socket string) Options {
		o := Options{NodeName: "n1"}
		o.PodResources.SocketPath = socket
		return o
	}
	for socket, ok := range map[string]bool{
		"": true,
		"/var/lib/kubedevice/pod-resources/kubelet.sock":               true,
		"relative/kubelet.sock":                                        false,
		"/var/lib/kubedevice/device-plugins/pr.sock":                   false,
		"/var/lib/kubedevice/device-plugins/../device-plugins/pr.sock": false,
		"/var/lib/kubelet/plugins_registry/pr.sock":                    false,
	} {
		if err := opts(socket).Validate(cfg); (err == nil) != ok {
			t.Errorf("socket %q: err %v, want ok %v", socket, err, ok)
		}
	}
	if err := (Options{}).Validate(cfg); !errors.Is(err, ErrNoNodeName) {
		t.Errorf("no node name: err %v", err)
	}
	for dir, ok := range map[string]bool{
		"":                                    true,
		"/var/lib/kubedevice/state":           true,
		"state":                               false,
		"/var/lib/kubedevice/device-plugins":  false,
		"/var/lib/kubedevice/device-plugins/": false,
	} {
		c := cfg
		c.StateDir = dir
		if err := opts("").Validate(c); (err == nil) != ok {
			t.Errorf("state dir %q: err %v, want ok %v", dir, err, ok)
		}
	}
}

// parseFlags parses args as the agent's command line does: the flags of the agent, its flows and
// the core, completed by ParseFlags.
func parseFlags(t *testing.T, args ...string) (Options, nodeagent.Config, error) {
	t.Helper()
	var o Options
	core := nodeagent.Flags{Config: nodeagent.DefaultConfig()}
	fs := flag.NewFlagSet("kubedevice-agent", flag.ContinueOnError)
	o.AddFlags(fs)
	core.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parsing %q: %v", args, err)
	}
	err := o.ParseFlags(&core)
	return o, core.Config, err
}

// Every flow's flags land in its options, with their defaults, and the values that need parsing
// are parsed.
func TestParseFlags(t *testing.T) {
	t.Setenv("NODE_NAME", "n1")
	t.Setenv("POD_NAMESPACE", "")
	o, cfg, err := parseFlags(t, "--mode=observe", "--observe-resources=example.com/a, example.com/b,",
		"--topology-policy=restricted", "--topology-policy-options=max-allowable-numa-nodes=16", "--state-dir=/state",
		"--dra-resources=example.com/*", "--runtime-injection=none", "--kubelet-checkpoint=/cp")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]any{
		"node": o.NodeName, "namespace": o.Namespace, "mode": o.Mode, "injection": o.RuntimeInjection,
		"observed": o.Observe.Resources, "checkpoint": o.Observe.CheckpointPath, "nriSocket": o.NRI.SocketPath,
		"cdiDir": o.DRA.CDIDir, "dra": o.DRAResources.String(), "servedByDRA": cfg.ServedByDRA != nil && cfg.ServedByDRA("example.com/x"),
		"policy": cfg.TopologyPolicy, "scope": cfg.TopologyScope, "maxNUMA": cfg.TopologyPolicyOptions.MaxNUMANodes(), "stateDir": cfg.StateDir,
	}
	want := map[string]any{
		"node": "n1", "namespace": DefaultNamespace, "mode": ModeObserve, "injection": RuntimeInjectionNone,
		"observed": []string{"example.com/a", "example.com/b"}, "checkpoint": "/cp", "nriSocket": nri.DefaultSocketPath,
		"cdiDir": dra.DefaultCDIDir, "dra": "example.com/*", "servedByDRA": true,
		"policy": topology.PolicyRestricted, "scope": topology.ScopeContainer, "maxNUMA": 16, "stateDir": "/state",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("options (-want +got):\n%s", diff)
	}
}

// An invalid flag's error names it.
func TestParseFlagsErrors(t *testing.T) {
	t.Setenv("NODE_NAME", "n1")
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"mode":              {[]string{"--mode=watch"}, `--mode: unknown mode "watch"`},
		"observed":          {[]string{"--observe-resources=kubernetes.io/gpu"}, `--observe-resources: "kubernetes.io/gpu" is not`},
		"topology scope":    {[]string{"--topology-scope=node"}, `--topology-scope: parsing topology scope "node"`},
		"policy options":    {[]string{"--topology-policy-options=x=y"}, "--topology-policy-options: "},
		"allocate policy":   {[]string{"--allocate-policy=/nonexistent"}, "--allocate-policy: "},
		"injection":         {[]string{"--runtime-injection=cri"}, `--runtime-injection: unknown runtime injection "cri"`},
		"dra resources":     {[]string{"--dra-resources=a b"}, `--dra-resources: DRA resource pattern "a b"`},
		"dra directory":     {[]string{"--dra-resources=*", "--cdi-dir=cdi"}, `--dra-resources: DRA options: the CDI directory must be an absolute path, got "cdi"`},
		"dra node selector": {[]string{"--dra-resources=*", "--dra-node-selector=pool in gpu"}, "--dra-node-selector: "},
		"dra node selector without dra resources": {
			[]string{"--dra-node-selector=kubedevice.io/dra=true"},
			`--dra-node-selector="kubedevice.io/dra=true": it chooses the nodes that serve --dra-resources through DRA, and --dra-resources names no resource`,
		},
		"node name":        {[]string{"--node-name="}, "--node-name is required when $NODE_NAME is not set"},
		"state dir":        {[]string{"--state-dir=state"}, `--state-dir="state": want an absolute directory`},
		"socket":           {[]string{"--pod-resources-socket=pr.sock"}, `--pod-resources-socket="pr.sock": want an absolute path`},
		"first error wins": {[]string{"--mode=watch", "--topology-policy=x", "--node-name="}, "--mode: "},
	} {
		t.Run(name, func(t *testing.T) {
			if _, _, err := parseFlags(t, tc.args...); err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Errorf("%q: error %v, want one starting %q", tc.args, err, tc.want)
			}
		})
	}
}

// --dra-node-selector: the core serves the DRA resources through DRA only once the start-up has
// chosen DRA for the node, and the options Setup is given share that choice; without a selector
// (or with an empty one) it serves them from the start, as before the flag existed.
func TestParseFlagsDRANodeSelector(t *testing.T) {
	t.Setenv("NODE_NAME", "n1")
	o, cfg, err := parseFlags(t, "--dra-resources=example.com/*", "--dra-node-selector=kubedevice.io/dra=true, pool in (a,b)")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := o.DRANodeSelector.String(), "kubedevice.io/dra=true,pool in (a,b)"; got != want {
		t.Errorf("selector %q, want %q", got, want)
	}
	if cfg.ServedByDRA == nil || cfg.ServedByDRA("example.com/gopher") {
		t.Fatal("the core serves a resource through DRA before the start-up chose, or knows no DRA resource")
	}
	copied := o
	if copied.draPath == nil || copied.draPath != o.draPath || o.ServedByDRA() == nil {
		t.Fatal("the options' copies do not share the choice the core follows")
	}
	copied.draPath.decide(true)
	if !cfg.ServedByDRA("example.com/gopher") || cfg.ServedByDRA("other.com/gpu") {
		t.Error("after choosing DRA, the core does not serve exactly --dra-resources through DRA")
	}

	for _, sel := range []string{"", " "} {
		o, cfg, err := parseFlags(t, "--dra-resources=example.com/*", "--dra-node-selector="+sel)
		if err != nil {
			t.Fatal(err)
		}
		if o.DRANodeSelector != nil || o.draPath != nil || !cfg.ServedByDRA("example.com/gopher") {
			t.Errorf("selector %q: %v, choice %v, served %v; want no selector and DRA from the start", sel, o.DRANodeSelector, o.draPath, cfg.ServedByDRA("example.com/gopher"))
		}
	}
	if o, cfg, err := parseFlags(t, "--dra-node-selector="); err != nil || o.DRANodeSelector != nil || cfg.ServedByDRA != nil {
		t.Errorf("an empty selector without --dra-resources: %v, %v, ServedByDRA set %v; want accepted, nothing through DRA", err, o.DRANodeSelector, cfg.ServedByDRA != nil)
	}
}

// The start-up log line shows the parsed settings of the agent, its flows and the core, each key
// once.
func TestLogValues(t *testing.T) {
	t.Setenv("NODE_NAME", "n1")
	t.Setenv("POD_NAMESPACE", "")
	o, cfg, err := parseFlags(t, "--dra-resources=example.com/*", "--dra-node-selector=pool=a", "--topology-policy=restricted",
		"--plugins-registry-dir=")
	if err != nil {
		t.Fatal(err)
	}
	core := nodeagent.Flags{Config: cfg}
	got := logValues(t, append(o.LogValues(), core.LogValues()...))
	want := map[string]string{
		"mode": "manage", "node": "n1", "namespace": DefaultNamespace, "runtimeInjection": "nri",
		"nriSocket": nri.DefaultSocketPath, "podResourcesSocket": o.PodResources.SocketPath,
		"draResources": "example.com/*", "draNodeSelector": "pool=a",
		"pluginDir": cfg.PluginDir, "pluginsRegistryDir": "", "topologyPolicy": "restricted", "topologyScope": "container",
		"topologyPolicyOptions": fmt.Sprint(cfg.TopologyPolicyOptions),
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("log values (-want +got):\n%s", diff)
	}
}

// logValues reads key-value pairs as a logr call would, failing on an odd count, a key that is
// not a string or a key given twice.
func logValues(t *testing.T, kv []any) map[string]string {
	t.Helper()
	if len(kv)%2 != 0 {
		t.Fatalf("%d values: not key-value pairs", len(kv))
	}
	m := map[string]string{}
	for i := 0; i < len(kv); i += 2 {
		key, ok := kv[i].(string)
		if _, seen := m[key]; !ok || seen {
			t.Fatalf("key %v at %d: not a string, or given twice", kv[i], i)
		}
		m[key] = fmt.Sprint(kv[i+1])
	}
	return m
}
