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

package nri

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"

	"github.com/containerd/nri/pkg/api"
	"golang.org/x/sys/unix"

	"github.com/kubedevice/kubedevice/internal/nodeagent/poddevices"
)

// defaultPermissions are the device cgroup permissions of a device whose plugin gave none.
const defaultPermissions = "rwm"

// errNotDevice is returned for a host path that is not a character or block device node.
var errNotDevice = errors.New("not a character or block device")

// hostDevice is what a host device node's stat says: what the container's node is made from.
type hostDevice struct {
	// typ is "c" or "b".
	typ          string
	major, minor int64
	// mode is the node's permission bits.
	mode     uint32
	uid, gid uint32
}

// statCache remembers the stat of host device nodes by path, so that the handler makes no system
// call for a device it has seen. refresh looks a path up again; it is called whenever a pod's
// devices are recorded, so a node recreated with another number is seen before the next pod
// uses it.
type statCache struct {
	// root is prefixed to every host path before stat: where the host's device nodes are
	// mounted in the agent's container ("" when the agent sees the host's /dev).
	root string

	mu    sync.RWMutex
	nodes map[string]hostDevice
}

func newStatCache(root string) *statCache {
	return &statCache{root: root, nodes: map[string]hostDevice{}}
}

// get returns the device node at path, from the cache or else from stat.
func (c *statCache) get(path string) (hostDevice, error) {
	c.mu.RLock()
	d, ok := c.nodes[path]
	c.mu.RUnlock()
	if ok {
		return d, nil
	}
	return c.refresh(path)
}

// refresh stats path and caches the result; a path that is no device is dropped from the cache.
func (c *statCache) refresh(path string) (hostDevice, error) {
	d, err := statDevice(filepath.Join(c.root, path))
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		delete(c.nodes, path)
		return hostDevice{}, err
	}
	c.nodes[path] = d
	return d, nil
}

func statDevice(path string) (hostDevice, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return hostDevice{}, fmt.Errorf("getting the status of %s: %w", path, err)
	}
	d := hostDevice{
		major: int64(unix.Major(st.Rdev)),
		minor: int64(unix.Minor(st.Rdev)),
		mode:  st.Mode &^ unix.S_IFMT,
		uid:   st.Uid,
		gid:   st.Gid,
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFCHR:
		d.typ = "c"
	case unix.S_IFBLK:
		d.typ = "b"
	default:
		return hostDevice{}, fmt.Errorf("using %s as a device node: %w", path, errNotDevice)
	}
	return d, nil
}

// adjustment returns the container adjustment that gives a container its devices: envs, bind
// mounts, device nodes with their device cgroup rules, annotations and CDI devices by name.
func adjustment(opts *poddevices.RunContainerOptions, stats *statCache) (*api.ContainerAdjustment, error) {
	adj := &api.ContainerAdjustment{}
	for _, e := range opts.Envs {
		adj.AddEnv(e.Name, e.Value)
	}
	for _, m := range opts.Mounts {
		adj.AddMount(&api.Mount{
			Destination: m.ContainerPath,
			Source:      m.HostPath,
			Type:        "bind",
			Options:     bindOptions(m.ReadOnly),
		})
	}
	for _, d := range opts.Devices {
		node, err := stats.get(d.HostPath)
		if err != nil {
			return nil, fmt.Errorf("adding device %s at %s: %w", d.HostPath, d.ContainerPath, err)
		}
		addDevice(adj, d, node)
	}
	for _, a := range opts.Annotations {
		adj.AddAnnotation(a.Key, a.Value)
	}
	for _, name := range opts.CDIDevices {
		adj.AddCDIDevice(&api.CDIDevice{Name: name})
	}
	return adj, nil
}

// bindOptions are the options containerd's CRI plugin gives the kubelet's bind mounts: recursive,
// private propagation, and read-only or read-write.
func bindOptions(readOnly bool) []string {
	if readOnly {
		return []string{"rbind", "rprivate", "ro"}
	}
	return []string{"rbind", "rprivate", "rw"}
}

// addDevice adds the device node and makes the container's device cgroup allow exactly the
// plugin's permissions on it, as the kubelet's runtime does. NRI allows "rw" ("rwm" for a block
// device) on every device it adds, before the rules of the adjustment's resources: the rules
// added here come after it, so an allow rule grants the plugin's permissions and a deny rule
// takes back what NRI granted beyond them.
func addDevice(adj *api.ContainerAdjustment, d poddevices.DeviceSpec, node hostDevice) {
	adj.AddDevice(&api.LinuxDevice{
		Path:     d.ContainerPath,
		Type:     node.typ,
		Major:    node.major,
		Minor:    node.minor,
		FileMode: api.FileMode(node.mode),
		Uid:      api.UInt32(node.uid),
		Gid:      api.UInt32(node.gid),
	})
	perms := d.Permissions
	if perms == "" {
		perms = defaultPermissions
	}
	if adj.Linux.Resources == nil {
		adj.Linux.Resources = &api.LinuxResources{}
	}
	rule := func(allow bool, access string) *api.LinuxDeviceCgroup {
		return &api.LinuxDeviceCgroup{
			Allow:  allow,
			Type:   node.typ,
			Major:  api.Int64(node.major),
			Minor:  api.Int64(node.minor),
			Access: access,
		}
	}
	adj.Linux.Resources.Devices = append(adj.Linux.Resources.Devices, rule(true, perms))
	granted := "rw"
	if node.typ == "b" {
		granted = "rwm"
	}
	var deny strings.Builder
	for _, a := range granted {
		if !strings.ContainsRune(perms, a) {
			deny.WriteRune(a)
		}
	}
	if deny.Len() > 0 {
		adj.Linux.Resources.Devices = append(adj.Linux.Resources.Devices, rule(false, deny.String()))
	}
}
