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

// Command mdlinks checks the relative links of the repository's Markdown files, as `make verify`
// runs it: every link or image to a file or directory must resolve, and every #anchor, in the same
// file or in another Markdown file, must name a heading there, slugged by GitHub's rules (lower
// case; letters, digits, marks, '_', '-' and spaces kept, spaces turned into '-', everything else
// dropped; a repeated heading gets -1, -2, ...). External links (a scheme such as https: or
// mailto:) are not checked: CI has no internet.
//
// Usage: go run ./hack/mdlinks [DIR]   (default: the current directory; bin/ and dot directories
// are skipped). It prints one line per broken link and exits 1 when there is one.
package main

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

func main() {
	root := "."
	if len(os.Args) > 2 {
		fmt.Fprintln(os.Stderr, "usage: mdlinks [DIR]")
		os.Exit(2)
	}
	if len(os.Args) == 2 {
		root = os.Args[1]
	}
	problems, err := checkTree(root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mdlinks:", err)
		os.Exit(2)
	}
	for _, p := range problems {
		fmt.Println(p)
	}
	if len(problems) > 0 {
		fmt.Printf("%d broken Markdown links (relative paths and #anchors; external links are not checked)\n", len(problems))
		os.Exit(1)
	}
}

// checkTree checks every Markdown file under root, skipping bin/ (tools and build output) and
// dot directories (.git).
func checkTree(root string) ([]string, error) {
	var files []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (d.Name() == "bin" || strings.HasPrefix(d.Name(), ".")) {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(d.Name(), ".md") {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return newChecker().check(files)
}
