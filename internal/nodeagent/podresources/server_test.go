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
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	promtestutil "github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/kubedevice/kubedevice/internal/nodeagent/dptest"
	"github.com/kubedevice/kubedevice/internal/testutil"
)

// node is a test node: a real core with three plugins, and the pods bound to it.
//
//	example.com/gopher:   a0 (NUMA 0), a1 (NUMA 0 and 1)
//	example.com/beaver:   b0 (no topology)
//	example.com/capybara: c0 (NUMA 1)
//
// trainer: a regular init container holding both gophers (reused by app), a sidecar with the
// beaver, app, and idle asking for nothing. plain asks for nothing. done held the capybara and
// Succeeded; the agent has not freed it yet.
type node struct {
	core                   interface{ DevicesProvider }
	pods                   *fakePods
	trainer, plain, done   *corev1.Pod
	holdsDone              func() bool
	wantTrainer, wantPlain *podresourcesapi.PodResources
}

func newNode(t *testing.T) *node {
	t.Helper()
	core := newCore(t)
	startPlugin(t, core, resA, dptest.Device("a0", pluginapi.Healthy, 0), dptest.Device("a1", pluginapi.Healthy, 0, 1))
	startPlugin(t, core, resB, dptest.Device("b0", pluginapi.Healthy))
	startPlugin(t, core, resC, dptest.Device("c0", pluginapi.Healthy, 1))

	n := &node{core: core, pods: &fakePods{}}
	n.trainer = testutil.MakePod("trainer", "ml").UID("uid-trainer").Request(resA, 2).Container("idle").
		InitContainer("setup", resA, 2).SidecarContainer("logger", resB, 1).Obj()
	n.plain = testutil.MakePod("plain", "web").UID("uid-plain").Obj()
	n.done = testutil.MakePod("done", "ml").UID("uid-done").Request(resC, 1).Obj()
	for _, p := range []*corev1.Pod{n.trainer, n.plain, n.done} {
		allocate(t, core, p)
	}
	n.done.Status.Phase = corev1.PodSucceeded
	// Not in List's order, which sorts by namespace and name.
	n.pods.set(n.plain, n.done, n.trainer)
	n.holdsDone = func() bool { _, ok := core.PodAllocation("uid-done"); return ok }

	n.wantTrainer = podRes(n.trainer,
		ctr("logger", dev(resB, "b0", -1)),
		ctr("app", dev(resA, "a0", 0), dev(resA, "a1", 0), dev(resA, "a1", 1)),
		ctr("idle"),
	)
	n.wantPlain = podRes(n.plain, ctr("app"))
	return n
}

func TestList(t *testing.T) {
	n := newNode(t)
	_, c := serve(t, n.pods, n.core, Options{})

	got, err := c.List(callCtx(t), &podresourcesapi.ListPodResourcesRequest{})
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	want := &podresourcesapi.ListPodResourcesResponse{PodResources: []*podresourcesapi.PodResources{n.wantTrainer, n.wantPlain}}
	if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}
	if !n.holdsDone() {
		t.Error("List freed the devices of the terminal pod: a read must not change the core's state")
	}
}

func TestGet(t *testing.T) {
	n := newNode(t)
	_, c := serve(t, n.pods, n.core, Options{})

	for name, tc := range map[string]struct {
		namespace, pod string
		want           *podresourcesapi.PodResources
	}{
		"pod with devices":                {namespace: "ml", pod: "trainer", want: n.wantTrainer},
		"pod without devices":             {namespace: "web", pod: "plain", want: n.wantPlain},
		"terminal pod, devices not shown": {namespace: "ml", pod: "done", want: podRes(n.done, ctr("app"))},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := c.Get(callCtx(t), &podresourcesapi.GetPodResourcesRequest{PodNamespace: tc.namespace, PodName: tc.pod})
			if err != nil {
				t.Fatalf("Get: %v", err)
			}
			if diff := cmp.Diff(&podresourcesapi.GetPodResourcesResponse{PodResources: tc.want}, got, protocmp.Transform()); diff != "" {
				t.Errorf("Get (-want +got):\n%s", diff)
			}
		})
	}

	for name, tc := range map[string]struct{ namespace, pod string }{
		"unknown pod":              {namespace: "ml", pod: "nope"},
		"pod in another namespace": {namespace: "web", pod: "trainer"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := c.Get(callCtx(t), &podresourcesapi.GetPodResourcesRequest{PodNamespace: tc.namespace, PodName: tc.pod})
			st, _ := status.FromError(err)
			wantMsg := fmt.Sprintf("pod %s in namespace %s not found", tc.pod, tc.namespace)
			if st.Code() != codes.NotFound || st.Message() != wantMsg {
				t.Errorf("Get: got %v, want code NotFound and message %q", err, wantMsg)
			}
		})
	}
	if !n.holdsDone() {
		t.Error("Get freed the devices of the terminal pod: a read must not change the core's state")
	}
}

func TestGetAllocatableResources(t *testing.T) {
	core := newCore(t)
	startPlugin(t, core, resA,
		dptest.Device("a0", pluginapi.Healthy, 0), dptest.Device("a1", pluginapi.Healthy, 0, 1),
		dptest.Device("a2", pluginapi.Unhealthy, 1), dptest.Device("a3", pluginapi.Healthy, 1))
	startPlugin(t, core, resB, dptest.Device("b0", pluginapi.Healthy), dptest.Device("b1", pluginapi.Healthy))
	core.SetCordons(resA, []string{"a3"})
	// An allocated device is still allocatable: the API answers with capacity, not free devices.
	holder := testutil.MakePod("holder", "ml").UID("uid-holder").Request(resB, 2).Obj()
	allocate(t, core, holder)
	_, c := serve(t, &fakePods{}, core, Options{})

	got, err := c.GetAllocatableResources(callCtx(t), &podresourcesapi.AllocatableResourcesRequest{})
	if err != nil {
		t.Fatalf("GetAllocatableResources: %v", err)
	}
	// Sorted by resource name: beaver before gopher.
	want := &podresourcesapi.AllocatableResourcesResponse{Devices: []*podresourcesapi.ContainerDevices{
		dev(resB, "b0", -1), dev(resB, "b1", -1),
		dev(resA, "a0", 0), dev(resA, "a1", 0), dev(resA, "a1", 1),
	}}
	if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
		t.Errorf("GetAllocatableResources (-want +got):\n%s", diff)
	}
}

func TestRateLimit(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC))
	reg := prometheus.NewRegistry()
	s, c := serve(t, &fakePods{}, newCore(t), Options{Clock: clk, Registerer: reg})

	for i := range DefaultBurst {
		if _, err := c.List(callCtx(t), &podresourcesapi.ListPodResourcesRequest{}); err != nil {
			t.Fatalf("List %d within the burst: %v", i, err)
		}
	}
	rejected := func(call string, err error) {
		t.Helper()
		st, _ := status.FromError(err)
		if st.Code() != codes.ResourceExhausted || st.Message() != "rejected by rate limit" {
			t.Errorf("%s beyond the burst: got %v, want ResourceExhausted \"rejected by rate limit\"", call, err)
		}
	}
	_, err := c.List(callCtx(t), &podresourcesapi.ListPodResourcesRequest{})
	rejected("List", err)
	_, err = c.GetAllocatableResources(callCtx(t), &podresourcesapi.AllocatableResourcesRequest{})
	rejected("GetAllocatableResources", err)
	_, err = c.Get(callCtx(t), &podresourcesapi.GetPodResourcesRequest{PodNamespace: "ml", PodName: "nope"})
	rejected("Get", err)

	// One token comes back every 1/DefaultQPS.
	clk.Step(time.Second / DefaultQPS)
	if _, err := c.GetAllocatableResources(callCtx(t), &podresourcesapi.AllocatableResourcesRequest{}); err != nil {
		t.Errorf("GetAllocatableResources after a token came back: %v", err)
	}
	_, err = c.List(callCtx(t), &podresourcesapi.ListPodResourcesRequest{})
	rejected("List after the token was used", err)

	for _, tc := range []struct {
		c      *prometheus.CounterVec
		method string
		want   float64
	}{
		{s.metrics.requests, "List", DefaultBurst + 2},
		{s.metrics.errors, "List", 2},
		{s.metrics.requests, "GetAllocatableResources", 2},
		{s.metrics.errors, "GetAllocatableResources", 1},
		{s.metrics.requests, "Get", 1},
		{s.metrics.errors, "Get", 1},
	} {
		if got := promtestutil.ToFloat64(tc.c.WithLabelValues(APIVersion, tc.method)); got != tc.want {
			t.Errorf("%s{method=%q} = %v, want %v", prometheusName(t, tc.c), tc.method, got, tc.want)
		}
	}
	if n, err := promtestutil.GatherAndCount(reg, "kubedevice_agent_pod_resources_requests_total", "kubedevice_agent_pod_resources_errors_total"); err != nil || n != 6 {
		t.Errorf("registered series: got %d (%v), want 6", n, err)
	}
}

func prometheusName(t *testing.T, c *prometheus.CounterVec) string {
	t.Helper()
	ch := make(chan *prometheus.Desc, 1)
	c.Describe(ch)
	return (<-ch).String()
}

func TestInFlightAllocationNotVisible(t *testing.T) {
	core := newCore(t)
	p := startPlugin(t, core, resA, dptest.Device("a0", pluginapi.Healthy, 0))
	release := make(chan struct{})
	p.SetAllocateFunc(func(req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
		<-release
		return echoAllocate(req)
	})
	pod := testutil.MakePod("trainer", "ml").UID("uid-trainer").Request(resA, 1).Obj()
	pods := &fakePods{}
	pods.set(pod)
	_, c := serve(t, pods, core, Options{})

	allocated := make(chan error, 1)
	go func() {
		_, ctx := ktesting.NewTestContext(t)
		allocated <- core.AllocatePod(ctx, pod)
	}()
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	dptest.Eventually(t, waitTimeout, func() error {
		for _, call := range p.Calls() {
			if call == dptest.CallAllocate {
				return nil
			}
		}
		return errors.New("the plugin has not been asked to Allocate yet")
	})

	wantBlocked := podRes(pod, ctr("app"))
	list, err := c.List(callCtx(t), &podresourcesapi.ListPodResourcesRequest{})
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if diff := cmp.Diff([]*podresourcesapi.PodResources{wantBlocked}, list.GetPodResources(), protocmp.Transform()); diff != "" {
		t.Errorf("List while Allocate is blocked (-want +got):\n%s", diff)
	}
	get, err := c.Get(callCtx(t), &podresourcesapi.GetPodResourcesRequest{PodNamespace: "ml", PodName: "trainer"})
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	if diff := cmp.Diff(wantBlocked, get.GetPodResources(), protocmp.Transform()); diff != "" {
		t.Errorf("Get while Allocate is blocked (-want +got):\n%s", diff)
	}

	close(release)
	select {
	case err := <-allocated:
		if err != nil {
			t.Fatalf("AllocatePod: %v", err)
		}
	case <-time.After(waitTimeout):
		t.Fatal("AllocatePod did not return after the plugin answered")
	}
	list, err = c.List(callCtx(t), &podresourcesapi.ListPodResourcesRequest{})
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	want := []*podresourcesapi.PodResources{podRes(pod, ctr("app", dev(resA, "a0", 0)))}
	if diff := cmp.Diff(want, list.GetPodResources(), protocmp.Transform()); diff != "" {
		t.Errorf("List after the allocation committed (-want +got):\n%s", diff)
	}
}

// TestConcurrentCalls reads the API from several clients while pods come and go and are
// allocated and freed: run with -race. No device is ever listed for two pods.
func TestConcurrentCalls(t *testing.T) {
	const devices, rounds, readers = 4, 30, 4
	core := newCore(t)
	var devs []*pluginapi.Device
	for i := range devices {
		devs = append(devs, dptest.Device(fmt.Sprintf("a%d", i), pluginapi.Healthy, int64(i%2)))
	}
	startPlugin(t, core, resA, devs...)
	pods := &fakePods{}
	_, c := serve(t, pods, core, Options{QPS: 1e6, Burst: 1e6})

	done := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, readers)
	for r := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				list, err := c.List(callCtx(t), &podresourcesapi.ListPodResourcesRequest{})
				if err != nil {
					errs <- fmt.Errorf("reader %d: List: %w", r, err)
					return
				}
				holders := map[string]string{}
				for _, pr := range list.GetPodResources() {
					for _, cr := range pr.GetContainers() {
						for _, d := range cr.GetDevices() {
							id := d.GetDeviceIds()[0]
							if h, ok := holders[id]; ok && h != pr.GetName() {
								errs <- fmt.Errorf("reader %d: device %s listed for pods %s and %s", r, id, h, pr.GetName())
								return
							}
							holders[id] = pr.GetName()
						}
					}
				}
				if _, err := c.GetAllocatableResources(callCtx(t), &podresourcesapi.AllocatableResourcesRequest{}); err != nil {
					errs <- fmt.Errorf("reader %d: GetAllocatableResources: %w", r, err)
					return
				}
				if _, err := c.Get(callCtx(t), &podresourcesapi.GetPodResourcesRequest{PodNamespace: "ml", PodName: "p-0"}); err != nil && status.Code(err) != codes.NotFound {
					errs <- fmt.Errorf("reader %d: Get: %w", r, err)
					return
				}
			}
		}()
	}

	_, ctx := ktesting.NewTestContext(t)
	for round := range rounds {
		var active []*corev1.Pod
		for i := range devices / 2 {
			pod := testutil.MakePod(fmt.Sprintf("p-%d", i), "ml").UID(types.UID(fmt.Sprintf("uid-%d-%d", round, i))).Request(resA, 2).Obj()
			active = append(active, pod)
		}
		pods.set(active...)
		for _, pod := range active {
			if err := core.AllocatePod(ctx, pod); err != nil {
				t.Fatalf("round %d: AllocatePod %s: %v", round, pod.Name, err)
			}
		}
		pods.set()
		if err := core.UpdateAllocatedDevices(ctx, nil); err != nil {
			t.Fatalf("round %d: UpdateAllocatedDevices: %v", round, err)
		}
	}
	close(done)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestSocketLifecycle(t *testing.T) {
	core := newCore(t)
	_, logCtx := ktesting.NewTestContext(t)

	t.Run("creates the directory 0750 and removes its socket at Stop", func(t *testing.T) {
		dir := filepath.Join(dptest.ShortTempDir(t), "pod-resources")
		socket := filepath.Join(dir, "kubelet.sock")
		s, c := serve(t, &fakePods{}, core, Options{SocketPath: socket})
		fi, err := os.Stat(dir)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm()&^0o750 != 0 {
			t.Errorf("socket directory mode %v, want at most 0750", fi.Mode().Perm())
		}
		if _, err := c.List(callCtx(t), &podresourcesapi.ListPodResourcesRequest{}); err != nil {
			t.Fatalf("List: %v", err)
		}
		s.Stop()
		if _, err := os.Lstat(socket); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("after Stop: the socket is still there (%v)", err)
		}
		s.Stop() // idempotent
	})

	t.Run("replaces a stale socket", func(t *testing.T) {
		socket := filepath.Join(dptest.ShortTempDir(t), "kubelet.sock")
		l, err := net.Listen("unix", socket)
		if err != nil {
			t.Fatal(err)
		}
		l.(*net.UnixListener).SetUnlinkOnClose(false)
		l.Close()
		_, c := serve(t, &fakePods{}, core, Options{SocketPath: socket})
		if _, err := c.List(callCtx(t), &podresourcesapi.ListPodResourcesRequest{}); err != nil {
			t.Fatalf("List over the replaced socket: %v", err)
		}
	})

	t.Run("refuses a path that is not a socket", func(t *testing.T) {
		socket := filepath.Join(dptest.ShortTempDir(t), "kubelet.sock")
		if err := os.WriteFile(socket, []byte("data"), 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := New(&fakePods{}, core, Options{SocketPath: socket})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Start(logCtx); err == nil {
			s.Stop()
			t.Fatal("Start over a regular file: got no error")
		}
		if data, err := os.ReadFile(socket); err != nil || string(data) != "data" {
			t.Errorf("the file at the socket path was changed: %q, %v", data, err)
		}
	})

	t.Run("leaves a successor's socket at Stop", func(t *testing.T) {
		socket := filepath.Join(dptest.ShortTempDir(t), "kubelet.sock")
		old, _ := serve(t, &fakePods{}, core, Options{SocketPath: socket})
		_, c := serve(t, &fakePods{}, core, Options{SocketPath: socket})
		old.Stop()
		if _, err := c.List(callCtx(t), &podresourcesapi.ListPodResourcesRequest{}); err != nil {
			t.Fatalf("List from the successor after the old server stopped: %v", err)
		}
	})
}

// A client calling List in a loop, as fast as it can, over its own connection, neither takes the
// other clients' share of the rate limit nor delays their calls beyond a bound: each connection
// has its own bucket (the kubelet's one bucket refuses every other client). Real clock, real unix
// socket, two connections.
func TestRateLimitPerClient(t *testing.T) {
	const (
		hammerers = 4
		calls     = 40
		interval  = 50 * time.Millisecond // 20 calls/s: well within DefaultQPS
		bound     = time.Second
	)
	n := newNode(t)
	s, hammer := serve(t, n.pods, n.core, Options{})
	victim := dial(t, s.SocketPath())

	done := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	hammered, refused := 0, 0
	for range hammerers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				_, err := hammer.List(callCtx(t), &podresourcesapi.ListPodResourcesRequest{})
				mu.Lock()
				hammered++
				if status.Code(err) == codes.ResourceExhausted {
					refused++
				}
				mu.Unlock()
			}
		}()
	}

	var worst time.Duration
	var failures []error
	for range calls {
		time.Sleep(interval)
		start := time.Now()
		resp, err := victim.List(callCtx(t), &podresourcesapi.ListPodResourcesRequest{})
		worst = max(worst, time.Since(start))
		if err != nil {
			failures = append(failures, err)
		} else if len(resp.GetPodResources()) != 2 {
			failures = append(failures, fmt.Errorf("listed %d pods, want 2", len(resp.GetPodResources())))
		}
	}
	close(done)
	wg.Wait()

	t.Logf("hammering client: %d calls, %d refused; other client: %d calls, slowest %v", hammered, refused, calls, worst)
	if refused == 0 {
		t.Fatalf("the hammering client was never refused in %d calls: it did not exceed its rate, so the test proves nothing", hammered)
	}
	if len(failures) > 0 {
		t.Errorf("%d of the other client's %d calls failed while one client hammered List, first: %v", len(failures), calls, failures[0])
	}
	if worst > bound {
		t.Errorf("the other client's slowest call took %v, want at most %v", worst, bound)
	}
}
