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
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// controlPlaneBinaries are what kubedevice dev runs from the control plane directory.
var controlPlaneBinaries = []string{"etcd", "kube-apiserver", "kube-scheduler"}

// buildScript builds the control plane binaries from source; kubedevice dev runs it when it is in
// the working directory (a kubedevice checkout) and binaries are missing.
const buildScript = "hack/build-control-plane.sh"

// Names in the kubeconfig kubedevice dev writes.
const (
	kubeconfigCluster = "kubedevice-dev"
	kubeconfigUser    = "kubedevice-dev-admin"
)

var errControlPlaneMissing = errors.New("control plane binaries missing")

// missingBinaries returns the names among binaries that are not executable files in dir.
func missingBinaries(dir string, binaries []string) []string {
	var missing []string
	for _, b := range binaries {
		fi, err := os.Stat(filepath.Join(dir, b))
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			missing = append(missing, b)
		}
	}
	return missing
}

// ensureControlPlane builds etcd, kube-apiserver and kube-scheduler into dir with
// hack/build-control-plane.sh when any is missing, showing the script's progress on out.
func ensureControlPlane(ctx context.Context, dir string, out io.Writer) error {
	missing := missingBinaries(dir, controlPlaneBinaries)
	if len(missing) == 0 {
		return nil
	}
	if _, err := os.Stat(buildScript); err != nil {
		return fmt.Errorf("finding %s in %s: %w; %s is not in the working directory to build them: "+
			"run `make envtest-assets` in a kubedevice checkout, or pass --k8s-bin-dir",
			strings.Join(missing, ", "), dir, errControlPlaneMissing, buildScript)
	}
	fmt.Fprintf(out, "Building %s into %s with %s (about 6 minutes on 2 cores, once)\n",
		strings.Join(missing, ", "), displayPath(dir), buildScript)
	cmd := exec.CommandContext(ctx, "bash", buildScript, "etcd", "kube-apiserver", "kube-scheduler")
	cmd.Env = append(os.Environ(), "K8S_BIN_DIR="+dir)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("building the control plane with %s: %w", buildScript, err)
	}
	if missing := missingBinaries(dir, controlPlaneBinaries); len(missing) > 0 {
		return fmt.Errorf("building the control plane: %s did not produce %s in %s", buildScript, strings.Join(missing, ", "), dir)
	}
	return nil
}

// controlPlane is etcd and kube-apiserver, run by envtest with certificates, and the admin user's
// configuration.
type controlPlane struct {
	cp    *envtest.ControlPlane
	admin *rest.Config
	logs  []*os.File
}

// startControlPlane starts etcd and kube-apiserver from dir with envtest, their output in the
// layout's logs, and provisions an admin user (system:masters).
func startControlPlane(ctx context.Context, l layout, dir string, timeout time.Duration) (_ *controlPlane, err error) {
	etcdLog, err := os.Create(l.logPath("etcd"))
	if err != nil {
		return nil, fmt.Errorf("creating the log of etcd: %w", err)
	}
	apiLog, err := os.Create(l.logPath("kube-apiserver"))
	if err != nil {
		etcdLog.Close()
		return nil, fmt.Errorf("creating the log of kube-apiserver: %w", err)
	}
	c := &controlPlane{logs: []*os.File{etcdLog, apiLog}}
	c.cp = &envtest.ControlPlane{
		Etcd: &envtest.Etcd{
			Path: filepath.Join(dir, "etcd"), Out: etcdLog, Err: etcdLog,
			StartTimeout: timeout, StopTimeout: stopTimeout,
		},
		APIServer: &envtest.APIServer{
			Path: filepath.Join(dir, "kube-apiserver"), Out: apiLog, Err: apiLog,
			StartTimeout: timeout, StopTimeout: stopTimeout,
		},
	}
	defer func() {
		if err != nil {
			err = fmt.Errorf("%w%s%s", err, logTail("etcd", etcdLog.Name()), logTail("kube-apiserver", apiLog.Name()))
			if stopErr := c.stop(); stopErr != nil {
				err = errors.Join(err, stopErr)
			}
		}
	}()
	if err := c.cp.Start(); err != nil {
		return nil, fmt.Errorf("starting etcd and kube-apiserver: %w", err)
	}
	user, err := c.cp.AddUser(envtest.User{Name: kubeconfigUser, Groups: []string{"system:masters"}},
		&rest.Config{QPS: 50, Burst: 100})
	if err != nil {
		return nil, fmt.Errorf("provisioning the admin user: %w", err)
	}
	c.admin = user.Config()
	if err := waitForDefaultNamespace(ctx, c.admin, timeout); err != nil {
		return nil, err
	}
	return c, nil
}

// waitForDefaultNamespace waits until the API server has created the default namespace, which it
// does a moment after it starts serving.
func waitForDefaultNamespace(ctx context.Context, cfg *rest.Config, timeout time.Duration) error {
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		return fmt.Errorf("creating a client: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		reqCtx, reqCancel := context.WithTimeout(ctx, requestTimeout)
		err := c.Get(reqCtx, client.ObjectKey{Name: PodNamespace}, &corev1.Namespace{})
		reqCancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the API server to create the default namespace: %w (last error: %w)", ctx.Err(), err)
		case <-time.After(pollInterval):
		}
	}
}

// stop stops kube-apiserver, then etcd, and removes their temporary directories.
func (c *controlPlane) stop() error {
	err := c.cp.Stop()
	for _, f := range c.logs {
		f.Close()
	}
	if err != nil {
		return fmt.Errorf("stopping etcd and kube-apiserver: %w", err)
	}
	return nil
}

// writeKubeconfig writes a kubeconfig for cfg (a client certificate user) to path, readable only
// by its owner.
func writeKubeconfig(path string, cfg *rest.Config) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters[kubeconfigCluster] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos[kubeconfigUser] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData}
	kc.Contexts[kubeconfigCluster] = &clientcmdapi.Context{Cluster: kubeconfigCluster, AuthInfo: kubeconfigUser, Namespace: PodNamespace}
	kc.CurrentContext = kubeconfigCluster
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return fmt.Errorf("writing the kubeconfig: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("restricting the kubeconfig to its owner: %w", err)
	}
	return nil
}

// freePort returns a TCP port on 127.0.0.1 that nothing listens on now.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// localAddr is 127.0.0.1:port.
func localAddr(port int) string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

// probeClient reads the components' health endpoints. kube-scheduler serves its own self-signed
// certificate; the probes carry nothing secret.
var probeClient = &http.Client{
	Timeout: requestTimeout,
	Transport: &http.Transport{
		// A local health probe of a server with a self-signed certificate.
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true},
	},
}

// probe returns whether url answers 200, and what it answered otherwise.
func probe(ctx context.Context, url string) (ok bool, seen string, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false, "", fmt.Errorf("building the request: %w", err)
	}
	resp, err := probeClient.Do(req)
	if err != nil {
		return false, "", fmt.Errorf("probing %s: %w", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode == http.StatusOK {
		return true, "", nil
	}
	return false, fmt.Sprintf("%s answered %s: %s", url, resp.Status, strings.TrimSpace(string(body))), nil
}
