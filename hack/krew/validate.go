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

package main

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/version"
)

// plugin is krew's index.Plugin (sigs.k8s.io/krew/pkg/index, v0.4.3), which cannot be imported:
// krew's module requires k8s.io/client-go v11.0.0+incompatible, which would replace ours.
type plugin struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   metav1.ObjectMeta `json:"metadata"`
	Spec       struct {
		Version          string     `json:"version,omitempty"`
		ShortDescription string     `json:"shortDescription,omitempty"`
		Description      string     `json:"description,omitempty"`
		Caveats          string     `json:"caveats,omitempty"`
		Homepage         string     `json:"homepage,omitempty"`
		Platforms        []platSpec `json:"platforms,omitempty"`
	} `json:"spec"`
}

type platSpec struct {
	URI      string                `json:"uri,omitempty"`
	Sha256   string                `json:"sha256,omitempty"`
	Selector *metav1.LabelSelector `json:"selector,omitempty"`
	Files    []struct {
		From string `json:"from,omitempty"`
		To   string `json:"to,omitempty"`
	} `json:"files"`
	Bin string `json:"bin"`
}

var validSHA256 = regexp.MustCompile(`^[a-f0-9]{64}$`)

// validate applies krew's ValidatePlugin (internal/index/validation, v0.4.3) to the manifest of the
// plugin name.
func (p *plugin) validate(name string) error {
	switch {
	case p.APIVersion != "krew.googlecontainertools.github.com/v1alpha2":
		return fmt.Errorf("apiVersion %q is not krew's v1alpha2", p.APIVersion)
	case p.Kind != "Plugin":
		return fmt.Errorf("kind %q, want Plugin", p.Kind)
	case p.Metadata.Name != name:
		return fmt.Errorf("plugin should be named %q, not %q", name, p.Metadata.Name)
	case p.Spec.ShortDescription == "" || strings.ContainsAny(p.Spec.ShortDescription, "\r\n"):
		return errors.New("should have a short description of one line")
	case len(p.Spec.Platforms) == 0:
		return errors.New("should have a platform specified")
	case !strings.HasPrefix(p.Spec.Version, "v"):
		return fmt.Errorf("version %q does not start with v", p.Spec.Version)
	}
	if _, err := version.ParseSemantic(strings.TrimPrefix(p.Spec.Version, "v")); err != nil {
		return fmt.Errorf("version: %w", err)
	}
	for i, pl := range p.Spec.Platforms {
		if err := pl.validate(); err != nil {
			return fmt.Errorf("platform %d: %w", i, err)
		}
	}
	return nil
}

func (pl *platSpec) validate() error {
	switch {
	case pl.URI == "":
		return errors.New("uri has to be set")
	case !validSHA256.MatchString(pl.Sha256):
		return fmt.Errorf("sha256 %q is not 64 lowercase hex digits", pl.Sha256)
	case pl.Bin == "":
		return errors.New("bin has to be set")
	case pl.Files != nil && len(pl.Files) == 0:
		return errors.New("files has to be unspecified or non-empty")
	case pl.Selector == nil || (len(pl.Selector.MatchLabels) == 0 && len(pl.Selector.MatchExpressions) == 0):
		return errors.New("the selector must not be empty")
	}
	for _, f := range pl.Files {
		if f.From == "" || f.To == "" {
			return errors.New("files need from and to")
		}
	}
	for k := range pl.Selector.MatchLabels {
		if k != "os" && k != "arch" {
			return fmt.Errorf("selector key %q not supported", k)
		}
	}
	for _, e := range pl.Selector.MatchExpressions {
		if e.Key != "os" && e.Key != "arch" {
			return fmt.Errorf("selector key %q not supported", e.Key)
		}
	}
	return nil
}
