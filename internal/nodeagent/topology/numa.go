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
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// nodeDir is where Linux lists NUMA nodes, relative to the root.
const nodeDir = "sys/devices/system/node"

// ReadNUMANodes returns the machine's NUMA node IDs, ascending, from the
// node<N> directories of <root>/sys/devices/system/node. root "" means "/".
// A machine without that directory, or without any node<N> in it, has a
// single node 0. A node ID above 63 is an error: BitMask cannot hold it.
func ReadNUMANodes(root string) ([]int, error) {
	if root == "" {
		root = "/"
	}
	dir := filepath.Join(root, nodeDir)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return []int{0}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading NUMA nodes from %s: %w", dir, err)
	}
	var nodes []int
	for _, e := range entries {
		id, ok := parseNodeName(e.Name())
		if !ok {
			continue
		}
		// sysfs entries are directories; follow a symlink to check.
		fi, err := os.Stat(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("reading NUMA nodes from %s: %w", dir, err)
		}
		if !fi.IsDir() {
			continue
		}
		if id >= MaxNUMANodes {
			return nil, fmt.Errorf("reading NUMA nodes from %s: node %d is above the supported maximum %d", dir, id, MaxNUMANodes-1)
		}
		nodes = append(nodes, id)
	}
	if len(nodes) == 0 {
		return []int{0}, nil
	}
	slices.Sort(nodes)
	return nodes, nil
}

// parseNodeName parses "node<N>" with N a decimal number without sign.
func parseNodeName(name string) (int, bool) {
	digits, ok := strings.CutPrefix(name, "node")
	if !ok || digits == "" || strings.TrimLeft(digits, "0123456789") != "" {
		return 0, false
	}
	id, err := strconv.Atoi(digits)
	if err != nil {
		return 0, false
	}
	return id, true
}
