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
	"archive/tar"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// buildStatic builds the pause command as a static binary to stand in for every binary of the image.
func buildStatic(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "pause")
	cmd := exec.Command("go", "build", "-o", out, "../pause")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building pause: %v\n%s", err, b)
	}
	return out
}

type entry struct {
	Type byte
	Mode int64
	Link string
}

func TestWrite(t *testing.T) {
	bin := buildStatic(t)
	agent := filepath.Join(t.TempDir(), "kubedevice-agent")
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(agent, data, 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "image.tar")
	spec := Spec{
		Name:     "docker.io/local/kubedevice:e2e",
		Arch:     "amd64",
		Busybox:  bin,
		Applets:  []string{"bin/sh", "/bin/sleep", "usr/bin/nc", "bin/sh", "bin/busybox"},
		Pause:    bin,
		Binaries: []string{agent},
	}
	digest, err := Write(out, spec)
	if err != nil {
		t.Fatalf("Write: %v", err)
	}

	dir := t.TempDir()
	untar(t, out, dir)
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatalf("reading the layout: %v", err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 {
		t.Fatalf("index has %d manifests, want 1", len(im.Manifests))
	}
	desc := im.Manifests[0]
	if desc.Digest != digest {
		t.Errorf("index names manifest %s, Write returned %s", desc.Digest, digest)
	}
	wantAnn := map[string]string{AnnotationImageName: "docker.io/local/kubedevice:e2e", "org.opencontainers.image.ref.name": "e2e"}
	if diff := cmp.Diff(wantAnn, desc.Annotations); diff != "" {
		t.Errorf("index annotations (-want +got):\n%s", diff)
	}
	if desc.MediaType != types.OCIManifestSchema1 || desc.Platform == nil || desc.Platform.Architecture != "amd64" {
		t.Errorf("descriptor = %+v, want an OCI manifest for linux/amd64", desc)
	}

	img, err := idx.Image(desc.Digest)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.OS != "linux" || cfg.Architecture != "amd64" || len(cfg.Config.Entrypoint) != 1 || cfg.Config.Entrypoint[0] != "/pause" || len(cfg.Config.Cmd) != 0 {
		t.Errorf("config = %+v", cfg)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers = %d, %v; want one", len(layers), err)
	}
	mt, err := layers[0].MediaType()
	if err != nil || mt != types.OCILayer {
		t.Errorf("layer media type = %s, %v; want %s", mt, err, types.OCILayer)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rc.Close() }()
	got := map[string]entry{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got[h.Name] = entry{Type: h.Typeflag, Mode: h.Mode, Link: h.Linkname}
	}
	want := map[string]entry{
		"bin/busybox":                    {Type: tar.TypeReg, Mode: 0o755},
		"bin/sh":                         {Type: tar.TypeSymlink, Mode: 0o777, Link: "/bin/busybox"},
		"bin/sleep":                      {Type: tar.TypeSymlink, Mode: 0o777, Link: "/bin/busybox"},
		"usr/bin/nc":                     {Type: tar.TypeSymlink, Mode: 0o777, Link: "/bin/busybox"},
		"pause":                          {Type: tar.TypeReg, Mode: 0o755},
		"usr/local/bin/kubedevice-agent": {Type: tar.TypeReg, Mode: 0o755},
		"tmp/":                           {Type: tar.TypeDir, Mode: 0o1777},
		"etc/passwd":                     {Type: tar.TypeReg, Mode: 0o644},
	}
	for name, w := range want {
		if diff := cmp.Diff(w, got[name]); diff != "" {
			t.Errorf("layer entry %s (-want +got):\n%s", name, diff)
		}
	}

	// The same inputs make the same image.
	again, err := Write(filepath.Join(t.TempDir(), "again.tar"), spec)
	if err != nil || again != digest {
		t.Errorf("second Write = %s, %v; want the same digest %s", again, err, digest)
	}
}

func TestWriteRejects(t *testing.T) {
	bin := buildStatic(t)
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := staticBinary(sh); !errors.Is(err, errNotStatic) {
		t.Fatalf("staticBinary(%s) = %v; this test needs a dynamically linked sh", sh, err)
	}
	text := filepath.Join(t.TempDir(), "script")
	if err := os.WriteFile(text, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, spec := range map[string]Spec{
		"dynamic binary":   {Name: "docker.io/local/x:e2e", Busybox: bin, Pause: bin, Binaries: []string{sh}},
		"script as pause":  {Name: "docker.io/local/x:e2e", Busybox: bin, Pause: text},
		"digest reference": {Name: "docker.io/local/x@sha256:00", Busybox: bin, Pause: bin},
	} {
		t.Run(name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "image.tar")
			if _, err := Write(out, spec); err == nil {
				t.Fatal("Write succeeded, want an error")
			}
			if _, err := os.Stat(out); !os.IsNotExist(err) {
				t.Errorf("Write left %s behind (%v)", out, err)
			}
		})
	}
}

func TestSplitReference(t *testing.T) {
	for ref, want := range map[string][2]string{
		"docker.io/local/kubedevice:e2e": {"docker.io/local/kubedevice", "e2e"},
		"docker.io/local/kubedevice":     {"docker.io/local/kubedevice", "latest"},
		"localhost:5000/x":               {"localhost:5000/x", "latest"},
	} {
		repo, tag, err := splitReference(ref)
		if err != nil || repo != want[0] || tag != want[1] {
			t.Errorf("splitReference(%q) = %q, %q, %v; want %q, %q", ref, repo, tag, err, want[0], want[1])
		}
	}
}

func untar(t *testing.T, file, dir string) {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, filepath.FromSlash(h.Name))
		if h.Typeflag == tar.TypeDir {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
