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

package metricsserving

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/cache"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/wait"
	authenticationclient "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authorizationclient "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/client-go/rest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// What controller-runtime's filters.WithAuthenticationAndAuthorization configures k8s.io/apiserver's
// delegating authenticator and authorizer with, which this filter does as they do: a TokenReview
// answer cached for a minute (errors not cached), a SubjectAccessReview answer for five minutes
// when allowed and 30 s when not, the TokenReview bounded by 10 s, both retried on transient errors.
const (
	tokenCacheTTL      = time.Minute
	allowCacheTTL      = 5 * time.Minute
	denyCacheTTL       = 30 * time.Second
	tokenReviewTimeout = 10 * time.Second
	// The library's caches hold up to 32×4096 tokens and 8192 decisions; a metrics endpoint sees a
	// handful of scrapers.
	tokenCacheSize    = 4096
	decisionCacheSize = 8192
	// allAuthenticated is the group the API server's authenticators add to every authenticated
	// user (k8s.io/apiserver's user.AllAuthenticated).
	allAuthenticated   = "system:authenticated"
	allUnauthenticated = "system:unauthenticated"
	anonymousUser      = "system:anonymous"
)

// retryBackoff is the library's (k8s.io/apiserver's DefaultAuthWebhookRetryBackoff).
var retryBackoff = wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5}

// errInvalidToken is what k8s.io/apiserver's bearer token authenticator answers for a token the
// TokenReview does not authenticate; the library's filter answers it with 500.
var errInvalidToken = errors.New("invalid bearer token")

// WithAuthenticationAndAuthorization is a metricsserver.Filter that lets a request through when
// the API server authenticates its bearer token (a TokenReview) and authorizes the user to get
// the non-resource URL of the request (a SubjectAccessReview), with the answers, status codes and
// caching of controller-runtime's filters.WithAuthenticationAndAuthorization over k8s.io/apiserver's
// delegating authenticator and authorizer: 401 without a bearer token, 500 with one the API server
// does not authenticate or when a review fails, 403 when the user may not. It makes the same two
// API calls with client-go's typed clients; the library pulls k8s.io/apiserver, CEL, OpenTelemetry
// and more into both binaries for them (docs/design.md, Decisions). A bearer token in a WebSocket
// protocol header, which the library also took, is not looked at: scrapers send the
// Authorization header.
func WithAuthenticationAndAuthorization(config *rest.Config, httpClient *http.Client) (metricsserver.Filter, error) {
	authn, err := authenticationclient.NewForConfigAndClient(config, httpClient)
	if err != nil {
		return nil, err
	}
	authz, err := authorizationclient.NewForConfigAndClient(config, httpClient)
	if err != nil {
		return nil, err
	}
	a := newAuthorizer(authn.TokenReviews(), authz.SubjectAccessReviews())
	return func(log logr.Logger, handler http.Handler) (http.Handler, error) {
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			u, ok, err := a.authenticate(req)
			if err != nil {
				log.Error(err, "Authentication failed")
				http.Error(w, "Authentication failed", http.StatusInternalServerError)
				return
			}
			if !ok {
				log.V(4).Info("Authentication failed")
				http.Error(w, "Unauthorized", http.StatusUnauthorized)
				return
			}
			allowed, reason, err := a.authorize(req.Context(), u, strings.ToLower(req.Method), req.URL.Path)
			if err != nil {
				msg := fmt.Sprintf("Authorization for user %s failed", u.Username)
				log.Error(err, msg)
				http.Error(w, msg, http.StatusInternalServerError)
				return
			}
			if !allowed {
				msg := fmt.Sprintf("Authorization denied for user %s", u.Username)
				log.V(4).Info(fmt.Sprintf("%s: %s", msg, reason))
				http.Error(w, msg, http.StatusForbidden)
				return
			}
			handler.ServeHTTP(w, req)
		}), nil
	}, nil
}

// tokenReviewer and accessReviewer are the two API calls, client-go's typed clients.
type tokenReviewer interface {
	Create(context.Context, *authenticationv1.TokenReview, metav1.CreateOptions) (*authenticationv1.TokenReview, error)
}
type accessReviewer interface {
	Create(context.Context, *authorizationv1.SubjectAccessReview, metav1.CreateOptions) (*authorizationv1.SubjectAccessReview, error)
}

// authorizer asks the API server who a token is and what it may do, and caches the answers.
type authorizer struct {
	tokens    tokenReviewer
	access    accessReviewer
	tokenMu   sync.Mutex
	tokenKey  func(string) string
	tokenMemo *cache.LRUExpireCache // hashed token → *authenticationv1.UserInfo, nil when not authenticated
	decisions *cache.LRUExpireCache // SubjectAccessReviewSpec as JSON → SubjectAccessReviewStatus
}

func newAuthorizer(tokens tokenReviewer, access accessReviewer) *authorizer {
	// Tokens are cached by an HMAC under a random key, as the library does: no token stays in
	// memory, and the key cannot be computed from outside.
	key := make([]byte, 32)
	_, _ = rand.Read(key) // crypto/rand.Read never fails
	mac := hmac.New(sha256.New, key)
	a := &authorizer{
		tokens:    tokens,
		access:    access,
		tokenMemo: cache.NewLRUExpireCache(tokenCacheSize),
		decisions: cache.NewLRUExpireCache(decisionCacheSize),
	}
	a.tokenKey = func(token string) string {
		a.tokenMu.Lock()
		defer a.tokenMu.Unlock()
		mac.Reset()
		mac.Write([]byte(token))
		return string(mac.Sum(nil))
	}
	return a
}

// authenticate returns the user of the request's bearer token, with the group every authenticated
// user has; false without a bearer token; an error when the review failed or did not authenticate
// the token.
func (a *authorizer) authenticate(req *http.Request) (*authenticationv1.UserInfo, bool, error) {
	token, ok := bearerToken(req)
	if !ok {
		return nil, false, nil
	}
	u, err := a.reviewToken(req.Context(), token)
	if err != nil {
		return nil, false, err
	}
	if u == nil {
		return nil, false, errInvalidToken
	}
	// As the library's bearer token authenticator: the token is not handed on.
	req.Header.Del("Authorization")
	return withAuthenticatedGroup(u), true, nil
}

// bearerToken is the token of the request's "Authorization: Bearer" header, read as
// k8s.io/apiserver reads it.
func bearerToken(req *http.Request) (string, bool) {
	auth := strings.TrimSpace(req.Header.Get("Authorization"))
	parts := strings.SplitN(auth, " ", 3)
	if len(parts) < 2 || !strings.EqualFold(parts[0], "bearer") || parts[1] == "" {
		return "", false
	}
	return parts[1], true
}

// reviewToken returns who token is, nil when the API server does not authenticate it; an answer
// is cached for a minute, a failed review (or one that says why it failed) not at all.
func (a *authorizer) reviewToken(ctx context.Context, token string) (*authenticationv1.UserInfo, error) {
	key := a.tokenKey(token)
	if v, ok := a.tokenMemo.Get(key); ok {
		return v.(*authenticationv1.UserInfo), nil
	}
	ctx, cancel := context.WithTimeout(ctx, tokenReviewTimeout)
	defer cancel()
	var res *authenticationv1.TokenReview
	if err := withRetries(ctx, func() (err error) {
		res, err = a.tokens.Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
		return err
	}); err != nil {
		return nil, err
	}
	if !res.Status.Authenticated {
		if res.Status.Error != "" {
			return nil, errors.New(res.Status.Error)
		}
		a.tokenMemo.Add(key, (*authenticationv1.UserInfo)(nil), tokenCacheTTL)
		return nil, nil
	}
	u := res.Status.User
	a.tokenMemo.Add(key, &u, tokenCacheTTL)
	return &u, nil
}

// withAuthenticatedGroup returns u in the group system:authenticated, as the API server's
// authenticators put every authenticated user but the anonymous one.
func withAuthenticatedGroup(u *authenticationv1.UserInfo) *authenticationv1.UserInfo {
	if u.Username == anonymousUser || slices.ContainsFunc(u.Groups, func(g string) bool { return g == allAuthenticated || g == allUnauthenticated }) {
		return u
	}
	out := *u
	out.Groups = append(slices.Clip(u.Groups), allAuthenticated)
	return &out
}

// authorize asks whether u may verb the non-resource path; the answer is cached for five minutes
// when allowed, 30 s when not. A review that both allows and denies is an error, as in the library.
func (a *authorizer) authorize(ctx context.Context, u *authenticationv1.UserInfo, verb, path string) (bool, string, error) {
	spec := authorizationv1.SubjectAccessReviewSpec{
		User: u.Username, UID: u.UID, Groups: u.Groups,
		NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: path, Verb: verb},
	}
	if len(u.Extra) > 0 {
		spec.Extra = make(map[string]authorizationv1.ExtraValue, len(u.Extra))
		for k, v := range u.Extra {
			spec.Extra[k] = authorizationv1.ExtraValue(v)
		}
	}
	key, err := json.Marshal(spec)
	if err != nil {
		return false, "", err
	}
	var st authorizationv1.SubjectAccessReviewStatus
	if v, ok := a.decisions.Get(string(key)); ok {
		st = v.(authorizationv1.SubjectAccessReviewStatus)
	} else {
		var res *authorizationv1.SubjectAccessReview
		if err := withRetries(ctx, func() (err error) {
			res, err = a.access.Create(ctx, &authorizationv1.SubjectAccessReview{Spec: spec}, metav1.CreateOptions{})
			return err
		}); err != nil {
			return false, "", err
		}
		st = res.Status
		ttl := denyCacheTTL
		if st.Allowed {
			ttl = allowCacheTTL
		}
		a.decisions.Add(string(key), st, ttl)
	}
	if st.Allowed && st.Denied {
		return false, st.Reason, errors.New("webhook subject access review returned both allow and deny response")
	}
	return st.Allowed && !st.Denied, st.Reason, nil
}

// withRetries calls review until it succeeds, fails for good, or the backoff is spent, retrying
// the errors k8s.io/apiserver's webhooks retry (webhook.DefaultShouldRetry).
func withRetries(ctx context.Context, review func() error) error {
	var last error
	err := wait.ExponentialBackoffWithContext(ctx, retryBackoff, func(context.Context) (bool, error) {
		last = review()
		switch {
		case last == nil:
			return true, nil
		case transient(last):
			return false, nil
		default:
			return false, last
		}
	})
	switch {
	case last != nil:
		return last
	case err != nil:
		return fmt.Errorf("webhook call failed: %w", err)
	}
	return nil
}

// transient is k8s.io/apiserver's webhook.DefaultShouldRetry.
func transient(err error) bool {
	if utilnet.IsConnectionReset(err) || utilnet.IsHTTP2ConnectionLost(err) || apierrors.IsInternalError(err) ||
		apierrors.IsTimeout(err) || apierrors.IsTooManyRequests(err) {
		return true
	}
	_, retry := apierrors.SuggestsClientDelay(err)
	return retry
}
