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

package devenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/kubedevice/kubedevice/internal/contract"
)

// Defaults of Options.
const (
	DefaultWorkDir = "bin/demo"
	DefaultTimeout = 60 * time.Second
)

const (
	// requestTimeout bounds every API call and probe.
	requestTimeout = 10 * time.Second
	// pollInterval is how often a wait looks again.
	pollInterval = 250 * time.Millisecond
)

// The binaries kubedevice dev runs: kube-scheduler from the control plane directory, the others
// from the directory of kubedevice itself (bin/ after `make build`).
const (
	schedulerName  = "kube-scheduler"
	controllerName = "kubedevice-controller"
	agentName      = "kubedevice-agent"
	pluginName     = "gopher-device-plugin"
)

var (
	errMissingBinary = errors.New("binary missing")
	errDemoFailed    = errors.New("the demo did not show what it should")
)

// Options configure kubedevice dev.
type Options struct {
	// WorkDir holds the kubeconfig, the logs, the gophers and (when its path is short enough)
	// the sockets. Default bin/demo.
	WorkDir string
	// BinDir holds kubedevice-controller, kubedevice-agent and gopher-device-plugin. Default: the
	// directory of the running executable.
	BinDir string
	// K8sBinDir holds etcd, kube-apiserver and kube-scheduler. Default: $KUBEBUILDER_ASSETS, else
	// <BinDir>/k8s.
	K8sBinDir string
	// Timeout bounds each wait. Default 60 s.
	Timeout time.Duration
	// ExitAfterDemo stops everything after the demo's tables and checks what they show.
	ExitAfterDemo bool
	// Plugins are the command lines (run with sh -c) of device plugins to run beside the Gopher,
	// pointed at the agent's plugin directory: {plugin-dir} in the command is replaced by it, and
	// KUBEDEVICE_PLUGIN_DIR and KUBEDEVICE_KUBELET_SOCKET are set. For each, the demo waits for
	// every resource it registers and creates a pod asking for one device of each. One that ends
	// while the cluster serves is reported, and the cluster keeps running.
	Plugins []string
	// PluginSockets are plugins that already run, as RESOURCE=SOCKET: each socket is linked into the
	// agent's plugin directory and registered for RESOURCE, as the plugin would register itself.
	PluginSockets []string
	// PluginMountNamespace runs the Plugins in a private mount namespace where the agent's plugin
	// directory is bind-mounted on /var/lib/kubelet/device-plugins (Linux, root), for plugins that
	// cannot be told where it is.
	PluginMountNamespace bool
	// DRA runs the agent as the DRA driver kubedevice.io for the Gopher's resource, with two
	// gophers: the demo shows the ResourceSlices and the scheduler allocating one gopher to a pod
	// with plain limits and one to a ResourceClaim, instead of the device plugin path.
	DRA bool
	// PluginDRA are resources of the Plugins and PluginSockets the agent serves through DRA
	// instead of the device plugin path: the demo shows their ResourceSlices and DeviceClass, and
	// the scheduler allocating a device to the claim of a pod with plain limits.
	PluginDRA []string
	// RestartPlugins restarts every Plugins command (stopping it if it runs) and registers every
	// PluginSockets plugin again, on each value received (kubedevice dev: SIGHUP).
	RestartPlugins <-chan os.Signal
	// Out receives the progress, the tables and the checks. Default os.Stdout.
	Out io.Writer
}

func (o Options) complete() (Options, error) {
	if o.WorkDir == "" {
		o.WorkDir = DefaultWorkDir
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Out == nil {
		o.Out = os.Stdout
	}
	if o.BinDir == "" {
		exe, err := os.Executable()
		if err != nil {
			return o, fmt.Errorf("finding the kubedevice binary's directory (pass --bin-dir): %w", err)
		}
		o.BinDir = filepath.Dir(exe)
	}
	if o.K8sBinDir == "" {
		o.K8sBinDir = os.Getenv("KUBEBUILDER_ASSETS")
	}
	if o.K8sBinDir == "" {
		o.K8sBinDir = filepath.Join(o.BinDir, "k8s")
	}
	var err error
	if o.BinDir, err = filepath.Abs(o.BinDir); err != nil {
		return o, fmt.Errorf("resolving --bin-dir: %w", err)
	}
	if o.K8sBinDir, err = filepath.Abs(o.K8sBinDir); err != nil {
		return o, fmt.Errorf("resolving --k8s-bin-dir: %w", err)
	}
	return o, nil
}

// dev is one run of kubedevice dev.
type dev struct {
	opts     Options
	l        layout
	p        *progress
	cp       *controlPlane
	comps    []*component
	c        client.Client
	rc       rest.Interface
	agentRTI bool // the agent has --runtime-injection
	// authors are the --plugin and --plugin-socket plugins, in their order.
	authors []*authorPlugin
}

// Run starts a local cluster with no kubelet, runs the demo scenario on it and prints what
// kubectl would show (see the package documentation). It returns when ctx ends, after stopping
// everything it started, or right after the demo with Options.ExitAfterDemo, with an error
// when the demo did not show what it should.
func Run(ctx context.Context, opts Options) (err error) {
	opts, err = opts.complete()
	if err != nil {
		return err
	}
	d := &dev{opts: opts, p: &progress{w: opts.Out, start: time.Now()}}
	if d.authors, err = opts.authorPlugins(); err != nil {
		return err
	}
	if err := d.checkBinaries(); err != nil {
		return err
	}
	if err := ensureControlPlane(ctx, opts.K8sBinDir, opts.Out); err != nil {
		return err
	}
	if d.l, err = newLayout(opts.WorkDir); err != nil {
		return err
	}
	lock, err := d.l.lock()
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := d.l.prepare(); err != nil {
		return err
	}
	logFile, err := os.Create(d.l.logPath("kubedevice-dev"))
	if err != nil {
		return fmt.Errorf("creating the log of kubedevice dev: %w", err)
	}
	defer logFile.Close()
	logger := textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(logFile), textlogger.Verbosity(2)))
	// envtest and client-go log through these; their lines belong in the log, not the terminal.
	ctrllog.SetLogger(logger)
	klog.SetLogger(logger)
	ctx = klog.NewContext(ctx, logger)

	d.header()
	d.p.start = time.Now()
	defer func() {
		if stopErr := d.shutdown(ctx); stopErr != nil {
			err = errors.Join(err, stopErr)
		}
	}()
	if err := d.start(ctx); err != nil {
		return err
	}
	return d.demo(ctx)
}

// demo prints what the demo shows; then, with Options.ExitAfterDemo, checks it, else serves the
// cluster until ctx ends.
func (d *dev) demo(ctx context.Context) error {
	if d.opts.DRA {
		obs, err := d.showDRA(ctx)
		if err != nil {
			return err
		}
		if d.opts.ExitAfterDemo {
			return d.checkDRA(obs)
		}
		return d.serve(ctx)
	}
	obs, err := d.show(ctx)
	if err != nil {
		return err
	}
	if d.opts.ExitAfterDemo {
		return d.check(obs)
	}
	return d.serve(ctx)
}

// checkBinaries fails early when a component binary is missing, and learns the agent's flags.
func (d *dev) checkBinaries() error {
	if missing := missingBinaries(d.opts.BinDir, []string{controllerName, agentName, pluginName}); len(missing) > 0 {
		return fmt.Errorf("finding %s in %s: %w (run `make build`, or pass --bin-dir)",
			strings.Join(missing, ", "), d.opts.BinDir, errMissingBinary)
	}
	// The agent gains --runtime-injection=nri|none; the demo has no container runtime.
	out, _ := exec.Command(filepath.Join(d.opts.BinDir, agentName), "--help").CombinedOutput()
	d.agentRTI = strings.Contains(string(out), "-runtime-injection")
	return nil
}

func (d *dev) header() {
	w := d.opts.Out
	fmt.Fprintf(w, "kubedevice dev: etcd, kube-apiserver and kube-scheduler, the kubedevice controller, and node %s\n", NodeName)
	fmt.Fprintf(w, "with the kubedevice agent as its device manager and the Gopher device plugin (no kubelet, no containers).\n")
	if res := d.draResources(); len(res) > 0 {
		fmt.Fprintf(w, "DRA: the agent is the DRA driver %s for %s; the scheduler allocates their devices to ResourceClaims.\n",
			contract.DRADriverName, strings.Join(res, ", "))
	}
	if n := len(d.authors); n > 0 {
		fmt.Fprintf(w, "Beside the Gopher, %d plugin(s) of yours, pointed at the agent's plugin directory %s (logs: plugin-<n>.log).\n", n, d.l.pluginDir())
	}
	fmt.Fprintf(w, "Work directory %s; every component logs to %s/<name>.log.\n", displayPath(d.l.workDir), displayPath(d.l.logsDir()))
	if d.l.tempRunDir {
		fmt.Fprintf(w, "The work directory's path is too long for unix sockets: the sockets are in %s.\n", d.l.runDir)
	}
	fmt.Fprintln(w)
}

// start brings the cluster up and runs the scenario up to the pending pod's event, then starts
// the plugins of the plugin author.
func (d *dev) start(ctx context.Context) error {
	if err := d.startControlPlane(ctx); err != nil {
		return err
	}
	p := d.p
	// The namespace first: the injection gate's parameters (config/admission) live in it.
	if err := p.run("Creating node "+NodeName+" (Ready, no kubelet)", func() (string, error) {
		if err := createNamespace(ctx, d.c, AgentNamespace); err != nil {
			return "", err
		}
		return "and namespace " + AgentNamespace, createNode(ctx, d.c)
	}); err != nil {
		return err
	}
	if err := p.run("Installing the CRDs and admission policies", func() (string, error) {
		return installManifests(ctx, d.cp.admin, d.c, d.opts.Timeout)
	}); err != nil {
		return err
	}
	if err := p.run("Starting "+controllerName, d.startController(ctx)); err != nil {
		return err
	}
	if err := p.run("Starting "+agentName+" on "+NodeName, d.startAgent(ctx)); err != nil {
		return err
	}
	if err := p.run("Starting "+pluginName+" with "+strings.Join(d.gophers(), ", "), d.startPlugin(ctx)); err != nil {
		return err
	}
	if d.opts.DRA {
		if err := d.runDRA(ctx); err != nil {
			return err
		}
	} else if err := d.runDevicePlugin(ctx); err != nil {
		return err
	}
	if err := d.startAuthorPlugins(ctx); err != nil {
		return err
	}
	fmt.Fprintf(d.opts.Out, "Demo ready in %s.\n", seconds(time.Since(p.start)))
	return nil
}

// startControlPlane starts etcd, kube-apiserver and kube-scheduler, writes the kubeconfig, and
// creates the clients.
func (d *dev) startControlPlane(ctx context.Context) error {
	if err := d.p.run("Starting etcd and kube-apiserver", func() (string, error) {
		cp, err := startControlPlane(ctx, d.l, d.opts.K8sBinDir, d.opts.Timeout)
		if err != nil {
			return "", err
		}
		d.cp = cp
		return strings.TrimSuffix(cp.admin.Host, "/"), nil
	}); err != nil {
		return err
	}
	if err := writeKubeconfig(d.l.kubeconfig(), d.cp.admin); err != nil {
		return err
	}
	scheme, err := contract.NewScheme()
	if err != nil {
		return err
	}
	if d.c, err = client.New(d.cp.admin, client.Options{Scheme: scheme}); err != nil {
		return fmt.Errorf("creating a client: %w", err)
	}
	cs, err := kubernetes.NewForConfig(d.cp.admin)
	if err != nil {
		return fmt.Errorf("creating a clientset: %w", err)
	}
	d.rc = cs.CoreV1().RESTClient()
	if err := d.p.run("Starting kube-scheduler", d.startScheduler(ctx)); err != nil {
		return err
	}
	fmt.Fprintf(d.opts.Out, "\nexport KUBECONFIG=%s\n\n", d.l.kubeconfig())
	return nil
}

// runDevicePlugin publishes the gopher as node capacity, and creates a pod that gets it and one
// that finds none left.
func (d *dev) runDevicePlugin(ctx context.Context) error {
	if err := d.p.run("Publishing "+ResourceName+" on node "+NodeName, d.waitNodeCapacity(ctx)); err != nil {
		return err
	}
	if err := d.p.run("Creating "+PodName, d.runPod(ctx)); err != nil {
		return err
	}
	return d.p.run("Creating "+PendingPodName, d.runPendingPod(ctx))
}

// gophers are the gophers the plugin serves: one, or two with DRA.
func (d *dev) gophers() []string {
	if d.opts.DRA {
		return draGophers
	}
	return []string{GopherID}
}

// startComponent starts one of the subprocesses and records it for shutdown.
func (d *dev) startComponent(name, path string, args []string) error {
	c, err := startComponent(name, path, args, d.l.logPath(name))
	if err != nil {
		return err
	}
	d.comps = append(d.comps, c)
	return nil
}

// componentStopped returns an error when a component has ended on its own: any of the
// cluster's, or a plugin of the author's named in deps (what the caller waits for depends on
// it). Any other plugin of the author's that ends is reported and the cluster keeps running.
func (d *dev) componentStopped(deps []string) error {
	for _, c := range d.comps {
		if err := c.exited(); err != nil {
			return err
		}
	}
	for _, ap := range d.authors {
		if ap.comp == nil || !slices.Contains(deps, ap.name) {
			continue
		}
		if err := ap.comp.exited(); err != nil {
			return err
		}
	}
	return nil
}

func (d *dev) startScheduler(ctx context.Context) func() (string, error) {
	return func() (string, error) {
		port, err := freePort()
		if err != nil {
			return "", err
		}
		// No --authentication-kubeconfig: the API server has no request-header CA for the
		// scheduler to look up, and /readyz needs no authentication.
		args := []string{
			"--kubeconfig=" + d.l.kubeconfig(),
			"--leader-elect=false",
			"--bind-address=127.0.0.1",
			"--secure-port=" + strconv.Itoa(port),
			"--cert-dir=" + d.l.schedulerDir(),
		}
		if err := d.startComponent(schedulerName, filepath.Join(d.opts.K8sBinDir, schedulerName), args); err != nil {
			return "", err
		}
		url := "https://" + localAddr(port) + "/readyz"
		if err := d.waitFor(ctx, "kube-scheduler to be ready ("+url+")", []string{schedulerName}, func(ctx context.Context) (bool, string, error) {
			return probe(ctx, url)
		}); err != nil {
			return "", err
		}
		return "", nil
	}
}

// probeAddrs returns free addresses for a manager's metrics and health probes.
func probeAddrs() (metrics, health string, err error) {
	m, err := freePort()
	if err != nil {
		return "", "", err
	}
	h, err := freePort()
	if err != nil {
		return "", "", err
	}
	return localAddr(m), localAddr(h), nil
}

func (d *dev) startController(ctx context.Context) func() (string, error) {
	return func() (string, error) {
		metrics, health, err := probeAddrs()
		if err != nil {
			return "", err
		}
		args := []string{
			"--kubeconfig=" + d.l.kubeconfig(),
			"--leader-elect=false",
			"--agent-namespace=" + AgentNamespace,
			"--metrics-bind-address=" + metrics,
			// Plain HTTP on the loopback address: the demo prints the URL to curl.
			"--metrics-secure=false",
			"--health-probe-bind-address=" + health,
		}
		if err := d.startComponent(controllerName, filepath.Join(d.opts.BinDir, controllerName), args); err != nil {
			return "", err
		}
		if err := d.waitReady(ctx, controllerName, health); err != nil {
			return "", err
		}
		return "metrics on http://" + metrics + "/metrics", nil
	}
}

func (d *dev) startAgent(ctx context.Context) func() (string, error) {
	return func() (string, error) {
		metrics, health, err := probeAddrs()
		if err != nil {
			return "", err
		}
		args := []string{
			"--kubeconfig=" + d.l.kubeconfig(),
			"--node-name=" + NodeName,
			"--namespace=" + AgentNamespace,
			"--plugin-dir=" + d.l.pluginDir(),
			"--state-dir=" + d.l.stateDir(),
			"--plugins-registry-dir=" + d.l.registryDir(),
			// The dev cluster's own, not the host's /var/lib/kubedevice/pod-resources.
			"--pod-resources-socket=" + d.l.podResourcesSocket(),
			"--metrics-bind-address=" + metrics,
			// Plain HTTP on the loopback address: the demo prints the URL to curl.
			"--metrics-secure=false",
			"--health-probe-bind-address=" + health,
		}
		if d.agentRTI {
			args = append(args, "--runtime-injection=none")
		}
		args = append(args, d.draAgentArgs()...)
		if err := d.startComponent(agentName, filepath.Join(d.opts.BinDir, agentName), args); err != nil {
			return "", err
		}
		if err := d.waitReady(ctx, agentName, health); err != nil {
			return "", err
		}
		return "metrics on http://" + metrics + "/metrics", nil
	}
}

// waitReady waits until a controller-runtime manager's /readyz answers 200.
func (d *dev) waitReady(ctx context.Context, name, health string) error {
	url := "http://" + health + "/readyz"
	return d.waitFor(ctx, name+" to be ready ("+url+")", []string{name}, func(ctx context.Context) (bool, string, error) {
		return probe(ctx, url)
	})
}

func (d *dev) startPlugin(ctx context.Context) func() (string, error) {
	return func() (string, error) {
		for _, g := range d.gophers() {
			if err := os.WriteFile(filepath.Join(d.l.gophersDir(), g), []byte("a gopher\n"), 0o644); err != nil {
				return "", fmt.Errorf("creating %s: %w", g, err)
			}
		}
		args := []string{
			"--plugin-dir=" + d.l.pluginDir(),
			"--gophers-dir=" + d.l.gophersDir(),
		}
		if err := d.startComponent(pluginName, filepath.Join(d.opts.BinDir, pluginName), args); err != nil {
			return "", err
		}
		var name string
		what := fmt.Sprintf("the NodeDevice of %s on %s to list %s, registered", ResourceName, NodeName, strings.Join(d.gophers(), ", "))
		if err := d.waitFor(ctx, what, []string{pluginName, agentName}, func(ctx context.Context) (bool, string, error) {
			nd, err := getNodeDevice(ctx, d.c)
			if err != nil || nd == nil {
				return false, "no NodeDevice", err
			}
			name = nd.Name
			return nodeDeviceReady(nd, d.gophers(), !d.opts.DRA)
		}); err != nil {
			return "", err
		}
		return "NodeDevice " + name, nil
	}
}

func (d *dev) waitNodeCapacity(ctx context.Context) func() (string, error) {
	return func() (string, error) {
		what := fmt.Sprintf("kubedevice-controller to publish %s=1 in node %s's capacity and allocatable", ResourceName, NodeName)
		if err := d.waitFor(ctx, what, []string{controllerName}, func(ctx context.Context) (bool, string, error) {
			capacity, allocatable, err := nodeResource(ctx, d.c, ResourceName)
			if err != nil {
				return false, "", err
			}
			return capacity == "1" && allocatable == "1", fmt.Sprintf("capacity %q, allocatable %q", capacity, allocatable), nil
		}); err != nil {
			return "", err
		}
		return "capacity 1, allocatable 1", nil
	}
}

func (d *dev) runPod(ctx context.Context) func() (string, error) {
	return func() (string, error) {
		pod, err := createPod(ctx, d.c, PodName)
		if err != nil {
			return "", err
		}
		if err := d.waitFor(ctx, PodName+" to be bound to "+NodeName, []string{schedulerName}, podBound(d.c, PodName)); err != nil {
			return "", err
		}
		what := fmt.Sprintf("the DeviceAllocation of %s to hold %s", PodName, GopherID)
		if err := d.waitFor(ctx, what, []string{agentName}, allocationHolds(d.c, pod)); err != nil {
			return "", err
		}
		what = fmt.Sprintf("the NodeDevice of %s on %s to count 1 allocated", ResourceName, NodeName)
		if err := d.waitFor(ctx, what, []string{agentName}, func(ctx context.Context) (bool, string, error) {
			nd, err := getNodeDevice(ctx, d.c)
			if err != nil || nd == nil {
				return false, "no NodeDevice", err
			}
			return nd.Status.Allocated == 1, fmt.Sprintf("allocated %d", nd.Status.Allocated), nil
		}); err != nil {
			return "", err
		}
		return "bound to " + NodeName + ", holds " + GopherID, nil
	}
}

func (d *dev) runPendingPod(ctx context.Context) func() (string, error) {
	return func() (string, error) {
		pod, err := createPod(ctx, d.c, PendingPodName)
		if err != nil {
			return "", err
		}
		what := fmt.Sprintf("the scheduler's %s event on %s saying %s", failedScheduling, PendingPodName, insufficientMessage)
		if err := d.waitFor(ctx, what, []string{schedulerName}, schedulingFailed(d.c, pod)); err != nil {
			return "", err
		}
		return "Pending: " + insufficientMessage, nil
	}
}

// The kubectl commands the demos print.
var (
	nodeDevicesQuery = TableQuery{Command: "kubectl get nodedevices", Path: "/apis/kubedevice.io/v1alpha1/nodedevices",
		Empty: "No resources found"}
	allocationsQuery = TableQuery{Command: "kubectl get deviceallocations -A", Path: "/apis/kubedevice.io/v1alpha1/deviceallocations",
		Options: RenderOptions{WithNamespace: true}, Empty: "No resources found"}
	podsQuery = TableQuery{Command: "kubectl get pods -o wide", Path: "/api/v1/namespaces/" + PodNamespace + "/pods",
		Options: RenderOptions{Wide: true}, Empty: "No resources found in " + PodNamespace + " namespace."}
	eventsQuery = TableQuery{Command: "kubectl get events --field-selector involvedObject.name=" + PendingPodName,
		Path: "/api/v1/namespaces/" + PodNamespace + "/events", FieldSelector: "involvedObject.name=" + PendingPodName,
		Empty: "No resources found in " + PodNamespace + " namespace."}
	slicesQuery = TableQuery{Command: "kubectl get resourceslices", Path: "/apis/resource.k8s.io/v1/resourceslices",
		Empty: "No resources found"}
	claimsQuery = TableQuery{Command: "kubectl get resourceclaims", Path: "/apis/resource.k8s.io/v1/namespaces/" + PodNamespace + "/resourceclaims",
		Empty: "No resources found in " + PodNamespace + " namespace."}
)

// tableQueries are the kubectl commands the demo prints, and where its checks find them.
var tableQueries = []demoQuery{
	{TableQuery: nodeDevicesQuery, into: func(o *Observed) **metav1.Table { return &o.NodeDevices }},
	{TableQuery: allocationsQuery, into: func(o *Observed) **metav1.Table { return &o.Allocations }},
	{TableQuery: podsQuery, into: func(o *Observed) **metav1.Table { return &o.Pods }},
	{TableQuery: eventsQuery, into: func(o *Observed) **metav1.Table { return &o.Events }},
}

// demoQuery is a table the demo prints and where its checks find it.
type demoQuery struct {
	TableQuery
	into func(*Observed) **metav1.Table
}

// show prints the kubectl tables of the demo (and the DRA objects when the author's resources
// go through DRA) and what the node advertises of each resource, and returns what it printed.
func (d *dev) show(ctx context.Context) (Observed, error) {
	var obs Observed
	for _, q := range tableQueries {
		t, err := d.printTable(ctx, q.TableQuery)
		if err != nil {
			return obs, err
		}
		*q.into(&obs) = t
	}
	if len(d.opts.PluginDRA) > 0 {
		for _, q := range []TableQuery{slicesQuery, claimsQuery} {
			if _, err := d.printTable(ctx, q); err != nil {
				return obs, err
			}
		}
	}
	fmt.Fprintln(d.opts.Out)
	var err error
	if obs.NodeCapacity, obs.NodeAllocatable, err = d.showAdvertised(ctx, ResourceName, ""); err != nil {
		return obs, err
	}
	return obs, d.showAuthorResources(ctx)
}

// printTable prints what kubectl prints for q, and returns the table.
func (d *dev) printTable(ctx context.Context, q TableQuery) (*metav1.Table, error) {
	reqCtx, cancel := context.WithTimeout(ctx, requestTimeout)
	t, err := GetTable(reqCtx, d.rc, q.Path, q.FieldSelector)
	cancel()
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(d.opts.Out, "\n$ %s\n", q.Command)
	if len(t.Rows) == 0 {
		fmt.Fprintln(d.opts.Out, q.Empty)
		return t, nil
	}
	return t, RenderTable(d.opts.Out, t, q.Options)
}

// showAdvertised prints what the node advertises of res: its capacity and allocatable on the
// device plugin path; none through DRA, and then which device kube-scheduler allocated to the
// claim of pod (none: no pod to show).
func (d *dev) showAdvertised(ctx context.Context, res, pod string) (capacity, allocatable string, err error) {
	reqCtx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	if capacity, allocatable, err = nodeResource(reqCtx, d.c, res); err != nil {
		return "", "", err
	}
	if !d.servedByDRA(res) {
		fmt.Fprintf(d.opts.Out, "Node %s advertises %s: capacity %s, allocatable %s (published by %s).\n",
			NodeName, res, orNone(capacity), orNone(allocatable), controllerName)
		return capacity, allocatable, nil
	}
	allocated := ""
	if pod != "" {
		claim, devices, err := extendedAllocation(reqCtx, d.c, pod, res)
		if err != nil {
			return "", "", err
		}
		allocated = fmt.Sprintf("; kube-scheduler allocated %s to %s's claim %s", orNone(strings.Join(devices, ",")), pod, orNone(claim))
	}
	fmt.Fprintf(d.opts.Out, "Node %s advertises %s: capacity %s (DRA serves it; no node capacity)%s.\n", NodeName, res, orNone(capacity), allocated)
	return capacity, "", nil
}

// showAuthorResources prints what the node advertises of each resource of the author's plugins.
func (d *dev) showAuthorResources(ctx context.Context) error {
	for _, ap := range d.authors {
		for k, res := range ap.resources {
			if _, _, err := d.showAdvertised(ctx, res, ap.pods[k]); err != nil {
				return err
			}
		}
	}
	return nil
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

// check prints the outcome of the demo's checks and fails when any failed.
func (d *dev) check(obs Observed) error {
	return d.report("the demo", CheckDemo(obs), fmt.Sprintf(
		"%s is bound to %s and holds %s; %s is Pending with %s; "+
			"the NodeDevice counts 1 device, 1 allocatable, 1 allocated; the node advertises %s=1.",
		PodName, NodeName, GopherID, PendingPodName, insufficientMessage, ResourceName))
}

// report prints what a demo's checks showed (checked) when no problem was found, the problems
// otherwise, and fails then.
func (d *dev) report(demo string, problems []string, checked string) error {
	w := d.opts.Out
	if len(problems) == 0 {
		fmt.Fprintf(w, "\nChecked: %s\n", checked)
		return nil
	}
	fmt.Fprintf(w, "\nThe demo did not show what it should:\n")
	for _, p := range problems {
		fmt.Fprintf(w, "  - %s\n", p)
	}
	return fmt.Errorf("checking %s: %w (%d problems)", demo, errDemoFailed, len(problems))
}

// serve keeps the cluster running until ctx ends or a component of the cluster stops. A plugin
// of the author's that ends is reported, and the cluster keeps running; RestartPlugins starts
// the author's plugins again.
func (d *dev) serve(ctx context.Context) error {
	d.printServing()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-d.opts.RestartPlugins:
			d.keepRunning(ctx, d.restartPlugins(ctx))
		case <-tick.C:
			if err := d.componentStopped(nil); err != nil {
				return err
			}
			d.keepRunning(ctx, d.reportExits(ctx))
		}
	}
}

// printServing prints what to try on the running cluster.
func (d *dev) printServing() {
	kubectl, note := d.kubectl()
	status := displayPath(filepath.Join(d.opts.BinDir, "kubedevice"))
	fmt.Fprintf(d.opts.Out, "\nThe cluster is running. In another terminal:\n  export KUBECONFIG=%s\n", d.l.kubeconfig())
	if d.opts.DRA {
		fmt.Fprintf(d.opts.Out, `  %s get resourceslices -o yaml%s
  %s get resourceclaims -o yaml   # status.allocation names each gopher
  %s get pod %s -o jsonpath='{.status.extendedResourceClaimStatus}'
  %s status
`, kubectl, note, kubectl, kubectl, PodName, status)
	} else {
		fmt.Fprintf(d.opts.Out, `  %s get nodedevices,deviceallocations -A%s
  %s status
  %s delete pod %s   # the agent frees %s; the scheduler binds %s, which gets it
  echo unhealthy > %s   # the gopher turns Unhealthy; rm it and it is gone
`, kubectl, note, status, kubectl, PodName, GopherID, PendingPodName, displayPath(filepath.Join(d.l.gophersDir(), GopherID)))
	}
	if len(d.authors) > 0 {
		fmt.Fprintf(d.opts.Out, "  kill -HUP %d   # restarts your --plugin commands (after a rebuild, or once one exited), registers your --plugin-socket plugins again\n", os.Getpid())
	}
	fmt.Fprintln(d.opts.Out, "Press Ctrl-C to stop everything.")
}

// kubectl returns how to run kubectl: from $PATH, else the one hack/build-control-plane.sh may
// have built next to the control plane, else a note on how to build one.
func (d *dev) kubectl() (command, note string) {
	if _, err := exec.LookPath("kubectl"); err == nil {
		return "kubectl", ""
	}
	if len(missingBinaries(d.opts.K8sBinDir, []string{"kubectl"})) == 0 {
		return displayPath(filepath.Join(d.opts.K8sBinDir, "kubectl")), ""
	}
	return "kubectl", "   # no kubectl here? hack/build-control-plane.sh kubectl builds one into bin/k8s"
}

// shutdown stops the components: the agent first, so it sees no plugin go away, then the
// author's plugins, then the others in the reverse order of their start; then kube-apiserver and
// etcd; and removes the sockets.
func (d *dev) shutdown(ctx context.Context) error {
	start := time.Now()
	logger := klog.FromContext(ctx)
	fmt.Fprintf(d.opts.Out, "\nStopping ")
	var errs []error
	for _, c := range d.stopOrder() {
		fmt.Fprintf(d.opts.Out, "%s, ", c.name)
		if err := c.stop(); err != nil {
			errs = append(errs, err)
		}
		logger.Info("Stopped component", "name", c.name, "exit", c.cmd.ProcessState)
	}
	for _, ap := range d.authors {
		if ap.relay != nil {
			ap.relay.close()
		}
	}
	if d.cp != nil {
		fmt.Fprintf(d.opts.Out, "kube-apiserver, etcd ")
		if err := d.cp.stop(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := d.l.cleanup(); err != nil {
		errs = append(errs, err)
	}
	fmt.Fprintf(d.opts.Out, "... done in %s; logs are in %s.\n", seconds(time.Since(start)), displayPath(d.l.logsDir()))
	return errors.Join(errs...)
}

// stopOrder is the order shutdown stops the components in (see shutdown).
func (d *dev) stopOrder() []*component {
	var order []*component
	for _, c := range d.comps {
		if c.name == agentName {
			order = append(order, c)
		}
	}
	for _, ap := range d.authors {
		if ap.comp != nil {
			order = append(order, ap.comp)
		}
	}
	for i := len(d.comps) - 1; i >= 0; i-- {
		if d.comps[i].name != agentName {
			order = append(order, d.comps[i])
		}
	}
	return order
}
