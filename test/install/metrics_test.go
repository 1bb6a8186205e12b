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

package install

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/kubedevice/kubedevice/internal/metricsserving"
)

// TestMetricsNeedAuthorization installs config/default for real and serves metrics as the agent
// and the controller do by default (metricsserving.Options with --metrics-secure), each as its
// own service account with the RBAC the install gives it: a scrape without a token is refused,
// so is one whose service account may not get /metrics, and one bound to the install's ClusterRole
// kubedevice-metrics-reader gets the metrics.
func TestMetricsNeedAuthorization(t *testing.T) {
	cfg := startAPIServer(t)
	ctx := t.Context()
	installForReal(t)
	admin, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}

	token := func(sa string, reader bool) string {
		t.Helper()
		return metricsToken(t, admin, sa, reader)
	}
	prometheus := token("prometheus", true)
	nosy := token("nosy", false)
	https := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // controller-runtime's self-signed certificate
	}}

	for _, component := range []string{"kubedevice-agent", "kubedevice-controller"} {
		t.Run(component, func(t *testing.T) {
			as := rest.CopyConfig(cfg)
			as.Impersonate = rest.ImpersonationConfig{
				UserName: "system:serviceaccount:" + namespace + ":" + component,
				Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
			}
			httpClient, err := rest.HTTPClientFor(as)
			if err != nil {
				t.Fatal(err)
			}
			addr := freeAddr(t)
			srv, err := metricsserver.NewServer(metricsserving.Options(addr, true), as, httpClient)
			if err != nil {
				t.Fatalf("creating the metrics server: %v", err)
			}
			srvCtx, stop := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- srv.Start(srvCtx) }()
			t.Cleanup(func() {
				stop()
				if err := <-done; err != nil {
					t.Errorf("the metrics server ended with %v", err)
				}
			})

			scrape := func(bearer string) (int, error) {
				req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+"/metrics", nil)
				if err != nil {
					return 0, err
				}
				if bearer != "" {
					req.Header.Set("Authorization", "Bearer "+bearer)
				}
				resp, err := https.Do(req)
				if err != nil {
					return 0, err
				}
				defer resp.Body.Close()
				_, _ = io.Copy(io.Discard, resp.Body)
				return resp.StatusCode, nil
			}
			// The role bindings take effect once the API server's informers have them.
			var code int
			if err := waitFor(20*time.Second, func() error {
				if code, err = scrape(prometheus); err != nil || code != http.StatusOK {
					return fmt.Errorf("status %d: %w", code, errNotYet)
				}
				return nil
			}); err != nil {
				t.Fatalf("scraping with a token allowed to get /metrics: %v (err %v)", code, err)
			}
			// controller-runtime's filter answers 500 for a token the TokenReview cannot validate.
			for name, c := range map[string]struct {
				bearer string
				want   int
			}{
				"no token":                            {"", http.StatusUnauthorized},
				"a token not allowed to get /metrics": {nosy, http.StatusForbidden},
				"a bad token":                         {"x", http.StatusInternalServerError},
			} {
				got, err := scrape(c.bearer)
				if err != nil {
					t.Fatalf("scraping with %s: %v", name, err)
				}
				if got != c.want {
					t.Errorf("scraping with %s: status %d, want %d", name, got, c.want)
				}
			}
		})
	}
}

// freeAddr returns a loopback address with a port nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// metricsToken creates service account sa in the install's namespace and returns a token of it;
// when reader, sa is bound to the install's ClusterRole kubedevice-metrics-reader first, and the
// API server's authorizer is waited for until it allows sa to get /metrics.
func metricsToken(t *testing.T, admin kubernetes.Interface, sa string, reader bool) string {
	t.Helper()
	ctx := t.Context()
	if _, err := admin.CoreV1().ServiceAccounts(namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if reader {
		crb := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: sa},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "kubedevice-metrics-reader"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: namespace}},
		}
		if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// Wait until the API server's authorizer has the binding: a denial is cached.
		if err := waitFor(20*time.Second, func() error {
			sar, err := admin.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User:                  "system:serviceaccount:" + namespace + ":" + sa,
				Groups:                []string{"system:serviceaccounts", "system:authenticated"},
				NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: "/metrics", Verb: "get"},
			}}, metav1.CreateOptions{})
			if err != nil {
				return err
			}
			if !sar.Status.Allowed {
				return errNotYet
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	tr, err := admin.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}
