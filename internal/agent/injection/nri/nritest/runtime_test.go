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

package nritest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	nrilog "github.com/containerd/nri/pkg/log"
	"github.com/containerd/nri/pkg/stub"
)

// quietLogger drops the NRI runtime's and stub's messages but warnings and errors.
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

// probe is an NRI plugin that sets one environment variable in every container it is asked about.
type probe struct{}

func (probe) CreateContainer(context.Context, *api.PodSandbox, *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	adj := &api.ContainerAdjustment{}
	adj.AddEnv("PROBE", "1")
	return adj, nil, nil
}

// TestWaitForPlugins checks that WaitForPlugins counts the plugins that connect to the socket
// (the runtime's start synchronizes its default validator with no plugin connected, which does
// not count), and that once it returns CreateContainer reaches the plugin.
func TestWaitForPlugins(t *testing.T) {
	// Not t.TempDir: its path, with the test's name, may be too long for a unix socket.
	dir, err := os.MkdirTemp("", "nri")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	socket := filepath.Join(dir, "nri.sock")
	rt := New(socket)
	if err := rt.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rt.Stop)

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := rt.WaitForPlugins(ctx, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitForPlugins with no plugin connected: got %v, want the deadline", err)
	}

	st, err := stub.New(probe{}, stub.WithPluginName("probe"), stub.WithPluginIdx("50"), stub.WithSocketPath(socket), stub.WithOnClose(func() {}))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Stop)
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := rt.WaitForPlugins(ctx, 1); err != nil {
		t.Fatal(err)
	}
	adj, err := rt.CreateContainer(ctx, &api.PodSandbox{Id: "sandbox-p", Uid: "p", Namespace: "ns", Name: "p"}, "app")
	if err != nil {
		t.Fatal(err)
	}
	if env := adj.GetEnv(); len(env) != 1 || env[0].GetKey() != "PROBE" {
		t.Errorf("adjustment right after WaitForPlugins: got env %v, want the plugin's PROBE", env)
	}
}
