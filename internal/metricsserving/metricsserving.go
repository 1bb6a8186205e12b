// Package metricsserving is how the agent and the controller serve their Prometheus metrics:
// with --metrics-secure (the default) over HTTPS, with controller-runtime's self-signed
// certificate, to clients that authenticate (a TokenReview) and may get the non-resource URL
// /metrics (a SubjectAccessReview; the ClusterRole kubedevice-metrics-reader grants it), as
// controller-runtime's secure metrics do; otherwise over plain HTTP to anyone who reaches the
// address. Both binaries' RBAC allow the two reviews.
package metricsserving

import (
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// Options serves the metrics at addr, securely when secure.
func Options(addr string, secure bool) metricsserver.Options {
	o := metricsserver.Options{BindAddress: addr, SecureServing: secure}
	if secure {
		o.FilterProvider = filters.WithAuthenticationAndAuthorization
	}
	return o
}
