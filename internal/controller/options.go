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

package controller

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
	"github.com/kubedevice/kubedevice/internal/contract"
)

// Names shared by the controllers. The names every kubedevice binary shares are defined in package
// contract; the aliases here keep the controller's callers reading them as before.
const (
	// FieldOwner is the field manager of every write of the controller (contract.ControllerFieldOwner).
	FieldOwner = contract.ControllerFieldOwner

	// LeaderElectionID names the controller's leader election Lease (contract.LeaderElectionID).
	LeaderElectionID = contract.LeaderElectionID

	// DRADriverName is the DRA driver of the agents' ResourceSlices, whose devices the
	// controller's DeviceClasses select (contract.DRADriverName).
	DRADriverName = contract.DRADriverName

	// NodeCapacityFinalizer holds a NodeDevice until its resource is zero on the node
	// (contract.NodeCapacityFinalizer).
	NodeCapacityFinalizer = contract.NodeCapacityFinalizer

	// DefaultAgentNamespace is where agent Leases live when neither the flag nor $POD_NAMESPACE
	// says otherwise.
	DefaultAgentNamespace = contract.Namespace

	// DefaultAgentLeaseDuration is how long after its last renewal an agent's Lease counts as
	// valid: four of the agent's 10 s renewals.
	DefaultAgentLeaseDuration = 40 * time.Second

	// DefaultWorkers is how many objects each reconciler works on at once. Reconciles write one
	// object each, one request after another, so a single worker caps the writes of a first
	// install at one per API round trip, whatever the client's rate limit (measured: 27 writes/s
	// at QPS 100 on a 2-core control plane); each reconciler keys by object, and no two workers
	// ever hold the same key.
	DefaultWorkers = 4

	// reconcileTimeout bounds each reconcile, and with it every API call the reconcile makes.
	reconcileTimeout = 30 * time.Second
)

// Options configure the controllers.
type Options struct {
	// AgentNamespace is the namespace of the agents' Leases.
	AgentNamespace string

	// AgentLeaseDuration is how long an agent's Lease stays valid after its renewTime.
	AgentLeaseDuration time.Duration

	// Clock drives lease expiry and every RequeueAfter; nil means the real clock. Tests pass a
	// fake clock and step it.
	Clock clock.WithTicker

	// Workers is how many objects each reconciler works on at once; zero means DefaultWorkers.
	Workers int

	// Remediation is the policy for pods on unhealthy devices; off unless it names a resource.
	Remediation RemediationOptions
}

// AddFlags registers the controllers' flags on fs, bound to o (the remediation policy's too); the
// agent namespace defaults to $POD_NAMESPACE.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.AgentNamespace, "agent-namespace", cmp.Or(os.Getenv("POD_NAMESPACE"), DefaultAgentNamespace),
		"Namespace of the node agents' Leases (kubedevice-agent-<node>); defaults to $POD_NAMESPACE, else "+DefaultAgentNamespace+".")
	fs.DurationVar(&o.AgentLeaseDuration, "agent-lease-duration", DefaultAgentLeaseDuration,
		"How long after its last renewal a node agent's Lease stays valid; after that the node's NodeDevices get AgentReady=False and its kubedevice resources are published as 0.")
	fs.IntVar(&o.Workers, "workers", DefaultWorkers,
		"How many objects each reconciler (node capacity, NodeDevice, DeviceAllocation) works on at once; with one, writes go one API round trip after another whatever --kube-api-qps allows.")
	o.Remediation.AddFlags(fs)
}

// LogValues are the controllers' settings the start-up log line shows, as key-value pairs, the
// remediation policy's included.
func (o *Options) LogValues() []any {
	return []any{"agentNamespace", o.AgentNamespace, "agentLeaseDuration", o.AgentLeaseDuration,
		"workers", o.Workers, "remediate", o.Remediation.Policy.String()}
}

var (
	errNoAgentNamespace    = errors.New("the agent namespace is empty")
	errLeaseDurationNotPos = errors.New("the agent lease duration must be positive")
	errWorkersNegative     = errors.New("the number of workers must not be negative")
)

func (o Options) complete() (Options, error) {
	if o.AgentNamespace == "" {
		return o, errNoAgentNamespace
	}
	if o.AgentLeaseDuration <= 0 {
		return o, fmt.Errorf("%w: %s", errLeaseDurationNotPos, o.AgentLeaseDuration)
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Workers < 0 {
		return o, fmt.Errorf("%w: %d", errWorkersNegative, o.Workers)
	}
	if o.Workers == 0 {
		o.Workers = DefaultWorkers
	}
	var err error
	o.Remediation, err = o.Remediation.complete()
	return o, err
}

// CacheOptions returns the cache options the controllers need: Leases only from the agent
// namespace, no managed fields (nothing reads them) but a Node's owners of its status.capacity and
// status.allocatable keys, Nodes without their image lists (stripNode), and NodeDevices sharing
// their devices' repeated strings (contract.CompactNodeDevice).
// Pods are watched as metadata only (see the DeviceAllocation controller), so they need no entry.
func CacheOptions(opts Options) cache.Options {
	return cache.Options{
		DefaultTransform: cache.TransformStripManagedFields(),
		ByObject: map[client.Object]cache.ByObject{
			&coordinationv1.Lease{}:  {Namespaces: map[string]cache.Config{opts.AgentNamespace: {}}},
			&corev1.Node{}:           {Transform: stripNode},
			&kdv1alpha1.NodeDevice{}: {Transform: contract.CompactNodeDevice},
		},
	}
}

// Setup adds the node capacity, NodeDevice, DeviceAllocation and DeviceClass controllers to mgr,
// and the remediation controller when opts.Remediation names a resource. The field
// indexes of package indexer must be registered on the same manager (indexer.Setup), and the
// manager's cache built with CacheOptions.
func Setup(mgr ctrl.Manager, opts Options) error {
	opts, err := opts.complete()
	if err != nil {
		return fmt.Errorf("setting up the controllers: %w", err)
	}
	recorder := mgr.GetEventRecorder(FieldOwner)
	ctrlOpts := crcontroller.Options{
		NewQueue:                newQueueFunc(opts.Clock),
		ReconciliationTimeout:   reconcileTimeout,
		MaxConcurrentReconciles: opts.Workers,
	}
	leases := leaseReader{client: mgr.GetClient(), namespace: opts.AgentNamespace, duration: opts.AgentLeaseDuration}

	if err := (&nodeReconciler{
		client:    mgr.GetClient(),
		apiReader: mgr.GetAPIReader(),
		clock:     opts.Clock,
		leases:    leases,
		recorder:  recorder,
	}).setupWithManager(mgr, ctrlOpts); err != nil {
		return fmt.Errorf("setting up the node capacity controller: %w", err)
	}
	if err := (&nodeDeviceReconciler{
		client:   mgr.GetClient(),
		clock:    opts.Clock,
		recorder: recorder,
		leases:   leases,
	}).setupWithManager(mgr, ctrlOpts); err != nil {
		return fmt.Errorf("setting up the NodeDevice controller: %w", err)
	}
	if err := (&deviceAllocationReconciler{
		client:    mgr.GetClient(),
		apiReader: mgr.GetAPIReader(),
		clock:     opts.Clock,
		recorder:  recorder,
		leases:    leases,
	}).setupWithManager(mgr, ctrlOpts); err != nil {
		return fmt.Errorf("setting up the DeviceAllocation controller: %w", err)
	}
	if err := (&deviceClassReconciler{
		client:   mgr.GetClient(),
		recorder: recorder,
	}).setupWithManager(mgr, ctrlOpts); err != nil {
		return fmt.Errorf("setting up the DeviceClass controller: %w", err)
	}
	if err := mgr.Add(agentReadyRunnable{&agentReadySource{client: mgr.GetClient(), leases: leases, clock: opts.Clock}}); err != nil {
		return fmt.Errorf("adding the agent readiness metric: %w", err)
	}
	return setupRemediation(mgr, opts, ctrlOpts, recorder)
}
