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

package dra

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/kubedevice/kubedevice/internal/agent/kube"
	"github.com/kubedevice/kubedevice/internal/nodeagent"
)

// Default directories of the kubelet's plugin watcher and DRA plugins.
const (
	DefaultKubeletPluginsDir  = kubeletplugin.KubeletPluginsDir
	DefaultKubeletRegistryDir = kubeletplugin.KubeletRegistryDir
)

// Core is what the DRA flow uses of the device manager core, *nodeagent.Manager.
type Core interface {
	// PrepareClaim allocates exactly the given devices to a claim, durably; idempotent.
	PrepareClaim(ctx context.Context, claim nodeagent.ClaimRef, requests []nodeagent.ClaimRequest) (nodeagent.ClaimAllocation, error)
	// UnprepareClaim frees a claim's devices, durably; idempotent.
	UnprepareClaim(ctx context.Context, uid string) (bool, error)
	// Claim is what a prepared claim holds.
	Claim(uid string) (nodeagent.ClaimAllocation, bool)
	// Snapshots are the resources' states; ServedByDRA marks the ones this flow publishes.
	Snapshots() []nodeagent.ResourceSnapshot
	// Subscribe announces the resources that changed.
	Subscribe() *nodeagent.Subscription
}

// Options are the DRA flow's settings and dependencies.
type Options struct {
	// NodeName is the agent's node: the ResourceSlices' node and owner.
	NodeName string
	// Core prepares claims and reports the devices.
	Core Core
	// Gate holds the kubelet plugin and the publishing until the agent has started (checkpoint
	// restored), so no claim is prepared and no empty pool published before. The ResourceSlice
	// controller starts (and syncs its informer) at once, without waiting for it.
	Gate *kube.Gate
	// KubeClient reads ResourceClaims and writes ResourceSlices; nil: built from the manager's
	// rest config.
	KubeClient kubernetes.Interface
	// KubeletPluginsDir holds the driver's socket directory, <dir>/kubedevice.io/dra.sock.
	KubeletPluginsDir string
	// KubeletRegistryDir is the kubelet's plugin watcher directory, where the registration socket
	// kubedevice.io-reg.sock goes.
	KubeletRegistryDir string
	// CDIDir is where the per-claim CDI specs are written (the runtime's CDI spec directory).
	CDIDir string
	// Listen, if set, replaces net.Listen("unix") for both sockets (tests).
	Listen func(ctx context.Context, path string) (net.Listener, error)
}

// Validate reports missing or relative settings (Setup also needs Core and Gate).
func (o Options) Validate() error {
	var errs []error
	if o.NodeName == "" {
		errs = append(errs, errors.New("the node name is required"))
	}
	for name, dir := range map[string]string{"kubelet plugins": o.KubeletPluginsDir, "kubelet registry": o.KubeletRegistryDir, "CDI": o.CDIDir} {
		if !filepath.IsAbs(dir) {
			errs = append(errs, fmt.Errorf("the %s directory must be an absolute path, got %q", name, dir))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("DRA options: %w", err)
	}
	return nil
}

// AddFlags registers the DRA flow's directories on fs, bound to o.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.KubeletPluginsDir, "kubelet-plugins-dir", DefaultKubeletPluginsDir,
		"The kubelet's DRA plugins directory; the DRA socket is <dir>/kubedevice.io/dra.sock (with --dra-resources).")
	fs.StringVar(&o.KubeletRegistryDir, "kubelet-registry-dir", DefaultKubeletRegistryDir,
		"The kubelet's plugin watcher directory, where the DRA driver registers (with --dra-resources).")
	fs.StringVar(&o.CDIDir, "cdi-dir", DefaultCDIDir,
		"The container runtime's CDI spec directory, where a spec per prepared claim is written (with --dra-resources).")
}

// Setup adds the DRA flow to mgr: the ResourceSlice controller, started with the manager, and
// once the agent has started, the kubelet plugin (registration and DRA gRPC service, health
// service) and the publishing of the DRA-served resources' ResourceSlices, republished on every
// change of the core.
func Setup(mgr ctrl.Manager, opts Options) error {
	r, err := New(mgr, opts)
	if err != nil {
		return err
	}
	return mgr.Add(r)
}

// New returns the DRA flow Setup adds to mgr, for a caller that starts it itself: the agent when
// its start-up decides whether the node serves its resources through DRA (--dra-node-selector).
// Nothing happens on the node or in the API server before it is started.
func New(mgr ctrl.Manager, opts Options) (manager.Runnable, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if opts.Core == nil || opts.Gate == nil {
		return nil, errors.New("DRA flow: the core and the start-up gate are required")
	}
	if opts.KubeClient == nil {
		cs, err := kubernetes.NewForConfig(mgr.GetConfig())
		if err != nil {
			return nil, fmt.Errorf("DRA flow: building the Kubernetes client: %w", err)
		}
		opts.KubeClient = cs
	}
	w, err := newCDIWriter(opts.CDIDir)
	if err != nil {
		return nil, err
	}
	return &runner{opts: opts, driver: &driver{core: opts.Core, cdi: w, fatal: make(chan error, 1)}}, nil
}

// runner runs the kubelet plugin and the publisher.
type runner struct {
	opts   Options
	driver *driver
}

func (*runner) NeedLeaderElection() bool { return false }

// Start starts the ResourceSlice controller at once, and once the agent has started: starts the
// kubelet plugin (which an API call must not hold up), makes the slices an earlier run left
// reflect the restored state if the controller has not synced yet, and publishes through the
// controller until ctx ends or a fatal background error.
func (r *runner) Start(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithName("dra")
	ctx, cancel := context.WithCancel(klog.NewContext(ctx, logger))
	sc := startSliceController(ctx, r.opts.KubeClient, r.opts.NodeName)
	defer func() {
		cancel()
		sc.stop()
	}()
	if err := r.opts.Gate.Wait(ctx); err != nil {
		return nil
	}
	helper, err := r.startPlugin(ctx)
	if err != nil {
		return err
	}
	defer helper.Stop()
	if !sc.synced() {
		r.taintStale(ctx)
	}
	c, err := sc.wait(ctx, r.driver.fatal)
	if c == nil {
		return err
	}
	return publish(ctx, r.opts.Core, sc.publisher(), r.driver.fatal)
}

// taintStale taints the devices of the slices an earlier run left as the restored state says
// (taintStale), logging what it did; failing is not fatal: the controller publishes the state
// once it has synced.
func (r *runner) taintStale(ctx context.Context) {
	logger := klog.FromContext(ctx)
	n, err := taintStale(ctx, r.opts.KubeClient, r.opts.NodeName, r.opts.Core.Snapshots())
	if err != nil {
		logger.Error(err, "Tainting the devices of the ResourceSlices an earlier run published, before the ResourceSlice controller has synced")
	}
	if n > 0 {
		logger.Info("Tainted the devices of the ResourceSlices an earlier run published as the restored state says, until the ResourceSlice controller publishes", "resourceSlices", n)
	}
}

// startPlugin starts the kubelet plugin: registration with the kubelet's plugin watcher, the DRA
// and health gRPC services. It publishes no ResourceSlices: the runner does.
func (r *runner) startPlugin(ctx context.Context) (*kubeletplugin.Helper, error) {
	// The library listens in these directories but does not create them; the driver's own
	// directory under the kubelet's plugins directory never exists on a fresh node.
	dataDir := filepath.Join(r.opts.KubeletPluginsDir, DriverName)
	for _, dir := range []string{dataDir, r.opts.KubeletRegistryDir} {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return nil, fmt.Errorf("creating the DRA plugin directory: %w", err)
		}
	}
	opts := []kubeletplugin.Option{
		kubeletplugin.DriverName(DriverName),
		kubeletplugin.KubeClient(r.opts.KubeClient),
		kubeletplugin.NodeName(r.opts.NodeName),
		kubeletplugin.RegistrarDirectoryPath(r.opts.KubeletRegistryDir),
		kubeletplugin.PluginDataDirectoryPath(dataDir),
		// The core serializes what must be (per claim, per device); a plugin that hangs must not
		// hold up the claims of other resources.
		kubeletplugin.Serialize(false),
	}
	if r.opts.Listen != nil {
		opts = append(opts, kubeletplugin.PluginListener(r.opts.Listen), kubeletplugin.RegistrarListener(r.opts.Listen))
	}
	helper, err := kubeletplugin.Start(ctx, r.driver, opts...)
	if err != nil {
		return nil, fmt.Errorf("starting the DRA kubelet plugin: %w", err)
	}
	klog.FromContext(ctx).Info("DRA kubelet plugin started", "driver", DriverName)
	return helper, nil
}
