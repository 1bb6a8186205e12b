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

package main

import (
	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/table"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
)

// The selectors every query of the dashboard narrows its series with: the agents' series carry
// the node (the ServiceMonitor's relabeling) and the device metrics the resource.
const (
	nodes     = `node=~"$node"`
	resources = `resource=~"$resource"`
	agentJob  = `job="kubedevice-agent-metrics"`
)

// kubedeviceDashboard is kubedevice's dashboard: the devices and who holds them, allocations, plugins, DRA,
// the agents' and the controller's state. Every query reads a metric the binaries export; the
// real-node suite (test/e2e-node, label prometheus) checks each returns series.
//
// It is a classic dashboard (the SDK's dashboard package, which staticcheck reports deprecated in
// favour of dashboardv2): the JSON Grafana's dashboard sidecar provisions and every Grafana reads;
// the v2 schema needs Grafana 12's v2 dashboard API.
func kubedeviceDashboard() *dashboard.DashboardBuilder { //nolint:staticcheck // the classic schema on purpose, see above
	d := dashboard.NewDashboardBuilder("kubedevice") //nolint:staticcheck // the classic schema on purpose, see above
	return d.
		Uid("kubedevice").
		Description("Devices, their health and holders, allocations, device plugins, DRA and the agents of kubedevice's nodes.").
		Tags([]string{"kubedevice", "devices"}).
		Refresh("30s").
		Time("now-3h", "now").
		Timezone(common.TimeZoneBrowser).
		Tooltip(dashboard.DashboardCursorSyncCrosshair).
		WithVariable(dashboard.NewDatasourceVariableBuilder("datasource").Label("Data source").Type("prometheus")).
		WithVariable(labelVariable("node", "Node", `label_values(kubedevice_agent_device_info, node)`)).
		WithVariable(labelVariable("resource", "Resource", `label_values(kubedevice_agent_device_info{`+nodes+`}, resource)`)).
		WithRow(dashboard.NewRowBuilder("Devices")).
		WithPanel(timeSeries("Devices per node and resource", "none",
			"The devices each node's agent knows, by resource and health.",
			query(`sum by (node, resource, health) (kubedevice_agent_device_info{`+nodes+`, `+resources+`})`, "{{node}} {{resource}} {{health}}")).
			Stacking(common.NewStackingConfigBuilder().Mode(common.StackingModeNormal))).
		WithPanel(timeSeries("Device health over time", "none",
			"Healthy and unhealthy devices, by node and resource: a rise of the unhealthy line is a device going bad.",
			query(`sum by (node, resource, health) (kubedevice_agent_device_info{`+nodes+`, `+resources+`})`, "{{node}} {{resource}} {{health}}"))).
		WithPanel(holders()).
		WithRow(dashboard.NewRowBuilder("Allocations")).
		WithPanel(timeSeries("Allocation refusals", "none",
			"Refusals by reason, and the pods waiting now for devices the agent refused them.",
			query(`sum by (node, reason) (increase(kubedevice_agent_allocation_failures_total{`+nodes+`}[$__rate_interval]))`, "{{node}} {{reason}}"),
			query(`kubedevice_agent_refused_pods{`+nodes+`}`, "{{node}} pods waiting"))).
		WithPanel(timeSeries("Allocation latency", "s",
			"99th and 50th percentiles of an allocation, from reserving the devices to the fsync'd checkpoint, and of the plugins' Allocate RPC.",
			query(quantile("0.99", "kubedevice_allocation_duration_seconds_bucket"), "{{node}} p99 allocation"),
			query(quantile("0.5", "kubedevice_allocation_duration_seconds_bucket"), "{{node}} p50 allocation"),
			query(quantile("0.99", "kubedevice_device_plugin_alloc_duration_seconds_bucket"), "{{node}} p99 plugin Allocate"))).
		WithRow(dashboard.NewRowBuilder("Device plugins and DRA")).
		WithPanel(timeSeries("Plugin registrations", "none",
			"Registration attempts of device plugins, and the plugins connected now, by resource.",
			query(`sum by (node, resource_name) (increase(kubedevice_device_plugin_registration_total{`+nodes+`}[$__rate_interval]))`, "{{node}} {{resource_name}} registrations"),
			query(`sum by (node, resource_name) (kubedevice_device_plugin_connected{`+nodes+`})`, "{{node}} {{resource_name}} connected"))).
		WithPanel(timeSeries("DRA prepares", "ops",
			"ResourceClaims the agent's DRA driver prepared, by result; the kubelet retries a failure.",
			query(`sum by (node, result) (rate(kubedevice_agent_dra_prepare_total{`+nodes+`}[$__rate_interval]))`, "{{node}} {{result}}"))).
		WithRow(dashboard.NewRowBuilder("Agents and controller")).
		WithPanel(timeSeries("Agent memory", "bytes",
			"Resident memory and live heap of each node's agent.",
			query(`process_resident_memory_bytes{`+agentJob+`, `+nodes+`}`, "{{node}} resident"),
			query(`go_memstats_heap_inuse_bytes{`+agentJob+`, `+nodes+`}`, "{{node}} heap in use"))).
		WithPanel(timeSeries("Agents ready and capacity", "none",
			"Whether each node's agent Lease is valid (1) as the controller judges it, resources held back from a node's capacity, "+
				"and the controller's capacity writes.",
			query(`min by (node) (kubedevice_node_agent_ready{`+nodes+`})`, "{{node}} agent ready"),
			query(`max by (node, resource, manager) (kubedevice_node_capacity_held{`+nodes+`})`, "{{node}} {{resource}} held by {{manager}}"),
			query(`sum(rate(kubedevice_node_capacity_patches_total[$__rate_interval]))`, "capacity patches/s"))).
		WithPanel(timeSeries("Remediation evictions", "none",
			"Evictions the controller's opt-in --remediate policy asked for, by result: evicted, blocked (a PodDisruptionBudget; asked again) or error.",
			query(`sum by (node, resource, result) (increase(kubedevice_remediation_evictions_total{`+nodes+`, `+resources+`}[$__rate_interval]))`, "{{node}} {{resource}} {{result}}")))
}

// labelVariable is a multi-valued variable of a label's values, All by default.
func labelVariable(name, label, q string) *dashboard.QueryVariableBuilder {
	return dashboard.NewQueryVariableBuilder(name).
		Label(label).
		Query(dashboard.StringOrMap{String: cog.ToPtr(q)}).
		Datasource(datasource()).
		Refresh(dashboard.VariableRefreshOnTimeRangeChanged).
		Sort(dashboard.VariableSortAlphabeticalAsc).
		Multi(true).
		IncludeAll(true).
		AllValue(".*")
}

// holders is the table of who holds what: one row per device, with its health and holder.
func holders() *table.PanelBuilder {
	return table.NewPanelBuilder().
		Title("Who holds what").
		Description("Every device of the selected nodes with its health and the namespace, pod and container holding it (empty when free).").
		Datasource(datasource()).
		Height(10).
		Span(24).
		WithTarget(query(`kubedevice_agent_device_info{`+nodes+`, `+resources+`}`, "").
			Instant().Format(prometheus.PromQueryFormatTable))
}

// timeSeries is a half-width time series panel of the queries.
func timeSeries(title, unit, description string, queries ...*prometheus.DataqueryBuilder) *timeseries.PanelBuilder {
	p := timeseries.NewPanelBuilder().
		Title(title).
		Description(description).
		Datasource(datasource()).
		Unit(unit).
		Min(0).
		Height(8).
		Span(12).
		Legend(common.NewVizLegendOptionsBuilder().ShowLegend(true).DisplayMode(common.LegendDisplayModeList).Placement(common.LegendPlacementBottom)).
		Tooltip(common.NewVizTooltipOptionsBuilder().Mode(common.TooltipDisplayModeMulti).Sort(common.SortOrderDescending))
	for _, q := range queries {
		p.WithTarget(q)
	}
	return p
}

// query is a Prometheus query of the dashboard's data source.
func query(expr, legend string) *prometheus.DataqueryBuilder {
	q := prometheus.NewDataqueryBuilder().Expr(expr).Datasource(datasource())
	if legend != "" {
		q.LegendFormat(legend)
	}
	return q
}

// quantile is the q-quantile of a histogram's buckets per node.
func quantile(q, buckets string) string {
	return `histogram_quantile(` + q + `, sum by (node, le) (rate(` + buckets + `{` + nodes + `}[$__rate_interval])))`
}

// datasource is the dashboard's data source variable.
func datasource() common.DataSourceRef {
	return common.DataSourceRef{Type: cog.ToPtr("prometheus"), Uid: cog.ToPtr("${datasource}")}
}
