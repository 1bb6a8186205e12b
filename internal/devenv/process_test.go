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
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestComponentThatExitsIsReported(t *testing.T) {
	log := filepath.Join(t.TempDir(), "broken.log")
	c, err := startComponent("broken", "/bin/sh", []string{"-c", "echo cannot dial the API server >&2; exit 3"}, log)
	if err != nil {
		t.Fatalf("startComponent: %v", err)
	}
	<-c.done
	err = c.exited()
	if err == nil {
		t.Fatal("exited() = nil for a component that ended on its own")
	}
	for _, want := range []string{"broken stopped unexpectedly (exit status 3)", "cannot dial the API server", "broken's log"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("exited() = %q, want it to contain %q", err, want)
		}
	}
	if err := c.stop(); err != nil {
		t.Errorf("stop of an ended component: %v", err)
	}
}

func TestComponentStopsOnSIGTERM(t *testing.T) {
	log := filepath.Join(t.TempDir(), "sleeper.log")
	c, err := startComponent("sleeper", "/bin/sleep", []string{"60"}, log)
	if err != nil {
		t.Fatalf("startComponent: %v", err)
	}
	if err := c.exited(); err != nil {
		t.Fatalf("exited() of a running component: %v", err)
	}
	start := time.Now()
	if err := c.stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if d := time.Since(start); d > stopTimeout/2 {
		t.Errorf("stop took %s: sleep should end on SIGTERM at once", d)
	}
	// Asked to stop, it is not reported as stopped unexpectedly.
	if err := c.exited(); err != nil {
		t.Errorf("exited() after stop: %v", err)
	}
}

func TestLastLines(t *testing.T) {
	data := []byte("one\ntwo\nthree\nfour\n")
	if got, want := lastLines(data, 2), "  three\n  four"; got != want {
		t.Errorf("lastLines(2) = %q, want %q", got, want)
	}
	if got, want := lastLines(data, 10), "  one\n  two\n  three\n  four"; got != want {
		t.Errorf("lastLines(10) = %q, want %q", got, want)
	}
}
