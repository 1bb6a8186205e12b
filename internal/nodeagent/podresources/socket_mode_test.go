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

package podresources

import (
	"os"
	"syscall"
	"testing"

	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/kubedevice/kubedevice/internal/nodeagent/registration"
)

// The PodResources API socket's mode is registration.SocketMode whatever the umask, and the
// API answers on it.
func TestSocketMode(t *testing.T) {
	old := syscall.Umask(0)
	t.Cleanup(func() { syscall.Umask(old) })
	s, c := serve(t, &fakePods{}, newCore(t), Options{})
	fi, err := os.Lstat(s.SocketPath())
	if err != nil {
		t.Fatal(err)
	}
	if want := os.ModeSocket | registration.SocketMode; fi.Mode() != want {
		t.Errorf("PodResources socket mode = %v, want %v", fi.Mode(), want)
	}
	if _, err := c.List(callCtx(t), &podresourcesapi.ListPodResourcesRequest{}); err != nil {
		t.Errorf("List: %v", err)
	}
	s.Stop()
	if _, err := os.Lstat(s.SocketPath()); !os.IsNotExist(err) {
		t.Errorf("socket after Stop: %v, want it removed", err)
	}
}
