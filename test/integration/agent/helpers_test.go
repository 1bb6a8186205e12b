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

package agent

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
	"github.com/kubedevice/kubedevice/internal/agent"
	"github.com/kubedevice/kubedevice/internal/indexer"
	"github.com/kubedevice/kubedevice/internal/nodeagent"
	"github.com/kubedevice/kubedevice/internal/nodeagent/checkpoint"
	"github.com/kubedevice/kubedevice/internal/nodeagent/dptest"
	"github.com/kubedevice/kubedevice/internal/testutil"
)

// gopher is the resource most specs publish.
const gopher corev1.ResourceName = "example.com/gopher"

var nodeCounter atomic.Int64

// uniqueName returns prefix with a suffix no other spec uses, for cluster-scoped objects.
func uniqueName(prefix string) string {
	return fmt.Sprintf("%s-%d-%d", prefix, GinkgoParallelProcess(), nodeCounter.Add(1))
}

// newNamespace creates a namespace for one spec and deletes it afterwards.
func newNamespace() string {
	GinkgoHelper()
	ns := &corev1.Namespace{}
	ns.GenerateName = "kd-"
	Expect(k8sClient.Create(ctx, ns)).To(Succeed())
	DeferCleanup(func() {
		Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, ns))).To(Succeed())
	})
	return ns.Name
}

// writeCounter counts an agent's write requests to the API server by resource, from its HTTP
// transport: what the API server sees, whatever the agent thinks it does.
type writeCounter struct {
	mu     sync.Mutex
	counts map[string]int
}

// wrap is a rest.Config WrapTransport.
func (w *writeCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		switch req.Method {
		case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
			w.mu.Lock()
			w.counts[resourceOfPath(req.URL.Path)]++
			w.mu.Unlock()
		}
		return rt.RoundTrip(req)
	})
}

// mirror is the number of writes to NodeDevices and DeviceAllocations so far: everything but the
// Lease and events.
func (w *writeCounter) mirror() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.counts["nodedevices"] + w.counts["deviceallocations"]
}

// allocations is the number of writes to DeviceAllocations so far.
func (w *writeCounter) allocations() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.counts["deviceallocations"]
}

// leases is the number of writes to Leases so far.
func (w *writeCounter) leases() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.counts["leases"]
}

// slices is the number of writes to ResourceSlices so far.
func (w *writeCounter) slices() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.counts["resourceslices"]
}

// resourceOfPath returns the resource of an API path: the segment after the namespace (or after
// the group version, for cluster-scoped objects).
func resourceOfPath(path string) string {
	for _, r := range []string{"nodedevices", "deviceallocations", "leases", "events", "resourceslices"} {
		if strings.Contains(path, "/"+r) {
			return r
		}
	}
	return path
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// nodeAgent is one node with its agent: a Node object, a short directory for the sockets and
// the checkpoint, and the agent running in-process with the real device manager core. The agent
// can be stopped and started again on the same directory, as a restarted DaemonSet pod.
type nodeAgent struct {
	name   string
	dir    string
	grace  time.Duration
	writes *writeCounter

	node *corev1.Node
	dm   *nodeagent.Manager
	stop func()
	// options adjust the agent's options; core adjusts the core's configuration.
	options []func(*agent.Options)
	core    func(*nodeagent.Config)
	// apiHost, when set, is where the agent reaches the API server (a proxy the spec can cut).
	apiHost string
	// labels are the Node's labels when it is created.
	labels map[string]string
	// logs holds what the agent's managers logged, as they also write it to GinkgoWriter.
	logs *logBuffer
}

// logBuffer is a log sink safe for the managers' concurrent writes.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns what was logged so far.
func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// newNodeAgent creates a Node and starts its agent with the given endpoint grace period (0: the
// default) and options; both go away after the spec.
func newNodeAgent(grace time.Duration, options ...func(*agent.Options)) *nodeAgent {
	GinkgoHelper()
	return newNodeAgentWith(grace, nil, options...)
}

// newNodeAgentWith is newNodeAgent with setup (if not nil) applied to the nodeAgent before its
// agent first starts: to set its core's configuration, its Node's labels or where it reaches the
// API server.
func newNodeAgentWith(grace time.Duration, setup func(*nodeAgent), options ...func(*agent.Options)) *nodeAgent {
	GinkgoHelper()
	dir, err := os.MkdirTemp("", "kd")
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(os.RemoveAll, dir)
	Expect(os.WriteFile(filepath.Join(dir, "boot_id"), []byte("3d1c6a3e-6a5f-4f7e-9d2c-1b2a3c4d5e6f\n"), 0o600)).To(Succeed())

	n := &nodeAgent{name: uniqueName("node"), dir: dir, grace: grace, writes: &writeCounter{counts: map[string]int{}}, options: options, logs: &logBuffer{}}
	if setup != nil {
		setup(n)
	}
	node := testutil.MakeNode(n.name)
	for k, v := range n.labels {
		node.Label(k, v)
	}
	n.node = node.Obj()
	Expect(k8sClient.Create(ctx, n.node)).To(Succeed())
	DeferCleanup(func() {
		Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, n.node))).To(Succeed())
	})
	n.start()
	DeferCleanup(func() {
		if n.stop != nil {
			n.stop()
		}
	})
	return n
}

// start runs a new agent process for the node: a new core on the node's directory and a new
// manager, as the agent's service account with the node's token claim; it returns once the agent
// is ready.
func (n *nodeAgent) start() {
	GinkgoHelper()
	Expect(n.stop).To(BeNil(), "the agent is running")
	core := nodeagent.DefaultConfig()
	core.PluginDir, core.StateDir = n.dir, n.dir
	core.PluginsRegistryDir = ""
	core.BootIDPath = filepath.Join(n.dir, "boot_id")
	core.Registerer = prometheus.NewRegistry()
	if n.grace > 0 {
		core.EndpointGracePeriod = n.grace
	}
	opts := agent.Options{NodeName: n.name, Namespace: agentNamespace}
	for _, o := range n.options {
		o(&opts)
	}
	if opts.DRAResources.Any() {
		core.ServedByDRA = opts.ServedByDRA()
		if opts.DRA.KubeletPluginsDir == "" {
			opts.DRA.KubeletPluginsDir = filepath.Join(n.dir, "plugins")
			opts.DRA.KubeletRegistryDir = filepath.Join(n.dir, "plugins_registry")
			opts.DRA.CDIDir = filepath.Join(n.dir, "cdi")
		}
	}
	if n.core != nil {
		n.core(&core)
	}
	dm, err := nodeagent.New(core)
	Expect(err).NotTo(HaveOccurred())

	asAgent := rest.CopyConfig(cfg)
	asAgent.Impersonate = rest.ImpersonationConfig{
		UserName: agentUser,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + agentNamespace, "system:authenticated"},
		Extra:    map[string][]string{nodeNameExtraKey: {n.name}},
	}
	asAgent.WrapTransport = n.writes.wrap
	if n.apiHost != "" {
		asAgent.Host = n.apiHost
	}
	mgr, err := ctrl.NewManager(asAgent, ctrl.Options{
		Scheme:                 testEnv.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  agent.CacheOptions(n.name),
		// Several agents, and restarts of one, run within the process.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
		Logger:     zap.New(zap.WriteTo(io.MultiWriter(GinkgoWriter, n.logs)), zap.UseDevMode(true)),
	})
	Expect(err).NotTo(HaveOccurred())
	Expect(indexer.Setup(ctx, mgr.GetFieldIndexer())).To(Succeed())
	a, err := agent.Setup(mgr, dm, opts)
	Expect(err).NotTo(HaveOccurred())
	n.dm = dm
	n.stop = runManager(mgr)
	Eventually(func() error { return a.ReadyCheck(nil) }).Should(Succeed(), "the agent did not become ready")
}

// restart stops the agent and starts a new one on the same directory.
func (n *nodeAgent) restart() {
	GinkgoHelper()
	n.stop()
	n.stop = nil
	n.start()
}

// regSocket is the agent's registration socket.
func (n *nodeAgent) regSocket() string { return filepath.Join(n.dir, "kubelet.sock") }

// checkpointPath is the core's checkpoint file.
func (n *nodeAgent) checkpointPath() string { return filepath.Join(n.dir, checkpoint.DefaultFileName) }

// plugin starts a stub device plugin for resource with devs on the node's directory, answering
// Allocate with envAllocator. It is not registered yet; it stops after the spec.
func (n *nodeAgent) plugin(resource corev1.ResourceName, devs []*pluginapi.Device) *dptest.Plugin {
	GinkgoHelper()
	name := strings.NewReplacer("/", "-", ".", "-").Replace(string(resource))
	p := dptest.New(filepath.Join(n.dir, name+".sock"), string(resource), devs)
	p.SetAllocateFunc(envAllocator)
	Expect(p.Start()).To(Succeed())
	DeferCleanup(p.Stop)
	return p
}

// restartPlugin stops the gopher plugin p and starts and registers a new one with devs on the
// same socket, as a device plugin does when the agent restarts (the agent removes the sockets a
// previous run left, as the kubelet does), and returns the new one.
func (n *nodeAgent) restartPlugin(p *dptest.Plugin, devs []*pluginapi.Device) *dptest.Plugin {
	GinkgoHelper()
	p.Stop()
	np := n.plugin(gopher, devs)
	n.register(np)
	return np
}

// register registers p with the agent.
func (n *nodeAgent) register(p *dptest.Plugin) {
	GinkgoHelper()
	Expect(p.Register(ctx, n.regSocket())).To(Succeed())
}

// nodeDevice returns the shard of the node's NodeDevice for resource, as the API server has it.
func (n *nodeAgent) nodeDevice(resource corev1.ResourceName, shard int) func() (*kdv1alpha1.NodeDevice, error) {
	return func() (*kdv1alpha1.NodeDevice, error) {
		nd := &kdv1alpha1.NodeDevice{}
		err := k8sClient.Get(ctx, client.ObjectKey{Name: agent.NodeDeviceName(n.name, string(resource), shard)}, nd)
		return nd, err
	}
}

// nodeDevices lists the node's NodeDevices, by the field selector the agent's cache uses.
func (n *nodeAgent) nodeDevices() ([]kdv1alpha1.NodeDevice, error) {
	list := &kdv1alpha1.NodeDeviceList{}
	err := k8sClient.List(ctx, list, client.MatchingFields{"spec.nodeName": n.name})
	return list.Items, err
}

// gophers returns n healthy devices prefix-0 … prefix-(n-1).
func gophers(prefix string, count int) []*pluginapi.Device {
	devs := make([]*pluginapi.Device, count)
	for i := range devs {
		devs[i] = dptest.Device(fmt.Sprintf("%s-%d", prefix, i), pluginapi.Healthy)
	}
	return devs
}

// envAllocator answers Allocate with one env per container request naming its devices.
func envAllocator(req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for _, cr := range req.GetContainerRequests() {
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerAllocateResponse{
			Envs: map[string]string{"GOPHER_VISIBLE_DEVICES": strings.Join(cr.GetDevicesIds(), ",")},
		})
	}
	return resp, nil
}

// createPod creates a pod and returns it as created (with its UID).
func createPod(w *testutil.PodWrapper) *corev1.Pod {
	GinkgoHelper()
	pod := w.Obj()
	Expect(k8sClient.Create(ctx, pod)).To(Succeed())
	return pod
}

// deletePod deletes a pod at once, as the kubelet does once its containers are gone (envtest
// has no kubelet to finish a graceful deletion).
func deletePod(pod *corev1.Pod) {
	GinkgoHelper()
	Expect(k8sClient.Delete(ctx, pod, client.GracePeriodSeconds(0))).To(Succeed())
}

// deviceAllocation returns the pod's DeviceAllocation as the API server has it.
func deviceAllocation(pod *corev1.Pod) func() (*kdv1alpha1.DeviceAllocation, error) {
	return func() (*kdv1alpha1.DeviceAllocation, error) {
		da := &kdv1alpha1.DeviceAllocation{}
		err := k8sClient.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: agent.DeviceAllocationName(pod.Spec.NodeName, pod.Name, string(pod.UID))}, da)
		return da, err
	}
}

// allocated waits until the pod's DeviceAllocation says Allocated=True and returns it.
func allocated(pod *corev1.Pod) *kdv1alpha1.DeviceAllocation {
	GinkgoHelper()
	var da *kdv1alpha1.DeviceAllocation
	Eventually(func(g Gomega) {
		var err error
		da, err = deviceAllocation(pod)()
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(meta.IsStatusConditionTrue(da.Status.Conditions, kdv1alpha1.DeviceAllocationAllocated)).To(BeTrue(), "Allocated")
	}).Should(Succeed())
	return da
}

// deviceIDs returns the devices of resource the allocation lists, over all containers.
func deviceIDs(da *kdv1alpha1.DeviceAllocation, resource corev1.ResourceName) []string {
	var ids []string
	for _, c := range da.Status.Containers {
		for _, r := range c.Resources {
			if r.ResourceName == string(resource) {
				ids = append(ids, r.DeviceIDs...)
			}
		}
	}
	return ids
}

// gone reports whether get finds nothing.
func gone[T any](get func() (T, error)) func() bool {
	return func() bool {
		_, err := get()
		return apierrors.IsNotFound(err)
	}
}

// holds reports whether the core holds devices for pod.
func (n *nodeAgent) holds(pod *corev1.Pod) bool {
	_, ok := n.dm.PodAllocation(string(pod.UID))
	return ok
}

// eventsFor lists the events.k8s.io Events about the object with uid.
func eventsFor(uid types.UID) func() ([]eventsv1.Event, error) {
	return func() ([]eventsv1.Event, error) {
		list := &eventsv1.EventList{}
		if err := k8sClient.List(ctx, list); err != nil {
			return nil, err
		}
		var out []eventsv1.Event
		for _, e := range list.Items {
			if e.Regarding.UID == uid {
				out = append(out, e)
			}
		}
		return out, nil
	}
}

// quiet is how long the agent must write nothing for a spec to call it settled: longer than a
// NodeDevice's write interval and settle time together.
const quiet = 1500 * time.Millisecond

// settle waits until the agent has written nothing to NodeDevices and DeviceAllocations for
// quiet, and returns the number of writes so far.
func (n *nodeAgent) settle() int {
	GinkgoHelper()
	last, since := n.writes.mirror(), time.Now()
	Eventually(func() bool {
		if w := n.writes.mirror(); w != last {
			last, since = w, time.Now()
		}
		return time.Since(since) >= quiet
	}).WithTimeout(quiet + 20*time.Second).Should(BeTrue())
	return last
}

// loadManifests reads the Kubernetes objects of the YAML files at paths, relative to the
// repository root.
func loadManifests(paths ...string) []*unstructured.Unstructured {
	GinkgoHelper()
	objs, err := testutil.LoadManifests(paths...)
	Expect(err).NotTo(HaveOccurred())
	return objs
}

// cutProxy forwards TCP connections to the API server until it is cut: then it closes every
// connection and stops listening, so the agent behind it finds the API server unreachable, until
// it is restored on the same address.
type cutProxy struct {
	target, addr string
	mu           sync.Mutex
	ln           net.Listener
	conns        map[net.Conn]struct{}
}

// newCutProxy starts a proxy to the API server of cfg and returns it; it stops after the spec.
func newCutProxy() *cutProxy {
	GinkgoHelper()
	u, err := url.Parse(cfg.Host)
	Expect(err).NotTo(HaveOccurred())
	p := &cutProxy{target: u.Host, conns: map[net.Conn]struct{}{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	Expect(err).NotTo(HaveOccurred())
	p.addr = ln.Addr().String()
	p.serve(ln)
	DeferCleanup(p.cut)
	return p
}

// host is the proxy's address as a rest.Config Host.
func (p *cutProxy) host() string { return "https://" + p.addr }

func (p *cutProxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			if p.ln != ln {
				p.mu.Unlock()
				c.Close()
				up.Close()
				return
			}
			p.conns[c], p.conns[up] = struct{}{}, struct{}{}
			p.mu.Unlock()
			go func() { _, _ = io.Copy(up, c); up.Close() }()
			go func() { _, _ = io.Copy(c, up); c.Close() }()
		}
	}()
}

// cut closes the listener and every connection.
func (p *cutProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

// restore listens again on the same address.
func (p *cutProxy) restore() {
	GinkgoHelper()
	var ln net.Listener
	Eventually(func() (err error) {
		ln, err = net.Listen("tcp", p.addr)
		return err
	}).Should(Succeed())
	p.serve(ln)
}
