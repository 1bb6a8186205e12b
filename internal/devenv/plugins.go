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
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

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
	"github.com/kubedevice/kubedevice/internal/plugincheck"
)

// authorPluginName is the component name, and log name, of the i-th --plugin.
func authorPluginName(i int) string { return fmt.Sprintf("plugin-%d", i+1) }

// authorPodName is the pod that asks for the i-th --plugin's resource.
func authorPodName(i int) string { return fmt.Sprintf("plugin-pod-%d", i+1) }

// authorPlugin is a --plugin (command) or a --plugin-socket (socket and resource).
type authorPlugin struct {
	command          string
	socket, resource string
}

// startAuthorPlugins starts each --plugin command pointed at the agent's plugin directory, or
// registers each --plugin-socket with the agent, waits for the agent to publish its resource, and
// creates a pod asking for one device of it.
func (d *dev) startAuthorPlugins(ctx context.Context) error {
	var plugins []authorPlugin
	for _, c := range d.opts.Plugins {
		plugins = append(plugins, authorPlugin{command: c})
	}
	for _, rs := range d.opts.PluginSockets {
		res, socket, ok := strings.Cut(rs, "=")
		if !ok || res == "" || socket == "" {
			return fmt.Errorf("--plugin-socket %q: want RESOURCE=SOCKET, as in example.com/gpu=/run/my-plugin.sock", rs)
		}
		plugins = append(plugins, authorPlugin{socket: socket, resource: res})
	}
	known := []string{ResourceName}
	for i, ap := range plugins {
		name := authorPluginName(i)
		title := "Starting " + name
		if ap.command == "" {
			title = "Registering " + name + " (a running plugin)"
		}
		var res string
		if err := d.p.run(title, func() (string, error) {
			if ap.command == "" {
				if err := d.registerSocket(ctx, name+".sock", ap.socket, ap.resource); err != nil {
					return "", err
				}
			} else if err := d.startAuthorCommand(name, ap.command); err != nil {
				return "", err
			}
			what := fmt.Sprintf("%s to register a new resource with the agent on %s, with a healthy device", name, NodeName)
			var nd *kdv1alpha1.NodeDevice
			if err := d.waitFor(ctx, what, []string{name, agentName}, func(ctx context.Context) (bool, string, error) {
				var err error
				nd, err = newNodeDevice(ctx, d.c, known)
				if err != nil || nd == nil {
					return false, "no new NodeDevice", err
				}
				st := nd.Status
				ok := st.Plugin != nil && st.Plugin.State == kdv1alpha1.PluginStateRegistered && st.Allocatable > 0
				return ok, fmt.Sprintf("NodeDevice %s (%s): capacity %d, allocatable %d", nd.Name, nd.Spec.ResourceName, st.Capacity, st.Allocatable), nil
			}); err != nil {
				return "", err
			}
			res = nd.Spec.ResourceName
			known = append(known, res)
			return fmt.Sprintf("%s: %d devices, %d allocatable", res, nd.Status.Capacity, nd.Status.Allocatable), nil
		}); err != nil {
			return err
		}
		if err := d.runAuthorPod(ctx, authorPodName(i), name, res); err != nil {
			return err
		}
	}
	return nil
}

// startAuthorCommand starts a --plugin command pointed at the agent's plugin directory.
func (d *dev) startAuthorCommand(name, command string) error {
	mountAt := ""
	if d.opts.PluginMountNamespace {
		mountAt = plugincheck.KubeletPluginDir
	}
	argv, env, err := plugincheck.CommandLine([]string{"sh", "-c", command}, d.l.pluginDir(), mountAt)
	if err != nil {
		return err
	}
	c, err := startComponentEnv(name, argv[0], argv[1:], env, d.l.logPath(name))
	if err != nil {
		return err
	}
	d.comps = append(d.comps, c)
	return nil
}

// runAuthorPod creates a pod asking for one device of res and waits until it holds one.
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
		var held []string
		what := fmt.Sprintf("the DeviceAllocation of %s to hold one %s", pod, res)
		if err := d.waitFor(ctx, what, []string{agentName, name}, func(ctx context.Context) (bool, string, error) {
			var ok bool
			var seen string
			var err error
			ok, seen, held, err = allocationHoldsOne(ctx, d.c, p, res)
			return ok, seen, err
		}); err != nil {
			return "", err
		}
		what = fmt.Sprintf("the NodeDevice of %s on %s to count 1 allocated", res, NodeName)
		if err := d.waitFor(ctx, what, []string{agentName}, func(ctx context.Context) (bool, string, error) {
			nd, err := nodeDeviceWhere(ctx, d.c, func(r string) bool { return r == res })
			if err != nil || nd == nil {
				return false, "no NodeDevice of " + res, err
			}
			return nd.Status.Allocated == 1, fmt.Sprintf("allocated %d", nd.Status.Allocated), nil
		}); err != nil {
			return "", err
		}
		return "asks for one " + res + ": bound to " + NodeName + ", holds " + strings.Join(held, ","), nil
	})
}

// registerSocket registers a plugin that already runs with the agent, as the plugin would: it
// serves a relay of the plugin's socket in the agent's plugin directory as link (the endpoint must be
// a socket file there, and the agent may refuse symlinks), asks the plugin for its options, and
// calls Register on kubelet.sock. The relay runs until kubedevice dev stops.
func (d *dev) registerSocket(ctx context.Context, link, socket, res string) error {
	abs, err := filepath.Abs(socket)
	if err != nil {
		return fmt.Errorf("resolving %s: %w", socket, err)
	}
	if st, err := os.Stat(abs); err != nil {
		return fmt.Errorf("finding the plugin's socket: %w", err)
	} else if st.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("%s is not a unix socket", abs)
	}
	relay, err := startRelay(filepath.Join(d.l.pluginDir(), link), abs)
	if err != nil {
		return err
	}
	d.relays = append(d.relays, relay)
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

// relay serves a unix socket whose every connection is piped to another socket.
type relay struct {
	ln *net.UnixListener
	wg sync.WaitGroup

	mu     sync.Mutex
	conns  []net.Conn
	closed bool
}

func startRelay(path, target string) (*relay, error) {
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("serving a relay of the plugin's socket: %w", err)
	}
	r := &relay{ln: ln}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("unix", target)
			if err != nil {
				in.Close()
				continue
			}
			r.mu.Lock()
			if r.closed {
				r.mu.Unlock()
				in.Close()
				out.Close()
				return
			}
			r.conns = append(r.conns, in, out)
			r.mu.Unlock()
			r.wg.Add(2)
			go func() { defer r.wg.Done(); _, _ = io.Copy(out, in); _ = out.(*net.UnixConn).CloseWrite() }()
			go func() { defer r.wg.Done(); _, _ = io.Copy(in, out); _ = in.(*net.UnixConn).CloseWrite() }()
		}
	}()
	return r, nil
}

// close stops the relay and its connections, and removes its socket.
func (r *relay) close() {
	_ = r.ln.Close()
	r.mu.Lock()
	r.closed = true
	for _, c := range r.conns {
		_ = c.Close()
	}
	r.mu.Unlock()
	r.wg.Wait()
}

// newNodeDevice returns a NodeDevice of the demo node whose resource is not among known.
func newNodeDevice(ctx context.Context, c client.Client, known []string) (*kdv1alpha1.NodeDevice, error) {
	return nodeDeviceWhere(ctx, c, func(res string) bool { return !slices.Contains(known, res) })
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
