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
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
	"github.com/kubedevice/kubedevice/internal/nodeagent/registration"
	"github.com/kubedevice/kubedevice/internal/plugincheck"
)

// authorPluginName is the component name, and log name, of the i-th --plugin or --plugin-socket.
func authorPluginName(i int) string { return fmt.Sprintf("plugin-%d", i+1) }

// authorPodName is the pod that asks for the k-th resource (in name order) of the i-th plugin:
// plugin-pod-<i+1> for its first, plugin-pod-<i+1>-<k+1> for the others.
func authorPodName(i, k int) string {
	if k == 0 {
		return fmt.Sprintf("plugin-pod-%d", i+1)
	}
	return fmt.Sprintf("plugin-pod-%d-%d", i+1, k+1)
}

// settleWindow is how long a plugin's set of resources must stay the same before the demo takes
// it as the plugin's resources: a plugin that serves several registers them one after the other.
const settleWindow = 2 * time.Second

// authorPlugin is a --plugin (command) or a --plugin-socket (socket and resource).
type authorPlugin struct {
	name             string
	command          string
	socket, resource string
	// comp is the running command; a restart replaces it.
	comp *component
	// relay serves a --plugin-socket plugin's socket in the agent's plugin directory.
	relay *relay
	// resources are the resources the plugin registered, in name order; pods the pods asking
	// for one device of each.
	resources, pods []string
	// reported says the command's exit has been reported.
	reported bool
}

// authorPlugins returns the --plugin and --plugin-socket plugins, and checks --plugin-dra.
func (o Options) authorPlugins() ([]*authorPlugin, error) {
	var plugins []*authorPlugin
	for _, c := range o.Plugins {
		plugins = append(plugins, &authorPlugin{name: authorPluginName(len(plugins)), command: c})
	}
	for _, rs := range o.PluginSockets {
		res, socket, ok := strings.Cut(rs, "=")
		if !ok || res == "" || socket == "" {
			return nil, fmt.Errorf("--plugin-socket %q: want RESOURCE=SOCKET, as in example.com/gpu=/run/my-plugin.sock", rs)
		}
		plugins = append(plugins, &authorPlugin{name: authorPluginName(len(plugins)), socket: socket, resource: res})
	}
	for _, res := range o.PluginDRA {
		switch {
		case res == ResourceName:
			return nil, fmt.Errorf("--plugin-dra %s: the Gopher's resource goes through DRA with --dra", res)
		case !registration.IsExtendedResourceName(res):
			return nil, fmt.Errorf("--plugin-dra %q: not an extended resource name (domain/name, as in example.com/gpu)", res)
		case len(plugins) == 0:
			return nil, fmt.Errorf("--plugin-dra %s: no --plugin or --plugin-socket serves it", res)
		}
	}
	return plugins, nil
}

// servedByDRA says whether the agent serves res through DRA.
func (d *dev) servedByDRA(res string) bool {
	return (d.opts.DRA && res == ResourceName) || slices.Contains(d.opts.PluginDRA, res)
}

// startAuthorPlugins starts each --plugin command pointed at the agent's plugin directory, or
// registers each --plugin-socket with the agent, waits for the agent to publish every resource
// the plugin registers, and creates a pod asking for one device of each.
func (d *dev) startAuthorPlugins(ctx context.Context) error {
	known := []string{ResourceName}
	for i, ap := range d.authors {
		title := "Starting " + ap.name
		if ap.command == "" {
			title = "Registering " + ap.name + " (a running plugin)"
		}
		if err := d.p.run(title, func() (string, error) { return d.startAuthorPlugin(ctx, ap, known) }); err != nil {
			return err
		}
		known = append(known, ap.resources...)
		for k, res := range ap.resources {
			if d.servedByDRA(res) {
				if err := d.p.run("Publishing "+res+" through DRA", d.waitDRA(ctx, res, ap.name, nil)); err != nil {
					return err
				}
			}
			ap.pods = append(ap.pods, authorPodName(i, k))
			if err := d.runAuthorPod(ctx, authorPodName(i, k), ap.name, res); err != nil {
				return err
			}
		}
	}
	for _, res := range d.opts.PluginDRA {
		if !slices.Contains(known, res) {
			return fmt.Errorf("--plugin-dra %s: no plugin registered it; they registered %s", res, strings.Join(known[1:], ", "))
		}
	}
	return nil
}

// startAuthorPlugin starts or registers one plugin and waits for its resources; it returns the
// progress line's detail.
func (d *dev) startAuthorPlugin(ctx context.Context, ap *authorPlugin, known []string) (string, error) {
	if ap.command == "" {
		if err := d.registerSocket(ctx, ap); err != nil {
			return "", err
		}
	} else if err := d.startAuthorCommand(ap); err != nil {
		return "", err
	}
	what := fmt.Sprintf("%s to register its resources with the agent on %s, each with a healthy device", ap.name, NodeName)
	var got []*served
	var set string
	var changed time.Time
	if err := d.waitFor(ctx, what, []string{ap.name, agentName}, func(ctx context.Context) (bool, string, error) {
		all, err := servedResources(ctx, d.c)
		if err != nil {
			return false, "", err
		}
		got = newResources(all, known)
		if s := fmt.Sprint(resourceNames(got)); s != set {
			set, changed = s, time.Now()
		}
		ready := len(got) > 0 && !slices.ContainsFunc(got, func(s *served) bool { return !s.ready() })
		return ready && time.Since(changed) >= settleWindow, describeServed(got, "no new resource"), nil
	}); err != nil {
		return "", err
	}
	ap.resources = resourceNames(got)
	return describeCounts(got), nil
}

// startAuthorCommand starts a --plugin command pointed at the agent's plugin directory.
func (d *dev) startAuthorCommand(ap *authorPlugin) error {
	mountAt := ""
	if d.opts.PluginMountNamespace {
		mountAt = plugincheck.KubeletPluginDir
	}
	argv, env, err := plugincheck.CommandLine([]string{"sh", "-c", ap.command}, d.l.pluginDir(), mountAt)
	if err != nil {
		return err
	}
	c, err := startComponentEnv(ap.name, argv[0], argv[1:], env, d.l.logPath(ap.name))
	if err != nil {
		return err
	}
	ap.comp, ap.reported = c, false
	return nil
}

// runAuthorPod creates a pod asking for one device of res and waits until it holds one: a
// DeviceAllocation on the device plugin path, its claim's allocation through DRA.
func (d *dev) runAuthorPod(ctx context.Context, pod, name, res string) error {
	return d.p.run("Creating "+pod, func() (string, error) {
		p := authorPod(pod, corev1.ResourceName(res))
		reqCtx, cancel := context.WithTimeout(ctx, requestTimeout)
		err := d.c.Create(reqCtx, p)
		cancel()
		if err != nil {
			return "", fmt.Errorf("creating pod %s: %w", pod, err)
		}
		if err := d.waitFor(ctx, pod+" to be bound to "+NodeName, []string{schedulerName}, podBound(d.c, pod)); err != nil {
			return "", err
		}
		if d.servedByDRA(res) {
			claim, devices, err := d.waitExtendedClaim(ctx, pod, res, "")
			if err != nil {
				return "", err
			}
			return fmt.Sprintf("asks for one %s: bound to %s, claim %s allocated %s", res, NodeName, claim, strings.Join(devices, ",")), nil
		}
		held, err := d.waitAuthorAllocation(ctx, p, name, res)
		if err != nil {
			return "", err
		}
		return "asks for one " + res + ": bound to " + NodeName + ", holds " + strings.Join(held, ","), nil
	})
}

// waitAuthorAllocation waits until the pod's DeviceAllocation holds one device of res and the
// resource's NodeDevice counts it, and returns the device.
func (d *dev) waitAuthorAllocation(ctx context.Context, p *corev1.Pod, name, res string) ([]string, error) {
	var held []string
	what := fmt.Sprintf("the DeviceAllocation of %s to hold one %s", p.Name, res)
	if err := d.waitFor(ctx, what, []string{agentName, name}, func(ctx context.Context) (bool, string, error) {
		var ok bool
		var seen string
		var err error
		ok, seen, held, err = allocationHoldsOne(ctx, d.c, p, res)
		return ok, seen, err
	}); err != nil {
		return nil, err
	}
	what = fmt.Sprintf("the NodeDevice of %s on %s to count 1 allocated", res, NodeName)
	if err := d.waitFor(ctx, what, []string{agentName}, func(ctx context.Context) (bool, string, error) {
		nd, err := nodeDeviceWhere(ctx, d.c, func(r string) bool { return r == res })
		if err != nil || nd == nil {
			return false, "no NodeDevice of " + res, err
		}
		return nd.Status.Allocated == 1, fmt.Sprintf("allocated %d", nd.Status.Allocated), nil
	}); err != nil {
		return nil, err
	}
	return held, nil
}

// registerSocket registers a plugin that already runs with the agent, as the plugin would: it
// serves a relay of the plugin's socket in the agent's plugin directory as <name>.sock (the
// endpoint must be a socket file there, and the agent may refuse symlinks), asks the plugin for
// its options, and calls Register on kubelet.sock. The relay runs until the plugin is registered
// again or kubedevice dev stops.
func (d *dev) registerSocket(ctx context.Context, ap *authorPlugin) error {
	link, socket, res := ap.name+".sock", ap.socket, ap.resource
	abs, err := filepath.Abs(socket)
	if err != nil {
		return fmt.Errorf("resolving %s: %w", socket, err)
	}
	if st, err := os.Stat(abs); err != nil {
		return fmt.Errorf("finding the plugin's socket: %w", err)
	} else if st.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("%s is not a unix socket", abs)
	}
	if ap.relay != nil {
		ap.relay.close()
	}
	if ap.relay, err = startRelay(filepath.Join(d.l.pluginDir(), link), abs); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	dial := func(path string) (*grpc.ClientConn, error) {
		return grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	}
	pconn, err := dial(abs)
	if err != nil {
		return err
	}
	defer pconn.Close()
	opts, err := v1beta1.NewDevicePluginClient(pconn).GetDevicePluginOptions(ctx, &v1beta1.Empty{}, grpc.WaitForReady(true))
	if err != nil {
		return fmt.Errorf("asking the plugin at %s for its options: %w", abs, err)
	}
	kconn, err := dial(filepath.Join(d.l.pluginDir(), "kubelet.sock"))
	if err != nil {
		return err
	}
	defer kconn.Close()
	_, err = v1beta1.NewRegistrationClient(kconn).Register(ctx, &v1beta1.RegisterRequest{
		Version: v1beta1.Version, Endpoint: link, ResourceName: res, Options: opts,
	}, grpc.WaitForReady(true))
	if err != nil {
		return fmt.Errorf("registering %s at %s with the agent: %w", res, abs, err)
	}
	return nil
}

// nodeDeviceWhere returns the first NodeDevice of the demo node whose resource matches, nil when
// there is none.
func nodeDeviceWhere(ctx context.Context, c client.Client, match func(resource string) bool) (*kdv1alpha1.NodeDevice, error) {
	var list kdv1alpha1.NodeDeviceList
	if err := c.List(ctx, &list, client.MatchingFields{"spec.nodeName": NodeName}); err != nil {
		return nil, fmt.Errorf("listing the NodeDevices of %s: %w", NodeName, err)
	}
	for i := range list.Items {
		if match(list.Items[i].Spec.ResourceName) {
			return &list.Items[i], nil
		}
	}
	return nil, nil
}

// allocationHoldsOne says whether the pod's DeviceAllocation is Allocated with one device of res.
func allocationHoldsOne(ctx context.Context, c client.Client, pod *corev1.Pod, res string) (bool, string, []string, error) {
	var list kdv1alpha1.DeviceAllocationList
	if err := c.List(ctx, &list, client.InNamespace(pod.Namespace)); err != nil {
		return false, "", nil, fmt.Errorf("listing DeviceAllocations: %w", err)
	}
	for _, da := range list.Items {
		if da.Spec.PodName != pod.Name || da.Spec.PodUID != string(pod.UID) {
			continue
		}
		cond := apimeta.FindStatusCondition(da.Status.Conditions, kdv1alpha1.DeviceAllocationAllocated)
		held := heldDevices(&da)
		seen := fmt.Sprintf("DeviceAllocation %s holds [%s]", da.Name, strings.Join(held, " "))
		if cond != nil {
			seen += fmt.Sprintf(", Allocated=%s %s: %s", cond.Status, cond.Reason, cond.Message)
		}
		ok := cond != nil && cond.Status == metav1.ConditionTrue && len(held) == 1 && strings.HasPrefix(held[0], res+"/")
		return ok, seen, held, nil
	}
	return false, "no DeviceAllocation of " + pod.Name, nil, nil
}

// authorPod is a pod asking for one device of res.
func authorPod(name string, res corev1.ResourceName) *corev1.Pod {
	one := resource.MustParse("1")
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: PodNamespace,
			Labels:    map[string]string{"app.kubernetes.io/name": "plugin-demo"},
		},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			Containers: []corev1.Container{{
				Name:    "app",
				Image:   "busybox",
				Command: []string{"sh", "-c", "env; sleep 3600"},
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{res: one},
					Limits:   corev1.ResourceList{res: one},
				},
			}},
		},
	}
}
