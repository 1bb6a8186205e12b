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

package gopher

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unicode"

	"k8s.io/klog/v2"
	"k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kubedevice/kubedevice/pkg/deviceplugin"
)

const (
	// unhealthyContent marks a gopher file as an unhealthy device.
	unhealthyContent = "unhealthy"
	// maxHealthRead is how much of a gopher file is read to decide its
	// health: a longer file cannot be "unhealthy" plus some white space that
	// matters.
	maxHealthRead = 4096
	// maxIDLength is the longest device ID the device manager accepts.
	maxIDLength = 253
)

var errNotFound = errors.New("gopher not found")

// scan lists the gophers in dir, sorted in natural order. A missing
// directory has no gophers.
func scan(logger klog.Logger, dir string) ([]*v1beta1.Device, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading gophers directory: %w", err)
	}
	var devs []*v1beta1.Device
	for _, e := range entries {
		id := e.Name()
		if !validID(id) {
			logger.V(2).Info("Skipping file: its name cannot be a device ID", "name", id)
			continue
		}
		path := filepath.Join(dir, id)
		fi, err := os.Stat(path)
		if err != nil || !fi.Mode().IsRegular() {
			// Gone since ReadDir, a directory, a broken symlink...
			continue
		}
		devs = append(devs, deviceplugin.Device(id, healthy(logger, path)))
	}
	slices.SortFunc(devs, func(a, b *v1beta1.Device) int { return CompareNatural(a.GetID(), b.GetID()) })
	return devs, nil
}

// validID reports whether a file name can be a gopher's device ID: not
// hidden, no comma (GOPHER lists IDs comma-separated), no control
// characters, at most 253 bytes.
func validID(name string) bool {
	return name != "" && !strings.HasPrefix(name, ".") && !strings.Contains(name, ",") &&
		!strings.ContainsFunc(name, unicode.IsControl) && len(name) <= maxIDLength
}

// healthy reads a gopher file: it is unhealthy when its trimmed content is
// "unhealthy", or when it cannot be read.
func healthy(logger klog.Logger, path string) bool {
	f, err := os.Open(path)
	if err != nil {
		logger.Error(err, "Reading gopher file; reporting the gopher unhealthy", "path", path)
		return false
	}
	defer f.Close()
	content, err := io.ReadAll(io.LimitReader(f, maxHealthRead))
	if err != nil {
		logger.Error(err, "Reading gopher file; reporting the gopher unhealthy", "path", path)
		return false
	}
	return string(bytes.TrimSpace(content)) != unhealthyContent
}

// lookup returns the path of the gopher file for id, or an error wrapping
// errNotFound.
func lookup(dir, id string) (string, error) {
	if !validID(id) || filepath.Base(id) != id {
		return "", fmt.Errorf("%w: %q is not a gopher ID", errNotFound, id)
	}
	path := filepath.Join(dir, id)
	fi, err := os.Stat(path)
	if err != nil || !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%w: no gopher file %s", errNotFound, path)
	}
	return path, nil
}
