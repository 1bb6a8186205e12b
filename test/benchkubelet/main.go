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

// Command benchkubelet runs the kubelet's device manager (ManagerImpl of
// k8s.io/kubernetes, with the kubelet's own stub plugin over a unix socket
// and its checkpoint on disk) and kubedevice's core on the same workload,
// interleaved in one run, and prints one table (make bench-kubelet).
//
// The workload: one resource of N devices; pods of one container asking for
// k devices, allocated one after another; each previous pod freed after the
// next allocation. The kubelet frees inside its next Allocate (its active
// pods are the current pod alone); kubedevice frees with
// UpdateAllocatedDevices. Both use the kubelet's stub plugin.
//
// The kubelet's manager listens on /var/lib/kubelet/device-plugins/kubelet.sock,
// a path its constructor does not let a caller change, so the command must
// run in a mount namespace of its own with a scratch directory bound over
// /var/lib (the Makefile target does so with unshare): it refuses to run
// otherwise, rather than touch a real kubelet's directory.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"k8s.io/kubernetes/pkg/kubelet/cm/containermap"
	"k8s.io/kubernetes/pkg/kubelet/cm/devicemanager"
	plugin "k8s.io/kubernetes/pkg/kubelet/cm/devicemanager/plugin/v1beta1"
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager"
	"k8s.io/kubernetes/pkg/kubelet/lifecycle"

	"github.com/kubedevice/kubedevice/internal/nodeagent"
)

const resourceName = "example.com/gopher"

type workload struct{ devices, perPod int }

func main() {
	var (
		cases   = flag.String("cases", "128x1,1024x8,10000x1", "Workloads, devices x devices per pod, comma-separated.")
		cycles  = flag.Int("cycles", 300, "Allocations per run.")
		runs    = flag.Int("runs", 3, "Runs per workload, each the kubelet then kubedevice or the other way round.")
		scratch = flag.String("scratch", "", "A scratch directory on the disk to benchmark (both checkpoints go there); required.")
	)
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	flag.Parse()
	// Both managers log every registration and allocation; the table is the output.
	for name, value := range map[string]string{"logtostderr": "false", "alsologtostderr": "false", "stderrthreshold": "FATAL"} {
		if err := klogFlags.Set(name, value); err != nil {
			fmt.Fprintln(os.Stderr, "benchkubelet:", err)
			os.Exit(1)
		}
	}
	klog.SetOutput(devNull{})
	if err := run(*cases, *cycles, *runs, *scratch); err != nil {
		fmt.Fprintln(os.Stderr, "benchkubelet:", err)
		os.Exit(1)
	}
}

type devNull struct{}

func (devNull) Write(p []byte) (int, error) { return len(p), nil }

func parseCases(s string) ([]workload, error) {
	var out []workload
	for _, c := range strings.Split(s, ",") {
		d, k, ok := strings.Cut(strings.TrimSpace(c), "x")
		n, err1 := strconv.Atoi(d)
		per, err2 := strconv.Atoi(k)
		if !ok || err1 != nil || err2 != nil || n < 2*per || per < 1 {
			return nil, fmt.Errorf("workload %q: want <devices>x<per pod> with devices ≥ 2 × per pod", c)
		}
		out = append(out, workload{n, per})
	}
	return out, nil
}

// result is one run: allocation latencies and cycles per second.
type result struct {
	lat    []time.Duration
	cycles float64
}

func run(casesFlag string, cycles, runs int, scratch string) error {
	cases, err := parseCases(casesFlag)
	if err != nil {
		return err
	}
	if scratch == "" {
		return errors.New("--scratch is required")
	}
	if err := checkPrivateVarLib(scratch); err != nil {
		return err
	}
	fmt.Printf("| devices × per pod | kubelet allocate p50 / p99 | kubedevice allocate p50 / p99 | kubelet cycles/s | kubedevice cycles/s (allocate + free) |\n")
	fmt.Printf("|---|---|---|---|---|\n")
	for _, w := range cases {
		var kube, kd []result
		for r := range runs {
			order := []func() error{
				func() error { res, err := runKubelet(w, cycles); kube = append(kube, res); return err },
				func() error { res, err := runKubedevice(w, cycles, scratch); kd = append(kd, res); return err },
			}
			if r%2 == 1 {
				slices.Reverse(order)
			}
			for _, f := range order {
				if err := f(); err != nil {
					return fmt.Errorf("%d × %d: %w", w.devices, w.perPod, err)
				}
			}
		}
		fmt.Printf("| %s × %d | %s | %s | %s | %s |\n", thousands(w.devices), w.perPod,
			latRange(kube), latRange(kd), rateRange(kube), rateRange(kd))
	}
	return nil
}

// checkPrivateVarLib refuses to run unless /var/lib is the scratch
// directory bound in a private mount namespace: the kubelet's manager
// writes to /var/lib/kubelet/device-plugins.
func checkPrivateVarLib(scratch string) error {
	marker := filepath.Join(scratch, ".benchkubelet-var-lib")
	if err := os.WriteFile(marker, nil, 0o600); err != nil {
		return err
	}
	defer os.Remove(marker)
	if _, err := os.Stat("/var/lib/.benchkubelet-var-lib"); err != nil {
		return fmt.Errorf("/var/lib is not --scratch=%s bound in a private mount namespace (run it with make bench-kubelet): %w", scratch, err)
	}
	return os.MkdirAll(pluginapi.DevicePluginPath, 0o750)
}

func pods(n, perPod int) []*v1.Pod {
	out := make([]*v1.Pod, n)
	q := *resource.NewQuantity(int64(perPod), resource.DecimalSI)
	for i := range out {
		name := fmt.Sprintf("p%d", i)
		out[i] = &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name)},
			Spec: v1.PodSpec{Containers: []v1.Container{{
				Name:      "c",
				Resources: v1.ResourceRequirements{Limits: v1.ResourceList{resourceName: q}, Requests: v1.ResourceList{resourceName: q}},
			}}},
		}
	}
	return out
}

func devices(n int) []*pluginapi.Device {
	out := make([]*pluginapi.Device, n)
	for i := range out {
		out[i] = &pluginapi.Device{ID: fmt.Sprintf("dev-%05d", i), Health: pluginapi.Healthy}
	}
	return out
}

func startStub(ctx context.Context, socket, registration string, n int) (*plugin.Stub, error) {
	stub := plugin.NewDevicePluginStub(klog.Background(), devices(n), socket, resourceName, false, false)
	// A no-op plugin: one empty response per container, as both managers
	// require.
	stub.SetAllocFunc(func(r *pluginapi.AllocateRequest, _ map[string]*pluginapi.Device) (*pluginapi.AllocateResponse, error) {
		out := &pluginapi.AllocateResponse{}
		for range r.GetContainerRequests() {
			out.ContainerResponses = append(out.ContainerResponses, &pluginapi.ContainerAllocateResponse{})
		}
		return out, nil
	})
	if err := stub.Start(ctx); err != nil {
		return nil, fmt.Errorf("starting the stub plugin: %w", err)
	}
	if err := stub.Register(ctx, registration, resourceName, ""); err != nil {
		_ = stub.Stop(klog.Background())
		return nil, fmt.Errorf("registering the stub plugin: %w", err)
	}
	return stub, nil
}

func waitFor(what string, cond func() bool) error {
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return nil
}

type sourcesReady struct{}

func (sourcesReady) AddSource(string) {}
func (sourcesReady) AllReady() bool   { return true }

func runKubelet(w workload, cycles int) (result, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logger := klog.Background()
	if err := os.RemoveAll(pluginapi.DevicePluginPath); err != nil {
		return result{}, err
	}
	if err := os.MkdirAll(pluginapi.DevicePluginPath, 0o750); err != nil {
		return result{}, err
	}
	m, err := devicemanager.NewManagerImpl(logger, nil, topologymanager.NewFakeManager(logger))
	if err != nil {
		return result{}, err
	}
	var current *v1.Pod
	active := func() []*v1.Pod {
		if current == nil {
			return nil
		}
		return []*v1.Pod{current}
	}
	if err := m.Start(logger, active, sourcesReady{}, containermap.ContainerMap{}, sets.New[string]()); err != nil {
		return result{}, err
	}
	defer func() { _ = m.Stop(logger) }()
	stub, err := startStub(ctx, filepath.Join(pluginapi.DevicePluginPath, "gopher.sock"), pluginapi.KubeletSocket, w.devices)
	if err != nil {
		return result{}, err
	}
	defer func() { _ = stub.Stop(klog.Background()) }()
	if err := waitFor("the kubelet's capacity", func() bool {
		_, alloc, _ := m.GetCapacity(logger)
		q := alloc[resourceName]
		return q.Value() == int64(w.devices)
	}); err != nil {
		return result{}, err
	}
	ps := pods(cycles, w.perPod)
	lat := make([]time.Duration, 0, cycles)
	start := time.Now()
	for _, p := range ps {
		current = p
		t0 := time.Now()
		if err := m.Allocate(ctx, p, &p.Spec.Containers[0], lifecycle.AddOperation); err != nil {
			return result{}, fmt.Errorf("kubelet Allocate: %w", err)
		}
		lat = append(lat, time.Since(t0))
	}
	return result{lat: lat, cycles: float64(cycles) / time.Since(start).Seconds()}, nil
}

func runKubedevice(w workload, cycles int, scratch string) (result, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir, err := os.MkdirTemp(scratch, "kubedevice-")
	if err != nil {
		return result{}, err
	}
	defer os.RemoveAll(dir)
	// Plugin sockets need a short path (108 bytes).
	sockDir, err := os.MkdirTemp("", "kd")
	if err != nil {
		return result{}, err
	}
	defer os.RemoveAll(sockDir)
	cfg := nodeagent.Config{
		PluginDir:  sockDir,
		StateDir:   dir,
		Registerer: prometheus.NewRegistry(),
	}
	m, err := nodeagent.New(cfg)
	if err != nil {
		return result{}, err
	}
	if err := m.Start(klog.NewContext(ctx, klog.Background())); err != nil {
		return result{}, err
	}
	defer m.Stop()
	stub, err := startStub(ctx, filepath.Join(sockDir, "gopher.sock"), m.SocketPath(), w.devices)
	if err != nil {
		return result{}, err
	}
	defer func() { _ = stub.Stop(klog.Background()) }()
	if err := waitFor("kubedevice's capacity", func() bool {
		s, ok := m.Snapshot(resourceName)
		return ok && s.Allocatable == w.devices
	}); err != nil {
		return result{}, err
	}
	ps := pods(cycles, w.perPod)
	lat := make([]time.Duration, 0, cycles)
	start := time.Now()
	for _, p := range ps {
		t0 := time.Now()
		if err := m.AllocatePod(ctx, p); err != nil {
			return result{}, fmt.Errorf("kubedevice AllocatePod: %w", err)
		}
		lat = append(lat, time.Since(t0))
		if err := m.UpdateAllocatedDevices(ctx, []*v1.Pod{p}); err != nil {
			return result{}, fmt.Errorf("kubedevice UpdateAllocatedDevices: %w", err)
		}
	}
	return result{lat: lat, cycles: float64(cycles) / time.Since(start).Seconds()}, nil
}

func pct(lat []time.Duration, p float64) float64 {
	s := slices.Sorted(slices.Values(lat))
	return float64(s[min(int(float64(len(s))*p), len(s)-1)]) / float64(time.Millisecond)
}

func span(vals []float64, format string) string {
	lo, hi := slices.Min(vals), slices.Max(vals)
	if fmt.Sprintf(format, lo) == fmt.Sprintf(format, hi) {
		return fmt.Sprintf(format, lo)
	}
	return fmt.Sprintf(format+"–"+format, lo, hi)
}

func latRange(rs []result) string {
	var p50, p99 []float64
	for _, r := range rs {
		p50, p99 = append(p50, pct(r.lat, 0.5)), append(p99, pct(r.lat, 0.99))
	}
	return span(p50, "%.2f") + " / " + span(p99, "%.1f") + " ms"
}

func rateRange(rs []result) string {
	var v []float64
	for _, r := range rs {
		v = append(v, r.cycles)
	}
	return span(v, "%.0f")
}

func thousands(n int) string {
	s := strconv.Itoa(n)
	if len(s) <= 3 {
		return s
	}
	return s[:len(s)-3] + "," + s[len(s)-3:]
}
