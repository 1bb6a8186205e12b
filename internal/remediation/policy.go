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

package remediation

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Policy says, per extended resource, how long a held device must stay unhealthy before the
// controller evicts its holders. A resource it does not name is never remediated: the policy is
// off by default. It is a flag.Value: each --remediate=RESOURCE=GRACE adds one resource.
type Policy map[string]time.Duration

var (
	errPolicySyntax   = errors.New("want RESOURCE=GRACE, for example example.com/gopher=5m")
	errPolicyResource = errors.New("not an extended resource name")
	errPolicyGrace    = errors.New("the grace period must be positive")
	errPolicyRepeated = errors.New("the resource is named twice")
)

// String lists the policy as RESOURCE=GRACE pairs, sorted, comma-separated.
func (p *Policy) String() string {
	if p == nil || len(*p) == 0 {
		return ""
	}
	pairs := make([]string, 0, len(*p))
	for _, r := range slices.Sorted(maps.Keys(*p)) {
		pairs = append(pairs, r+"="+(*p)[r].String())
	}
	return strings.Join(pairs, ",")
}

// Set adds one RESOURCE=GRACE pair: an extended resource name (domain/name) and a Go duration.
func (p *Policy) Set(value string) error {
	resource, grace, ok := strings.Cut(value, "=")
	if !ok || resource == "" || grace == "" {
		return fmt.Errorf("%q: %w", value, errPolicySyntax)
	}
	if errs := validation.IsQualifiedName(resource); len(errs) > 0 || !strings.Contains(resource, "/") {
		return fmt.Errorf("%q: %w (domain/name, like example.com/gopher)", resource, errPolicyResource)
	}
	d, err := time.ParseDuration(grace)
	if err != nil {
		return fmt.Errorf("%q: %w", value, err)
	}
	if d <= 0 {
		return fmt.Errorf("%q: %w", value, errPolicyGrace)
	}
	if *p == nil {
		*p = Policy{}
	}
	if _, dup := (*p)[resource]; dup {
		return fmt.Errorf("%q: %w", resource, errPolicyRepeated)
	}
	(*p)[resource] = d
	return nil
}

// Type names the flag's value in --help.
func (p *Policy) Type() string { return "RESOURCE=GRACE" }
