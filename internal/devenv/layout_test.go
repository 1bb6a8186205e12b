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

package devenv

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSocketDirFits(t *testing.T) {
	// The longest plugin directory is <dir>/plugins_registry (17 bytes after dir); a socket name of
	// socketNameBudget bytes and its "/" must fit in maxSocketPath.
	longest := maxSocketPath - 1 - socketNameBudget - len("/plugins_registry")
	tests := map[string]struct {
		dir  string
		want bool
	}{
		"the repository's bin/demo": {dir: "/work/main/bin/demo", want: true},
		"a test's temporary dir":    {dir: "/tmp/TestDemo1234567890/001", want: true},
		"longest that fits":         {dir: "/" + strings.Repeat("d", longest-1), want: true},
		"one byte too long":         {dir: "/" + strings.Repeat("d", longest), want: false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := socketDirFits(tc.dir); got != tc.want {
				t.Errorf("socketDirFits(%d bytes) = %v, want %v", len(tc.dir), got, tc.want)
			}
		})
	}
}

func TestNewLayoutMovesSocketsOfALongWorkDir(t *testing.T) {
	long := filepath.Join(t.TempDir(), strings.Repeat("a", 40), strings.Repeat("b", 40))
	l, err := newLayout(long)
	if err != nil {
		t.Fatalf("newLayout: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(l.runDir) })
	if !l.tempRunDir || !strings.HasPrefix(l.runDir, "/tmp/kubedevice-dev-") {
		t.Fatalf("sockets in %s (temporary: %v), want a directory under /tmp", l.runDir, l.tempRunDir)
	}
	if l.workDir != long || !strings.HasPrefix(l.logsDir(), long) || !strings.HasPrefix(l.kubeconfig(), long) {
		t.Errorf("work directory %s, logs %s, kubeconfig %s: want them under %s", l.workDir, l.logsDir(), l.kubeconfig(), long)
	}
	for _, dir := range []string{l.pluginDir(), l.registryDir()} {
		if !socketDirFits(filepath.Dir(dir)) {
			t.Errorf("%s is still too long for sockets", dir)
		}
	}
	if err := l.prepare(); err != nil {
		t.Fatalf("prepare: %v", err)
	}
	if err := l.cleanup(); err != nil {
		t.Fatalf("cleanup: %v", err)
	}
	if _, err := os.Stat(l.runDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the temporary socket directory %s is still there after cleanup (%v)", l.runDir, err)
	}
}

func TestPrepareAndCleanup(t *testing.T) {
	l, err := newLayout(t.TempDir())
	if err != nil {
		t.Fatalf("newLayout: %v", err)
	}
	if l.tempRunDir {
		t.Fatalf("sockets moved to %s for a short work directory", l.runDir)
	}
	// What a previous run left behind, and a file of the user's.
	stale := []string{
		filepath.Join(l.pluginDir(), "kubelet_internal_checkpoint"),
		filepath.Join(l.gophersDir(), "gopher-7"),
		filepath.Join(l.logsDir(), "kubedevice-agent.log"),
		l.kubeconfig(),
	}
	mine := filepath.Join(l.workDir, "notes.txt")
	for _, f := range append(stale, mine) {
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.prepare(); err != nil {
		t.Fatalf("prepare: %v", err)
	}
	for _, f := range stale {
		if _, err := os.Stat(f); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s from a previous run is still there (%v)", f, err)
		}
	}
	for _, d := range []string{l.pluginDir(), l.registryDir(), l.gophersDir(), l.logsDir(), l.schedulerDir()} {
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
			t.Errorf("%s was not created: %v", d, err)
		}
	}

	log := l.logPath("kubedevice-agent")
	if err := os.WriteFile(log, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := l.cleanup(); err != nil {
		t.Fatalf("cleanup: %v", err)
	}
	for _, p := range []string{l.pluginDir(), l.registryDir(), l.gophersDir(), l.schedulerDir(), l.kubeconfig()} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s is still there after cleanup (%v)", p, err)
		}
	}
	for _, p := range []string{log, mine} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("cleanup removed %s: %v", p, err)
		}
	}
}

func TestLockRefusesASecondRun(t *testing.T) {
	l, err := newLayout(t.TempDir())
	if err != nil {
		t.Fatalf("newLayout: %v", err)
	}
	first, err := l.lock()
	if err != nil {
		t.Fatalf("first lock: %v", err)
	}
	if _, err := l.lock(); !errors.Is(err, errLocked) {
		t.Errorf("second lock: %v, want %v", err, errLocked)
	}
	first.Close()
	again, err := l.lock()
	if err != nil {
		t.Fatalf("lock after the first was released: %v", err)
	}
	again.Close()
}
