//go:build e2enode

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

package e2enode

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	promapi "github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	"sigs.k8s.io/yaml"
)

const (
	// promInterval is the real Prometheus's scrape and rule evaluation interval.
	promInterval = 5 * time.Second
	// promAgentJob and promControllerJob are the jobs the chart's ServiceMonitors give
	// (kubedevice-<component>-metrics, their Services' names), which the rules select.
	promAgentJob      = "kubedevice-agent-metrics"
	promControllerJob = "kubedevice-controller-metrics"
	// promReaderBinding binds the ClusterRole kubedevice-metrics-reader to the suite's Prometheus.
	promReaderBinding = "kubedevice-e2e-prometheus"
)

// promStateOnly are the metrics with a series only once what they count has happened: a corrupt
// checkpoint, a resource held back from the Node's capacity, an eviction by the opt-in remediation
// policy (off in this install). On the healthy node the suite runs they must have none; every
// other selector of the rules and query of the dashboard must return series.
var promStateOnly = []string{"kubedevice_checkpoint_corrupt_total", "kubedevice_node_capacity_held", "kubedevice_remediation_evictions_total"}

// describePrometheus is kubedevice installed with the chart's secure metrics (HTTPS, a token of a
// service account bound to kubedevice-metrics-reader) and scraped by a real Prometheus server on
// the node, configured as the chart's ServiceMonitors configure the Prometheus Operator's, with
// the alerting rules loaded from hack/monitoring/rules.yaml (the PrometheusRule's source).
func describePrometheus() {
	Describe("scraped by a real Prometheus as the chart's ServiceMonitors and rules say", Ordered, Label("prometheus"), Offset(1), func() {
		const label = "prometheus: "
		var (
			ns   string
			prom promv1.API
			base string
		)
		BeforeAll(func(ctx context.Context) {
			setUp(ctx, label, installWithHelmSecureMetrics)
			ns = newNamespace(ctx)
			installGopher(ctx, gopherID, gopherContent)
			createPod(ctx, MakePod("gopher-pod", ns).Limits(gopherResource, 1).Obj())
			watchUntilRunning(ctx, ns, "gopher-pod", 2*time.Minute)
			base = startPrometheus(ctx, ns)
			client, err := promapi.NewClient(promapi.Config{Address: base})
			Expect(err).NotTo(HaveOccurred())
			prom = promv1.NewAPI(client)
		}, NodeTimeout(25*time.Minute))
		AfterEach(func(ctx context.Context) {
			if CurrentSpecReport().Failed() {
				dumpKubedevice(ctx)
			}
		})

		It("1. scrapes the agent and the controller over HTTPS with the metrics reader's token; the agent's series carry the node", func(ctx context.Context) {
			start := time.Now()
			for _, job := range []string{promAgentJob, promControllerJob} {
				Eventually(ctx, func(g Gomega) {
					g.Expect(promQuery(ctx, g, prom, `up{job="`+job+`"} == 1`)).NotTo(BeEmpty(), "job %s not up: %s", job, promTargets(ctx, prom))
				}).WithTimeout(2 * time.Minute).Should(Succeed())
			}
			recordTiming(label+"1. Prometheus started -> agent and controller scraped", time.Since(start))
			info := promQuery(ctx, Default, prom, `kubedevice_agent_device_info{device_id="`+gopherID+`"}`)
			Expect(info).To(HaveLen(1))
			Expect(info[0].Metric).To(And(HaveKeyWithValue(model.LabelName("node"), model.LabelValue(node.Name)),
				HaveKeyWithValue(model.LabelName("pod"), model.LabelValue("gopher-pod")),
				HaveKeyWithValue(model.LabelName("namespace"), model.LabelValue(ns))),
				"the device's holder, not the agent pod, and the node")
		}, SpecTimeout(4*time.Minute))

		It("2. makes KubedeviceDevicesUnhealthy and KubedeviceHeldDeviceUnhealthy pending within one evaluation interval of the unhealthy gopher's first scrape", func(ctx context.Context) {
			gopherFile := filepath.Join(gophersDir(renderedGopherDaemonSet(ctx)), gopherID)
			Expect(os.WriteFile(gopherFile, []byte("unhealthy\n"), 0o644)).To(Succeed())
			marked := time.Now()
			unhealthy := `kubedevice_agent_device_info{health="Unhealthy", device_id="` + gopherID + `"}`
			var scraped time.Time
			Eventually(ctx, func(g Gomega) {
				// The first sample of the series since the file changed (health is a label: the
				// series starts with the change).
				window := fmt.Sprintf("[%ds:1s]", int(time.Since(marked).Seconds())+1)
				v := promQuery(ctx, g, prom, `min_over_time(timestamp(`+unhealthy+`)`+window+`)`)
				g.Expect(v).To(HaveLen(1))
				scraped = time.UnixMilli(int64(float64(v[0].Value) * 1000))
			}).WithTimeout(time.Minute).Should(Succeed())
			recordTiming(label+"2. gopher file unhealthy -> first scrape of the agent showing it", scraped.Sub(marked))
			for _, alert := range []string{"KubedeviceDevicesUnhealthy", "KubedeviceHeldDeviceUnhealthy"} {
				var active time.Time
				Eventually(ctx, func(g Gomega) {
					a := promAlert(ctx, g, prom, alert)
					g.Expect(a).NotTo(BeNil(), "%s not active: %s", alert, promAlerts(ctx, prom))
					g.Expect(a.State).To(Equal(promv1.AlertStatePending))
					g.Expect(a.Labels).To(HaveKeyWithValue(model.LabelName("node"), model.LabelValue(node.Name)))
					active = a.ActiveAt
				}).WithTimeout(time.Minute).WithPolling(100 * time.Millisecond).Should(Succeed())
				recordTiming(label+"2. first unhealthy scrape -> "+alert+" pending", active.Sub(scraped))
				// The first evaluation after the sample was appended: the scrape's own duration
				// (well under a second) may push it to the next one.
				Expect(active.Sub(scraped)).To(BeNumerically("<=", promInterval+time.Second),
					"%s active at %s, the unhealthy gopher first scraped at %s", alert, active, scraped)
			}
		}, SpecTimeout(4*time.Minute))

		It("3. finds series for every selector of every alert and every query of the dashboard, on the live node", func(ctx context.Context) {
			// rate() and increase() need two samples in their window: wait until each job has been
			// scraped three times in the last minute, or a query over a counter scraped once comes
			// back empty however sound it is (spec 2 may end one interval after the first scrape).
			for _, job := range []string{promAgentJob, promControllerJob} {
				Eventually(ctx, func(g Gomega) {
					g.Expect(promQuery(ctx, g, prom, `count_over_time(up{job="`+job+`"}[1m]) >= 3`)).NotTo(BeEmpty(), "job %s scraped fewer than 3 times", job)
				}).WithTimeout(time.Minute).Should(Succeed())
			}
			selectors := promRuleSelectors(ctx, base)
			Expect(selectors).NotTo(BeEmpty())
			queries := promDashboardQueries()
			Expect(queries).NotTo(BeEmpty())
			// Every selector and query is judged before the spec fails, so its message names all
			// the wrong ones.
			var wrong []string
			for _, q := range append(selectors, queries...) {
				got := promQuery(ctx, Default, prom, q)
				switch {
				case promIsStateOnly(q) && len(got) > 0:
					wrong = append(wrong, fmt.Sprintf("%s: nothing happened that it counts, yet it has %v", q, got))
				case !promIsStateOnly(q) && len(got) == 0:
					wrong = append(wrong, q+": no series")
				}
			}
			Expect(wrong).To(BeEmpty(), "alert selectors and dashboard queries on the live node")
			GinkgoWriter.Printf("%d selectors of the alerts and %d queries of the dashboard checked\n", len(selectors), len(queries))
		}, SpecTimeout(3*time.Minute))

		It("4. lets the alerts go once the gopher is healthy again", func(ctx context.Context) {
			gopherFile := filepath.Join(gophersDir(renderedGopherDaemonSet(ctx)), gopherID)
			Expect(os.WriteFile(gopherFile, []byte(gopherContent), 0o644)).To(Succeed())
			healed := time.Now()
			Eventually(ctx, func(g Gomega) {
				for _, alert := range []string{"KubedeviceDevicesUnhealthy", "KubedeviceHeldDeviceUnhealthy"} {
					g.Expect(promAlert(ctx, g, prom, alert)).To(BeNil())
				}
			}).WithTimeout(time.Minute).Should(Succeed())
			recordTiming(label+"4. gopher file healthy -> the alerts gone", time.Since(healed))
			Expect(promAlerts(ctx, prom)).To(BeEmpty(), "no alert on the healthy node")
		}, SpecTimeout(2*time.Minute))
	})
}

// installWithHelmSecureMetrics installs the chart as installWithHelm does, but with the chart's
// default secure metrics (HTTPS, authenticated, authorized), which the Prometheus scrapes.
func installWithHelmSecureMetrics(ctx context.Context) {
	out, err := helm(ctx, append(append([]string{"install", helmRelease, filepath.Join(repoRoot, "charts", "kubedevice"),
		"--namespace", kubedeviceNamespace, "--create-namespace"}, helmValues(image)...), "--set", "metrics.secure=true")...)
	Expect(err).NotTo(HaveOccurred())
	GinkgoWriter.Printf("helm install:\n%s", out)
}

// startPrometheus runs the Prometheus server (E2E_PROMETHEUS, else bin/prometheus: `make
// prometheus`) on the host, with a service account of ns bound to kubedevice-metrics-reader for
// its scrapes' token, and returns its address; it stops when the container ends.
func startPrometheus(ctx context.Context, ns string) string {
	bin := envOr("E2E_PROMETHEUS", filepath.Join(repoRoot, "bin", "prometheus"))
	Expect(bin).To(BeAnExistingFile(), "no prometheus: run make prometheus (hack/e2e-node/install.sh does)")
	dir, err := os.MkdirTemp("", "kubedevice-e2e-prometheus-")
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(os.RemoveAll, dir)

	_, err = kubectl(ctx, "create", "serviceaccount", "prometheus", "-n", ns)
	Expect(err).NotTo(HaveOccurred())
	_, _ = kubectl(ctx, "delete", "clusterrolebinding", promReaderBinding, "--ignore-not-found")
	_, err = kubectl(ctx, "create", "clusterrolebinding", promReaderBinding, "--clusterrole=kubedevice-metrics-reader", "--serviceaccount="+ns+":prometheus")
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func(ctx context.Context) {
		_, err := kubectl(ctx, "delete", "clusterrolebinding", promReaderBinding, "--ignore-not-found")
		Expect(err).NotTo(HaveOccurred())
	})
	token, err := kubectl(ctx, "create", "token", "prometheus", "-n", ns, "--duration=2h")
	Expect(err).NotTo(HaveOccurred())
	Expect(os.WriteFile(filepath.Join(dir, "token"), []byte(strings.TrimSpace(token)), 0o600)).To(Succeed())
	config := filepath.Join(dir, "prometheus.yaml")
	Expect(os.WriteFile(config, promConfig(dir), 0o600)).To(Succeed())

	l, err := net.Listen("tcp", "127.0.0.1:0")
	Expect(err).NotTo(HaveOccurred())
	addr := l.Addr().String()
	Expect(l.Close()).To(Succeed())
	logFile, err := os.Create(filepath.Join(dir, "prometheus.log"))
	Expect(err).NotTo(HaveOccurred())
	cmd := exec.Command(bin, "--config.file="+config, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	Expect(cmd.Start()).To(Succeed())
	DeferCleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		_ = logFile.Close()
		if CurrentSpecReport().Failed() {
			out, _ := os.ReadFile(logFile.Name())
			GinkgoWriter.Printf("prometheus's log:\n%s", out)
		}
	})
	base := "http://" + addr
	Eventually(ctx, func(g Gomega) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/-/ready", nil)
		g.Expect(err).NotTo(HaveOccurred())
		resp, err := http.DefaultClient.Do(req)
		g.Expect(err).NotTo(HaveOccurred())
		_ = resp.Body.Close()
		g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	}).WithTimeout(time.Minute).Should(Succeed())
	return base
}

// promConfig is the Prometheus configuration the chart's ServiceMonitors make the Prometheus
// Operator write, with the pods found directly (the ServiceMonitors find them through their
// headless Services, which select the same pods and port): the `metrics` port of the agent and
// controller pods, over HTTPS with a bearer token, controller-runtime's self-signed certificate
// not verified; the agent's series with the pod's node as `node` and their own namespace, pod and
// container kept (honor_labels, the target's dropped), the controller's with the target's.
func promConfig(dir string) []byte {
	job := func(name, component string, agent bool) map[string]any {
		relabel := []map[string]any{{
			"source_labels": []string{"__meta_kubernetes_pod_label_app_kubernetes_io_component", "__meta_kubernetes_pod_container_port_name"},
			"regex":         component + ";metrics", "action": "keep",
		}}
		if agent {
			relabel = append(relabel, map[string]any{"source_labels": []string{"__meta_kubernetes_pod_node_name"}, "target_label": "node"})
		} else {
			for target, meta := range map[string]string{"namespace": "namespace", "pod": "pod_name", "container": "pod_container_name"} {
				relabel = append(relabel, map[string]any{"source_labels": []string{"__meta_kubernetes_" + meta}, "target_label": target})
			}
		}
		return map[string]any{
			"job_name": name, "scheme": "https", "metrics_path": "/metrics", "honor_labels": agent,
			"tls_config":    map[string]any{"insecure_skip_verify": true},
			"authorization": map[string]any{"type": "Bearer", "credentials_file": filepath.Join(dir, "token")},
			"kubernetes_sd_configs": []map[string]any{{
				"role": "pod", "kubeconfig_file": kubeconfig,
				"namespaces": map[string]any{"names": []string{kubedeviceNamespace}},
			}},
			"relabel_configs": relabel,
		}
	}
	out, err := yaml.Marshal(map[string]any{
		"global":         map[string]any{"scrape_interval": promInterval.String(), "evaluation_interval": promInterval.String()},
		"rule_files":     []string{filepath.Join(repoRoot, "hack", "monitoring", "rules.yaml")},
		"scrape_configs": []any{job(promAgentJob, "agent", true), job(promControllerJob, "controller", false)},
	})
	Expect(err).NotTo(HaveOccurred())
	return out
}

// promQuery runs an instant query and returns its series; it fails on an error or a result that
// is not a vector.
func promQuery(ctx context.Context, g Gomega, prom promv1.API, q string) model.Vector {
	v, _, _, err := prom.Query(ctx, q, time.Now())
	g.Expect(err).NotTo(HaveOccurred(), "query %s", q)
	vec, ok := v.(model.Vector)
	g.Expect(ok).To(BeTrue(), "query %s returned a %s", q, v.Type())
	return vec
}

// promAlert returns the active alert named name (pending or firing), or nil.
func promAlert(ctx context.Context, g Gomega, prom promv1.API, name string) *promv1.Alert {
	res, err := prom.Alerts(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	for i, a := range res.Alerts {
		if string(a.Labels[model.AlertNameLabel]) == name {
			return &res.Alerts[i]
		}
	}
	return nil
}

// promAlerts lists the active alerts, for messages.
func promAlerts(ctx context.Context, prom promv1.API) []string {
	res, err := prom.Alerts(ctx)
	if err != nil {
		return []string{err.Error()}
	}
	var out []string
	for _, a := range res.Alerts {
		out = append(out, fmt.Sprintf("%s %s since %s", a.Labels, a.State, a.ActiveAt.Format(time.RFC3339)))
	}
	return out
}

// promTargets says each target's health and last error, for messages.
func promTargets(ctx context.Context, prom promv1.API) string {
	res, err := prom.Targets(ctx)
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, t := range res.Active {
		out = append(out, fmt.Sprintf("%s %s %s %q", t.Labels["job"], t.ScrapeURL, t.Health, t.LastError))
	}
	return strings.Join(out, "; ")
}

// promIsStateOnly says whether a selector or query reads a metric of promStateOnly.
func promIsStateOnly(q string) bool {
	return slices.ContainsFunc(promStateOnly, func(m string) bool { return strings.Contains(q, m) })
}

// promRuleSelectors returns every series selector of the alerting rules' expressions, as
// Prometheus itself parses them (/api/v1/parse_query), each once.
func promRuleSelectors(ctx context.Context, base string) []string {
	data, err := os.ReadFile(filepath.Join(repoRoot, "hack", "monitoring", "rules.yaml"))
	Expect(err).NotTo(HaveOccurred())
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `json:"alert"`
				Expr  string `json:"expr"`
			} `json:"rules"`
		} `json:"groups"`
	}
	Expect(yaml.Unmarshal(data, &rules)).To(Succeed())
	seen := map[string]bool{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			for _, sel := range promSelectors(promParse(ctx, base, r.Expr)) {
				seen[sel] = true
			}
		}
	}
	out := make([]string, 0, len(seen))
	for sel := range seen {
		out = append(out, sel)
	}
	slices.Sort(out)
	return out
}

// promParse returns the syntax tree Prometheus's /api/v1/parse_query makes of expr.
func promParse(ctx context.Context, base, expr string) any {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/v1/parse_query?"+url.Values{"query": {expr}}.Encode(), nil)
	Expect(err).NotTo(HaveOccurred())
	resp, err := http.DefaultClient.Do(req)
	Expect(err).NotTo(HaveOccurred())
	defer func() { _ = resp.Body.Close() }()
	var body struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   any    `json:"data"`
	}
	Expect(json.NewDecoder(resp.Body).Decode(&body)).To(Succeed())
	Expect(body.Status).To(Equal("success"), "parsing %s: %s", expr, body.Error)
	return body.Data
}

// promSelectors collects the vector and matrix selectors of a parse_query tree, written back as
// instant selectors: {__name__="m", label="v", ...}.
func promSelectors(node any) []string {
	var out []string
	switch n := node.(type) {
	case map[string]any:
		if t := n["type"]; t == "vectorSelector" || t == "matrixSelector" {
			var ms []string
			for _, m := range n["matchers"].([]any) {
				m := m.(map[string]any)
				ms = append(ms, fmt.Sprintf("%s%s%s", m["name"], m["type"], strconv.Quote(m["value"].(string))))
			}
			return []string{"{" + strings.Join(ms, ", ") + "}"}
		}
		for _, v := range n {
			out = append(out, promSelectors(v)...)
		}
	case []any:
		for _, v := range n {
			out = append(out, promSelectors(v)...)
		}
	}
	return out
}

// promDashboardQueries returns the queries of the chart's dashboard with its variables set as
// Grafana sets them for All: the node and resource matchers match everything, and
// $__rate_interval is four scrape intervals and more.
func promDashboardQueries() []string {
	data, err := os.ReadFile(filepath.Join(repoRoot, "charts", "kubedevice", "files", "kubedevice-dashboard.json"))
	Expect(err).NotTo(HaveOccurred())
	var dash struct {
		Panels []struct {
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	Expect(json.Unmarshal(data, &dash)).To(Succeed())
	vars := strings.NewReplacer("$node", ".*", "$resource", ".*", "$__rate_interval", "1m")
	var out []string
	for _, p := range dash.Panels {
		for _, t := range p.Targets {
			out = append(out, vars.Replace(t.Expr))
		}
	}
	return out
}
