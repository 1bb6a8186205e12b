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

package deviceplugin

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	"k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// TestRemoveEventOfAnEarlierSocket: inotify names paths, not files, so the removal of the socket a
// manager cleaned up can be read after the loop has already made the new one at the same path
// (its timer and the watcher are ready at once, and select picks either). Such an event is about
// the earlier socket: the plugin keeps serving the one it has. A removal of the current socket
// still retires it.
func TestRemoveEventOfAnEarlierSocket(t *testing.T) {
	p, err := New(Config{
		ResourceName: "example.com/gopher",
		SocketDir:    t.TempDir(),
		Devices:      []*v1beta1.Device{{ID: "g0", Health: v1beta1.Healthy}},
	})
	if err != nil {
		t.Fatal(err)
	}
	r := newRunner(context.Background(), p)
	if err := r.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.shutdown)
	now := time.Now()

	// The socket we serve is still at the path: the event is an earlier socket's.
	r.handleEvent(fsnotify.Event{Name: r.path, Op: fsnotify.Remove}, now)
	if r.ln == nil {
		t.Fatal("a removal event for an earlier socket closed the listener of the socket still at the path")
	}
	if _, err := os.Lstat(r.path); err != nil {
		t.Fatalf("the socket path: %v", err)
	}

	// Another process removes the socket we serve: we retire it and look again shortly.
	if err := os.Remove(r.path); err != nil {
		t.Fatal(err)
	}
	r.handleEvent(fsnotify.Event{Name: r.path, Op: fsnotify.Remove}, now)
	if r.ln != nil {
		t.Fatal("the removal of the socket we serve left its listener open")
	}
	if r.recheckSocket.IsZero() {
		t.Fatal("no recheck of the socket path was scheduled after its removal")
	}
}
