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
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// noInjectionGateLabel keeps a pod from being held for kubedevice's NRI plugin.
const noInjectionGateLabel = "kubedevice.io/no-injection-gate"

func toDaemonSet(t *testing.T, u *unstructured.Unstructured) *appsv1.DaemonSet {
	t.Helper()
	ds := &appsv1.DaemonSet{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, ds, true); err != nil {
		t.Fatalf("DaemonSet %s: %v", u.GetName(), err)
	}
	return ds
}

// flags returns a container's --name=value arguments.
func flags(c corev1.Container) map[string]string {
	m := map[string]string{}
	for _, a := range c.Args {
		if k, v, ok := strings.Cut(strings.TrimPrefix(a, "--"), "="); ok {
			m[k] = v
		}
	}
	return m
}

// hostPathAt returns the host path mounted at mountPath in the container, and whether the mount is
// read-only; "" when nothing is mounted there from the host.
func hostPathAt(spec corev1.PodSpec, c corev1.Container, mountPath string) (string, bool) {
	for _, m := range c.VolumeMounts {
		if m.MountPath != mountPath {
			continue
		}
		for _, v := range spec.Volumes {
			if v.Name == m.Name && v.HostPath != nil {
				return v.HostPath.Path, m.ReadOnly
			}
		}
	}
	return "", false
}

// renders are the agent's installs to check: config/default and the chart with each values file.
func renders(t *testing.T) map[string][]*unstructured.Unstructured {
	t.Helper()
	r := map[string][]*unstructured.Unstructured{
		"config/default":     kustomizeBuild(t, filepath.Join(configDir, "default")),
		"config/observe":     kustomizeBuild(t, filepath.Join(configDir, "observe")),
		"chart with default": helmTemplate(t, namespace),
	}
	for _, f := range ciValuesFiles(t) {
		r["chart with "+filepath.Base(f)] = helmTemplate(t, namespace, "--values", f)
	}
	return r
}

// TestAgentIsWiredToTheNode checks, in every install, that the agent's flags and its host paths
// agree: each directory it is told to use (the PodResources API socket's too, unless it is off)
// is the same path on the host, writable; NRI, CDI and
// /dev are mounted exactly when it injects through NRI; it learns its node and namespace from the
// Downward API; it runs as root without privileges; its token is mounted (the node claim the
// admission policy needs rides on it); and its pods are never held for the NRI plugin.
func TestAgentIsWiredToTheNode(t *testing.T) {
	for name, objs := range renders(t) {
		t.Run(name, func(t *testing.T) {
			ds := toDaemonSet(t, find(t, objs, "DaemonSet", "kubedevice-agent"))
			spec := ds.Spec.Template.Spec
			if len(spec.Containers) != 1 {
				t.Fatalf("the agent pod has %d containers, want 1", len(spec.Containers))
			}
			c := spec.Containers[0]
			f := flags(c)
			if f["mode"] == "observe" {
				checkObserveWiring(t, spec, c, f, objs)
				return
			}
			if f["state-dir"] == f["plugin-dir"] {
				t.Errorf("--state-dir=%q is the plugin directory, which every device plugin mounts read-write", f["state-dir"])
			}
			for _, flag := range []string{"plugin-dir", "plugins-registry-dir", "state-dir"} {
				dir := f[flag]
				if !path.IsAbs(dir) {
					t.Errorf("--%s=%q is not an absolute path", flag, dir)
					continue
				}
				if host, ro := hostPathAt(spec, c, dir); host != dir || ro {
					t.Errorf("--%s=%s: mounted from host path %q (read-only %v), want the same path, writable", flag, dir, host, ro)
				}
			}
			if socket, ok := f["pod-resources-socket"]; !ok {
				t.Error("--pod-resources-socket is not set: the PodResources API's socket must be where its host directory is mounted")
			} else if socket == "" {
				if host, _ := hostPathAt(spec, c, "/var/lib/kubedevice/pod-resources"); host != "" {
					t.Error("the PodResources API is off, but its directory is still mounted from the host")
				}
			} else if dir := path.Dir(socket); !path.IsAbs(socket) {
				t.Errorf("--pod-resources-socket=%q is not an absolute path", socket)
			} else if host, ro := hostPathAt(spec, c, dir); host != dir || ro {
				t.Errorf("--pod-resources-socket=%s: its directory is mounted from host path %q (read-only %v), want the same path, writable, for monitoring agents to mount too", socket, host, ro)
			}
			nriDir := path.Dir(f["nri-socket"])
			injects := f["runtime-injection"] == "nri"
			if f["runtime-injection"] != "nri" && f["runtime-injection"] != "none" {
				t.Errorf("--runtime-injection=%q, want nri or none", f["runtime-injection"])
			}
			dra := f["dra-resources"] != ""
			if dra {
				// The DRA driver writes a CDI spec per claim, and the kubelet dials its socket and
				// reads its registration by the paths it names: each the same path, writable.
				for _, dir := range []string{f["cdi-dir"], f["kubelet-plugins-dir"], f["kubelet-registry-dir"]} {
					if host, ro := hostPathAt(spec, c, dir); dir == "" || host != dir || ro {
						t.Errorf("serving through DRA, %q is mounted from host path %q (read-only %v), want the same path, writable", dir, host, ro)
					}
				}
			}
			for _, m := range []struct {
				dir      string
				readOnly bool
			}{{nriDir, false}, {"/etc/cdi", true}, {"/var/run/cdi", true}, {"/dev", true}} {
				if dra && m.dir == f["cdi-dir"] {
					continue
				}
				host, ro := hostPathAt(spec, c, m.dir)
				switch {
				case injects && (host != m.dir || ro != m.readOnly):
					t.Errorf("with NRI injection, %s is mounted from host path %q (read-only %v), want the same path (read-only %v)", m.dir, host, ro, m.readOnly)
				case !injects && host != "":
					t.Errorf("without NRI injection, %s is still mounted from the host", m.dir)
				}
			}
			if injects && strings.HasPrefix(c.TerminationMessagePath, "/dev/") {
				t.Errorf("terminationMessagePath %s is in the host's read-only /dev", c.TerminationMessagePath)
			}

			env := map[string]string{}
			for _, e := range c.Env {
				if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
					env[e.Name] = e.ValueFrom.FieldRef.FieldPath
				}
			}
			if env["NODE_NAME"] != "spec.nodeName" || env["POD_NAMESPACE"] != "metadata.namespace" {
				t.Errorf("Downward API env %v, want NODE_NAME=spec.nodeName and POD_NAMESPACE=metadata.namespace", env)
			}
			if f["node-name"] != "$(NODE_NAME)" || f["namespace"] != "$(POD_NAMESPACE)" {
				t.Errorf("--node-name=%q --namespace=%q, want $(NODE_NAME) and $(POD_NAMESPACE)", f["node-name"], f["namespace"])
			}

			sc := c.SecurityContext
			if sc == nil || sc.RunAsUser == nil || *sc.RunAsUser != 0 {
				t.Errorf("the agent must run as uid 0 (it owns root-only sockets), security context %+v", sc)
			} else if (sc.Privileged != nil && *sc.Privileged) || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
				sc.Capabilities == nil || len(sc.Capabilities.Add) > 0 || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" ||
				sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
				t.Errorf("the agent must be unprivileged, drop ALL capabilities and have a read-only root, security context %+v", sc)
			}
			if spec.HostNetwork || spec.HostPID || spec.HostIPC {
				t.Error("the agent must not use the host's network, PID or IPC namespace")
			}
			if spec.ServiceAccountName != "kubedevice-agent" {
				t.Errorf("serviceAccountName %q, want kubedevice-agent", spec.ServiceAccountName)
			}
			if spec.AutomountServiceAccountToken != nil && !*spec.AutomountServiceAccountToken {
				t.Error("automountServiceAccountToken is off: the agent's bound token carries the node claim the admission policy needs")
			}
			if ds.Spec.Template.Labels[noInjectionGateLabel] != "true" {
				t.Errorf("the agent's pods lack %s: \"true\"", noInjectionGateLabel)
			}
		})
	}
}

// checkObserveWiring checks an agent in observe mode: it reads the kubelet's PodResources socket
// and checkpoint from the same host paths, mounted read-only, and mounts nothing else of the
// host (it registers, allocates and injects nothing); no injection gate is installed, since no
// NRI plugin would ever let the gated pods start.
func checkObserveWiring(t *testing.T, spec corev1.PodSpec, c corev1.Container, f map[string]string, objs []*unstructured.Unstructured) {
	t.Helper()
	mounted := map[string]bool{}
	for _, flag := range []string{"kubelet-pod-resources-socket", "kubelet-checkpoint"} {
		p := f[flag]
		if !path.IsAbs(p) {
			t.Errorf("--%s=%q is not an absolute path", flag, p)
			continue
		}
		dir := path.Dir(p)
		if host, ro := hostPathAt(spec, c, dir); host != dir || !ro {
			t.Errorf("--%s=%s: its directory is mounted from host path %q (read-only %v), want the same path, read-only", flag, p, host, ro)
		}
		mounted[dir] = true
	}
	for _, v := range spec.Volumes {
		if v.HostPath != nil && !mounted[v.HostPath.Path] {
			t.Errorf("in observe mode the agent mounts host path %s, which it does not read", v.HostPath.Path)
		}
	}
	for _, u := range objs {
		if u.GetName() == "kubedevice-injection-gate" || (u.GetKind() == "ConfigMap" && u.GetName() == "kubedevice-admission") {
			t.Errorf("observe mode installs %s %s: the gated pods would wait for an NRI plugin that never connects", u.GetKind(), u.GetName())
		}
	}
}

// TestGopherSampleRegistersWithKubedevice checks the Gopher sample against config/default: the
// unmodified plugin (no --plugin-dir) finds kubedevice because kubedevice's host plugin directory
// is mounted at the kubelet's path; the gophers directory is mounted at the same path as on the
// host (the plugin's Allocate names files by the path it sees); it runs the same image as the
// agent; and its pods are never held for the NRI plugin.
func TestGopherSampleRegistersWithKubedevice(t *testing.T) {
	sample := kustomizeBuild(t, filepath.Join(configDir, "samples", "gopher"))
	agent := toDaemonSet(t, find(t, kustomizeBuild(t, filepath.Join(configDir, "default")), "DaemonSet", "kubedevice-agent"))
	agentPluginDir := flags(agent.Spec.Template.Spec.Containers[0])["plugin-dir"]

	ds := toDaemonSet(t, find(t, sample, "DaemonSet", "gopher-device-plugin"))
	spec := ds.Spec.Template.Spec
	c := spec.Containers[0]
	f := flags(c)
	if _, ok := f["plugin-dir"]; ok {
		t.Errorf("the sample passes --plugin-dir=%s: it should run as an unmodified plugin does, with the kubelet's default", f["plugin-dir"])
	}
	if host, ro := hostPathAt(spec, c, "/var/lib/kubelet/device-plugins"); host != agentPluginDir || ro {
		t.Errorf("/var/lib/kubelet/device-plugins is mounted from host path %q (read-only %v), want the agent's --plugin-dir %s, writable", host, ro, agentPluginDir)
	}
	gophers := f["gophers-dir"]
	if host, _ := hostPathAt(spec, c, gophers); gophers == "" || host != gophers {
		t.Errorf("--gophers-dir=%q is mounted from host path %q, want the same path", gophers, host)
	}
	if got, want := c.Image, agent.Spec.Template.Spec.Containers[0].Image; got != want {
		t.Errorf("the sample runs image %s, the agent %s", got, want)
	}
	if len(c.Command) != 1 || c.Command[0] != "/usr/local/bin/gopher-device-plugin" {
		t.Errorf("command %v, want /usr/local/bin/gopher-device-plugin", c.Command)
	}
	if ds.Spec.Template.Labels[noInjectionGateLabel] != "true" {
		t.Errorf("the plugin's pods lack %s: \"true\"", noInjectionGateLabel)
	}
	if sc := c.SecurityContext; sc == nil || sc.RunAsUser == nil || *sc.RunAsUser != 0 {
		t.Errorf("the plugin must run as root, as the device manager whose directory it writes into; security context %+v", sc)
	}
}

// TestImagePathsAgree checks that every install runs the binaries where the image has them: the
// Dockerfile installs them in /usr/local/bin, as `make image` does.
func TestImagePathsAgree(t *testing.T) {
	dockerfile, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^COPY --from=build /out/ /usr/local/bin/$`).Match(dockerfile) {
		t.Error("the Dockerfile no longer installs the binaries in /usr/local/bin/")
	}
	binaries, err := os.ReadDir(filepath.Join(root, "cmd"))
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, b := range binaries {
		have["/usr/local/bin/"+b.Name()] = true
	}
	objs := append(kustomizeBuild(t, filepath.Join(configDir, "default")), kustomizeBuild(t, filepath.Join(configDir, "samples", "gopher"))...)
	objs = append(objs, helmTemplate(t, namespace)...)
	for _, u := range objs {
		containers, found, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
		if !found {
			continue
		}
		for _, c := range containers {
			cmd, _, _ := unstructured.NestedStringSlice(c.(map[string]any), "command")
			if len(cmd) == 0 || !have[cmd[0]] {
				t.Errorf("%s runs %v, not one of the image's binaries (/usr/local/bin/<cmd/ directory>)", key(u), cmd)
			}
		}
	}
}

// omittedFlags are the flags of the agent and the controller that the installs leave at their
// defaults on purpose: the in-cluster configuration, logging, --nri-host-root (the agent sees
// the host's /dev at /dev), --allocate-policy (an administrator's opt-in file, mounted by
// them; without it the agent checks the structure of Allocate responses only:
// docs/decisions/0021-trust-model-for-device-plugins.md), and --topology-policy-options (none means the kubelet's defaults; the chart
// passes agent.topologyPolicyOptions only when set, and config/agent shows it commented out).
var omittedFlags = map[string]bool{
	"allocate-policy":         true,
	"topology-policy-options": true,
	"kubeconfig":              true,
	"zap-devel":               true,
	"zap-encoder":             true,
	"zap-log-level":           true,
	"zap-stacktrace-level":    true,
	"zap-time-encoding":       true,
	"nri-host-root":           true,
	// Observe mode's: config/observe passes them, config/default runs the default mode.
	"mode":                         true,
	"observe-resources":            true,
	"kubelet-pod-resources-socket": true,
	"kubelet-checkpoint":           true,
	// DRA's: config/components/dra passes them (the chart with agent.draResources); config/default
	// serves every resource through node capacity.
	"dra-resources":        true,
	"dra-node-selector":    true,
	"kubelet-plugins-dir":  true,
	"kubelet-registry-dir": true,
	"cdi-dir":              true,
	// The controller's remediation policy: off unless an administrator names a resource with
	// --remediate (an opt-in, like --allocate-policy); its intervals matter only then.
	"remediate":                    true,
	"remediation-node-interval":    true,
	"remediation-cluster-interval": true,
	// Profiling, off unless asked for.
	"pprof-bind-address": true,
	// Prints the version and exits: for a person, not a container.
	"version": true,
	// The kernel's boot ID by default; another file only to simulate a reboot (test/e2e-node).
	"boot-id-path": true,
}

// binaryFlags builds the commands and returns the names of the flags each defines, from its -h
// output, by the path the image has it at. It builds as test/e2e does (with the race detector when
// the test runs with it), so `make test` compiles the dependencies once for both.
func binaryFlags(t *testing.T, names ...string) map[string]map[string]bool {
	t.Helper()
	dir := t.TempDir()
	args := []string{"build", "-o", dir + "/"}
	if raceEnabled {
		args = append(args, "-race")
	}
	for _, n := range names {
		args = append(args, "./cmd/"+n)
	}
	build := exec.Command("go", args...)
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	flagLine := regexp.MustCompile(`(?m)^  -([a-z0-9-]+)`)
	defined := map[string]map[string]bool{}
	for _, n := range names {
		out, _ := exec.Command(filepath.Join(dir, n), "-h").CombinedOutput() // exits 0 or 2 after the usage
		defined["/usr/local/bin/"+n] = flagsIn(t, n, flagLine, out)
	}
	return defined
}

// subcommandFlags builds cmd/kubedevice and returns the names of the flags of each subcommand,
// from its --help (cobra's), by the command line the image runs it with.
func subcommandFlags(t *testing.T, subcommands ...string) map[string]map[string]bool {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "kubedevice")
	build := exec.Command("go", "build", "-o", bin, "./cmd/kubedevice")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/kubedevice: %v\n%s", err, out)
	}
	flagLine := regexp.MustCompile(`(?m)^ +(?:-[a-z], )?--([a-z0-9-]+)`)
	defined := map[string]map[string]bool{}
	for _, sub := range subcommands {
		out, err := exec.Command(bin, sub, "--help").CombinedOutput()
		if err != nil {
			t.Fatalf("kubedevice %s --help: %v\n%s", sub, err, out)
		}
		defined["/usr/local/bin/kubedevice "+sub] = flagsIn(t, "kubedevice "+sub, flagLine, out)
	}
	return defined
}

// flagsIn returns the flag names flagLine finds in a command's usage.
func flagsIn(t *testing.T, command string, flagLine *regexp.Regexp, usage []byte) map[string]bool {
	t.Helper()
	flags := map[string]bool{}
	for _, m := range flagLine.FindAllStringSubmatch(string(usage), -1) {
		flags[m[1]] = true
	}
	if len(flags) == 0 {
		t.Fatalf("%s -h lists no flags:\n%s", command, usage)
	}
	return flags
}

// TestArgsAreTheBinariesFlags checks every container's arguments, in every install, against the
// flags its binary defines, so a renamed or removed flag fails here and not in a crash-looping pod;
// and that config/default passes the agent and the controller every flag they have (explicitly,
// at its default where there is nothing else to say), but for omittedFlags.
func TestArgsAreTheBinariesFlags(t *testing.T) {
	defined := binaryFlags(t, "kubedevice-agent", "kubedevice-controller", "gopher-device-plugin")
	maps.Copy(defined, subcommandFlags(t, "cleanup"))
	all := renders(t)
	all["config/samples/gopher"] = kustomizeBuild(t, filepath.Join(configDir, "samples", "gopher"))
	for name, objs := range all {
		for _, u := range objs {
			containers, found, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
			if !found {
				continue
			}
			for _, c := range containers {
				cmd, _, _ := unstructured.NestedStringSlice(c.(map[string]any), "command")
				args, _, _ := unstructured.NestedStringSlice(c.(map[string]any), "args")
				command := strings.Join(cmd, " ")
				flagsOf, ok := defined[command]
				if !ok {
					t.Errorf("%s: %s runs %s, which this test does not know", name, key(u), command)
					continue
				}
				passed := map[string]bool{}
				for _, a := range args {
					flag, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
					if !strings.HasPrefix(a, "--") || !flagsOf[flag] {
						t.Errorf("%s: %s passes %q, which %s does not define", name, key(u), a, command)
					}
					passed[flag] = true
				}
				if name != "config/default" || cmd[0] == "/usr/local/bin/gopher-device-plugin" {
					continue
				}
				for f := range flagsOf {
					if !passed[f] && !omittedFlags[f] {
						t.Errorf("%s: %s does not pass --%s (pass it, or add it to omittedFlags with the reason)", name, key(u), f)
					}
				}
			}
		}
	}
}
