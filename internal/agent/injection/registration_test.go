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

package injection

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2/ktesting"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/kubedevice/kubedevice/internal/agent/injection/nri"
	"github.com/kubedevice/kubedevice/internal/agent/kube"
	"github.com/kubedevice/kubedevice/internal/nodeagent"
	"github.com/kubedevice/kubedevice/internal/nodeagent/dptest"
	"github.com/kubedevice/kubedevice/internal/testutil"
)

const (
	gopher   = "example.com/gopher"
	nodeName = "node-1"
)

// preStartNode is a device manager core on a directory of its own, with a stub plugin of gopher
// that requires PreStartContainer and counts the calls, over real gRPC on unix sockets.
type preStartNode struct {
	t    *testing.T
	ctx  context.Context
	dir  string
	core *nodeagent.Manager

	mu    sync.Mutex
	calls int
}

func newPreStartNode(t *testing.T) *preStartNode {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	n := &preStartNode{t: t, ctx: ctx, dir: dptest.ShortTempDir(t)}
	if err := os.WriteFile(filepath.Join(n.dir, "boot_id"), []byte("11111111-2222-3333-4444-555555555555\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	n.startCore()
	return n
}

// startCore starts a core on the node's directory, restoring what the previous one checkpointed:
// an agent (re)start.
func (n *preStartNode) startCore() {
	n.t.Helper()
	core, err := nodeagent.New(nodeagent.Config{
		PluginDir: filepath.Join(n.dir, "dp"), StateDir: filepath.Join(n.dir, "state"),
		BootIDPath: filepath.Join(n.dir, "boot_id"), Registerer: prometheus.NewRegistry(),
	})
	if err != nil {
		n.t.Fatal(err)
	}
	if _, err := core.RestoreCheckpoint(n.ctx); err != nil {
		n.t.Fatal(err)
	}
	if err := core.Start(n.ctx); err != nil {
		n.t.Fatal(err)
	}
	n.t.Cleanup(core.Stop)
	n.core = core
}

// plugin starts a stub plugin of gopher on socket name, requiring PreStartContainer, and
// registers it.
func (n *preStartNode) plugin(name string) *dptest.Plugin {
	n.t.Helper()
	p := dptest.New(filepath.Join(n.dir, "dp", name), gopher, []*pluginapi.Device{dptest.Device("gopher-0", pluginapi.Healthy)})
	p.SetOptions(true, false)
	p.SetAllocateFunc(func(r *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
		return &pluginapi.AllocateResponse{ContainerResponses: []*pluginapi.ContainerAllocateResponse{{}}}, nil
	})
	p.SetPreStartContainerFunc(func(*pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
		n.mu.Lock()
		defer n.mu.Unlock()
		n.calls++
		return &pluginapi.PreStartContainerResponse{}, nil
	})
	if err := p.Start(); err != nil {
		n.t.Fatal(err)
	}
	n.t.Cleanup(p.Stop)
	ctx, cancel := context.WithTimeout(n.ctx, 10*time.Second)
	defer cancel()
	if err := p.Register(ctx, n.core.SocketPath()); err != nil {
		n.t.Fatal(err)
	}
	n.waitState(nodeagent.PluginRegistered, 1)
	return p
}

// waitState waits until gopher's plugin is in state want with allocatable devices.
func (n *preStartNode) waitState(want nodeagent.PluginState, allocatable int) {
	n.t.Helper()
	dptest.Eventually(n.t, 10*time.Second, func() error {
		if s, ok := n.core.Snapshot(gopher); !ok || s.State != want || s.Allocatable != allocatable {
			return fmt.Errorf("%s is not %s with %d allocatable yet", gopher, want, allocatable)
		}
		return nil
	})
}

func (n *preStartNode) preStartCalls() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.calls
}

// newPreStartController returns runtime injection without NRI on core, with the pod in its
// cache, and its PreStartContainer controller. The controller is not run: the test reconciles
// what its queue hands out and never honours a RequeueAfter, so that no retry happens on a
// timer (the backoff's clock never moves) and whatever reaches the queue was added at once.
func newPreStartController(t *testing.T, core Core, pod *corev1.Pod) (*Injection, *preStartReconciler, client.Client) {
	t.Helper()
	c := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(pod).Build()
	gate := kube.NewGate()
	gate.Open(time.Now())
	x := &Injection{
		opts: Options{NodeName: nodeName, Core: core, Gate: gate, Recorder: events.NewFakeRecorder(100)},
		pods: kube.Pods{Client: c, NodeName: nodeName},
	}
	x.grants = nri.NewGrants(x.requestPreStart)
	r := &preStartReconciler{
		Injection: x,
		backoff:   workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](retryBaseDelay, retryMaxDelay),
	}
	return x, r, c
}

// nextRequest waits for the next request the queue hands out; it fails the test if none comes:
// nothing queued the pod waiting for the plugin when the plugin registered again.
func nextRequest(t *testing.T, q workqueue.TypedRateLimitingInterface[reconcile.Request]) reconcile.Request {
	t.Helper()
	got := make(chan reconcile.Request, 1)
	go func() {
		req, shutdown := q.Get()
		if !shutdown {
			q.Done(req)
			got <- req
		}
	}()
	select {
	case req := <-got:
		return req
	case <-time.After(10 * time.Second):
		t.Fatal("nothing was queued: the pod waiting for the plugin was not queued when the plugin registered again")
		return reconcile.Request{}
	}
}

// endedID is the runtime's ID of the app container that ended (endedAndWaiting).
const endedID = "c1"

// endedAndWaiting writes the status of a pod whose app container ended and waits to be restarted.
func endedAndWaiting(t *testing.T, c client.Client, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	pod.Status.Phase = corev1.PodRunning
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{
		Name: "app", RestartCount: 1,
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
		LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ContainerID: "containerd://" + endedID, ExitCode: 1,
		}},
	}}
	if err := c.Status().Update(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	return pod
}

// A container whose plugin requires PreStartContainer waits while the plugin is away: the call
// for its restart fails, and is retried with backoff. When the plugin registers again the pod is
// queued at once, not when the backoff or the kubelet's next creation of the container would
// retry it, and the call made then grants the restart (the NRI hook admits the next creation).
func TestPreStartRequeuedWhenPluginRegistersAgain(t *testing.T) {
	for _, tc := range []struct {
		name string
		// away makes the plugin go away and tells runtime injection what the agent knows of it.
		away func(n *preStartNode, p *dptest.Plugin, x *Injection)
		// again is the socket the plugin registers on again.
		again string
	}{{
		name:  "the plugin disconnected, and registers again on a new socket",
		again: "gopher-2.sock",
		away: func(n *preStartNode, p *dptest.Plugin, x *Injection) {
			p.Stop()
			n.waitState(nodeagent.PluginDisconnected, 0)
			// The disconnected plugin keeps its options: the call is made, and fails.
			x.RefreshPreStart(gopher)
		},
	}, {
		name:  "the agent restarted, and the plugin registers again on its socket",
		again: "gopher-1.sock",
		away: func(n *preStartNode, p *dptest.Plugin, x *Injection) {
			p.Stop()
			n.core.Stop()
			n.startCore()
			x.opts.Core = n.core
			// Start-up: the NodeDevice said the plugin required PreStartContainer.
			x.RestorePreStartRequired(gopher)
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			n := newPreStartNode(t)
			p := n.plugin("gopher-1.sock")
			pod := testutil.MakePod("trainer", "ns").UID("uid-1").Node(nodeName).Request(gopher, 1).RestartPolicy(corev1.RestartPolicyAlways).Obj()
			if err := n.core.AllocatePod(n.ctx, pod); err != nil {
				t.Fatal(err)
			}
			x, r, c := newPreStartController(t, n.core, pod)
			tc.away(n, p, x)
			q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
			defer q.ShutDown()
			ctx, cancel := context.WithCancel(n.ctx)
			defer cancel()
			if err := r.requests(ctx, q); err != nil {
				t.Fatal(err)
			}

			// The container ended; the call for its restart fails while the plugin is away.
			pod = endedAndWaiting(t, c, pod)
			req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}}
			res, err := r.Reconcile(ctx, req)
			if err != nil || res.RequeueAfter == 0 {
				t.Fatalf("Reconcile while the plugin is away = %+v, %v; want a retry after a backoff", res, err)
			}
			uid := kube.RuntimeUID(pod)
			if got := x.grants.Wants(uid, "app", endedID); got != nri.CauseRetry {
				t.Fatalf("Wants while the plugin is away = %q, want %q", got, nri.CauseRetry)
			}
			if q.Len() != 0 {
				t.Fatalf("%d requests queued before the plugin registered again", q.Len())
			}
			calls := n.preStartCalls()

			// The plugin registers again.
			n.plugin(tc.again)
			got := nextRequest(t, q)
			if got != req {
				t.Fatalf("queued %v, want %v", got, req)
			}
			if res, err := r.Reconcile(ctx, got); err != nil || res.RequeueAfter != 0 {
				t.Fatalf("Reconcile after the plugin registered again = %+v, %v; want done", res, err)
			}
			if got := n.preStartCalls(); got != calls+1 {
				t.Errorf("%d PreStartContainer calls after the plugin registered again, want %d", got, calls+1)
			}
			if got := x.grants.Wants(uid, "app", endedID); got != nri.CauseNone {
				t.Errorf("Wants after the plugin registered again = %q, want none: the restart is granted", got)
			}
		})
	}
}

// snapshotCore is a Core that knows the resources of its snapshots.
type snapshotCore struct {
	Core
	snaps map[string]nodeagent.ResourceSnapshot
}

func (c *snapshotCore) Snapshot(resource string) (nodeagent.ResourceSnapshot, bool) {
	s, ok := c.snaps[resource]
	return s, ok
}

func (c *snapshotCore) PreStartRequired(resource string) (required, known bool) {
	s, ok := c.snaps[resource]
	return s.Options.PreStartRequired, ok && s.Registration != 0
}

// TestRegistered tells a plugin's registration from the other changes of a resource: only a new
// serving connection of a resource whose plugin requires PreStartContainer is one.
func TestRegistered(t *testing.T) {
	const plain = "example.com/plain"
	core := &snapshotCore{snaps: map[string]nodeagent.ResourceSnapshot{}}
	x := &Injection{opts: Options{Core: core}, grants: nri.NewGrants(nil)}
	r := &preStartReconciler{Injection: x}
	x.RestorePreStartRequired(gopher)
	serving := map[string]uint64{}
	set := func(res string, registration uint64, preStart bool) {
		core.snaps[res] = nodeagent.ResourceSnapshot{ResourceName: res, Registration: registration, Options: nodeagent.PluginOptions{PreStartRequired: preStart}}
	}
	for _, step := range []struct {
		name    string
		change  func()
		changed []string
		want    []string
	}{{
		name:    "restored, the plugin not back",
		change:  func() { set(gopher, 0, false) },
		changed: []string{gopher},
	}, {
		name:    "the plugin registers",
		change:  func() { set(gopher, 3, true) },
		changed: []string{gopher},
		want:    []string{gopher},
	}, {
		name:    "its devices change",
		change:  func() {},
		changed: []string{gopher},
	}, {
		name:    "the plugin of a resource that does not require PreStartContainer registers",
		change:  func() { set(plain, 4, false) },
		changed: []string{plain},
	}, {
		name:    "the plugin disconnects",
		change:  func() { set(gopher, 0, true) },
		changed: []string{gopher},
	}, {
		name:    "the plugin registers again",
		change:  func() { set(gopher, 5, true) },
		changed: []string{gopher, plain},
		want:    []string{gopher},
	}, {
		name:    "a new plugin takes over the socket before the old stream ended",
		change:  func() { set(gopher, 6, true) },
		changed: []string{gopher},
		want:    []string{gopher},
	}} {
		step.change()
		if diff := cmp.Diff(step.want, r.registered(step.changed, serving)); diff != "" {
			t.Errorf("%s: registered (-want +got):\n%s", step.name, diff)
		}
	}
}
