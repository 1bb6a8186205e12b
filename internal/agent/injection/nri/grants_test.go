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
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"

	"github.com/kubedevice/kubedevice/internal/nodeagent/poddevices"
)

// kicks records the requests for PreStartContainer a Grants makes.
type kicks struct {
	mu   sync.Mutex
	pods []string
}

func (k *kicks) request(namespace, name string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.pods = append(k.pods, namespace+"/"+name)
}

func (k *kicks) take() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := k.pods
	k.pods = nil
	return out
}

// TestCreateContainerWithPreStart runs the grants through the runtime side of NRI: a container
// whose plugin requires PreStartContainer is created once per grant (a repeated creation of the
// same container ID is the same creation), refused without one, with the agent asked to call
// PreStartContainer; a failed call is the refusal's message; a container whose plugins do not
// require it needs no grant.
func TestCreateContainerWithPreStart(t *testing.T) {
	dir := shortDir(t)
	socket := filepath.Join(dir, "nri.sock")
	rt := startRuntime(t, socket)

	index := NewIndex("")
	index.SetReady("ready", "ns", "trainer", map[string]Container{
		"app":   {Options: gopherOptions(), Resources: []string{"example.com/other", gopherResource}},
		"plain": {Options: &poddevices.RunContainerOptions{Envs: []poddevices.EnvVar{{Name: "OTHER", Value: "o1"}}}, Resources: []string{"example.com/other"}},
	})
	k := &kicks{}
	grants := NewGrants(k.request)
	grants.SetRequired(gopherResource, true)
	runner := startRunner(t, socket, index, grants, &fakePods{})
	waitFor(t, "the plugin to connect", func() bool { return runner.Status().State == StateConnected })
	waitForPlugins(t, rt, 1)
	pod := sandbox("ready", "ns", "trainer", nil)
	create := func(container, id string) (*api.ContainerAdjustment, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		return rt.CreateContainerWithID(ctx, pod, container, id)
	}
	injected := func(container, id string) {
		t.Helper()
		adj, err := create(container, id)
		if err != nil {
			t.Fatalf("creating %s (%s): %v", container, id, err)
		}
		if len(adj.GetEnv()) == 0 {
			t.Fatalf("creating %s (%s): no devices injected", container, id)
		}
	}
	refused := func(container, id, why string) {
		t.Helper()
		_, err := create(container, id)
		if err == nil || !strings.Contains(err.Error(), ErrDevicesNotReady.Error()) || !strings.Contains(err.Error(), why) {
			t.Fatalf("creating %s (%s): got %v, want a refusal saying %q and %q", container, id, err, ErrDevicesNotReady, why)
		}
		if diff := cmp.Diff([]string{"ns/trainer"}, k.take()); diff != "" {
			t.Errorf("PreStartContainer requests (-want +got):\n%s", diff)
		}
	}

	refused("app", "c1", notRunYet)
	if got := grants.Wants("ready", "app", ""); got != CauseCreation {
		t.Errorf("Wants after a refused creation: got %q, want %q", got, CauseCreation)
	}
	grants.Grant("ns", "trainer", "ready", "app", "")
	if got := grants.Wants("ready", "app", ""); got != CauseNone {
		t.Errorf("Wants of a granted container: got %q, want none", got)
	}
	injected("app", "c2")
	injected("app", "c2")
	refused("app", "c3", notRunYet)

	const failure = "device plugin PreStartContainer rpc failed with err: rpc error: code = Unavailable desc = device busy"
	if !grants.Fail("ns", "trainer", "ready", "app", failure) || grants.Fail("ns", "trainer", "ready", "app", failure) {
		t.Error("Fail: want the first failure reported as changed, the same again not")
	}
	refused("app", "c4", failure)
	grants.Grant("ns", "trainer", "ready", "app", "")
	injected("app", "c5")
	refused("app", "c6", notRunYet)

	for _, id := range []string{"p1", "p2", "p3"} {
		injected("plain", id)
	}
	if got := k.take(); len(got) != 0 {
		t.Errorf("a container needing no PreStartContainer asked for it: %v", got)
	}

	grants.SetRequired(gopherResource, false)
	injected("app", "c7")
	if got := k.take(); len(got) != 0 {
		t.Errorf("a container of a plugin that no longer requires PreStartContainer asked for it: %v", got)
	}
}

func TestGrantsWants(t *testing.T) {
	const uid, ctr = "uid", "app"
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, g *Grants, p *plugin)
		ended string
		want  Cause
	}{{
		name: "nothing recorded, nothing ended",
	}, {
		name:  "nothing recorded (an agent restart), a container ended",
		ended: "c1",
		want:  CauseRestart,
	}, {
		name:  "granted for the first start, nothing ended",
		setup: func(_ *testing.T, g *Grants, _ *plugin) { g.Grant("ns", "p", uid, ctr, "") },
	}, {
		name: "the first start took the grant, then the container ended",
		setup: func(t *testing.T, g *Grants, p *plugin) {
			g.Grant("ns", "p", uid, ctr, "")
			mustAdmit(t, p, "c1")
		},
		ended: "c1",
		want:  CauseRestart,
	}, {
		name: "the restart of the ended container is prepared",
		setup: func(t *testing.T, g *Grants, p *plugin) {
			g.Grant("ns", "p", uid, ctr, "")
			mustAdmit(t, p, "c1")
			g.Grant("ns", "p", uid, ctr, "c1")
		},
		ended: "c1",
	}, {
		name: "a status that lags behind: a container newer than the ended one was created and runs",
		setup: func(t *testing.T, g *Grants, p *plugin) {
			g.Grant("ns", "p", uid, ctr, "")
			mustAdmit(t, p, "c1")
		},
		ended: "c0",
	}, {
		name: "a creation asked for it",
		setup: func(t *testing.T, _ *Grants, p *plugin) {
			if _, _, err := p.CreateContainer(context.Background(), sandbox(uid, "ns", "p", nil), &api.Container{Id: "c1", Name: ctr}); err == nil {
				t.Fatal("a creation without a grant was admitted")
			}
		},
		want: CauseCreation,
	}, {
		name: "the last call failed",
		setup: func(_ *testing.T, g *Grants, _ *plugin) {
			g.Grant("ns", "p", uid, ctr, "c0")
			g.Fail("ns", "p", uid, ctr, "failed")
		},
		ended: "c0",
		want:  CauseRetry,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			g, p := grantedPlugin(uid, ctr)
			if tc.setup != nil {
				tc.setup(t, g, p)
			}
			if got := g.Wants(uid, ctr, tc.ended); got != tc.want {
				t.Errorf("Wants(%q): got %q, want %q", tc.ended, got, tc.want)
			}
		})
	}
}

// TestGrantsPending lists the pods whose containers' PreStartContainer call is to be made: asked
// for by a refused creation or failed, not granted nor admitted.
func TestGrantsPending(t *testing.T) {
	g, p := grantedPlugin("uid", "app")
	g.Grant("ns", "p", "uid", "app", "")
	if got := g.Pending(); len(got) != 0 {
		t.Fatalf("Pending with nothing to call: %v", got)
	}
	mustAdmit(t, p, "c0")
	g.Grant("ns", "p", "uid", "sidecar", "")
	if _, _, err := p.CreateContainer(context.Background(), sandbox("uid", "ns", "p", nil), &api.Container{Id: "c1", Name: "app"}); err == nil {
		t.Fatal("a creation without a grant was admitted")
	}
	g.Fail("ns", "b", "uid-b", "app", "plugin away")
	g.Fail("ns", "b", "uid-b", "init", "plugin away")
	g.Grant("ns", "c", "uid-c", "app", "")
	want := []PendingPod{
		{UID: "uid-b", Namespace: "ns", Name: "b", Containers: []string{"app", "init"}},
		{UID: "uid", Namespace: "ns", Name: "p", Containers: []string{"app"}},
	}
	if diff := cmp.Diff(want, g.Pending()); diff != "" {
		t.Errorf("Pending (-want +got):\n%s", diff)
	}
	g.Grant("ns", "p", "uid", "app", "c0")
	g.Forget("ns", "b", "")
	if got := g.Pending(); len(got) != 0 {
		t.Errorf("Pending once granted and forgotten: %v", got)
	}
}

func TestGrantsForget(t *testing.T) {
	g := NewGrants(nil)
	g.Grant("ns", "web", "old", "app", "")
	g.Grant("ns", "web", "new", "app", "")
	g.Grant("ns", "db", "other", "app", "")
	g.Forget("ns", "web", "new")
	if g.Len() != 2 || !g.Has("new", "app") || g.Has("old", "app") || !g.Has("other", "app") {
		t.Fatalf("after forgetting ns/web but the new pod: %d pods, want 2", g.Len())
	}
	g.Forget("ns", "web", "")
	g.Forget("ns", "db", "")
	if g.Len() != 0 {
		t.Fatalf("after forgetting every pod: %d pods left", g.Len())
	}
}

// TestGrantsConcurrent creates containers from several goroutines while an agent grants one
// start whenever asked: every grant admits exactly one new container, a container admitted is
// admitted again under its ID, and no creation is lost.
func TestGrantsConcurrent(t *testing.T) {
	const creators, starts = 4, 50
	asked := make(chan struct{}, 1)
	g := NewGrants(func(string, string) {
		select {
		case asked <- struct{}{}:
		default:
		}
	})
	_, p := grantedPlugin("uid", "app")
	p.grants = g
	g.SetRequired(gopherResource, true)

	stop := make(chan struct{})
	var granted int
	agentDone := make(chan struct{})
	go func() {
		defer close(agentDone)
		for {
			select {
			case <-stop:
				return
			case <-asked:
				// As the agent does: call PreStartContainer (here: nothing) unless a grant
				// awaits its creation.
				if g.Wants("uid", "app", "") != CauseNone {
					granted++
					g.Grant("ns", "p", "uid", "app", "")
				}
			}
		}
	}()

	var wg sync.WaitGroup
	admitted := make([][]string, creators)
	for i := range creators {
		wg.Go(func() {
			for n := 0; len(admitted[i]) < starts; n++ {
				id := fmt.Sprintf("c%d-%d", i, n)
				if _, _, err := p.CreateContainer(context.Background(), sandbox("uid", "ns", "p", nil), &api.Container{Id: id, Name: "app"}); err != nil {
					if !errors.Is(err, ErrDevicesNotReady) {
						t.Errorf("creating %s: %v", id, err)
						return
					}
					continue
				}
				admitted[i] = append(admitted[i], id)
			}
		})
	}
	wg.Wait()
	close(stop)
	<-agentDone

	seen := map[string]bool{}
	for _, ids := range admitted {
		for _, id := range ids {
			if seen[id] {
				t.Fatalf("container %s admitted twice", id)
			}
			seen[id] = true
		}
	}
	// Every admission took a grant of its own; at most one grant is left unused.
	if len(seen) != creators*starts || granted < len(seen) || granted > len(seen)+1 {
		t.Errorf("%d containers admitted with %d grants; want %d admitted with as many grants, or one more", len(seen), granted, creators*starts)
	}
}

// grantedPlugin returns a plugin whose index holds pod uid ready, with container holding a device
// of gopherResource, which requires PreStartContainer, and the plugin's grants.
func grantedPlugin(uid, container string) (*Grants, *plugin) {
	index := NewIndex("")
	index.SetReady(uid, "ns", "p", map[string]Container{container: {Options: gopherOptions(), Resources: []string{gopherResource}}})
	g := NewGrants(nil)
	g.SetRequired(gopherResource, true)
	return g, &plugin{name: PluginName, index: index, grants: g, pods: &fakePods{}, logger: logr.Discard()}
}

// mustAdmit creates container app of pod uid with id, which must be admitted.
func mustAdmit(t *testing.T, p *plugin, id string) {
	t.Helper()
	if _, _, err := p.CreateContainer(context.Background(), sandbox("uid", "ns", "p", nil), &api.Container{Id: id, Name: "app"}); err != nil {
		t.Fatalf("creating %s: %v", id, err)
	}
}
