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

package dra

import (
	"fmt"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/kubedevice/kubedevice/internal/nodeagent/registration"
)

// Resources says which resources are served through DRA: the agent's --dra-resources. The zero
// value matches nothing.
type Resources struct {
	all     bool
	exact   map[string]bool
	domains map[string]bool
	raw     []string
}

// ParseResources parses the values of --dra-resources: each a comma-separated list of patterns,
// an exact extended resource name (example.com/gopher), every resource of a domain
// (example.com/*), or every resource (*). Empty entries are ignored.
func ParseResources(values []string) (Resources, error) {
	r := Resources{exact: map[string]bool{}, domains: map[string]bool{}}
	for _, v := range values {
		for _, p := range strings.Split(v, ",") {
			p = strings.TrimSpace(p)
			switch {
			case p == "":
				continue
			case p == "*":
				r.all = true
			case strings.HasSuffix(p, "/*"):
				domain := strings.TrimSuffix(p, "/*")
				if errs := validation.IsDNS1123Subdomain(domain); len(errs) > 0 {
					return Resources{}, fmt.Errorf("DRA resource pattern %q: the domain %s", p, strings.Join(errs, "; "))
				}
				r.domains[domain] = true
			default:
				if !registration.IsExtendedResourceName(p) || strings.Contains(p, "*") {
					return Resources{}, fmt.Errorf("DRA resource pattern %q: want an extended resource name (example.com/gopher), domain/* or *", p)
				}
				if len(p) > resourceapi.DeviceAttributeMaxValueLength {
					return Resources{}, fmt.Errorf("DRA resource pattern %q: a resource served through DRA has at most %d characters (its device attribute)", p, resourceapi.DeviceAttributeMaxValueLength)
				}
				r.exact[p] = true
			}
			r.raw = append(r.raw, p)
		}
	}
	return r, nil
}

// Any reports whether any resource may match.
func (r Resources) Any() bool { return len(r.raw) > 0 }

// Match reports whether resource is served through DRA. A resource whose name is longer than a
// device attribute value (64 characters) never is: its devices could not carry it.
func (r Resources) Match(resource string) bool {
	if len(resource) > resourceapi.DeviceAttributeMaxValueLength {
		return false
	}
	if r.all || r.exact[resource] {
		return true
	}
	domain, _, ok := strings.Cut(resource, "/")
	return ok && r.domains[domain]
}

// String lists the patterns, comma-separated.
func (r Resources) String() string { return strings.Join(r.raw, ",") }
