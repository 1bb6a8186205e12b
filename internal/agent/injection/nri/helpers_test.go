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

package nri

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	nrilog "github.com/containerd/nri/pkg/log"
	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	"golang.org/x/sys/unix"

	"github.com/kubedevice/kubedevice/internal/agent/injection/nri/nritest"
	"github.com/kubedevice/kubedevice/internal/nodeagent/poddevices"
)

// fakePods is a PodChecker that knows the pods it was told about, by UID.
type fakePods struct {
	mu    sync.Mutex
	needs map[string]bool
}

func (f *fakePods) NeedsDevices(_ context.Context, _, _, uid string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.needs[uid], nil
}

// startRuntime starts a runtime serving socket; it stops after the test.
func startRuntime(t testing.TB, socket string) *nritest.Runtime {
	t.Helper()
	rt := nritest.New(socket)
	if err := rt.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rt.Stop)
	return rt
}

// createContainer asks the runtime's plugins to adjust a container of pod.
func createContainer(rt *nritest.Runtime, pod *api.PodSandbox, container string) (*api.ContainerAdjustment, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return rt.CreateContainer(ctx, pod, container)
}

// waitForPlugins waits until the runtime lists n plugins, so CreateContainer reaches them.
func waitForPlugins(t testing.TB, rt *nritest.Runtime, n int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := rt.WaitForPlugins(ctx, n); err != nil {
		t.Fatal(err)
	}
}

// startRunner runs a runner for index and grants on socket with short retry delays until the
// test ends.
func startRunner(t testing.TB, socket string, index *Index, grants *Grants, pods PodChecker) *Runner {
	t.Helper()
	opts, err := Options{SocketPath: socket, InitialRetryDelay: 10 * time.Millisecond, MaxRetryDelay: 100 * time.Millisecond, RegistrationTimeout: 5 * time.Second}.Complete()
	if err != nil {
		t.Fatal(err)
	}
	r := NewRunner(opts, index, grants, pods)
	ctx, cancel := context.WithCancel(logr.NewContext(context.Background(), testr.NewWithInterface(t, testr.Options{})))
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return r
}

// waitFor polls cond every 10 ms until it holds or 10 s pass.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// shortDir returns a temporary directory with a path short enough for unix sockets.
func shortDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "nri")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

func sandbox(uid, namespace, name string, annotations map[string]string) *api.PodSandbox {
	return &api.PodSandbox{Id: "sandbox-" + uid, Uid: uid, Namespace: namespace, Name: name, Annotations: annotations}
}

// devNull returns /dev/null as the host stats it.
func devNull(t testing.TB) hostDevice {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat("/dev/null", &st); err != nil {
		t.Fatal(err)
	}
	return hostDevice{typ: "c", major: 1, minor: 3, mode: st.Mode &^ unix.S_IFMT, uid: st.Uid, gid: st.Gid}
}

// gopherResource is the resource of the tests' devices.
const gopherResource = "example.com/gopher"

// gopherOptions are the runtime options of a container holding one device of each kind.
func gopherOptions() *poddevices.RunContainerOptions {
	return &poddevices.RunContainerOptions{
		Envs:        []poddevices.EnvVar{{Name: "GOPHER", Value: "g1"}, {Name: "GOPHER_VISIBLE_DEVICES", Value: "g1"}},
		Mounts:      []poddevices.Mount{{ContainerPath: "/gophers/g1", HostPath: "/var/lib/gophers/g1", ReadOnly: true}, {ContainerPath: "/scratch", HostPath: "/var/lib/gophers/scratch"}},
		Devices:     []poddevices.DeviceSpec{{ContainerPath: "/dev/gopher0", HostPath: "/dev/null", Permissions: "rwm"}},
		Annotations: []poddevices.Annotation{{Key: "example.com/gopher", Value: "g1"}},
		CDIDevices:  []string{"example.com/gopher=g1"},
	}
}

// quietLogger drops the NRI runtime's informational messages, which the adaptation logs for every
// plugin connection and request.
type quietLogger struct{}

func (quietLogger) Debugf(context.Context, string, ...any) {}
func (quietLogger) Infof(context.Context, string, ...any)  {}
func (quietLogger) Warnf(_ context.Context, format string, args ...any) {
	fmt.Fprintf(os.Stderr, "nri warning: "+format+"\n", args...)
}
func (quietLogger) Errorf(_ context.Context, format string, args ...any) {
	fmt.Fprintf(os.Stderr, "nri error: "+format+"\n", args...)
}

func TestMain(m *testing.M) {
	nrilog.Set(quietLogger{})
	os.Exit(m.Run())
}
