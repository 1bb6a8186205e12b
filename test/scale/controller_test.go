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

package scale

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
	kdcontroller "github.com/kubedevice/kubedevice/internal/controller"
	"github.com/kubedevice/kubedevice/internal/indexer"
)

// leaderKey is the request key of the controller's leader election: its Lease and its Events.
const leaderKey = "leader-election"

// discoveryKey is the request key of API discovery (/api, /apis).
const discoveryKey = "discovery"

// apiCounter counts the requests a controller sends to the API server, by verb and resource
// ("PATCH nodes/status", "LIST nodedevices", "WATCH leases", ...).
type apiCounter struct {
	mu     sync.Mutex
	counts map[string]int
}

func (c *apiCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		c.mu.Lock()
		c.counts[requestKey(req)]++
		c.mu.Unlock()
		return rt.RoundTrip(req)
	})
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// requestKey names a request by verb and resource, from its path:
// /api/v1/[namespaces/<ns>/]<resource>[/<name>[/<subresource>]], or /apis/<group>/<version>/...
func requestKey(req *http.Request) string {
	parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	core := false
	switch {
	case len(parts) > 2 && parts[0] == "api":
		parts = parts[2:]
		core = true
	case len(parts) > 3 && parts[0] == "apis":
		parts = parts[3:]
	default:
		return discoveryKey
	}
	if len(parts) > 2 && parts[0] == "namespaces" {
		parts = parts[2:]
	}
	verb := req.Method
	switch {
	case verb == http.MethodGet && req.URL.Query().Get("watch") == "true":
		verb = "WATCH"
	case verb == http.MethodGet && len(parts) == 1:
		verb = "LIST"
	}
	// The controller reads agent Leases from its cache: any other Lease request, its creation
	// included, is its leader election's.
	if parts[0] == "leases" && verb != "LIST" && verb != "WATCH" {
		return leaderKey
	}
	// The reconcilers record events.k8s.io Events; core Events come from the leader election
	// ("became leader").
	if core && parts[0] == "events" && verb != http.MethodGet {
		return leaderKey
	}
	resource := parts[0]
	if len(parts) > 2 {
		resource += "/" + parts[2]
	}
	return verb + " " + resource
}

// snapshot returns a copy of the counts.
func (c *apiCounter) snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.counts)
}

// requestCounts are counts of requests by key.
type requestCounts map[string]int

// since returns the counts of c minus those of before.
func (c requestCounts) since(before requestCounts) requestCounts {
	out := requestCounts{}
	for k, v := range c {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

// writes sums the requests that change something, but the leader election's.
func (c requestCounts) writes() int {
	n := 0
	for k, v := range c {
		if k != leaderKey && k != discoveryKey && !isRead(k) {
			n += v
		}
	}
	return n
}

// reads sums the GET and LIST requests.
func (c requestCounts) reads() int {
	n := 0
	for k, v := range c {
		if strings.HasPrefix(k, "GET ") || strings.HasPrefix(k, "LIST ") {
			n += v
		}
	}
	return n
}

func isRead(key string) bool {
	return strings.HasPrefix(key, "GET ") || strings.HasPrefix(key, "LIST ") || strings.HasPrefix(key, "WATCH ")
}

func (c requestCounts) String() string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(c)) {
		fmt.Fprintf(&b, "%s=%d ", k, c[k])
	}
	return strings.TrimSpace(b.String())
}

// readRecorder is the controller's client: it records which Nodes and NodeDevices the
// reconcilers read. The node-capacity reconciler starts by getting its Node, the NodeDevice
// reconciler its NodeDevice, and nothing else gets either, so the records say which objects have
// been reconciled.
type readRecorder struct {
	client.Client

	mu          sync.Mutex
	nodes       map[string]struct{}
	nodeDevices map[string]struct{}
	nodeGets    int
	ndGets      int
}

func (r *readRecorder) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	r.mu.Lock()
	switch obj.(type) {
	case *corev1.Node:
		r.nodes[key.Name] = struct{}{}
		r.nodeGets++
	case *kdv1alpha1.NodeDevice:
		r.nodeDevices[key.Name] = struct{}{}
		r.ndGets++
	}
	r.mu.Unlock()
	return r.Client.Get(ctx, key, obj, opts...)
}

// controllerOptions are the knobs a benchmark sets on the controller.
type controllerOptions struct {
	// qps and burst are the client's rate limits (--kube-api-qps, --kube-api-burst).
	qps   float32
	burst int
	// leaseDuration is --agent-lease-duration.
	leaseDuration time.Duration
}

// runningController is a controller manager running in the benchmark's process.
type runningController struct {
	counter  *apiCounter
	recorder *readRecorder
	// reconcilesAtStart are the reconcile totals of the two reconcilers before it started.
	nodeReconcilesAtStart, ndReconcilesAtStart float64
	cancel                                     context.CancelFunc
	done                                       chan error
}

// startController runs the controller as cmd/kubedevice-controller wires it (leader election,
// the cache options, the field indexes), as its service account.
func (e *env) startController(opts controllerOptions) (*runningController, error) {
	rc := &runningController{
		counter: &apiCounter{counts: map[string]int{}},
		recorder: &readRecorder{
			nodes:       map[string]struct{}{},
			nodeDevices: map[string]struct{}{},
		},
		done: make(chan error, 1),
	}
	cfg := e.controllerConfig()
	cfg.QPS, cfg.Burst = opts.qps, opts.burst
	cfg.Wrap(rc.counter.wrap)
	kdOpts := kdcontroller.Options{AgentNamespace: agentNamespace, AgentLeaseDuration: opts.leaseDuration, Workers: e.workers}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                        e.testEnv.Scheme,
		Metrics:                       metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress:        "0",
		LeaderElection:                true,
		LeaderElectionID:              kdcontroller.LeaderElectionID,
		LeaderElectionNamespace:       agentNamespace,
		LeaderElectionReleaseOnCancel: true,
		Cache:                         kdcontroller.CacheOptions(kdOpts),
		Controller:                    config.Controller{SkipNameValidation: ptr.To(true)},
		NewClient: func(cfg *rest.Config, o client.Options) (client.Client, error) {
			c, err := client.New(cfg, o)
			rc.recorder.Client = c
			return rc.recorder, err
		},
	})
	if err != nil {
		return nil, fmt.Errorf("creating the manager: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rc.cancel = cancel
	if err := indexer.Setup(ctx, mgr.GetFieldIndexer()); err != nil {
		cancel()
		return nil, err
	}
	if err := kdcontroller.Setup(mgr, kdOpts); err != nil {
		cancel()
		return nil, err
	}
	rc.nodeReconcilesAtStart = reconcileTotal("node-capacity")
	rc.ndReconcilesAtStart = reconcileTotal("nodedevice")
	go func() { rc.done <- mgr.Start(ctx) }()
	return rc, nil
}

// stop stops the controller and waits for it, releasing its leader Lease.
func (rc *runningController) stop() error {
	rc.cancel()
	select {
	case err := <-rc.done:
		return err
	case <-time.After(time.Minute):
		return fmt.Errorf("the controller did not stop within a minute")
	}
}

// requests returns the requests the controller has sent so far.
func (rc *runningController) requests() requestCounts { return rc.counter.snapshot() }

// fullyReconciled reports whether every Node and NodeDevice of cl has been reconciled and no
// reconcile is running: each reconcile that got its object has finished.
func (rc *runningController) fullyReconciled(cl *cluster) bool {
	rc.recorder.mu.Lock()
	nodes, nds := len(rc.recorder.nodes), len(rc.recorder.nodeDevices)
	nodeGets, ndGets := rc.recorder.nodeGets, rc.recorder.ndGets
	rc.recorder.mu.Unlock()
	return nodes == cl.p.nodes && nds == len(cl.nodeDevices) &&
		int(reconcileTotal("node-capacity")-rc.nodeReconcilesAtStart) == nodeGets &&
		int(reconcileTotal("nodedevice")-rc.ndReconcilesAtStart) == ndGets
}

// reconciles returns the reconciles of both reconcilers since the controller started.
func (rc *runningController) reconciles() float64 {
	return reconcileTotal("node-capacity") - rc.nodeReconcilesAtStart + reconcileTotal("nodedevice") - rc.ndReconcilesAtStart
}

// reconcileTotal is controller_runtime_reconcile_total of the named controller, over every
// manager the process has run.
func reconcileTotal(controller string) float64 {
	families, err := metrics.Registry.Gather()
	if err != nil {
		return 0
	}
	var sum float64
	for _, f := range families {
		if f.GetName() != "controller_runtime_reconcile_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "controller" && l.GetValue() == controller {
					sum += m.GetCounter().GetValue()
				}
			}
		}
	}
	return sum
}
