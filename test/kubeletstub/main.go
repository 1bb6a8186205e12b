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

// Command kubeletstub runs the kubelet's own device plugin stub
// (k8s.io/kubernetes/pkg/kubelet/cm/devicemanager/plugin/v1beta1.Stub, k8s.io/kubernetes v1.37.1)
// as a standalone device plugin, so that `kubedevice plugin test` can check it
// (`make plugin-test-kubelet-stub`). It wires the stub exactly as the kubelet's own tests do:
// Start, Register on <plugin-dir>/kubelet.sock, Watch for kubelet.sock to be created again, and
// Stop on SIGTERM. Two things are this binary's own, because the stub leaves them to its caller:
//
//   - the Allocate and GetPreferredAllocation answers (SetAllocFunc, SetGetPreferredAllocFunc): the
//     stub's defaults return empty responses, with no container response at all, which the kubelet
//     rejects ("no containers return in allocation response"); the kubelet's tests always set
//     them;
//   - SIGUSR1 flips the health of the first device and sends the new list with Stub.Update, as the
//     kubelet's tests do to provoke a health change (the checker's --health-change-cmd).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"syscall"

	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	plugin "k8s.io/kubernetes/pkg/kubelet/cm/devicemanager/plugin/v1beta1"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "kubeletstub: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	defaultDir := os.Getenv("KUBEDEVICE_PLUGIN_DIR")
	if defaultDir == "" {
		defaultDir = pluginapi.DevicePluginPath
	}
	var (
		dir        = flag.String("plugin-dir", defaultDir, "The device manager's plugin directory, where kubelet.sock is (default: $KUBEDEVICE_PLUGIN_DIR, else the kubelet's).")
		resource   = flag.String("resource-name", "example.com/kubelet-stub", "Extended resource name.")
		socketName = flag.String("socket-name", "kubelet-stub.sock", "File name of the plugin's socket in --plugin-dir.")
		count      = flag.Int("devices", 2, "Number of devices, named dev-0, dev-1, ...")
		preStart   = flag.Bool("pre-start-required", true, "Ask for PreStartContainer.")
		preferred  = flag.Bool("preferred-allocation", true, "Offer GetPreferredAllocation.")
		defaults   = flag.Bool("stub-default-funcs", false, "Keep the stub's own Allocate and GetPreferredAllocation, which answer empty responses.")
	)
	flag.Parse()
	logger := textlogger.NewLogger(textlogger.NewConfig())
	ctx, stop := signal.NotifyContext(klog.NewContext(context.Background(), logger), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	devs := make([]*pluginapi.Device, *count)
	for i := range devs {
		devs[i] = &pluginapi.Device{ID: fmt.Sprintf("dev-%d", i), Health: pluginapi.Healthy}
	}
	kubeletSocket := filepath.Join(*dir, "kubelet.sock")
	stub := plugin.NewDevicePluginStub(logger, devs, filepath.Join(*dir, *socketName), *resource, *preStart, *preferred)
	if !*defaults {
		stub.SetAllocFunc(allocate)
		stub.SetGetPreferredAllocFunc(preferredAllocation)
	}
	if err := stub.Start(ctx); err != nil {
		return fmt.Errorf("starting the stub: %w", err)
	}
	// pluginSockDir ends with a separator: the stub looks for <pluginSockDir>DEPRECATION.
	if err := stub.Register(ctx, kubeletSocket, *resource, *dir+string(filepath.Separator)); err != nil {
		return fmt.Errorf("registering: %w", err)
	}
	go stub.Watch(ctx, kubeletSocket, *resource, *dir+string(filepath.Separator))

	flips := make(chan os.Signal, 1)
	signal.Notify(flips, syscall.SIGUSR1)
	for {
		select {
		case <-ctx.Done():
			return stub.Stop(logger)
		case <-flips:
			devs = flipFirst(devs)
			logger.Info("Flipped the health of the first device", "device", devs[0].ID, "health", devs[0].Health)
			// Update blocks until a ListAndWatch stream takes the list.
			go stub.Update(devs)
		}
	}
}

// flipFirst returns a copy of devs whose first device has the other health.
func flipFirst(devs []*pluginapi.Device) []*pluginapi.Device {
	out := slices.Clone(devs)
	if len(out) == 0 {
		return out
	}
	health := pluginapi.Unhealthy
	if out[0].Health != pluginapi.Healthy {
		health = pluginapi.Healthy
	}
	out[0] = &pluginapi.Device{ID: out[0].ID, Health: health}
	return out
}

// allocate answers each container with what the kubelet's allocateStubFunc gives (an env per
// device and a device node per device), with absolute host paths.
func allocate(r *pluginapi.AllocateRequest, devs map[string]*pluginapi.Device) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for _, req := range r.GetContainerRequests() {
		c := &pluginapi.ContainerAllocateResponse{Envs: map[string]string{}}
		for _, id := range req.GetDevicesIds() {
			if _, ok := devs[id]; !ok {
				return nil, fmt.Errorf("unknown device %q", id)
			}
			c.Envs["STUB_"+id] = id
			c.Devices = append(c.Devices, &pluginapi.DeviceSpec{ContainerPath: "/dev/" + id, HostPath: "/dev/null", Permissions: "rw"})
		}
		resp.ContainerResponses = append(resp.ContainerResponses, c)
	}
	return resp, nil
}

// preferredAllocation picks the devices that must be included, then the available ones in order.
func preferredAllocation(r *pluginapi.PreferredAllocationRequest, _ map[string]*pluginapi.Device) (*pluginapi.PreferredAllocationResponse, error) {
	resp := &pluginapi.PreferredAllocationResponse{}
	for _, req := range r.GetContainerRequests() {
		size := int(req.GetAllocationSize())
		ids := slices.Clone(req.GetMustIncludeDeviceIDs())
		for _, id := range req.GetAvailableDeviceIDs() {
			if len(ids) >= size {
				break
			}
			if !slices.Contains(ids, id) {
				ids = append(ids, id)
			}
		}
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerPreferredAllocationResponse{DeviceIDs: ids})
	}
	return resp, nil
}
