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
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"unicode"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/extension"
	"github.com/yuin/goldmark/text"
)

// document is a parsed Markdown file: its links and the anchors its headings define.
type document struct {
	links   []link
	anchors map[string]bool
}

// link is one link or image destination and the line of the block it is in.
type link struct {
	dest string
	line int
}

// checker parses each Markdown file once, with GitHub's extensions (tables hold links too).
type checker struct {
	md   goldmark.Markdown
	docs map[string]*document
}

func newChecker() *checker {
	return &checker{md: goldmark.New(goldmark.WithExtensions(extension.GFM)), docs: map[string]*document{}}
}

// check returns one line per broken link of files, "file:line: link: what is wrong".
func (c *checker) check(files []string) ([]string, error) {
	var problems []string
	for _, f := range files {
		doc, err := c.parse(f)
		if err != nil {
			return nil, err
		}
		for _, l := range doc.links {
			if msg := c.resolve(f, l.dest); msg != "" {
				problems = append(problems, fmt.Sprintf("%s:%d: %s: %s", f, l.line, l.dest, msg))
			}
		}
	}
	return problems, nil
}

// resolve returns what is wrong with dest, a link in file from, or "" when it resolves.
func (c *checker) resolve(from, dest string) string {
	if dest == "" || isExternal(dest) {
		return ""
	}
	pathPart, anchor, _ := strings.Cut(dest, "#")
	target := from
	if pathPart != "" {
		p, err := url.PathUnescape(pathPart)
		if err != nil {
			return "bad path: " + err.Error()
		}
		if strings.HasPrefix(p, "/") {
			return "absolute path: links must be relative to the file"
		}
		target = filepath.Join(filepath.Dir(from), filepath.FromSlash(p))
		if _, err := os.Stat(target); err != nil {
			return "no such file or directory " + target
		}
	}
	if anchor == "" || !strings.HasSuffix(target, ".md") {
		return ""
	}
	doc, err := c.parse(target)
	if err != nil {
		return err.Error()
	}
	if !doc.anchors[anchor] {
		return fmt.Sprintf("no heading with anchor #%s in %s", anchor, target)
	}
	return ""
}

// isExternal tells a link with a scheme (https:, mailto:, ...) from a relative one.
func isExternal(dest string) bool {
	u, err := url.Parse(dest)
	return err == nil && u.Scheme != ""
}

// parse reads and parses file once, collecting its links and its headings' anchors.
func (c *checker) parse(file string) (*document, error) {
	if doc, ok := c.docs[file]; ok {
		return doc, nil
	}
	src, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	doc := &document{anchors: map[string]bool{}}
	seen := map[string]int{}
	root := c.md.Parser().Parse(text.NewReader(src))
	err = ast.Walk(root, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			return ast.WalkContinue, nil
		}
		switch n := n.(type) {
		case *ast.Heading:
			doc.anchors[uniqueSlug(slug(plainText(n, src)), seen)] = true
		case *ast.Link:
			doc.links = append(doc.links, link{dest: string(n.Destination), line: lineOf(n, src)})
		case *ast.Image:
			doc.links = append(doc.links, link{dest: string(n.Destination), line: lineOf(n, src)})
		}
		return ast.WalkContinue, nil
	})
	c.docs[file] = doc
	return doc, err
}

// plainText is a node's text as GitHub slugs it: text and code spans, without markup.
func plainText(n ast.Node, src []byte) string {
	var b strings.Builder
	for c := n.FirstChild(); c != nil; c = c.NextSibling() {
		switch c := c.(type) {
		case *ast.Text:
			b.Write(c.Segment.Value(src))
		case *ast.String:
			b.Write(c.Value)
		default:
			b.WriteString(plainText(c, src))
		}
	}
	return b.String()
}

// slug is GitHub's anchor of a heading's text (github-slugger's rule).
func slug(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || unicode.IsLetter(r) || unicode.IsNumber(r) || unicode.IsMark(r) || unicode.Is(unicode.Pc, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// uniqueSlug numbers a repeated slug as GitHub does: s, s-1, s-2, ...
func uniqueSlug(s string, seen map[string]int) string {
	n, ok := seen[s]
	seen[s] = n + 1
	if !ok {
		return s
	}
	return fmt.Sprintf("%s-%d", s, n)
}

// lineOf is the 1-based line of the block holding an inline node.
func lineOf(n ast.Node, src []byte) int {
	for p := n; p != nil; p = p.Parent() {
		if p.Type() == ast.TypeBlock && p.Lines().Len() > 0 {
			return bytes.Count(src[:p.Lines().At(0).Start], []byte("\n")) + 1
		}
	}
	return 1
}
