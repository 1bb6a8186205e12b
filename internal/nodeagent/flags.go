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

package nodeagent

import (
	"flag"
	"fmt"
	"strings"

	"github.com/kubedevice/kubedevice/internal/allocpolicy"
	"github.com/kubedevice/kubedevice/internal/nodeagent/topology"
)

// Flags are the core's command-line flags: a Config, and the values of the flags that ParseFlags
// parses into it.
type Flags struct {
	Config
	policyOptions  []string
	allocatePolicy string
}

// AddFlags registers the core's flags on fs, bound to f.Config, with its values as their defaults
// (start from DefaultConfig). Once fs is parsed, ParseFlags completes it.
func (f *Flags) AddFlags(fs *flag.FlagSet) {
	c := &f.Config
	fs.StringVar(&c.PluginDir, "plugin-dir", c.PluginDir,
		"Directory of the registration socket (kubelet.sock) and the device plugins' sockets. Never the kubelet's own directory, which deletes foreign sockets.")
	fs.StringVar(&c.StateDir, "state-dir", c.StateDir,
		"Directory of the agent's checkpoint; not --plugin-dir, which every device plugin mounts read-write. A checkpoint an earlier agent left in --plugin-dir is moved here on the first start.")
	fs.StringVar(&c.BootIDPath, "boot-id-path", c.BootIDPath,
		"File holding the node's boot ID, recorded in the checkpoint: a different one at start means the node rebooted, so no container of the checkpoint still runs and every device is allocated again. Change it only to simulate a reboot in a test.")
	fs.StringVar(&c.PluginsRegistryDir, "plugins-registry-dir", c.PluginsRegistryDir,
		"Directory watched for plugins that announce themselves through the kubelet's plugin watcher; empty disables that registration path.")
	fs.DurationVar(&c.EndpointGracePeriod, "endpoint-grace-period", c.EndpointGracePeriod,
		"How long a resource whose device plugins all disconnected stays listed, with nothing allocatable, before it is removed (the kubelet's 5 minutes).")
	fs.StringVar((*string)(&c.TopologyPolicy), "topology-policy", string(c.TopologyPolicy),
		"Topology manager policy for NUMA alignment of devices: "+joinValues(topology.Policies)+".")
	fs.StringVar((*string)(&c.TopologyScope), "topology-scope", string(c.TopologyScope),
		"Granularity of NUMA alignment: "+joinValues(topology.Scopes)+".")
	fs.Func("topology-policy-options",
		"Topology manager policy options as the kubelet's --topology-manager-policy-options, key=value[,key=value...], repeatable: "+topology.OptionPreferClosestNUMANodes+"=true (best-effort and restricted prefer the NUMA set with the shortest distances, read from sysfs) and "+topology.OptionMaxAllowableNUMANodes+"=N (a policy other than none refuses to start on more NUMA nodes; default and minimum 8).",
		func(v string) error { f.policyOptions = append(f.policyOptions, v); return nil })
	fs.StringVar(&f.allocatePolicy, "allocate-policy", "",
		"YAML file of the administrator's policy on device plugins' Allocate responses, per resource: allowedHostPathPrefixes, forbiddenEnvNames, forbiddenAnnotationPrefixes (docs/decisions/0021-trust-model-for-device-plugins.md). Empty: only their structure is checked.")
}

// ParseFlags checks the topology policy and scope, and parses the topology policy options and
// loads the allocate policy into f.Config. An error names the first invalid flag.
func (f *Flags) ParseFlags() error {
	c := &f.Config
	var err error
	if c.TopologyPolicy, err = topology.ParsePolicy(string(c.TopologyPolicy)); err != nil {
		return fmt.Errorf("--topology-policy: %w", err)
	}
	if c.TopologyScope, err = topology.ParseScope(string(c.TopologyScope)); err != nil {
		return fmt.Errorf("--topology-scope: %w", err)
	}
	if c.TopologyPolicyOptions, err = topology.ParsePolicyOptions(f.policyOptions); err != nil {
		return fmt.Errorf("--topology-policy-options: %w", err)
	}
	if f.allocatePolicy != "" {
		if c.AllocatePolicy, err = allocpolicy.Load(f.allocatePolicy); err != nil {
			return fmt.Errorf("--allocate-policy: %w", err)
		}
	}
	return nil
}

// LogValues are the core's settings the agent's start-up log line shows, as key-value pairs.
func (f *Flags) LogValues() []any {
	c := &f.Config
	return []any{"pluginDir", c.PluginDir, "pluginsRegistryDir", c.PluginsRegistryDir,
		"topologyPolicy", c.TopologyPolicy, "topologyScope", c.TopologyScope,
		"topologyPolicyOptions", c.TopologyPolicyOptions}
}

// joinValues lists values, comma-separated, for a flag's help.
func joinValues[T ~string](values []T) string {
	s := make([]string, len(values))
	for i, v := range values {
		s[i] = string(v)
	}
	return strings.Join(s, ", ")
}
