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
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/kubedevice/kubedevice/internal/version"
)

// The upgrade and rollback scenario of issue 23 on the real node. The previous release
// (hack/e2e-node/previous-release, a commit of main, built from this clone by
// hack/e2e-node/previous.sh into bin/e2e-node/previous and the image
// docker.io/local/kubedevice:previous) is installed, the Gopher plugin runs with two gophers and a
// pod holds one; kubedevice is upgraded to the tree under test as docs/install.md tells users, a new
// pod gets the other gopher, and kubedevice is rolled back to the previous release, which frees
// and hands out gophers again. Throughout the upgrade and the rollback a watchdog samples the
// cluster every watchdogPeriod: the running pods keep their containers (no restart, no failure),
// their DeviceAllocations stay the same objects naming the same gophers, no gopher is held twice
// (DeviceAllocations, NodeDevice holders, ResourceClaims), and the Node never offers fewer gophers
// than pods hold; afterwards no pod got a Warning event (a refusal) and the DeviceAllocations and
// NodeDevices converge. Three ways: kustomize, Helm (the CRD step before helm upgrade, helm
// rollback), and kustomize with the gophers served through DRA. `-ginkgo.label-filter=upgrade`
// runs them alone.
const (
	// previousImage is the image previous.sh puts the previous release's binaries in.
	previousImage = "docker.io/local/kubedevice:previous"
	// watchdogPeriod is how often the watchdog samples the cluster during an upgrade or rollback.
	watchdogPeriod = 300 * time.Millisecond
)

// previous is the previous release, as hack/e2e-node/previous.sh built it (buildPrevious).
var previous struct {
	built bool
	// version and commit are what hack/e2e-node/previous-release pins ($PREVIOUS_VERSION and
	// $PREVIOUS_COMMIT override them, for previous.sh too); commit is the full one it built.
	version, commit string
	// dir holds its rendered overlays (<overlay>.yaml) and its chart (chart/).
	dir string
}

// buildPrevious runs hack/e2e-node/previous.sh: the previous release's binaries, manifests and
// chart (kept per commit: hack/e2e-node/e2e.sh builds them before the suite) and its image,
// imported into the node's containerd. Once per run.
func buildPrevious(ctx context.Context) {
	if previous.built {
		return
	}
	start := time.Now()
	cmd := exec.CommandContext(ctx, filepath.Join(repoRoot, "hack", "e2e-node", "previous.sh"))
	cmd.Env = append(os.Environ(), "PREVIOUS_IMAGE="+previousImage)
	out, err := cmd.CombinedOutput()
	Expect(err).NotTo(HaveOccurred(), "hack/e2e-node/previous.sh:\n%s", out)
	GinkgoWriter.Printf("%s", out)

	pinned, err := os.ReadFile(filepath.Join(repoRoot, "hack", "e2e-node", "previous-release"))
	Expect(err).NotTo(HaveOccurred())
	var pinnedCommit string
	for _, line := range strings.Split(string(pinned), "\n") {
		if v, ok := strings.CutPrefix(line, "PREVIOUS_VERSION="); ok {
			previous.version = envOr("PREVIOUS_VERSION", v)
		}
		if v, ok := strings.CutPrefix(line, "PREVIOUS_COMMIT="); ok {
			pinnedCommit = v
		}
	}
	Expect(previous.version).NotTo(BeEmpty(), "PREVIOUS_VERSION in hack/e2e-node/previous-release")
	previous.dir = filepath.Join(repoRoot, "bin", "e2e-node", "previous")
	made, err := os.ReadFile(filepath.Join(previous.dir, "commit"))
	Expect(err).NotTo(HaveOccurred())
	previous.commit = strings.TrimSpace(string(made))
	Expect(previous.commit).To(MatchRegexp(`^[0-9a-f]{40}$`), "the commit previous.sh built")
	if os.Getenv("PREVIOUS_COMMIT") == "" {
		Expect(previous.commit).To(Equal(pinnedCommit), "the commit previous.sh built, and the one hack/e2e-node/previous-release pins")
	}
	recordTiming("upgrade: the previous release's binaries, manifests and image (previous.sh)", time.Since(start))
	previous.built = true
}

// upgradePath is one way of installing kubedevice's previous release, upgrading it to the tree
// under test and rolling it back, as docs/install.md says for that way.
type upgradePath struct {
	// name says which way, in the specs' names and timings.
	name string
	// dra: the gophers are served through DRA (no node capacity; pods hold them through claims).
	dra bool
	// helm: installed as a Helm release, whose appVersion says what runs.
	helm                       bool
	install, upgrade, rollback func(ctx context.Context)
}

// kustomizeUpgrade installs the previous release's rendering of the e2e overlay (its
// config/default), upgrades by applying the tree's overlay (`kubectl apply --server-side -k`, CRDs
// included), and rolls back by applying the previous release's rendering again.
func kustomizeUpgrade(name, overlayName string, dra bool) upgradePath {
	applyPrevious := func(ctx context.Context) {
		manifest := filepath.Join(previous.dir, overlayName+".yaml")
		Expect(manifest).To(BeAnExistingFile(), "the previous release has no hack/e2e-node/overlays/%s", overlayName)
		out, err := kubectl(ctx, "apply", "--server-side", "-f", manifest)
		Expect(err).NotTo(HaveOccurred())
		GinkgoWriter.Printf("kubectl apply --server-side -f %s:\n%s", manifest, out)
	}
	return upgradePath{
		name: name, dra: dra,
		install: applyPrevious,
		upgrade: func(ctx context.Context) {
			out, err := kubectl(ctx, "apply", "--server-side", "-k", overlay(overlayName))
			Expect(err).NotTo(HaveOccurred())
			GinkgoWriter.Printf("kubectl apply --server-side -k hack/e2e-node/overlays/%s:\n%s", overlayName, out)
		},
		rollback: applyPrevious,
	}
}

// helmUpgrade installs the previous release's chart, upgrades as docs/install.md says (the CRDs with
// kubectl, as Helm never upgrades crds/, then helm upgrade), and rolls back with helm rollback
// (which leaves the CRDs at the newer version, as it does for users).
func helmUpgrade() upgradePath {
	return upgradePath{
		name: "Helm", helm: true,
		install: func(ctx context.Context) {
			out, err := helm(ctx, append([]string{"install", helmRelease, filepath.Join(previous.dir, "chart"),
				"--namespace", kubedeviceNamespace, "--create-namespace"}, helmValues(previousImage)...)...)
			Expect(err).NotTo(HaveOccurred())
			GinkgoWriter.Printf("helm install (previous release):\n%s", out)
		},
		upgrade: func(ctx context.Context) {
			crds := filepath.Join(repoRoot, "charts", "kubedevice", "crds")
			out, err := kubectl(ctx, "apply", "--server-side", "--force-conflicts", "-f", crds)
			Expect(err).NotTo(HaveOccurred())
			GinkgoWriter.Printf("kubectl apply --server-side --force-conflicts -f charts/kubedevice/crds/:\n%s", out)
			out, err = helm(ctx, append([]string{"upgrade", helmRelease, filepath.Join(repoRoot, "charts", "kubedevice"),
				"--namespace", kubedeviceNamespace}, helmValues(image)...)...)
			Expect(err).NotTo(HaveOccurred())
			GinkgoWriter.Printf("helm upgrade:\n%s", out)
		},
		rollback: func(ctx context.Context) {
			out, err := helm(ctx, "rollback", helmRelease, "--namespace", kubedeviceNamespace)
			Expect(err).NotTo(HaveOccurred())
			GinkgoWriter.Printf("helm rollback:\n%s", out)
		},
	}
}

// describeUpgrade is the upgrade and rollback scenario, run inside "kubedevice on the real node"
// before observe mode's (kubedevice_test.go). Ginkgo runs the containers inside a top-level one
// in the order of their code locations (file, then line), so these carry their callers' (Offset):
// where kubedevice_test.go calls describeUpgrade, and the order of the calls below, not this file's
// name, which sorts after observe_test.go.
func describeUpgrade() {
	Describe("upgraded from the previous release and rolled back", Label("upgrade"), Offset(1), func() {
		describeUpgradePath(kustomizeUpgrade("kustomize", "kubedevice", false))
		describeUpgradePath(helmUpgrade())
		describeUpgradePath(kustomizeUpgrade("kustomize, DRA", "kubedevice-dra", true), Label("dra"))
	})
}

// describeUpgradePath is the scenario for one way of installing.
func describeUpgradePath(path upgradePath, args ...any) {
	Describe("with "+path.name, append([]any{Ordered, Offset(1)}, args...), func() {
		label := "upgrade, " + path.name + ": "
		var ns string
		var before, afterUpgrade held

		BeforeAll(func(ctx context.Context) {
			buildImage(ctx)
			buildPrevious(ctx)
			setUp(ctx, label+"previous release ", func(ctx context.Context) {
				alignBootID()
				path.install(ctx)
			})
			ns = newNamespace(ctx)
		}, NodeTimeout(20*time.Minute))
		AfterEach(func(ctx context.Context) {
			if CurrentSpecReport().Failed() {
				dumpKubedevice(ctx)
			}
		})

		It("1. runs the previous release with two gophers and a pod holding one", func(ctx context.Context) {
			expectRelease(ctx, path, previousRelease())
			servesTwoGophers(ctx, path)
			created := time.Now()
			createPod(ctx, MakePod("before-upgrade", ns).Limits(gopherResource, 1).Obj())
			t := watchUntilRunning(ctx, ns, "before-upgrade", 2*time.Minute)
			recordTiming(label+"1. previous release: pod created -> running with a gopher", t.running.Sub(created))
			before = hold(ctx, ns, "before-upgrade", path.dra)
			expectGopherIDInside(ctx, ns, before.name, before.gopher)
		}, SpecTimeout(5*time.Minute))

		It("2. upgrades to the tree under test: running pods keep their containers and gophers, nothing is held twice, no pod is refused; a new pod gets the other gopher", func(ctx context.Context) {
			transition(ctx, path, label+"2. upgrade", ns, path.upgrade, underTest(), before)
			created := time.Now()
			createPod(ctx, MakePod("after-upgrade", ns).Limits(gopherResource, 1).Obj())
			t := watchUntilRunning(ctx, ns, "after-upgrade", 2*time.Minute)
			recordTiming(label+"2. upgraded: new pod created -> running with a gopher", t.running.Sub(created))
			afterUpgrade = hold(ctx, ns, "after-upgrade", path.dra)
			Expect(afterUpgrade.gopher).NotTo(Equal(before.gopher), "the gopher before-upgrade holds")
			expectGopherIDInside(ctx, ns, afterUpgrade.name, afterUpgrade.gopher)
			expectConverged(ctx, path, before, afterUpgrade)
		}, SpecTimeout(8*time.Minute))

		It("3. rolls back to the previous release: running pods keep their containers and gophers, nothing is held twice, no pod is refused", func(ctx context.Context) {
			transition(ctx, path, label+"3. rollback", ns, path.rollback, previousRelease(), before, afterUpgrade)
		}, SpecTimeout(8*time.Minute))

		It("4. after the rollback, frees a deleted pod's gopher and gives it to a new pod", func(ctx context.Context) {
			start := time.Now()
			deletePod(ctx, ns, afterUpgrade.name)
			expectConverged(ctx, path, before)
			recordTiming(label+"4. rolled back: pod deleted -> its gopher free", time.Since(start))
			created := time.Now()
			createPod(ctx, MakePod("after-rollback", ns).Limits(gopherResource, 1).Obj())
			t := watchUntilRunning(ctx, ns, "after-rollback", 2*time.Minute)
			recordTiming(label+"4. rolled back: new pod created -> running with a gopher", t.running.Sub(created))
			afterRollback := hold(ctx, ns, "after-rollback", path.dra)
			Expect(afterRollback.gopher).To(Equal(afterUpgrade.gopher), "the gopher the deleted pod held")
			expectGopherIDInside(ctx, ns, afterRollback.name, afterRollback.gopher)
			expectConverged(ctx, path, before, afterRollback)
		}, SpecTimeout(5*time.Minute))
	})
}

// transition upgrades or rolls back (change) while the watchdog samples the cluster, and checks
// that want runs afterwards, that the held pods kept their containers and gophers, that the
// DeviceAllocations and NodeDevices converge, and that no pod got a Warning event.
func transition(ctx context.Context, path upgradePath, label, ns string, change func(context.Context), want release, pods ...held) {
	w := startWatchdog(ctx, ns, path.dra, pods)
	start := time.Now()
	change(ctx)
	expectRelease(ctx, path, want)
	ready := time.Since(start)
	expectConverged(ctx, path, pods...)
	converged := time.Since(start)
	recordTiming(label+" applied -> agent and controller of "+want.version+" Ready", ready)
	recordTiming(label+" applied -> DeviceAllocations and NodeDevices converged", converged)
	// A little longer, for what happens once everything looks settled.
	Consistently(ctx, w.violations, 3*time.Second, watchdogPeriod).Should(BeEmpty(), "what the watchdog saw during the %s", label)
	violations, samples := w.stop()
	GinkgoWriter.Printf("%s: the watchdog took %d samples in %s\n", label, samples, time.Since(start).Round(time.Millisecond))
	Expect(violations).To(BeEmpty(), "what the watchdog saw during the %s", label)
	Expect(samples).To(BeNumerically(">=", 5), "the watchdog could hardly sample the cluster")
	Expect(warningsSince(ctx, ns, start)).To(BeEmpty(), "Warning events of the pods during the %s", label)
	reportCheckpointEvents(ctx, label, start)
	for _, h := range pods {
		expectGopherIDInside(ctx, ns, h.name, h.gopher)
		if path.dra {
			Expect(cdiSpecsOf(string(h.claimUID))).NotTo(BeEmpty(), "the CDI spec of %s's claim", h.name)
		}
	}
}

// servesTwoGophers runs the Gopher plugin with two gophers and waits until they are offered: in
// the Node's capacity, or, served through DRA, in kubedevice's ResourceSlices.
func servesTwoGophers(ctx context.Context, path upgradePath) {
	start := time.Now()
	installGopher(ctx, gopherID, gopherContent)
	dir := gophersDir(renderedGopherDaemonSet(ctx))
	Expect(os.WriteFile(filepath.Join(dir, secondGopherID), []byte(gopherContent), 0o644)).To(Succeed())
	if path.dra {
		// Plain limits go through DRA once the controller's DeviceClass names the resource.
		Eventually(ctx, func(g Gomega) {
			devices := gopherSliceDevices(ctx, g)
			g.Expect(devices).To(And(HaveKey(gopherID), HaveKey(secondGopherID)))
			dc := &resourcev1.DeviceClass{}
			g.Expect(kd.Get(ctx, client.ObjectKey{Name: gopherClass}, dc)).To(Succeed())
			g.Expect(dc.Spec.ExtendedResourceName).To(HaveValue(Equal(gopherResource)))
		}).Should(Succeed())
	} else {
		expectNodeGophers(ctx, 2)
	}
	recordTiming("upgrade, "+path.name+": 1. previous release: Gopher plugin applied -> two gophers offered", time.Since(start))
}

// alignBootID makes the boot ID the e2e node keeps for its agent, where it keeps one, the
// kernel's again. An e2e agent that reads its boot ID from that file (--boot-id-path in
// overlays/kubedevice, which a simulated power-on rewrites: hack/e2e-node/node-event.sh) and a
// previous release that reads the kernel's would otherwise disagree, and the upgrade and the
// rollback would look like reboots to the agent. Run with no agent on the node, before the
// previous release is installed.
func alignBootID() {
	file := filepath.Join(envOr("E2E_NODE_DIR", "/var/lib/kubedevice-e2e"), "boot", "boot_id")
	kept, err := os.ReadFile(file)
	if os.IsNotExist(err) {
		return
	}
	Expect(err).NotTo(HaveOccurred())
	kernel, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	Expect(err).NotTo(HaveOccurred())
	if strings.TrimSpace(string(kept)) != strings.TrimSpace(string(kernel)) {
		GinkgoWriter.Printf("the e2e node's boot ID in %s is the kernel's again (%s)\n", file, strings.TrimSpace(string(kernel)))
		Expect(os.WriteFile(file, kernel, 0o644)).To(Succeed())
	}
}

// release is what runs: the agent's and the controller's image, and the version and commit the
// binaries say (kubedevice_build_info, kubedevice version) when they say one.
type release struct {
	image, version, commit string
	// stamped: the binaries report their version (every release from 0.2.0 on).
	stamped bool
	// chart is its Helm chart's directory, whose appVersion a Helm release of it reports.
	chart string
}

// underTest is the tree under test, as buildImage built it.
func underTest() release {
	return release{image: image, version: built.Version, commit: built.Commit, stamped: true,
		chart: filepath.Join(repoRoot, "charts", "kubedevice")}
}

// previousRelease is the previous release. Releases before 0.2.0 report no version; a later
// previous release must report its own.
func previousRelease() release {
	return release{image: previousImage, version: previous.version, commit: previous.commit[:12],
		stamped: !regexp.MustCompile(`^0\.[01]\.`).MatchString(previous.version),
		chart:   filepath.Join(previous.dir, "chart")}
}

// expectRelease waits until the agent and the controller of want are the only ones, and Ready,
// and checks that they say so: the agent's kubedevice_build_info, `kubedevice-agent --version` in
// its container and the controller's start-up log; with Helm, the release's appVersion.
func expectRelease(ctx context.Context, path upgradePath, want release) {
	var agent, ctrl *corev1.Pod
	Eventually(ctx, func(g Gomega) {
		agent = onlyPod(ctx, g, agentSelector, want.image)
		ctrl = onlyPod(ctx, g, controllerSelector, want.image)
	}).WithTimeout(3 * time.Minute).Should(Succeed())
	waitForKubedevice(ctx)
	if path.helm {
		expectHelmAppVersion(ctx, want.chart)
	}

	metrics, err := agentMetrics(ctx, agent)
	Expect(err).NotTo(HaveOccurred())
	labels, ok := buildInfo(metrics)
	if !want.stamped {
		Expect(ok).To(BeFalse(), "release %s exports %s%v", want.version, version.BuildInfoMetric, labels)
		return
	}
	Expect(ok).To(BeTrue(), "the agent exports no %s", version.BuildInfoMetric)
	Expect(labels).To(And(HaveKeyWithValue("version", want.version), HaveKeyWithValue("commit", want.commit)),
		"the agent's %s", version.BuildInfoMetric)

	// The agent's own binary: the kubedevice CLI links controller-runtime's envtest (kubedevice
	// dev), whose init creates a cache directory and panics on the agent's read-only root.
	out, err := execInAgent(ctx, agent, "/usr/local/bin/kubedevice-agent", "--version")
	Expect(err).NotTo(HaveOccurred())
	Expect(out).To(HavePrefix("kubedevice-agent "+want.version+" (commit "+want.commit+","), "kubedevice-agent --version in the image")

	logs, err := kubectl(ctx, "logs", "-n", kubedeviceNamespace, ctrl.Name)
	Expect(err).NotTo(HaveOccurred())
	Expect(logs).To(MatchRegexp(`Starting the manager.*"version":\s*"`+regexp.QuoteMeta(want.version)+`"`),
		"the controller's start-up log names its version")
}

// onlyPod returns the one pod the selector selects in kubedevice's namespace, once it is the only
// one (not being deleted) and Ready, running img.
func onlyPod(ctx context.Context, g Gomega, selector, img string) *corev1.Pod {
	pods, err := clientset.CoreV1().Pods(kubedeviceNamespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(pods.Items).To(HaveLen(1), "pods %s (an old one still there?)", selector)
	pod := &pods.Items[0]
	g.Expect(pod.DeletionTimestamp).To(BeNil())
	g.Expect(pod.Spec.Containers[0].Image).To(Equal(img), "pod %s", pod.Name)
	g.Expect(podReady(pod)).To(BeTrue(), "pod %s: %s", pod.Name, describeStatus(pod))
	return pod
}

// expectHelmAppVersion checks that the deployed Helm release's appVersion (helm list) is the
// chart's in dir.
func expectHelmAppVersion(ctx context.Context, dir string) {
	data, err := os.ReadFile(filepath.Join(dir, "Chart.yaml"))
	Expect(err).NotTo(HaveOccurred())
	var chart struct {
		AppVersion string `json:"appVersion"`
	}
	Expect(yaml.Unmarshal(data, &chart)).To(Succeed())
	want := chart.AppVersion
	Expect(want).NotTo(BeEmpty(), "the appVersion of %s/Chart.yaml", dir)
	out, err := helm(ctx, "list", "--namespace", kubedeviceNamespace, "--output", "json")
	Expect(err).NotTo(HaveOccurred())
	var releases []map[string]any
	Expect(json.Unmarshal([]byte(out), &releases)).To(Succeed(), "helm list: %s", out)
	Expect(releases).To(ContainElement(And(HaveKeyWithValue("name", helmRelease), HaveKeyWithValue("app_version", want))),
		"helm list: %s", out)
}

// buildInfo returns the labels of kubedevice_build_info in a Prometheus text exposition.
func buildInfo(exposition string) (map[string]string, bool) {
	for _, line := range strings.Split(exposition, "\n") {
		rest, ok := strings.CutPrefix(line, version.BuildInfoMetric+"{")
		if !ok {
			continue
		}
		labels := map[string]string{}
		for _, m := range regexp.MustCompile(`(\w+)="([^"]*)"`).FindAllStringSubmatch(rest, -1) {
			labels[m[1]] = m[2]
		}
		return labels, true
	}
	return nil, false
}

// execInAgent runs a command in the agent pod's container.
func execInAgent(ctx context.Context, agent *corev1.Pod, command ...string) (string, error) {
	return kubectl(ctx, append([]string{"exec", "-n", kubedeviceNamespace, agent.Name, "--"}, command...)...)
}
