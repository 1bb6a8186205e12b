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
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// AnnotationImageName is the index annotation containerd names an imported image by.
const AnnotationImageName = "io.containerd.image.name"

// epoch is the time of every file and of the image, so the same inputs make the same image.
var epoch = time.Unix(0, 0).UTC()

var errNotStatic = errors.New("not a statically linked ELF binary")

// Spec is what goes into the image.
type Spec struct {
	// Name is the full image reference, e.g. docker.io/local/kubedevice:e2e.
	Name string
	// Arch is the GOARCH-style architecture recorded in the image config and index.
	Arch string
	// Busybox is the static busybox binary, installed at /bin/busybox.
	Busybox string
	// Applets are the applet paths relative to / (bin/sh, usr/bin/wget, ...), linked to /bin/busybox.
	Applets []string
	// Pause is the static binary installed at /pause, the sandbox's process.
	Pause string
	// Binaries are static binaries installed in /usr/local/bin under their base names.
	Binaries []string
}

// BusyboxApplets asks a busybox binary for the full paths of its applets.
func BusyboxApplets(busybox string) ([]string, error) {
	out, err := exec.Command(busybox, "--list-full").Output()
	if err != nil {
		return nil, fmt.Errorf("listing the applets of %s: %w", busybox, err)
	}
	var applets []string
	for _, l := range strings.Fields(string(out)) {
		applets = append(applets, strings.TrimPrefix(l, "/"))
	}
	if len(applets) == 0 {
		return nil, fmt.Errorf("listing the applets of %s: none", busybox)
	}
	return applets, nil
}

// Write builds the image and writes it as an OCI image-layout tar to out; it returns the digest of
// the image manifest.
func Write(out string, spec Spec) (v1.Hash, error) {
	repo, tag, err := splitReference(spec.Name)
	if err != nil {
		return v1.Hash{}, err
	}
	layerTar, err := os.CreateTemp("", "mkimage-layer-*.tar")
	if err != nil {
		return v1.Hash{}, fmt.Errorf("creating the layer file: %w", err)
	}
	defer func() { _ = os.Remove(layerTar.Name()) }()
	if err := writeRootfs(layerTar, spec); err != nil {
		_ = layerTar.Close()
		return v1.Hash{}, err
	}
	if err := layerTar.Close(); err != nil {
		return v1.Hash{}, fmt.Errorf("writing the layer: %w", err)
	}

	img, err := buildImage(layerTar.Name(), spec.Arch)
	if err != nil {
		return v1.Hash{}, err
	}
	digest, err := img.Digest()
	if err != nil {
		return v1.Hash{}, fmt.Errorf("computing the manifest digest: %w", err)
	}

	dir, err := os.MkdirTemp("", "mkimage-layout-*")
	if err != nil {
		return v1.Hash{}, fmt.Errorf("creating the layout directory: %w", err)
	}
	defer func() { _ = os.RemoveAll(dir) }()
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("writing the image layout: %w", err)
	}
	err = p.AppendImage(img,
		layout.WithAnnotations(map[string]string{
			AnnotationImageName:                 repo + ":" + tag,
			"org.opencontainers.image.ref.name": tag,
		}),
		layout.WithPlatform(v1.Platform{OS: "linux", Architecture: spec.Arch}))
	if err != nil {
		return v1.Hash{}, fmt.Errorf("writing the image to the layout: %w", err)
	}
	if err := tarDir(dir, out); err != nil {
		return v1.Hash{}, err
	}
	return digest, nil
}

// splitReference splits docker.io/local/name:tag into its repository and tag (latest by default).
func splitReference(ref string) (repo, tag string, err error) {
	if ref == "" || strings.Contains(ref, "@") {
		return "", "", fmt.Errorf("parsing image name %q: want repository[:tag]", ref)
	}
	repo, tag = ref, "latest"
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		repo, tag = ref[:i], ref[i+1:]
	}
	if repo == "" || tag == "" {
		return "", "", fmt.Errorf("parsing image name %q: want repository[:tag]", ref)
	}
	return repo, tag, nil
}

func buildImage(layerPath, arch string) (v1.Image, error) {
	layer, err := tarball.LayerFromFile(layerPath, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("compressing the layer: %w", err)
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.AppendLayers(img, layer)
	if err != nil {
		return nil, fmt.Errorf("adding the layer: %w", err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("reading the image config: %w", err)
	}
	cfg = cfg.DeepCopy()
	cfg.OS = "linux"
	cfg.Architecture = arch
	cfg.Created = v1.Time{Time: epoch}
	// The image is also the pod sandbox image, and containerd runs a sandbox with the image's own
	// entrypoint: /pause, as in the Kubernetes pause image. Pods name their command.
	cfg.Config = v1.Config{
		Env:        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		Entrypoint: []string{"/pause"},
		WorkingDir: "/",
	}
	img, err = mutate.ConfigFile(img, cfg)
	if err != nil {
		return nil, fmt.Errorf("setting the image config: %w", err)
	}
	return img, nil
}

// rootfsWriter writes a root file system as a tar stream, creating parent directories once.
type rootfsWriter struct {
	tw   *tar.Writer
	dirs map[string]bool
}

func (w *rootfsWriter) dir(name string, mode int64) error {
	if name == "." || name == "" || w.dirs[name] {
		return nil
	}
	if err := w.dir(path.Dir(name), 0o755); err != nil {
		return err
	}
	w.dirs[name] = true
	return w.tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode, ModTime: epoch})
}

func (w *rootfsWriter) file(name string, mode int64, data []byte) error {
	if err := w.dir(path.Dir(name), 0o755); err != nil {
		return err
	}
	hdr := &tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data)), ModTime: epoch}
	if err := w.tw.WriteHeader(hdr); err != nil {
		return err
	}
	_, err := w.tw.Write(data)
	return err
}

func (w *rootfsWriter) symlink(name, target string) error {
	if err := w.dir(path.Dir(name), 0o755); err != nil {
		return err
	}
	return w.tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: target, Mode: 0o777, ModTime: epoch})
}

// staticBinary reads a file and checks that it is a statically linked ELF executable: the image has
// no dynamic loader or C library.
func staticBinary(file string) ([]byte, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", file, err)
	}
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w: %w", file, errNotStatic, err)
	}
	defer func() { _ = f.Close() }()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return nil, fmt.Errorf("checking %s: %w (it has a program interpreter; build Go with CGO_ENABLED=0)", file, errNotStatic)
		}
	}
	return data, nil
}

// writeRootfs writes the image's root file system to out as a tar stream: the directories and
// accounts a shell expects, busybox and its applets, the pause binary and spec's binaries.
func writeRootfs(out io.Writer, spec Spec) error {
	w := &rootfsWriter{tw: tar.NewWriter(out), dirs: map[string]bool{}}
	if err := w.base(); err != nil {
		return err
	}
	if err := w.binary("bin/busybox", spec.Busybox); err != nil {
		return err
	}
	applets := append([]string(nil), spec.Applets...)
	sort.Strings(applets)
	seen := map[string]bool{"bin/busybox": true}
	for _, a := range applets {
		a = path.Clean(strings.TrimPrefix(a, "/"))
		if seen[a] || a == "." || strings.HasPrefix(a, "..") {
			continue
		}
		seen[a] = true
		if err := w.symlink(a, "/bin/busybox"); err != nil {
			return fmt.Errorf("linking %s: %w", a, err)
		}
	}
	if err := w.binary("pause", spec.Pause); err != nil {
		return err
	}
	for _, b := range spec.Binaries {
		name := "usr/local/bin/" + filepath.Base(b)
		if seen[name] {
			return fmt.Errorf("writing %s: two binaries of that name", name)
		}
		seen[name] = true
		if err := w.binary(name, b); err != nil {
			return err
		}
	}
	if err := w.tw.Close(); err != nil {
		return fmt.Errorf("writing the layer: %w", err)
	}
	return nil
}

// base writes the directories and the account files.
func (w *rootfsWriter) base() error {
	for _, d := range []string{"bin", "dev", "etc", "proc", "root", "sbin", "sys", "usr/bin", "usr/sbin", "usr/local/bin", "var", "run"} {
		if err := w.dir(d, 0o755); err != nil {
			return fmt.Errorf("writing the layer: %w", err)
		}
	}
	if err := w.dir("tmp", 0o1777); err != nil {
		return fmt.Errorf("writing the layer: %w", err)
	}
	for _, f := range [][2]string{
		{"etc/passwd", "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"},
		{"etc/group", "root:x:0:\nnogroup:x:65534:\n"},
	} {
		if err := w.file(f[0], 0o644, []byte(f[1])); err != nil {
			return fmt.Errorf("writing %s: %w", f[0], err)
		}
	}
	return nil
}

// binary writes the static binary file at name.
func (w *rootfsWriter) binary(name, file string) error {
	data, err := staticBinary(file)
	if err != nil {
		return err
	}
	if err := w.file(name, 0o755, data); err != nil {
		return fmt.Errorf("writing %s: %w", name, err)
	}
	return nil
}

// tarDir writes the files of dir, in a stable order, as a tar at out.
func tarDir(dir, out string) error {
	tmp := out + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("creating %s: %w", tmp, err)
	}
	defer func() { _ = os.Remove(tmp) }()
	tw := tar.NewWriter(f)
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if d.IsDir() {
			return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: filepath.ToSlash(rel) + "/", Mode: 0o755, ModTime: epoch})
		}
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: filepath.ToSlash(rel), Mode: 0o644, Size: info.Size(), ModTime: epoch}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		src, err := os.Open(p)
		if err != nil {
			return err
		}
		defer func() { _ = src.Close() }()
		_, err = io.Copy(tw, src)
		return err
	})
	if err == nil {
		err = tw.Close()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", out, err)
	}
	if err := os.Rename(tmp, out); err != nil {
		return fmt.Errorf("writing %s: %w", out, err)
	}
	return nil
}
