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

package plugincheck

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

const (
	kubeletSocketName = "kubelet.sock"
	// dialTimeout is the kubelet's: it dials a registering plugin back with a 10 s deadline.
	dialTimeout = 10 * time.Second
)

// registration is one Register call the fake kubelet received, and what came of it.
type registration struct {
	at  time.Time
	req *v1beta1.RegisterRequest
	// rejected is the error the kubelet would have answered, "" when it accepted.
	rejected string
	// conn is the connection to the plugin's endpoint, when the dial back worked; the owner of
	// the registration closes it.
	conn *grpc.ClientConn
	// opts are the plugin's answer to GetDevicePluginOptions during Register.
	opts *v1beta1.DevicePluginOptions
	// watcher is set for a registration through the plugin watcher: the plugin's socket in the
	// plugins registry directory, and the versions its GetInfo answered (req.Version is
	// v1beta1 when they hold it). req.Endpoint is then the absolute path the kubelet dials.
	watcher *watcherInfo
}

// watcherInfo is what a registration through the plugin watcher adds.
type watcherInfo struct {
	socket   string
	versions []string
}

// endpointPath is the socket the kubelet dials for the registration.
func (r *registration) endpointPath(dir string) string {
	if r.watcher != nil {
		return r.req.GetEndpoint()
	}
	return filepath.Join(dir, r.req.GetEndpoint())
}

// fakeKubelet serves the kubelet's Registration service on <dir>/kubelet.sock and does what the
// kubelet does inside Register: it validates the request, dials the endpoint back and calls
// GetDevicePluginOptions, and answers with the kubelet's errors.
type fakeKubelet struct {
	v1beta1.UnimplementedRegistrationServer
	dir     string
	server  *grpc.Server
	regs    chan *registration
	watcher *pluginWatcher

	mu   sync.Mutex
	all  []*registration
	done bool
}

// newFakeKubelet returns the kubelet of the plugin directory dir, with a plugin watcher of
// registryDir when it is not "".
func newFakeKubelet(dir, registryDir string) *fakeKubelet {
	k := &fakeKubelet{dir: dir, regs: make(chan *registration, 16)}
	if registryDir != "" {
		k.watcher = &pluginWatcher{dir: registryDir, k: k}
	}
	return k
}

func (k *fakeKubelet) socketPath() string { return filepath.Join(k.dir, kubeletSocketName) }

// start listens on kubelet.sock, as the kubelet does at its start: it first removes every socket in
// the directory (CleanupPluginDirectory), so that plugins see their socket vanish and
// kubelet.sock appear.
func (k *fakeKubelet) start() error {
	if err := cleanupSockets(k.dir); err != nil {
		return err
	}
	ln, err := net.Listen("unix", k.socketPath())
	if err != nil {
		return fmt.Errorf("listening on %s: %w", k.socketPath(), err)
	}
	k.server = grpc.NewServer()
	v1beta1.RegisterRegistrationServer(k.server, k)
	go func() { _ = k.server.Serve(ln) }()
	if k.watcher != nil {
		return k.watcher.start()
	}
	return nil
}

// stop stops serving and removes kubelet.sock, as a kubelet that goes away leaves it.
func (k *fakeKubelet) stop() {
	if k.watcher != nil {
		k.watcher.stop()
	}
	if k.server != nil {
		k.server.Stop()
		k.server = nil
	}
	_ = os.Remove(k.socketPath())
}

// close stops serving for good and closes every connection it made.
func (k *fakeKubelet) close() {
	k.stop()
	k.mu.Lock()
	defer k.mu.Unlock()
	k.done = true
	for _, r := range k.all {
		if r.conn != nil {
			_ = r.conn.Close()
		}
	}
}

// registrations returns every registration so far.
func (k *fakeKubelet) registrations() []*registration {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]*registration(nil), k.all...)
}

// Register is the kubelet's Register (plugin/v1beta1/server.go): version, then resource name,
// then the synchronous dial back.
func (k *fakeKubelet) Register(ctx context.Context, req *v1beta1.RegisterRequest) (*v1beta1.Empty, error) {
	r := &registration{at: time.Now(), req: req}
	var err error
	switch {
	case req.GetVersion() != v1beta1.Version:
		err = fmt.Errorf("requested API version %q is not supported by kubelet. Supported version is %q", req.GetVersion(), v1beta1.SupportedVersions)
	case len(validateResourceName(req.GetResourceName())) > 0:
		err = fmt.Errorf("the ResourceName %q is invalid", req.GetResourceName())
	default:
		r.conn, r.opts, err = dialPlugin(ctx, filepath.Join(k.dir, req.GetEndpoint()))
	}
	if err != nil {
		r.rejected = err.Error()
	}
	if !k.add(r) {
		return nil, fmt.Errorf("the checker is done")
	}
	if err != nil {
		return nil, err
	}
	return &v1beta1.Empty{}, nil
}

// add records a registration and tells whoever waits for one; false when the checker is done
// (the registration's connection is then closed).
func (k *fakeKubelet) add(r *registration) bool {
	k.mu.Lock()
	if k.done {
		k.mu.Unlock()
		if r.conn != nil {
			_ = r.conn.Close()
		}
		return false
	}
	k.all = append(k.all, r)
	k.mu.Unlock()
	select {
	case k.regs <- r:
	default:
		// Nobody waits for more: the registration is still in registrations().
	}
	return true
}

// dialPlugin connects to a plugin's socket as the kubelet does (a blocking dial of at most 10 s)
// and asks for its options.
func dialPlugin(ctx context.Context, socket string) (*grpc.ClientConn, *v1beta1.DevicePluginOptions, error) {
	ctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	conn, err := grpc.NewClient("passthrough:///"+socket,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithAuthority("localhost"),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", addr)
		}))
	if err != nil {
		return nil, nil, fmt.Errorf("failed to dial device plugin: %w", err)
	}
	opts, err := v1beta1.NewDevicePluginClient(conn).GetDevicePluginOptions(ctx, &v1beta1.Empty{}, grpc.WaitForReady(true))
	if err != nil {
		_ = conn.Close()
		return nil, nil, fmt.Errorf("failed to get device plugin options: %w", err)
	}
	return conn, opts, nil
}

// cleanupSockets removes every socket in dir, as the kubelet's CleanupPluginDirectory does when
// it starts (it follows symlinks and leaves everything else alone).
func cleanupSockets(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("reading the plugin directory: %w", err)
	}
	var errs []string
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		st, err := os.Stat(p)
		if err != nil || st.Mode()&os.ModeSocket == 0 {
			continue
		}
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("removing the sockets of the plugin directory: %s", strings.Join(errs, "; "))
	}
	return nil
}
