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
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestManifestRenders renders plugins/kubedevice.yaml for two archives and parses the result as
// krew does.
func TestManifestRenders(t *testing.T) {
	dir := t.TempDir()
	sums := map[string]string{}
	for _, name := range []string{"kubectl-kubedevice_linux_amd64.tar.gz", "kubectl-kubedevice_linux_arm64.tar.gz", "other.tar.gz"} {
		data := []byte("archive " + name)
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(data)
		sums[name] = hex.EncodeToString(sum[:])
	}
	out, err := render(options{template: "../../plugins/kubedevice.yaml", version: "0.2.0", archives: dir,
		uriBase: "https://example.com/download/{version}"})
	if err != nil {
		t.Fatal(err)
	}
	var p plugin
	if err := yaml.UnmarshalStrict(out, &p); err != nil {
		t.Fatal(err)
	}
	if p.Spec.Version != "v0.2.0" || len(p.Spec.Platforms) != 2 {
		t.Fatalf("version %q, %d platforms:\n%s", p.Spec.Version, len(p.Spec.Platforms), out)
	}
	for _, pl := range p.Spec.Platforms {
		name := "kubectl-kubedevice_" + pl.Selector.MatchLabels["os"] + "_" + pl.Selector.MatchLabels["arch"] + ".tar.gz"
		if pl.Sha256 != sums[name] || pl.URI != "https://example.com/download/v0.2.0/"+name || pl.Bin != "kubectl-kubedevice" {
			t.Errorf("platform %+v, want the sha256 %s of %s", pl, sums[name], name)
		}
	}
}

func TestRenderRefuses(t *testing.T) {
	dir := t.TempDir()
	if _, err := render(options{template: "../../plugins/kubedevice.yaml", version: "0.2.0", archives: dir}); err == nil ||
		!strings.Contains(err.Error(), "no archive") {
		t.Errorf("no archive: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "kubectl-kubedevice_linux_amd64.tar.gz"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := render(options{template: "../../plugins/kubedevice.yaml", version: "not-a-version", archives: dir}); err == nil ||
		!strings.Contains(err.Error(), "version") {
		t.Errorf("a bad version: %v", err)
	}
}

func TestValidateRefuses(t *testing.T) {
	good := func() *plugin {
		var p plugin
		data := `{"apiVersion":"krew.googlecontainertools.github.com/v1alpha2","kind":"Plugin","metadata":{"name":"kubedevice"},
"spec":{"version":"v0.2.0","shortDescription":"x","platforms":[{"uri":"https://x","sha256":"` + strings.Repeat("a", 64) + `",
"bin":"kubectl-kubedevice","selector":{"matchLabels":{"os":"linux"}}}]}}`
		if err := yaml.UnmarshalStrict([]byte(data), &p); err != nil {
			t.Fatal(err)
		}
		return &p
	}
	if err := good().validate("kubedevice"); err != nil {
		t.Fatalf("a good manifest: %v", err)
	}
	for want, breakIt := range map[string]func(p *plugin){
		"apiVersion":        func(p *plugin) { p.APIVersion = "v1" },
		"named":             func(p *plugin) { p.Metadata.Name = "other" },
		"short description": func(p *plugin) { p.Spec.ShortDescription = "two\nlines" },
		"start with v":      func(p *plugin) { p.Spec.Version = "0.2.0" },
		"sha256":            func(p *plugin) { p.Spec.Platforms[0].Sha256 = "ABC" },
		"selector key":      func(p *plugin) { p.Spec.Platforms[0].Selector.MatchLabels["distro"] = "debian" },
		"bin":               func(p *plugin) { p.Spec.Platforms[0].Bin = "" },
	} {
		p := good()
		breakIt(p)
		if err := p.validate("kubedevice"); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v", want, err)
		}
	}
}
