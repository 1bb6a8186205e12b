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

package registration

import (
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/util/validation"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kubedevice/kubedevice/internal/nodeagent/dptest"
)

// wantResourceName is the kubelet's rule for an extended resource name,
// written out independently of IsExtendedResourceName: a qualified name with a
// domain prefix outside kubernetes.io, whose prefix leaves room for
// "requests." in a DNS subdomain.
func wantResourceName(name string) bool {
	prefix, _, ok := strings.Cut(name, "/")
	return ok && !strings.Contains(name, "kubernetes.io/") && !strings.HasPrefix(name, "requests.") &&
		len(validation.IsQualifiedName(name)) == 0 && len("requests.")+len(prefix) <= validation.DNS1123SubdomainMaxLength
}

// FuzzRegisterRequest feeds plugin-controlled Register requests (protobuf
// bytes) to validateRequest. Properties: it never panics; it accepts exactly
// the requests with a supported version, an extended resource name and an
// endpoint that names a file directly inside the plugin directory (joined to
// it, the endpoint neither leaves the directory nor names it, and holds no NUL,
// at which the kernel would cut the socket path).
func FuzzRegisterRequest(f *testing.F) {
	for _, r := range []*pluginapi.RegisterRequest{
		{Version: pluginapi.Version, Endpoint: "gopher.sock", ResourceName: "example.com/gopher"},
		{Version: pluginapi.Version, Endpoint: "kubelet-stub.sock", ResourceName: "vendor.com/fpga", Options: &pluginapi.DevicePluginOptions{PreStartRequired: true}},
		{Version: "v1alpha", Endpoint: "a.sock", ResourceName: "example.com/a"},
		{Version: pluginapi.Version, Endpoint: "../kubelet.sock", ResourceName: "example.com/a"},
		{Version: pluginapi.Version, Endpoint: "..", ResourceName: "example.com/a"},
		{Version: pluginapi.Version, Endpoint: "a.sock", ResourceName: "kubernetes.io/a"},
		{Version: pluginapi.Version, Endpoint: "a.sock", ResourceName: "requests.example.com/a"},
		{Version: pluginapi.Version, Endpoint: "a.sock", ResourceName: "gopher"},
	} {
		b, err := proto.Marshal(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	const dir = "/var/lib/kubelet/device-plugins"
	f.Fuzz(func(t *testing.T, msg []byte) {
		var req pluginapi.RegisterRequest
		if err := proto.Unmarshal(msg, &req); err != nil {
			return // grpc refuses it before the handler sees it
		}
		err := validateRequest(&req, dir)
		ep := req.GetEndpoint()
		joined := filepath.Join(dir, ep)
		want := slices.Contains(pluginapi.SupportedVersions[:], req.GetVersion()) &&
			wantResourceName(req.GetResourceName()) &&
			ep != "" && filepath.Dir(joined) == dir && filepath.Base(joined) == ep && !strings.ContainsRune(ep, 0)
		if (err == nil) != want {
			t.Fatalf("validateRequest(version %q, resource %q, endpoint %q) = %v, want accepted %v",
				req.GetVersion(), req.GetResourceName(), ep, err, want)
		}
	})
}

// FuzzCheckEndpoint checks plugin-named socket paths against a real plugin
// directory holding a socket, a regular file, a subdirectory with a socket, a
// link to a socket outside and a link to a directory outside. Properties: it
// never panics; whatever it accepts is a clean absolute path strictly inside
// one of the directories, reached through no symbolic link, and a socket when
// it exists.
func FuzzCheckEndpoint(f *testing.F) {
	root := dptest.ShortTempDir(f)
	dir, outside := filepath.Join(root, "dp"), filepath.Join(root, "out")
	for _, d := range []string{filepath.Join(dir, "sub"), outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			f.Fatal(err)
		}
	}
	for _, s := range []string{filepath.Join(dir, "p.sock"), filepath.Join(dir, "sub", "q.sock"), filepath.Join(outside, "runtime.sock")} {
		ln, err := net.Listen("unix", s)
		if err != nil {
			f.Fatal(err)
		}
		f.Cleanup(func() { _ = ln.Close() })
	}
	if err := os.WriteFile(filepath.Join(dir, "file"), nil, 0o600); err != nil {
		f.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "runtime.sock"), filepath.Join(dir, "link.sock")); err != nil {
		f.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "linkdir")); err != nil {
		f.Fatal(err)
	}
	for _, rel := range []string{"p.sock", "sub/q.sock", "link.sock", "linkdir/runtime.sock", "file", "sub", "absent.sock",
		"../out/runtime.sock", "./p.sock", "sub/../p.sock", "", ".", "p.sock\x00", "sub//q.sock"} {
		f.Add(rel, false)
	}
	f.Add("/run/containerd/containerd.sock", true)
	f.Add("relative.sock", true)
	f.Fuzz(func(t *testing.T, path string, raw bool) {
		socket := path
		if !raw {
			socket = dir + "/" + path
		}
		if checkEndpoint(socket, dir, "") != nil {
			return
		}
		if !filepath.IsAbs(socket) || filepath.Clean(socket) != socket || !strings.HasPrefix(socket, dir+"/") {
			t.Fatalf("accepted %q: not a clean path inside %s", socket, dir)
		}
		p := dir
		for _, elem := range strings.Split(strings.TrimPrefix(socket, dir+"/"), "/") {
			p = filepath.Join(p, elem)
			fi, err := os.Lstat(p)
			if err != nil {
				return // absent: the dial fails
			}
			if fi.Mode()&os.ModeSymlink != 0 {
				t.Fatalf("accepted %q through the link %s", socket, p)
			}
		}
		if fi, err := os.Stat(socket); err != nil || fi.Mode()&os.ModeSocket == 0 {
			t.Fatalf("accepted %q, which is not a socket (%v)", socket, err)
		}
	})
}
