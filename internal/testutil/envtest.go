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

package testutil

import (
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
)

// RepoRoot returns the repository's root directory, found from this source file.
func RepoRoot() string {
	_, file, _, _ := goruntime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// Scheme returns a scheme with the built-in types and kubedevice.io/v1alpha1.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := kdv1alpha1.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}

// NewEnvironment returns an envtest environment that runs the real kube-apiserver and etcd built
// by hack/build-control-plane.sh and installs the kubedevice CRDs. KUBEBUILDER_ASSETS must point
// at the binaries (the Makefile exports it); the error says how to build them otherwise. As in
// envtest, TEST_ASSET_ETCD and TEST_ASSET_KUBE_APISERVER name one binary elsewhere: make
// test-compat runs the oldest supported kube-apiserver (bin/k8s-<minor>) with bin/k8s's etcd.
func NewEnvironment() (*envtest.Environment, error) {
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		assets = filepath.Join(RepoRoot(), "bin", "k8s")
	}
	for _, b := range []struct{ name, override string }{
		{"etcd", "TEST_ASSET_ETCD"},
		{"kube-apiserver", "TEST_ASSET_KUBE_APISERVER"},
	} {
		path := filepath.Join(assets, b.name)
		if p, ok := os.LookupEnv(b.override); ok {
			path = p
		}
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("finding the test control plane's %s (run `make envtest-assets`): %w", b.name, err)
		}
	}
	return &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join(RepoRoot(), "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: assets,
		Scheme:                Scheme(),
	}, nil
}

// KubeVersionEnv names the environment variable that holds the kube-apiserver version a suite must
// run against (the Makefile sets it: KUBE_VERSION, or KUBE_COMPAT_VERSION for make test-compat).
const KubeVersionEnv = "KUBEDEVICE_TEST_KUBE_VERSION"

// CheckServerVersion returns an error when $KUBEDEVICE_TEST_KUBE_VERSION is set and the API server
// at cfg reports another version, so that a suite run against the wrong binaries fails rather than
// passing for a version it never saw.
func CheckServerVersion(cfg *rest.Config) error {
	want := os.Getenv(KubeVersionEnv)
	if want == "" {
		return nil
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return err
	}
	info, err := dc.ServerVersion()
	if err != nil {
		return fmt.Errorf("asking the test API server its version: %w", err)
	}
	if info.GitVersion != want {
		return fmt.Errorf("the test API server is kube-apiserver %s, want %s (%s)", info.GitVersion, want, KubeVersionEnv)
	}
	return nil
}
