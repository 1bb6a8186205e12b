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
	"cmp"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
	"github.com/kubedevice/kubedevice/internal/agent/dra"
	"github.com/kubedevice/kubedevice/internal/agent/injection"
	"github.com/kubedevice/kubedevice/internal/agent/injection/nri"
	"github.com/kubedevice/kubedevice/internal/agent/kube"
	"github.com/kubedevice/kubedevice/internal/agent/observe"
	"github.com/kubedevice/kubedevice/internal/contract"
	"github.com/kubedevice/kubedevice/internal/nodeagent"
	"github.com/kubedevice/kubedevice/internal/nodeagent/podresources"
)

// Names and defaults shared with the deployment and the controller. The names every binary
// shares are defined in package contract; the aliases here are how the agent's callers read them.
const (
	// FieldOwner is the field manager of every write of the agent (contract.AgentFieldOwner).
	FieldOwner = contract.AgentFieldOwner

	// LeasePrefix prefixes the node name in the name of the agent's Lease
	// (contract.AgentLeasePrefix).
	LeasePrefix = contract.AgentLeasePrefix

	// DefaultNamespace is the agent's namespace when neither the flag nor $POD_NAMESPACE says.
	DefaultNamespace = contract.Namespace

	// EventReasonPreStartContainerFailed is the reason of the Warning event on a pod whose device
	// plugin's PreStartContainer failed (injection.EventReasonPreStartContainerFailed).
	EventReasonPreStartContainerFailed = injection.EventReasonPreStartContainerFailed

	// DefaultLeaseDuration is the leaseDurationSeconds the agent writes in its Lease.
	DefaultLeaseDuration = 40 * time.Second

	// DefaultLeaseRenewInterval is how often the agent renews its Lease: its only periodic write.
	DefaultLeaseRenewInterval = 10 * time.Second

	// DefaultWriteInterval is the least time between two writes of one NodeDevice.
	DefaultWriteInterval = time.Second

	// DefaultWriteSettle is how long a NodeDevice change waits before it is written, so the
	// changes one event causes (a plugin registers, then lists its devices) are one write.
	DefaultWriteSettle = 100 * time.Millisecond
)

// RuntimeInjection is how the agent gives containers their devices when the runtime creates them.
type RuntimeInjection string

const (
	// RuntimeInjectionNRI: the agent is an NRI plugin of the container runtime and adjusts each
	// container at creation (package nri). The flag's default.
	RuntimeInjectionNRI RuntimeInjection = "nri"
	// RuntimeInjectionNone: the agent adjusts no container; something else must (a test
	// harness, or a runtime configured otherwise). Options' zero value.
	RuntimeInjectionNone RuntimeInjection = "none"
)

// RuntimeInjections lists the valid values of --runtime-injection.
var RuntimeInjections = []RuntimeInjection{RuntimeInjectionNRI, RuntimeInjectionNone}

// ParseRuntimeInjection parses a value of --runtime-injection.
func ParseRuntimeInjection(s string) (RuntimeInjection, error) {
	for _, v := range RuntimeInjections {
		if string(v) == s {
			return v, nil
		}
	}
	return "", fmt.Errorf("unknown runtime injection %q, want one of %q", s, RuntimeInjections)
}

// Mode is what the agent does on its node.
type Mode string

const (
	// ModeManage: the agent is the device manager of the plugins that register with it. The
	// default.
	ModeManage Mode = "manage"
	// ModeObserve: the kubelet manages its device plugins; the agent registers nothing, allocates
	// nothing and injects nothing, and mirrors, read-only, what the kubelet reports (package
	// observe) into NodeDevices (status.path Observed) and DeviceAllocations.
	ModeObserve Mode = "observe"
)

// Modes lists the valid values of --mode.
var Modes = []Mode{ModeManage, ModeObserve}

// ParseMode parses a value of --mode.
func ParseMode(s string) (Mode, error) {
	for _, v := range Modes {
		if string(v) == s {
			return v, nil
		}
	}
	return "", fmt.Errorf("unknown mode %q, want one of %q", s, Modes)
}

// Options configure the agent.
type Options struct {
	// Mode is what the agent does; empty means ModeManage.
	Mode Mode

	// Observe configures observe mode (ModeObserve); its node name, gate and clock are the
	// agent's.
	Observe observe.Options

	// NodeName is the node the agent runs on. Required.
	NodeName string

	// Namespace holds the agent's Lease. Required.
	Namespace string

	// LeaseDuration is written as the Lease's leaseDurationSeconds; LeaseRenewInterval is how
	// often it is renewed. Zero means the defaults.
	LeaseDuration      time.Duration
	LeaseRenewInterval time.Duration

	// WriteInterval and WriteSettle pace NodeDevice writes; zero means the defaults.
	WriteInterval time.Duration
	WriteSettle   time.Duration

	// RuntimeInjection is how containers get their devices at creation; empty means
	// RuntimeInjectionNone.
	RuntimeInjection RuntimeInjection

	// NRI configures the NRI plugin when RuntimeInjection is RuntimeInjectionNRI.
	NRI nri.Options

	// PodResources configures the PodResources API server; an empty SocketPath disables it.
	PodResources podresources.Options

	// Clock drives every timestamp, timer and delay of the agent; nil means the real clock.
	Clock clock.WithTicker
	// DRAResources are the resources served through DRA (--dra-resources): the agent is their
	// DRA driver (package dra). The core's Config.ServedByDRA must be ServedByDRA(). None: no
	// DRA flow runs.
	DRAResources dra.Resources
	// DRANodeSelector, when set (--dra-node-selector), limits DRAResources to the nodes whose
	// labels it matches when the agent starts: the start-up reads the agent's Node once and, on
	// any other node, the agent serves every resource through node capacity, as without
	// DRAResources. Nil: every node serves DRAResources through DRA. ServedByDRA() follows
	// that choice.
	DRANodeSelector labels.Selector
	// DRA configures the DRA flow (its directories; the rest Setup fills in).
	DRA dra.Options

	// draResourcesFlag holds the values of --dra-resources, which ParseFlags parses into
	// DRAResources; draNodeSelectorFlag the value of --dra-node-selector, into DRANodeSelector.
	draResourcesFlag    []string
	draNodeSelectorFlag string
	// draPath is the start-up's choice of the DRA path on this node when DRANodeSelector is set;
	// ServedByDRA creates it, so the core and every copy of the options share it.
	draPath *draPath
}

var (
	// ErrNoNodeName is the error of Options without a node name.
	ErrNoNodeName  = errors.New("the node name is empty")
	errNoNamespace = errors.New("the agent namespace is empty")
)

func (o Options) complete() (Options, error) {
	if o.NodeName == "" {
		return o, ErrNoNodeName
	}
	if o.Namespace == "" {
		return o, errNoNamespace
	}
	if o.LeaseDuration <= 0 {
		o.LeaseDuration = DefaultLeaseDuration
	}
	if o.LeaseRenewInterval <= 0 {
		o.LeaseRenewInterval = DefaultLeaseRenewInterval
	}
	if o.LeaseRenewInterval >= o.LeaseDuration {
		return o, fmt.Errorf("the lease renew interval %s must be shorter than the lease duration %s", o.LeaseRenewInterval, o.LeaseDuration)
	}
	if o.WriteInterval <= 0 {
		o.WriteInterval = DefaultWriteInterval
	}
	if o.WriteSettle <= 0 {
		o.WriteSettle = DefaultWriteSettle
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Mode == "" {
		o.Mode = ModeManage
	}
	switch o.RuntimeInjection {
	case "":
		o.RuntimeInjection = RuntimeInjectionNone
	case RuntimeInjectionNone:
	case RuntimeInjectionNRI:
		var err error
		if o.NRI, err = o.NRI.Complete(); err != nil {
			return o, err
		}
	default:
		return o, fmt.Errorf("unknown runtime injection %q, want one of %q", o.RuntimeInjection, RuntimeInjections)
	}
	return o, nil
}

// LeaseName returns the name of the Lease the agent of node renews (contract.AgentLeaseName).
func LeaseName(node string) string {
	return contract.AgentLeaseName(node)
}

// NodeDeviceName returns the name of shard shard of the NodeDevice for resource on node
// (kube.NodeDeviceName).
func NodeDeviceName(node, resource string, shard int) string {
	return kube.NodeDeviceName(node, resource, shard)
}

// DeviceAllocationName returns the name of the DeviceAllocation of the pod named podName with UID
// podUID on node (kube.DeviceAllocationName).
func DeviceAllocationName(node, podName, podUID string) string {
	return kube.DeviceAllocationName(node, podName, podUID)
}

// LabelValue returns s if it is a valid label value, else a valid label value derived from it
// (kube.LabelValue).
func LabelValue(s string) string {
	return kube.LabelValue(s)
}

// CacheOptions returns the cache options of the agent's manager: everything it reads is scoped to
// its node. Pods, NodeDevices and DeviceAllocations by the field selector spec.nodeName (a
// selectable field of both CRDs), the Node by name. The Lease is not cached: the agent only
// writes it. Managed fields are dropped, as the agent
// compares only what it applies.
func CacheOptions(node string) cache.Options {
	onNode := fields.OneTermEqualSelector("spec.nodeName", node)
	return cache.Options{
		DefaultTransform: cache.TransformStripManagedFields(),
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Pod{}:                  {Field: onNode},
			&kdv1alpha1.NodeDevice{}:       {Field: onNode, Transform: contract.CompactNodeDevice},
			&kdv1alpha1.DeviceAllocation{}: {Field: onNode},
			&corev1.Node{}:                 {Field: fields.OneTermEqualSelector("metadata.name", node), Transform: contract.StripNode},
		},
	}
}

var (
	errPodResourcesSocket = errors.New("want an absolute path outside the plugin directory and the plugins registry directory, whose sockets the agent treats as device plugins'")
	// errDRA wraps Validate's errors about the DRA flow's settings (--dra-resources, its directories).
	errDRA = errors.New("--dra-resources")
	// errStateDir is Validate's error for a state directory that is relative or the plugin directory.
	errStateDir = errors.New("want an absolute directory other than the plugin directory, which every device plugin mounts read-write")
	// errDRANodeSelectorAlone is Validate's error for --dra-node-selector without --dra-resources.
	errDRANodeSelectorAlone = errors.New("it chooses the nodes that serve --dra-resources through DRA, and --dra-resources names no resource: set both, or neither")
	// errNoNodeNameFlag is ParseFlags' ErrNoNodeName.
	errNoNodeNameFlag = errors.New("--node-name is required when $NODE_NAME is not set")
)

// AddFlags registers on fs the agent's flags and those of its flows (observe mode, NRI, the
// PodResources API, DRA), bound to o; the node name and the namespace default to $NODE_NAME and
// $POD_NAMESPACE. Once fs is parsed, ParseFlags completes o.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.NodeName, "node-name", os.Getenv("NODE_NAME"),
		"Name of the node the agent runs on (required); defaults to $NODE_NAME, set from the pod's spec.nodeName by the DaemonSet.")
	fs.StringVar(&o.Namespace, "namespace", cmp.Or(os.Getenv("POD_NAMESPACE"), DefaultNamespace),
		"Namespace of the agent's Lease (kubedevice-agent-<node>); defaults to $POD_NAMESPACE, else "+DefaultNamespace+".")
	fs.StringVar((*string)(&o.Mode), "mode", string(ModeManage),
		"What the agent does: "+string(ModeManage)+", "+string(ModeObserve)+". manage: it is the device manager of the plugins that register with it. observe: the kubelet manages its own device plugins; the agent registers, allocates and injects nothing and mirrors, read-only, the kubelet's PodResources API and device manager checkpoint into NodeDevices (status.path Observed) and DeviceAllocations. The flags of manage mode are ignored in observe mode.")
	fs.StringVar((*string)(&o.RuntimeInjection), "runtime-injection", string(RuntimeInjectionNRI),
		"How containers get their devices at creation: "+string(RuntimeInjectionNRI)+", "+string(RuntimeInjectionNone)+". nri: the agent is an NRI plugin of the container runtime (containerd 2.x, CRI-O) and adds each container's envs, mounts, device nodes and CDI devices; while the NRI socket is missing or the connection is down it logs it, sets RuntimeInjectionReady=False on the node's NodeDevices and reconnects. none: no container is adjusted.")
	fs.Func("dra-resources",
		"Resources served through DRA, the agent being their DRA driver kubedevice.io (ResourceSlices, prepare through the kubelet, CDI): exact names, domain/* or *, comma-separated, repeatable. A resource is served by one path: these get no node capacity and are never allocated to pods through the device plugin path.",
		func(v string) error { o.draResourcesFlag = append(o.draResourcesFlag, v); return nil })
	fs.StringVar(&o.draNodeSelectorFlag, "dra-node-selector", "",
		"Label selector (kubectl's syntax: key=value,key in (a,b),!key) of the nodes that serve --dra-resources through DRA, to move a cluster to DRA node by node. The agent reads its Node's labels once when it starts: on a node they do not match, it serves every resource through node capacity, as without --dra-resources, and removes the node's kubedevice.io ResourceSlices. A change of the labels takes effect at the agent's next start. Empty: every node.")
	o.Observe.AddFlags(fs)
	o.NRI.AddFlags(fs)
	o.PodResources.AddFlags(fs)
	o.DRA.AddFlags(fs)
}

// LogValues are the settings the agent's start-up log line shows, as key-value pairs: the agent's
// and its flows', so that a new flow shows its own here and main shows them all.
func (o *Options) LogValues() []any {
	selector := ""
	if o.DRANodeSelector != nil {
		selector = o.DRANodeSelector.String()
	}
	return []any{"mode", o.Mode, "node", o.NodeName, "namespace", o.Namespace,
		"runtimeInjection", o.RuntimeInjection, "nriSocket", o.NRI.SocketPath,
		"podResourcesSocket", o.PodResources.SocketPath, "draResources", o.DRAResources.String(),
		"draNodeSelector", selector}
}

// ParseFlags completes o and the core's configuration from the parsed flags that AddFlags and
// core.AddFlags registered, and validates them (Validate). An error names the first invalid flag.
// core.ServedByDRA is set from --dra-resources.
func (o *Options) ParseFlags(core *nodeagent.Flags) error {
	var err error
	if o.Mode, err = ParseMode(string(o.Mode)); err != nil {
		return fmt.Errorf("--mode: %w", err)
	}
	if err := o.Observe.ParseFlags(); err != nil {
		return err
	}
	if err := core.ParseFlags(); err != nil {
		return err
	}
	if o.RuntimeInjection, err = ParseRuntimeInjection(string(o.RuntimeInjection)); err != nil {
		return fmt.Errorf("--runtime-injection: %w", err)
	}
	if o.DRAResources, err = dra.ParseResources(o.draResourcesFlag); err != nil {
		return fmt.Errorf("--dra-resources: %w", err)
	}
	if o.DRANodeSelector, err = parseNodeSelector(o.draNodeSelectorFlag); err != nil {
		return fmt.Errorf("--dra-node-selector: %w", err)
	}
	core.ServedByDRA = o.ServedByDRA()
	if err = o.Validate(core.Config); errors.Is(err, ErrNoNodeName) {
		return errNoNodeNameFlag
	}
	return err
}

// Validate checks opts against the core's configuration cfg before anything starts: the node
// name is set, the state directory (when set) is an absolute path that is not the plugin
// directory, a DRA node selector comes with DRA resources, and the PodResources socket (when
// served) is an absolute path outside the directories whose sockets the core treats as device
// plugins'. Setup checks the rest. An error but ErrNoNodeName names the flag of the setting.
func (o Options) Validate(cfg nodeagent.Config) error {
	if o.NodeName == "" {
		return ErrNoNodeName
	}
	if d := cfg.StateDir; d != "" && (!filepath.IsAbs(d) || filepath.Clean(d) == filepath.Clean(cfg.PluginDir)) {
		return fmt.Errorf("--state-dir=%q: %w", d, errStateDir)
	}
	if o.DRANodeSelector != nil && !o.DRAResources.Any() {
		return fmt.Errorf("--dra-node-selector=%q: %w", o.DRANodeSelector.String(), errDRANodeSelectorAlone)
	}
	if o.DRAResources.Any() {
		if cfg.ServedByDRA == nil {
			return fmt.Errorf("%w: resources are configured but the core does not know them (Config.ServedByDRA)", errDRA)
		}
		d := o.DRA
		d.NodeName = o.NodeName
		if err := d.Validate(); err != nil {
			return fmt.Errorf("%w: %w", errDRA, err)
		}
	}
	s := o.PodResources.SocketPath
	if s == "" {
		return nil
	}
	dir := filepath.Clean(filepath.Dir(s))
	if !filepath.IsAbs(s) || dir == filepath.Clean(cfg.PluginDir) ||
		(cfg.PluginsRegistryDir != "" && dir == filepath.Clean(cfg.PluginsRegistryDir)) {
		return fmt.Errorf("--pod-resources-socket=%q: %w", s, errPodResourcesSocket)
	}
	return nil
}

// parseNodeSelector parses the value of --dra-node-selector: nil when it selects every node (empty).
func parseNodeSelector(s string) (labels.Selector, error) {
	sel, err := labels.Parse(s)
	if err != nil {
		return nil, err
	}
	if sel.Empty() {
		return nil, nil
	}
	return sel, nil
}

// ServedByDRA returns what the core's Config.ServedByDRA must be for these options: nil when
// DRAResources names nothing; DRAResources.Match without DRANodeSelector; with one,
// DRAResources.Match once the agent's start-up has found its Node's labels matching it, and false
// for every resource otherwise (and before: nothing asks the core before the start-up gate
// opens). Setup must be given these options (or a copy made after this call): the start-up makes
// the choice the returned function follows. One agent run per Options.
func (o *Options) ServedByDRA() func(resource string) bool {
	switch {
	case !o.DRAResources.Any():
		return nil
	case o.DRANodeSelector == nil:
		return o.DRAResources.Match
	}
	if o.draPath == nil {
		o.draPath = newDRAPath(o.DRAResources, o.DRANodeSelector)
	}
	return o.draPath.servedByDRA
}
