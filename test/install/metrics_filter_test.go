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
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/kubedevice/kubedevice/internal/metricsserving"
)

// reviewCounter counts the TokenReviews and SubjectAccessReviews a filter sends.
type reviewCounter struct {
	next http.RoundTripper
	mu   sync.Mutex
	n    map[string]int
}

func (c *reviewCounter) RoundTrip(req *http.Request) (*http.Response, error) {
	for _, r := range []string{"tokenreviews", "subjectaccessreviews"} {
		if req.Method == http.MethodPost && strings.HasSuffix(req.URL.Path, "/"+r) {
			c.mu.Lock()
			c.n[r]++
			c.mu.Unlock()
		}
	}
	return c.next.RoundTrip(req)
}

func (c *reviewCounter) counts() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return fmt.Sprintf("%d TokenReviews, %d SubjectAccessReviews", c.n["tokenreviews"], c.n["subjectaccessreviews"])
}

// TestMetricsFilterAnswersAsTheLibrary runs the same scrapes, one after another, through
// metricsserving's filter and through controller-runtime's filters.WithAuthenticationAndAuthorization
// (which the binaries used before; k8s.io/apiserver's delegating authenticator and authorizer)
// against the real API server with the install's RBAC, and wants the same status code for each
// and the same reviews sent: so the same decisions, and the same caching. It also wants the
// metrics handler never to see the bearer token.
func TestMetricsFilterAnswersAsTheLibrary(t *testing.T) {
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

	// Each filter gets tokens of its own: the review counts start from the same place.
	type scrape struct {
		name, method, auth string
	}
	scrapes := func(reader, nosy string) []scrape {
		return []scrape{
			{"no Authorization header", http.MethodGet, ""},
			{"basic authentication", http.MethodGet, "Basic eDp5"},
			{"an empty bearer token", http.MethodGet, "Bearer "},
			{"a reader's token", http.MethodGet, "Bearer " + reader},
			{"a reader's token again (cached)", http.MethodGet, "Bearer " + reader},
			{"a reader's token, lower-case scheme", http.MethodGet, "bearer " + reader},
			{"a reader's token, POST", http.MethodPost, "Bearer " + reader},
			{"a token not allowed to get /metrics", http.MethodGet, "Bearer " + nosy},
			{"that token again (denial cached)", http.MethodGet, "Bearer " + nosy},
			{"a bad token", http.MethodGet, "Bearer x"},
			{"a bad token again", http.MethodGet, "Bearer x"},
			{"a reader's token with trailing words", http.MethodGet, "Bearer " + reader + " trailing"},
		}
	}

	run := func(name string, provider func(*rest.Config, *http.Client) (metricsserver.Filter, error), reader, nosy string) ([]string, string) {
		t.Helper()
		as := rest.CopyConfig(cfg)
		as.Impersonate = rest.ImpersonationConfig{
			UserName: "system:serviceaccount:" + namespace + ":kubedevice-agent",
			Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
		}
		httpClient, err := rest.HTTPClientFor(as)
		if err != nil {
			t.Fatal(err)
		}
		counter := &reviewCounter{next: httpClient.Transport, n: map[string]int{}}
		httpClient.Transport = counter
		filter, err := provider(as, httpClient)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var sawToken bool
		handler, err := filter(logr.Discard(), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") != "" {
				sawToken = true
			}
			_, _ = io.WriteString(w, "metrics\n")
		}))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		srv := httptest.NewServer(handler)
		defer srv.Close()
		var got []string
		for _, s := range scrapes(reader, nosy) {
			req, err := http.NewRequestWithContext(ctx, s.method, srv.URL+"/metrics", nil)
			if err != nil {
				t.Fatal(err)
			}
			if s.auth != "" {
				req.Header.Set("Authorization", s.auth)
			}
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatalf("%s, %s: %v", name, s.name, err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			got = append(got, fmt.Sprintf("%s: %d (%s)", s.name, resp.StatusCode, counter.counts()))
		}
		if sawToken {
			t.Errorf("%s: the metrics handler saw the bearer token", name)
		}
		return got, counter.counts()
	}

	lib, libCounts := run("controller-runtime's filter", filters.WithAuthenticationAndAuthorization, token("lib-reader", true), token("lib-nosy", false))
	ours, ourCounts := run("metricsserving's filter", metricsserving.WithAuthenticationAndAuthorization, token("our-reader", true), token("our-nosy", false))
	for i := range lib {
		if lib[i] != ours[i] {
			t.Errorf("scrape %d: controller-runtime's filter answered %q, ours %q", i, lib[i], ours[i])
		}
	}
	t.Logf("controller-runtime's filter: %s; ours: %s", libCounts, ourCounts)
	// What the library does, spelled out, so that a change in both shows too.
	want := map[string]int{
		"no Authorization header": http.StatusUnauthorized, "basic authentication": http.StatusUnauthorized,
		"an empty bearer token": http.StatusUnauthorized, "a reader's token": http.StatusOK,
		"a reader's token, POST": http.StatusForbidden, "a token not allowed to get /metrics": http.StatusForbidden,
		"a bad token": http.StatusInternalServerError,
	}
	for _, line := range ours {
		for name, code := range want {
			if strings.HasPrefix(line, name+": ") && !strings.HasPrefix(line, fmt.Sprintf("%s: %d ", name, code)) {
				t.Errorf("%s, want status %d", line, code)
			}
		}
	}
	for _, line := range ours {
		t.Log(line)
	}
}
