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
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"text/template"

	"sigs.k8s.io/yaml"
)

type options struct {
	template, version, archives, uriBase string
}

// platform is one archive: kubectl-kubedevice_<OS>_<Arch>.tar.gz.
type platform struct {
	OS, Arch, SHA256 string
}

var archiveName = regexp.MustCompile(`^kubectl-kubedevice_([a-z0-9]+)_([a-z0-9]+)\.tar\.gz$`)

var errNoArchive = errors.New("no archive kubectl-kubedevice_<os>_<arch>.tar.gz")

// platforms returns the archives in dir with their sha256, sorted by name.
func platforms(dir string) ([]platform, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []platform
	for _, e := range entries {
		m := archiveName.FindStringSubmatch(e.Name())
		if m == nil || e.IsDir() {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		sum := sha256.Sum256(data)
		out = append(out, platform{OS: m[1], Arch: m[2], SHA256: hex.EncodeToString(sum[:])})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: %w", dir, errNoArchive)
	}
	return out, nil
}

// render fills the template with the version and the archives of opts, and checks the result.
func render(opts options) ([]byte, error) {
	if opts.version == "" {
		return nil, errors.New("--version is required")
	}
	version := "v" + strings.TrimPrefix(opts.version, "v")
	plats, err := platforms(opts.archives)
	if err != nil {
		return nil, err
	}
	tmpl, err := template.New(filepath.Base(opts.template)).Option("missingkey=error").ParseFiles(opts.template)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	data := map[string]any{
		"Version":   version,
		"URIBase":   strings.ReplaceAll(opts.uriBase, "{version}", version),
		"Platforms": plats,
	}
	if err := tmpl.Execute(&out, data); err != nil {
		return nil, err
	}
	var p plugin
	if err := yaml.UnmarshalStrict(out.Bytes(), &p); err != nil {
		return nil, fmt.Errorf("the rendered manifest: %w", err)
	}
	if err := p.validate("kubedevice"); err != nil {
		return nil, fmt.Errorf("the rendered manifest: %w", err)
	}
	return out.Bytes(), nil
}
