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
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// fakeSysfs creates root/sys/devices/system/node with the given directory
// and file entries and returns root.
func fakeSysfs(t *testing.T, dirs, files []string) string {
	t.Helper()
	root := t.TempDir()
	base := filepath.Join(root, nodeDir)
	if err := os.MkdirAll(base, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		if err := os.MkdirAll(filepath.Join(base, d, "cpu0"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(base, f), []byte("0-1\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestReadNUMANodes(t *testing.T) {
	cases := map[string]struct {
		root    func(t *testing.T) string
		want    []int
		wantErr bool
	}{
		"no node directory: single node 0": {
			root: func(t *testing.T) string { return t.TempDir() },
			want: []int{0},
		},
		"empty node directory: single node 0": {
			root: func(t *testing.T) string { return fakeSysfs(t, nil, []string{"possible", "online"}) },
			want: []int{0},
		},
		"one node": {
			root: func(t *testing.T) string { return fakeSysfs(t, []string{"node0"}, []string{"has_cpu", "online"}) },
			want: []int{0},
		},
		"several nodes, numeric order, other entries ignored": {
			root: func(t *testing.T) string {
				return fakeSysfs(t, []string{"node10", "node2", "node0", "node1", "power", "nodeX", "node"}, []string{"has_memory", "node3"})
			},
			want: []int{0, 1, 2, 10},
		},
		"sparse nodes": {
			root: func(t *testing.T) string { return fakeSysfs(t, []string{"node3", "node7"}, nil) },
			want: []int{3, 7},
		},
		"symlinked node directory": {
			root: func(t *testing.T) string {
				root := fakeSysfs(t, []string{"node0"}, nil)
				target := filepath.Join(root, "sys/devices/real-node1")
				if err := os.MkdirAll(target, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink(target, filepath.Join(root, nodeDir, "node1")); err != nil {
					t.Fatal(err)
				}
				return root
			},
			want: []int{0, 1},
		},
		"node 63 is the maximum": {
			root: func(t *testing.T) string { return fakeSysfs(t, []string{"node63"}, nil) },
			want: []int{63},
		},
		"node 64 does not fit a bit mask": {
			root:    func(t *testing.T) string { return fakeSysfs(t, []string{"node0", "node64"}, nil) },
			wantErr: true,
		},
		"node path is a file": {
			root: func(t *testing.T) string {
				root := t.TempDir()
				if err := os.MkdirAll(filepath.Join(root, "sys/devices/system"), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(root, nodeDir), nil, 0o644); err != nil {
					t.Fatal(err)
				}
				return root
			},
			wantErr: true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := ReadNUMANodes(tc.root(t))
			if (err != nil) != tc.wantErr {
				t.Fatalf("ReadNUMANodes() error = %v, want error %t", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ReadNUMANodes() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestReadNUMANodesDefaultRoot(t *testing.T) {
	want, err := ReadNUMANodes("/")
	if err != nil {
		t.Fatalf("ReadNUMANodes(/) = %v", err)
	}
	got, err := ReadNUMANodes("")
	if err != nil {
		t.Fatalf(`ReadNUMANodes("") = %v`, err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf(`ReadNUMANodes("") differs from "/" (-want +got):\n%s`, diff)
	}
	if len(got) == 0 {
		t.Errorf("ReadNUMANodes() returned no node")
	}
}
