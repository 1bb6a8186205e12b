package nri

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"
	nrilog "github.com/containerd/nri/pkg/log"
	validator "github.com/containerd/nri/plugins/default-validator/builtin"
	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	"golang.org/x/sys/unix"

	"github.com/kubedevice/kubedevice/internal/nodeagent/poddevices"
)

// fakePods is a PodChecker that knows the pods it was told about, by UID.
type fakePods struct {
	mu    sync.Mutex
	needs map[string]bool
}

func (f *fakePods) NeedsDevices(_ context.Context, _, _, uid string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.needs[uid], nil
}

// runtime is the runtime side of NRI, as containerd runs it: the nri module's adaptation, with
// the default validator enabled, listening on a socket for external plugins.
type runtime struct {
	t      testing.TB
	socket string
	r      *adaptation.Adaptation
}

// startRuntime starts a runtime listening on socket; it stops after the test.
func startRuntime(t testing.TB, socket string) *runtime {
	t.Helper()
	rt := &runtime{t: t, socket: socket}
	rt.start()
	t.Cleanup(rt.stop)
	return rt
}

func (rt *runtime) start() {
	rt.t.Helper()
	dir := filepath.Dir(rt.socket)
	sync := func(ctx context.Context, cb adaptation.SyncCB) error {
		_, err := cb(ctx, nil, nil)
		return err
	}
	update := func(context.Context, []*adaptation.ContainerUpdate) ([]*adaptation.ContainerUpdate, error) {
		return nil, nil
	}
	r, err := adaptation.New("containerd", "v2.4.2", sync, update,
		adaptation.WithSocketPath(rt.socket),
		adaptation.WithPluginPath(filepath.Join(dir, "plugins")),
		adaptation.WithPluginConfigPath(filepath.Join(dir, "conf.d")),
		adaptation.WithDefaultValidator(&validator.DefaultValidatorConfig{Enable: true}),
	)
	if err != nil {
		rt.t.Fatalf("creating the NRI runtime: %v", err)
	}
	if err := r.Start(); err != nil {
		rt.t.Fatalf("starting the NRI runtime: %v", err)
	}
	rt.r = r
}

// stop stops the runtime, closing its plugins' connections, as a containerd restart does.
func (rt *runtime) stop() {
	if rt.r != nil {
		rt.r.Stop()
		rt.r = nil
	}
}

// createContainer asks the runtime's plugins to adjust a container of pod.
func (rt *runtime) createContainer(pod *api.PodSandbox, container string) (*api.ContainerAdjustment, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	resp, err := rt.r.CreateContainer(ctx, &adaptation.CreateContainerRequest{
		Pod:       pod,
		Container: &api.Container{Id: pod.GetUid() + "-" + container, PodSandboxId: pod.GetId(), Name: container},
	})
	if err != nil {
		return nil, err
	}
	return resp.GetAdjust(), nil
}

// startRunner runs a runner for index on socket with short retry delays until the test ends.
func startRunner(t testing.TB, socket string, index *Index, pods PodChecker) *Runner {
	t.Helper()
	opts, err := Options{SocketPath: socket, InitialRetryDelay: 10 * time.Millisecond, MaxRetryDelay: 100 * time.Millisecond, RegistrationTimeout: 5 * time.Second}.Complete()
	if err != nil {
		t.Fatal(err)
	}
	r := NewRunner(opts, index, pods)
	ctx, cancel := context.WithCancel(logr.NewContext(context.Background(), testr.NewWithInterface(t, testr.Options{})))
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return r
}

// waitFor polls cond every 10 ms until it holds or 10 s pass.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// shortDir returns a temporary directory with a path short enough for unix sockets.
func shortDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "nri")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

func sandbox(uid, namespace, name string, annotations map[string]string) *api.PodSandbox {
	return &api.PodSandbox{Id: "sandbox-" + uid, Uid: uid, Namespace: namespace, Name: name, Annotations: annotations}
}

// devNull returns /dev/null as the host stats it.
func devNull(t testing.TB) hostDevice {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat("/dev/null", &st); err != nil {
		t.Fatal(err)
	}
	return hostDevice{typ: "c", major: 1, minor: 3, mode: st.Mode &^ unix.S_IFMT, uid: st.Uid, gid: st.Gid}
}

// gopherOptions are the runtime options of a container holding one device of each kind.
func gopherOptions() *poddevices.RunContainerOptions {
	return &poddevices.RunContainerOptions{
		Envs:        []poddevices.EnvVar{{Name: "GOPHER", Value: "g1"}, {Name: "GOPHER_VISIBLE_DEVICES", Value: "g1"}},
		Mounts:      []poddevices.Mount{{ContainerPath: "/gophers/g1", HostPath: "/var/lib/gophers/g1", ReadOnly: true}, {ContainerPath: "/scratch", HostPath: "/var/lib/gophers/scratch"}},
		Devices:     []poddevices.DeviceSpec{{ContainerPath: "/dev/gopher0", HostPath: "/dev/null", Permissions: "rwm"}},
		Annotations: []poddevices.Annotation{{Key: "example.com/gopher", Value: "g1"}},
		CDIDevices:  []string{"example.com/gopher=g1"},
	}
}

// proxy forwards the connections made to its socket to the runtime's, and can cut them all, as a
// runtime that exits closes its plugins' connections (the adaptation's Stop leaves external
// plugins' connections open: in containerd the process ends).
type proxy struct {
	l      net.Listener
	target string

	mu    sync.Mutex
	conns []net.Conn
}

// startProxy serves socket, forwarding to target, until the test ends.
func startProxy(t testing.TB, socket, target string) *proxy {
	t.Helper()
	l, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{l: l, target: target}
	go p.serve()
	t.Cleanup(func() {
		_ = l.Close()
		p.cut()
	})
	return p
}

func (p *proxy) serve() {
	for {
		in, err := p.l.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("unix", p.target)
		if err != nil {
			_ = in.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, in, out)
		p.mu.Unlock()
		go func() { _, _ = io.Copy(out, in); _ = out.Close() }()
		go func() { _, _ = io.Copy(in, out); _ = in.Close() }()
	}
}

// cut closes every connection made so far.
func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}

// quietLogger drops the NRI runtime's informational messages, which the adaptation logs for every
// plugin connection and request.
type quietLogger struct{}

func (quietLogger) Debugf(context.Context, string, ...any) {}
func (quietLogger) Infof(context.Context, string, ...any)  {}
func (quietLogger) Warnf(_ context.Context, format string, args ...any) {
	fmt.Fprintf(os.Stderr, "nri warning: "+format+"\n", args...)
}
func (quietLogger) Errorf(_ context.Context, format string, args ...any) {
	fmt.Fprintf(os.Stderr, "nri error: "+format+"\n", args...)
}

func TestMain(m *testing.M) {
	nrilog.Set(quietLogger{})
	os.Exit(m.Run())
}
