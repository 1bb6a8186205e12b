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

// Package metricsserving is how the agent and the controller serve their Prometheus metrics:
// with --metrics-secure (the default) over HTTPS, with controller-runtime's self-signed
// certificate, through controller-runtime's filters.WithAuthenticationAndAuthorization: a client
// must authenticate (a TokenReview) and may get the non-resource URL /metrics (a
// SubjectAccessReview; the ClusterRole kubedevice-metrics-reader grants it). Otherwise over plain
// HTTP to anyone who reaches the address. Both binaries' RBAC allow the two reviews, which is all
// the filter needs.
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
