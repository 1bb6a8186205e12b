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

package topology

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// The topology manager policy options, spelled as the kubelet's
// --topology-manager-policy-options keys (topologymanager/policy_options.go).
// Both are GA in the kubelet, so neither needs a feature gate.
const (
	// OptionPreferClosestNUMANodes makes best-effort and restricted prefer,
	// among hints of equal width, the NUMA set with the shortest average
	// distance instead of the one with the lowest node IDs.
	OptionPreferClosestNUMANodes = "prefer-closest-numa-nodes"
	// OptionMaxAllowableNUMANodes raises the number of NUMA nodes above
	// which a policy other than none refuses to start.
	OptionMaxAllowableNUMANodes = "max-allowable-numa-nodes"
)

// DefaultMaxAllowableNUMANodes is the kubelet's defaultMaxAllowableNUMANodes:
// hint merging enumerates every NUMA subset, which grows as 2^nodes.
const DefaultMaxAllowableNUMANodes = 8

// ErrUnknownPolicyOption is wrapped by the errors for option keys the
// kubelet does not know.
var ErrUnknownPolicyOption = errors.New("unknown Topology Manager Policy option")

// ErrTooManyNUMANodes is wrapped by CheckMachine's error.
var ErrTooManyNUMANodes = errors.New("too many NUMA nodes for the topology manager")

// PolicyOptions are the kubelet's topologymanager.PolicyOptions. The zero
// value is the kubelet's default (closest-NUMA preference off, at most
// DefaultMaxAllowableNUMANodes nodes).
type PolicyOptions struct {
	// PreferClosestNUMA is prefer-closest-numa-nodes.
	PreferClosestNUMA bool
	// MaxAllowableNUMANodes is max-allowable-numa-nodes; 0 means
	// DefaultMaxAllowableNUMANodes.
	MaxAllowableNUMANodes int
}

// MaxNUMANodes returns the effective max-allowable-numa-nodes.
func (o PolicyOptions) MaxNUMANodes() int {
	if o.MaxAllowableNUMANodes == 0 {
		return DefaultMaxAllowableNUMANodes
	}
	return o.MaxAllowableNUMANodes
}

// NewPolicyOptions validates options given as key/value pairs, as the
// kubelet's NewPolicyOptions does: unknown keys, a non-boolean
// prefer-closest-numa-nodes (strconv.ParseBool) and a non-integer or
// below-default max-allowable-numa-nodes are errors.
func NewPolicyOptions(options map[string]string) (PolicyOptions, error) {
	opts := PolicyOptions{MaxAllowableNUMANodes: DefaultMaxAllowableNUMANodes}
	for name, value := range options {
		switch name {
		case OptionPreferClosestNUMANodes:
			v, err := strconv.ParseBool(value)
			if err != nil {
				return opts, fmt.Errorf("bad value for option %q: %w", name, err)
			}
			opts.PreferClosestNUMA = v
		case OptionMaxAllowableNUMANodes:
			v, err := strconv.Atoi(value)
			if err != nil {
				return opts, fmt.Errorf("unable to convert policy option to integer %q: %w", name, err)
			}
			if v < DefaultMaxAllowableNUMANodes {
				return opts, fmt.Errorf("the minimum value of %q should not be less than %v", name, DefaultMaxAllowableNUMANodes)
			}
			opts.MaxAllowableNUMANodes = v
		default:
			return opts, fmt.Errorf("%w: %q", ErrUnknownPolicyOption, name)
		}
	}
	return opts, nil
}

// ParsePolicyOptions parses the values of a repeatable
// --topology-policy-options flag, each a comma-separated list of key=value
// pairs split as the kubelet's --topology-manager-policy-options (a
// cliflag.ConfigurationMap): empty pairs are skipped, key and value are
// trimmed, a pair without "=" has the empty value, and a later value for a
// key replaces an earlier one. The result is validated with
// NewPolicyOptions, so a missing value or a blank key is refused there.
func ParsePolicyOptions(values []string) (PolicyOptions, error) {
	kv := make(map[string]string)
	for _, value := range values {
		for _, pair := range strings.Split(value, ",") {
			if pair == "" {
				continue
			}
			k, v, _ := strings.Cut(pair, "=")
			kv[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	opts, err := NewPolicyOptions(kv)
	if err != nil {
		return PolicyOptions{}, fmt.Errorf("parsing topology policy options: %w", err)
	}
	return opts, nil
}

// CheckMachine refuses, as the kubelet's NewManager does, a policy other
// than none on a machine with more NUMA nodes than max-allowable-numa-nodes.
func CheckMachine(p Policy, opts PolicyOptions, nodes []int) error {
	if p != PolicyNone && len(nodes) > opts.MaxNUMANodes() {
		return fmt.Errorf("checking topology policy %q: %w: unsupported on machines with more than %v NUMA Nodes (the machine has %d; raise %s)",
			p, ErrTooManyNUMANodes, opts.MaxNUMANodes(), len(nodes), OptionMaxAllowableNUMANodes)
	}
	return nil
}
