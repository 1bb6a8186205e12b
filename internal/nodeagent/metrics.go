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

package nodeagent

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kubedevice/kubedevice/internal/nodeagent/registration"
)

const (
	metricsNamespace = "kubedevice"
	// invalidResourceLabel replaces a resource name that is not a valid
	// extended resource name in the registration counter, so a flood of
	// bogus registrations cannot grow the metric without bound.
	invalidResourceLabel = "<invalid>"
)

// metrics are the manager's collectors. Each Manager has its own, registered
// with Config.Registerer, so tests use a fresh registry.
type metrics struct {
	// registrations counts registration attempts on both paths, before
	// validation (kubelet_device_plugin_registration_total).
	registrations *prometheus.CounterVec
	// allocDuration times the Allocate RPC
	// (kubelet_device_plugin_alloc_duration_seconds), failed calls included.
	allocDuration *prometheus.HistogramVec
	// devices is the number of devices per resource and health.
	devices *prometheus.GaugeVec
	// connected is the number of connected plugin endpoints per resource.
	connected *prometheus.GaugeVec
	// invalidUpdates counts rejected ListAndWatch messages.
	invalidUpdates *prometheus.CounterVec
	// allocationDuration times a whole allocation transaction, from the
	// first reservation to the fsync'd checkpoint.
	allocationDuration *prometheus.HistogramVec
	// checkpointCorrupt counts checkpoint files found corrupt and
	// quarantined.
	checkpointCorrupt *prometheus.CounterVec
	// checkpointWrites counts checkpoint writes.
	checkpointWrites *prometheus.CounterVec
}

// Values of the result label.
const (
	resultSuccess = "success"
	resultError   = "error"
)

func newMetrics() *metrics {
	return &metrics{
		registrations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metricsNamespace,
			Name:      "device_plugin_registration_total",
			Help:      "Number of device plugin registration attempts, counted before validation, by resource name.",
		}, []string{"resource_name"}),
		allocDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: metricsNamespace,
			Name:      "device_plugin_alloc_duration_seconds",
			Help:      "Duration in seconds of the Allocate RPC to device plugins, by resource name.",
			Buckets:   prometheus.DefBuckets,
		}, []string{"resource_name"}),
		devices: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: metricsNamespace,
			Name:      "devices",
			Help:      "Number of devices known to the node agent, by resource name and health.",
		}, []string{"resource_name", "health"}),
		connected: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: metricsNamespace,
			Name:      "device_plugin_connected",
			Help:      "Number of connected device plugin endpoints, by resource name.",
		}, []string{"resource_name"}),
		invalidUpdates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metricsNamespace,
			Name:      "device_plugin_invalid_updates_total",
			Help: "Number of ListAndWatch messages rejected as a whole, by resource name and reason " +
				"(TooManyDevices, EmptyDeviceID, DeviceIDTooLong, InvalidDeviceID, DuplicateDeviceID, MessageTooLarge).",
		}, []string{"resource_name", "reason"}),
		allocationDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: metricsNamespace,
			Name:      "allocation_duration_seconds",
			Help: "Duration in seconds of an allocation by the node agent, from reserving the devices to the fsync'd checkpoint, " +
				"plugin RPCs included, by result (success, error).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"result"}),
		checkpointCorrupt: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metricsNamespace,
			Name:      "checkpoint_corrupt_total",
			Help: "Number of checkpoint files found corrupt (and quarantined, for the agent's own), by reason " +
				"(Unreadable, Empty, Truncated, NotJSON, UnknownFormat, UnknownVersion, ChecksumMismatch, InvalidData).",
		}, []string{"reason"}),
		checkpointWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metricsNamespace,
			Name:      "checkpoint_writes_total",
			Help:      "Number of checkpoint writes (each fsync'd), by result (success, error).",
		}, []string{"result"}),
	}
}

func (m *metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{
		m.registrations, m.allocDuration, m.devices, m.connected, m.invalidUpdates,
		m.allocationDuration, m.checkpointCorrupt, m.checkpointWrites,
	}
}

// register registers every collector with r.
func (m *metrics) register(r prometheus.Registerer) error {
	var errs []error
	for _, c := range m.collectors() {
		if err := r.Register(c); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// countRegistration is the registration server's OnRegistration hook.
func (m *metrics) countRegistration(resourceName string) {
	label := resourceName
	if !registration.IsExtendedResourceName(resourceName) {
		label = invalidResourceLabel
	}
	m.registrations.WithLabelValues(label).Inc()
}

// setResource publishes a resource's gauges.
func (m *metrics) setResource(r *resourceState) {
	m.devices.WithLabelValues(r.name, string(Healthy)).Set(float64(r.healthy.Len()))
	m.devices.WithLabelValues(r.name, string(Unhealthy)).Set(float64(r.unhealthy.Len()))
	m.connected.WithLabelValues(r.name).Set(float64(len(r.endpoints)))
}

// deleteResource drops a removed resource's gauges.
func (m *metrics) deleteResource(name string) {
	m.devices.DeleteLabelValues(name, string(Healthy))
	m.devices.DeleteLabelValues(name, string(Unhealthy))
	m.connected.DeleteLabelValues(name)
}
