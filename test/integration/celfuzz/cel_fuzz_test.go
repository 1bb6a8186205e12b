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

package celfuzz

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
	"github.com/kubedevice/kubedevice/internal/nodeagent/registration"
	"github.com/kubedevice/kubedevice/internal/testutil"
)

var (
	k8sClient client.Client
	seq       atomic.Int64
)

// sharedKubeconfig names, for the fuzzing workers, the kubeconfig of the API server their
// coordinator started: a worker process is ended without returning from m.Run, so one that
// started its own envtest would leave its etcd behind.
const sharedKubeconfig = "KUBEDEVICE_CELFUZZ_KUBECONFIG"

// TestMain starts one envtest API server, in the process that runs the tests or coordinates the
// fuzzing; fuzzing workers connect to it.
func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if path := os.Getenv(sharedKubeconfig); path != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", path)
		if err == nil {
			cfg.QPS, cfg.Burst = 1000, 1000
			k8sClient, err = client.New(cfg, client.Options{Scheme: testutil.Scheme()})
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return m.Run()
	}
	env, err := testutil.NewEnvironment()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cfg, err := env.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting envtest:", err)
		return 1
	}
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping envtest:", err)
		}
	}()
	cfg.QPS, cfg.Burst = 1000, 1000
	if k8sClient, err = client.New(cfg, client.Options{Scheme: env.Scheme}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	dir, err := os.MkdirTemp("", "celfuzz")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "admin"}
	kc.CurrentContext = "envtest"
	path := filepath.Join(dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	os.Setenv(sharedKubeconfig, path)
	return m.Run()
}

// documentedResourceName is the CRD's rule for spec.resourceName as its documentation states it,
// written out by hand: 3 to 317 characters, "<prefix>/<name>" with a prefix of DNS labels
// (lowercase letters, digits, '-', not starting or ending with '-', joined by '.') of at most 244
// characters, a name of 1 to 63 letters, digits, '-', '_' or '.' starting and ending with a letter
// or digit, not in the kubernetes.io namespace and not starting with "requests.".
func documentedResourceName(s string) bool {
	if len(s) < 3 || len(s) > 317 || strings.Contains(s, "kubernetes.io/") || strings.HasPrefix(s, "requests.") {
		return false
	}
	prefix, name, ok := strings.Cut(s, "/")
	if !ok || len(prefix) > 244 || len(name) < 1 || len(name) > 63 {
		return false
	}
	alnum := func(c byte, upper bool) bool {
		return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || upper && c >= 'A' && c <= 'Z'
	}
	for _, label := range strings.Split(prefix, ".") {
		if label == "" || !alnum(label[0], false) || !alnum(label[len(label)-1], false) {
			return false
		}
		for i := range len(label) {
			if !alnum(label[i], false) && label[i] != '-' {
				return false
			}
		}
	}
	if !alnum(name[0], true) || !alnum(name[len(name)-1], true) {
		return false
	}
	for i := range len(name) {
		if c := name[i]; !alnum(c, true) && c != '-' && c != '_' && c != '.' {
			return false
		}
	}
	return true
}

func validNodeName(s string) bool {
	n := utf8.RuneCountInString(s)
	return n >= 1 && n <= 253
}

func validShard(set bool, v int32) bool { return !set || v >= 0 && v <= 1023 }

// FuzzNodeDeviceSpec creates a NodeDevice with the given spec and, when that succeeds, updates its
// spec to the second one, through the API server, and checks each verdict: a create is accepted
// exactly when the documented rules hold (and always when the agent's registration would accept
// the resource name, so every plugin the agent serves can be mirrored); an update exactly when
// nodeName and resourceName are unchanged and a shard once set is unchanged; a refusal is always
// Invalid (422), never a server error.
func FuzzNodeDeviceSpec(f *testing.F) {
	long := strings.Repeat("a", 63)
	for _, seed := range []struct {
		node, res   string
		shardSet    bool
		shard       int32
		node2, res2 string
		shard2Set   bool
		shard2      int32
	}{
		{"n1", "example.com/gopher", false, 0, "n1", "example.com/gopher", true, 0},
		{"n1", "example.com/gopher", true, 3, "n1", "example.com/gopher", true, 4},
		{"n1", "example.com/gopher", true, 3, "n1", "example.com/gopher", false, 0},
		{"n1", "example.com/gopher", false, 0, "n2", "example.com/gopher", false, 0},
		{"n1", "example.com/gopher", false, 0, "n1", "example.com/other", false, 0},
		{"n1", "kubernetes.io/gpu", false, 0, "n1", "kubernetes.io/gpu", false, 0},
		{"n1", "nvidia.kubernetes.io/gpu", false, 0, "n1", "x/y", false, 0},
		{"n1", "requests.example.com/gpu", false, 0, "n1", "x/y", false, 0},
		{"n1", "a/b", true, 1023, "n1", "a/b", true, 1023},
		{"n1", "a/b", true, 1024, "n1", "a/b", true, 1024},
		{"n1", "a/b", true, -1, "n1", "a/b", true, -1},
		{"n1", "Example.com/gpu", false, 0, "n1", "x/y", false, 0},
		{"n1", "example.com/GPU_x.y", false, 0, "n1", "x/y", false, 0},
		{"n1", "example.com/-gpu", false, 0, "n1", "x/y", false, 0},
		{"n1", "example..com/gpu", false, 0, "n1", "x/y", false, 0},
		{"n1", "example.com/" + long, false, 0, "n1", "x/y", false, 0},
		{"n1", "example.com/" + long + "a", false, 0, "n1", "x/y", false, 0},
		{"n1", strings.Repeat(long+".", 3) + strings.Repeat("b", 52) + "/gpu", false, 0, "n1", "x/y", false, 0},
		{"n1", strings.Repeat(long+".", 3) + strings.Repeat("b", 53) + "/gpu", false, 0, "n1", "x/y", false, 0},
		{"n1", strings.Repeat("a", 64) + ".com/gpu", false, 0, "n1", "x/y", false, 0},
		{"n1", "example.com/gpu/x", false, 0, "n1", "x/y", false, 0},
		{"", "example.com/gpu", false, 0, "", "x/y", false, 0},
		{strings.Repeat("n", 254), "example.com/gpu", false, 0, "n1", "x/y", false, 0},
	} {
		f.Add(seed.node, seed.res, seed.shardSet, seed.shard, seed.node2, seed.res2, seed.shard2Set, seed.shard2)
	}
	f.Fuzz(func(t *testing.T, node, res string, shardSet bool, shard int32, node2, res2 string, shard2Set bool, shard2 int32) {
		if !utf8.ValidString(node) || !utf8.ValidString(res) || !utf8.ValidString(node2) || !utf8.ValidString(res2) ||
			strings.ContainsRune(node+node2, 0) {
			t.Skip("JSON carries valid UTF-8 only")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		nd := &kdv1alpha1.NodeDevice{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("fz-%d-%d", os.Getpid(), seq.Add(1))},
			Spec:       kdv1alpha1.NodeDeviceSpec{NodeName: node, ResourceName: res},
		}
		if shardSet {
			nd.Spec.Shard = ptr.To(shard)
		}
		err := k8sClient.Create(ctx, nd)
		want := validNodeName(node) && documentedResourceName(res) && validShard(shardSet, shard)
		if err != nil && !apierrors.IsInvalid(err) {
			t.Fatalf("create %q %q shard %v/%d: not an Invalid refusal: %v", node, res, shardSet, shard, err)
		}
		if (err == nil) != want {
			t.Fatalf("create nodeName %q resourceName %q shard %v/%d: API server says %v, the documented rules say accepted=%v", node, res, shardSet, shard, err, want)
		}
		if validNodeName(node) && validShard(shardSet, shard) && registration.IsExtendedResourceName(res) && err != nil {
			t.Fatalf("resource name %q, accepted by the agent's registration, cannot be mirrored: %v", res, err)
		}
		if err != nil {
			return
		}
		defer func() { _ = k8sClient.Delete(ctx, nd) }()

		upd := nd.DeepCopy()
		upd.Spec.NodeName, upd.Spec.ResourceName, upd.Spec.Shard = node2, res2, nil
		if shard2Set {
			upd.Spec.Shard = ptr.To(shard2)
		}
		err = k8sClient.Update(ctx, upd)
		if err != nil && !apierrors.IsInvalid(err) {
			t.Fatalf("update: not an Invalid refusal: %v", err)
		}
		shardKept := !shardSet || shard2Set && shard2 == shard
		want = node2 == node && res2 == res && shardKept && validShard(shard2Set, shard2)
		if (err == nil) != want {
			t.Fatalf("update %q %q shard %v/%d to %q %q shard %v/%d: API server says %v, the rules say accepted=%v",
				node, res, shardSet, shard, node2, res2, shard2Set, shard2, err, want)
		}
	})
}
