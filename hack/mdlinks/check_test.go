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
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestSlug(t *testing.T) {
	for heading, want := range map[string]string{
		"DRA in the demo cluster: `kubedevice dev --dra`":       "dra-in-the-demo-cluster-kubedevice-dev---dra",
		"Move a node from the kubelet to kubedevice (and back)": "move-a-node-from-the-kubelet-to-kubedevice-and-back",
		"kubedevice — design":                                   "kubedevice--design",
		"S1–S20: the fault_matrix, 2.0":                         "s1s20-the-fault_matrix-20",
	} {
		doc := writeFiles(t, map[string]string{"a.md": "# " + heading + "\n"})
		got, err := newChecker().parse(filepath.Join(doc, "a.md"))
		if err != nil {
			t.Fatal(err)
		}
		if !got.anchors[want] {
			t.Errorf("heading %q: anchors %v, want %q", heading, got.anchors, want)
		}
	}
}

// TestCheckTree pins what is broken and what is not: each link of a.md names its case.
func TestCheckTree(t *testing.T) {
	dir := writeFiles(t, map[string]string{
		"a.md": `# Top
## Same
## Same

[ok](#top) [ok](#same-1) [ok](docs/b.md#the-b-page) [ok](docs/) [ok](https://example.com/x#y)
[ok](docs/b.md) ![ok](docs/pic.png) [ok](mailto:a@example.com)

| table | [broken anchor](#same-2) |
|---|---|
| x | [broken file](docs/c.md) |

[broken other anchor](docs/b.md#nope) [broken absolute](/docs/b.md)
`,
		"docs/b.md":      "# The B page\n\n[broken up](../nothere.md) [ok up](../a.md#same)\n",
		"docs/pic.png":   "",
		"bin/skipped.md": "[broken but skipped](nowhere.md)\n",
	})
	got, err := checkTree(dir)
	if err != nil {
		t.Fatal(err)
	}
	for i := range got {
		got[i] = strings.ReplaceAll(got[i], dir+string(filepath.Separator), "")
	}
	want := []string{
		"a.md:8: #same-2: no heading with anchor #same-2 in a.md",
		"a.md:10: docs/c.md: no such file or directory docs/c.md",
		"a.md:12: docs/b.md#nope: no heading with anchor #nope in docs/b.md",
		"a.md:12: /docs/b.md: absolute path: links must be relative to the file",
		"docs/b.md:3: ../nothere.md: no such file or directory nothere.md",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}
}

// writeFiles writes files (path relative to a new temporary directory: content) and returns
// the directory.
func writeFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
