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

package allocpolicy

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path"
	"strings"

	"sigs.k8s.io/yaml"
)

// Policy is the administrator's opt-in policy: rules per resource. The zero value (or a nil
// *Policy) checks the structure of responses only.
type Policy struct {
	// Resources holds at most one rule per resource pattern.
	Resources []ResourcePolicy `json:"resources"`
}

// ResourcePolicy restricts the Allocate responses of the resources its pattern matches.
type ResourcePolicy struct {
	// Resource is an extended resource name (example.com/gopher), a domain's resources
	// (example.com/*), or every resource (*). For a resource, the exact rule applies if there
	// is one, else its domain's, else *.
	Resource string `json:"resource"`
	// AllowedHostPathPrefixes, when not empty, are the host directories (or files) that every
	// mount's host path and every device node's host path must be or lie under.
	AllowedHostPathPrefixes []string `json:"allowedHostPathPrefixes,omitempty"`
	// ForbiddenEnvNames are env names the plugin may not set (exact match).
	ForbiddenEnvNames []string `json:"forbiddenEnvNames,omitempty"`
	// ForbiddenAnnotationPrefixes are prefixes of annotation keys the plugin may not set.
	ForbiddenAnnotationPrefixes []string `json:"forbiddenAnnotationPrefixes,omitempty"`
}

var errInvalidPolicy = errors.New("invalid allocate policy")

// Load reads a Policy from a YAML (or JSON) file, refusing unknown fields and invalid rules.
func Load(file string) (*Policy, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("reading the allocate policy: %w", err)
	}
	return Parse(data)
}

// Parse decodes and validates a Policy.
func Parse(data []byte) (*Policy, error) {
	p := &Policy{}
	if len(bytes.TrimSpace(data)) > 0 {
		if err := yaml.UnmarshalStrict(data, p); err != nil {
			return nil, fmt.Errorf("%w: %w", errInvalidPolicy, err)
		}
	}
	if err := p.validate(); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *Policy) validate() error {
	seen := map[string]bool{}
	for i, r := range p.Resources {
		if !validPattern(r.Resource) {
			return fmt.Errorf("%w: resources[%d].resource %q: want an extended resource name, <domain>/* or *", errInvalidPolicy, i, r.Resource)
		}
		if seen[r.Resource] {
			return fmt.Errorf("%w: resources[%d].resource %q appears twice", errInvalidPolicy, i, r.Resource)
		}
		seen[r.Resource] = true
		for j, prefix := range r.AllowedHostPathPrefixes {
			if !isCleanAbs(prefix) {
				return fmt.Errorf("%w: resources[%d].allowedHostPathPrefixes[%d] %q: want a clean absolute path", errInvalidPolicy, i, j, prefix)
			}
		}
		for j, name := range r.ForbiddenEnvNames {
			if name == "" {
				return fmt.Errorf("%w: resources[%d].forbiddenEnvNames[%d] is empty", errInvalidPolicy, i, j)
			}
		}
		for j, prefix := range r.ForbiddenAnnotationPrefixes {
			if prefix == "" {
				return fmt.Errorf("%w: resources[%d].forbiddenAnnotationPrefixes[%d] is empty: it would forbid every annotation", errInvalidPolicy, i, j)
			}
		}
	}
	return nil
}

// validPattern accepts "*", "<domain>/*" and "<domain>/<name>".
func validPattern(s string) bool {
	if s == "*" {
		return true
	}
	domain, name, ok := strings.Cut(s, "/")
	return ok && domain != "" && name != "" && !strings.Contains(name, "/") && (name == "*" || !strings.Contains(name, "*")) && !strings.Contains(domain, "*")
}

// ruleFor returns the rule that applies to resource, nil when none does.
func (p *Policy) ruleFor(resource string) *ResourcePolicy {
	if p == nil {
		return nil
	}
	var domain, any *ResourcePolicy
	wantDomain := ""
	if d, _, ok := strings.Cut(resource, "/"); ok {
		wantDomain = d + "/*"
	}
	for i := range p.Resources {
		switch r := &p.Resources[i]; r.Resource {
		case resource:
			return r
		case wantDomain:
			domain = r
		case "*":
			any = r
		}
	}
	if domain != nil {
		return domain
	}
	return any
}

// underPrefix reports whether the clean absolute path p is prefix or lies under it.
func underPrefix(p, prefix string) bool {
	if prefix == "/" || p == prefix {
		return true
	}
	return strings.HasPrefix(p, prefix+"/")
}

// isCleanAbs reports whether p is an absolute path that cleaning would not change (a trailing
// slash aside) and that holds no NUL.
func isCleanAbs(p string) bool {
	if !path.IsAbs(p) || strings.ContainsRune(p, 0) {
		return false
	}
	c := path.Clean(p)
	return c == p || c+"/" == p
}
