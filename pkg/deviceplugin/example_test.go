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

package deviceplugin_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/klog/v2"
	"k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kubedevice/kubedevice/pkg/deviceplugin"
)

// Example runs a plugin against toyManager, a stand-in for the kubelet's
// device manager that serves kubelet.sock in a temporary directory and
// prints what it sees.
func Example() {
	dir, err := os.MkdirTemp("", "kd")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	manager, err := startToyManager(dir)
	if err != nil {
		panic(err)
	}
	defer manager.stop()

	p, err := deviceplugin.New(deviceplugin.Config{
		ResourceName: "example.com/gopher",
		SocketDir:    dir,
		SocketName:   "gopher.sock",
		Devices: []*v1beta1.Device{
			deviceplugin.Device("gopher-1", true),
			deviceplugin.Device("gopher-0", true),
		},
		Hooks: deviceplugin.Hooks{
			Allocate: func(_ context.Context, ids []string) (*v1beta1.ContainerAllocateResponse, error) {
				return &v1beta1.ContainerAllocateResponse{Envs: map[string]string{"GOPHER": strings.Join(ids, ",")}}, nil
			},
		},
	})
	if err != nil {
		panic(err)
	}
	// Run logs through the context's logger; this example keeps quiet.
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logr.Discard()))
	done := make(chan error)
	go func() { done <- p.Run(ctx) }()

	fmt.Println(manager.next()) // Register
	fmt.Println(manager.next()) // GetDevicePluginOptions
	fmt.Println(manager.next()) // the first ListAndWatch message

	if err := p.SetHealth("gopher-1", false); err != nil {
		panic(err)
	}
	fmt.Println(manager.next())

	envs, err := manager.allocate("gopher-0")
	if err != nil {
		panic(err)
	}
	fmt.Println("allocate gopher-0:", envs)

	cancel()
	if err := <-done; err != nil {
		panic(err)
	}
	fmt.Println(manager.next())
	_, err = os.Stat(p.SocketPath())
	fmt.Println("socket removed:", errors.Is(err, fs.ErrNotExist))

	// Output:
	// register example.com/gopher endpoint=gopher.sock version=v1beta1
	// options preStartRequired=false getPreferredAllocationAvailable=false
	// devices gopher-0=Healthy gopher-1=Healthy
	// devices gopher-0=Healthy gopher-1=Unhealthy
	// allocate gopher-0: map[GOPHER:gopher-0]
	// stream ended
	// socket removed: true
}

// toyManager serves the device manager's Registration service on
// <dir>/kubelet.sock. Like the kubelet, it dials a registering plugin back,
// asks for its options and then watches its devices, and it reports each step
// as a line of text.
type toyManager struct {
	v1beta1.UnimplementedRegistrationServer
	dir    string
	server *grpc.Server
	events chan string
	done   chan struct{}

	mu     sync.Mutex
	plugin v1beta1.DevicePluginClient
	conns  []*grpc.ClientConn
	// cancel ends the current ListAndWatch stream.
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func startToyManager(dir string) (*toyManager, error) {
	ln, err := net.Listen("unix", filepath.Join(dir, deviceplugin.KubeletSocketName))
	if err != nil {
		return nil, err
	}
	m := &toyManager{dir: dir, server: grpc.NewServer(), events: make(chan string, 100), done: make(chan struct{})}
	v1beta1.RegisterRegistrationServer(m.server, m)
	go func() { _ = m.server.Serve(ln) }()
	return m, nil
}

func (m *toyManager) Register(ctx context.Context, req *v1beta1.RegisterRequest) (*v1beta1.Empty, error) {
	m.emit(fmt.Sprintf("register %s endpoint=%s version=%s", req.GetResourceName(), req.GetEndpoint(), req.GetVersion()))
	conn, err := grpc.NewClient("unix://"+filepath.Join(m.dir, req.GetEndpoint()), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	plugin := v1beta1.NewDevicePluginClient(conn)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	opts, err := plugin.GetDevicePluginOptions(ctx, &v1beta1.Empty{})
	if err != nil {
		conn.Close()
		return nil, err
	}
	m.emit(fmt.Sprintf("options preStartRequired=%t getPreferredAllocationAvailable=%t",
		opts.GetPreStartRequired(), opts.GetGetPreferredAllocationAvailable()))

	streamCtx, cancelStream := context.WithCancel(context.Background())
	stream, err := plugin.ListAndWatch(streamCtx, &v1beta1.Empty{})
	if err != nil {
		cancelStream()
		conn.Close()
		return nil, err
	}
	m.mu.Lock()
	m.plugin, m.cancel = plugin, cancelStream
	m.conns = append(m.conns, conn)
	m.mu.Unlock()
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		for {
			resp, err := stream.Recv()
			if err != nil {
				m.emit("stream ended")
				return
			}
			var devs []string
			for _, d := range resp.GetDevices() {
				devs = append(devs, d.GetID()+"="+d.GetHealth())
			}
			m.emit("devices " + strings.Join(devs, " "))
		}
	}()
	return &v1beta1.Empty{}, nil
}

func (m *toyManager) emit(event string) {
	select {
	case m.events <- event:
	case <-m.done:
	}
}

// next returns the next thing the manager saw, or "nothing" after 10 s.
func (m *toyManager) next() string {
	select {
	case e := <-m.events:
		return e
	case <-time.After(10 * time.Second):
		return "nothing"
	}
}

// allocate asks the plugin to allocate ids to one container and returns the
// envs it answered.
func (m *toyManager) allocate(ids ...string) (map[string]string, error) {
	m.mu.Lock()
	plugin := m.plugin
	m.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := plugin.Allocate(ctx, &v1beta1.AllocateRequest{
		ContainerRequests: []*v1beta1.ContainerAllocateRequest{{DevicesIds: ids}},
	})
	if err != nil {
		return nil, err
	}
	return resp.GetContainerResponses()[0].GetEnvs(), nil
}

// dropStream ends the current ListAndWatch stream from the manager's side,
// as a manager does when it forgets a plugin.
func (m *toyManager) dropStream() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cancel != nil {
		m.cancel()
	}
}

func (m *toyManager) stop() {
	close(m.done)
	m.server.Stop()
	m.dropStream()
	m.mu.Lock()
	for _, c := range m.conns {
		c.Close()
	}
	m.mu.Unlock()
	m.wg.Wait()
}
