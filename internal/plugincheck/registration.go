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

package plugincheck

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// requestChecks are the checks of a registration's request, after registration/registered.
var requestChecks = []Check{CheckVersion, CheckResourceName, CheckEndpoint, CheckOptions}

// awaitRegistrations starts the plugin and returns its registrations, through kubelet.sock and
// through the plugin watcher. With none, it records why under an unnamed resource.
func (r *run) awaitRegistrations(ctx context.Context, started time.Time) []*registration {
	if err := r.opts.Target.Start(ctx, Dirs{Plugins: r.dir, Registry: r.registry}); err != nil {
		res := r.newResource("")
		res.record(CheckRegistered, Fail, started, "starting the plugin: "+err.Error())
		res.skipAll("the plugin did not start", requestChecks...)
		res.skipAll("the plugin did not start", afterRegistration...)
		return nil
	}
	r.waitRegistrations(ctx)
	regs := r.kubelet.registrations()
	if len(regs) == 0 {
		r.newResource("").notRegistered(started)
	}
	return regs
}

// waitRegistrations waits for the first registration the kubelet accepts (a plugin may try again
// after a rejection, within the registration timeout), then as long as other registrations follow
// within the settle window: one process may serve several resources.
func (r *run) waitRegistrations(ctx context.Context) {
	timeout := time.NewTimer(r.t.Registration)
	defer timeout.Stop()
	deadline := timeout.C
	var settle <-chan time.Time
	for {
		select {
		case reg := <-r.kubelet.regs:
			if reg.rejected == "" || settle != nil {
				settle, deadline = time.After(r.t.RegistrationSettle), nil
			}
		case <-settle:
			return
		case <-r.opts.Target.Exited():
			return
		case <-deadline:
			return
		case <-ctx.Done():
			return
		}
	}
}

// notRegistered records that the plugin did not register, with its output.
func (r *resourceRun) notRegistered(started time.Time) {
	where := r.kubelet.socketPath()
	if r.registry != "" {
		where += " nor through a socket in " + r.registry
	}
	ev := []string{fmt.Sprintf("no Register call on %s within %s", where, seconds(time.Since(started)))}
	select {
	case <-r.opts.Target.Exited():
		ev = append(ev, "the plugin exited")
	default:
	}
	if out := strings.TrimSpace(r.opts.Target.Output()); out != "" {
		ev = append(ev, "the plugin's output ends with:\n"+indent(out))
	}
	r.record(CheckRegistered, Fail, started, ev...)
	r.skipAll("the plugin did not register", requestChecks...)
	r.skipAll("the plugin did not register", afterRegistration...)
}

// resourceNames are the resources of the registrations, sorted.
func resourceNames(regs []*registration) []string {
	var names []string
	for _, reg := range regs {
		if !slices.Contains(names, reg.req.GetResourceName()) {
			names = append(names, reg.req.GetResourceName())
		}
	}
	slices.Sort(names)
	return names
}

// registrationsOf returns the registrations of resource and the one to judge: the first the
// kubelet accepted, else the first.
func registrationsOf(all []*registration, resource string) (regs []*registration, judged *registration) {
	for _, reg := range all {
		if reg.req.GetResourceName() != resource {
			continue
		}
		regs = append(regs, reg)
		if judged == nil || (judged.rejected != "" && reg.rejected == "") {
			judged = reg
		}
	}
	return regs, judged
}

// checkRegistration judges the resource's registration and connects to its plugin; false when
// there is no plugin to talk to.
func (r *resourceRun) checkRegistration(ctx context.Context, started time.Time, all []*registration) bool {
	regs, reg := registrationsOf(all, r.name)
	r.reg, r.socket = reg, reg.endpointPath(r.dir)
	r.judgeRegistered(started, regs)
	now := time.Now()
	r.judgeVersion(now)
	req := reg.req
	r.verdict(CheckResourceName, now, prefixAll(fmt.Sprintf("resource name %q: ", req.GetResourceName()), validateResourceName(req.GetResourceName())),
		fmt.Sprintf("resource name %q", req.GetResourceName()))
	r.judgeEndpoint(now)
	return r.connect(ctx, now)
}

// judgeRegistered records registration/registered: whether the kubelet accepted the
// registration, with every rejection of the resource's registrations.
func (r *resourceRun) judgeRegistered(started time.Time, regs []*registration) {
	var rejections []string
	for _, reg := range regs {
		if reg.rejected != "" {
			rejections = append(rejections, fmt.Sprintf("%s after %s rejected: %s", describeRegistration(reg), seconds(reg.at.Sub(started)), reg.rejected))
		}
	}
	if r.reg.rejected != "" {
		if hint := r.socketElsewhereHint(); hint != "" {
			rejections = append(rejections, hint)
		}
		r.record(CheckRegistered, Fail, started, rejections...)
		return
	}
	via := ""
	if r.reg.watcher != nil {
		via = fmt.Sprintf(" through the plugin watcher (socket %s)", filepath.Base(r.reg.watcher.socket))
	}
	r.record(CheckRegistered, Pass, started, append([]string{fmt.Sprintf("registered %s %s after start%s; the kubelet's dial back and GetDevicePluginOptions worked",
		r.name, seconds(r.reg.at.Sub(started)), via)}, rejections...)...)
}

func describeRegistration(reg *registration) string {
	if reg.watcher != nil {
		return fmt.Sprintf("the plugin watcher's registration of %s (resource %q, endpoint %q, versions %q)",
			reg.watcher.socket, reg.req.GetResourceName(), reg.req.GetEndpoint(), reg.watcher.versions)
	}
	return fmt.Sprintf("Register(resource %q, endpoint %q, version %q)", reg.req.GetResourceName(), reg.req.GetEndpoint(), reg.req.GetVersion())
}

// judgeVersion records registration/version: "v1beta1" in Register, or among the versions
// GetInfo answers through the plugin watcher.
func (r *resourceRun) judgeVersion(now time.Time) {
	switch w := r.reg.watcher; {
	case w != nil && slices.Contains(w.versions, v1beta1.Version):
		r.record(CheckVersion, Pass, now, fmt.Sprintf("supported versions %q (plugin watcher GetInfo)", w.versions))
	case w != nil:
		r.record(CheckVersion, Fail, now, fmt.Sprintf("supported versions %q (plugin watcher GetInfo) lack %q", w.versions, v1beta1.Version))
	case r.reg.req.GetVersion() == v1beta1.Version:
		r.record(CheckVersion, Pass, now, fmt.Sprintf("version %q", r.reg.req.GetVersion()))
	default:
		r.record(CheckVersion, Fail, now, fmt.Sprintf("version %q; the kubelet supports %q", r.reg.req.GetVersion(), v1beta1.SupportedVersions))
	}
}

// judgeEndpoint records registration/endpoint: a unix socket in the plugin directory, or (through
// the plugin watcher) at an absolute path.
func (r *resourceRun) judgeEndpoint(now time.Time) {
	endpoint := r.reg.req.GetEndpoint()
	var problems []string
	ok := fmt.Sprintf("endpoint %q, a unix socket in the plugin directory", endpoint)
	if r.reg.watcher != nil {
		ok = fmt.Sprintf("endpoint %q, a unix socket at an absolute path", endpoint)
		if !filepath.IsAbs(endpoint) {
			problems = append(problems, fmt.Sprintf("endpoint %q is not an absolute path: the kubelet dials it as it is", endpoint))
		}
	} else {
		problems = prefixAll(fmt.Sprintf("endpoint %q: ", endpoint), validateEndpoint(endpoint))
	}
	if len(problems) == 0 {
		if st, err := os.Stat(r.socket); err != nil {
			problems = append(problems, fmt.Sprintf("endpoint %q: %v", endpoint, err))
		} else if st.Mode()&os.ModeSocket == 0 {
			problems = append(problems, fmt.Sprintf("endpoint %q is not a socket (%s)", endpoint, st.Mode()))
		}
	}
	r.verdict(CheckEndpoint, now, problems, ok)
}

// connect takes the kubelet's connection to the plugin, or (when the kubelet rejected the
// registration for its version or name) makes one of its own, to check the rest; then it records
// registration/options.
func (r *resourceRun) connect(ctx context.Context, now time.Time) bool {
	if r.reg.conn != nil {
		r.conn, r.opts2 = r.reg.conn, r.reg.opts
		r.reg.conn = nil // ours now
	} else {
		conn, opts, err := dialPlugin(ctx, r.socket)
		if err != nil {
			r.record(CheckOptions, Fail, now, fmt.Sprintf("GetDevicePluginOptions at %s: %v", r.socket, err))
			r.skipAll("no connection to the plugin", afterRegistration...)
			return false
		}
		r.conn, r.opts2 = conn, opts
	}
	r.client = v1beta1.NewDevicePluginClient(r.conn)
	reg, got := r.reg.req.GetOptions(), r.opts2
	switch {
	case r.reg.watcher != nil:
		r.record(CheckOptions, Pass, now, "registered through the plugin watcher, which carries no options; GetDevicePluginOptions answered "+describeOptions(got))
	case reg.GetPreStartRequired() == got.GetPreStartRequired() && reg.GetGetPreferredAllocationAvailable() == got.GetGetPreferredAllocationAvailable():
		r.record(CheckOptions, Pass, now, "registered and answered "+describeOptions(got))
	default:
		r.record(CheckOptions, Fail, now, "registered "+describeOptions(reg), "GetDevicePluginOptions answered "+describeOptions(got)+" (what the kubelet uses)")
	}
	return true
}

// socketElsewhereHint explains a registration whose endpoint is not in the checker's directory:
// the plugin created its socket elsewhere, most often because it hard-codes the kubelet's
// directory. It returns "" when the socket is where it should be.
func (r *resourceRun) socketElsewhereHint() string {
	endpoint := r.reg.req.GetEndpoint()
	if r.reg.watcher != nil || len(validateEndpoint(endpoint)) > 0 {
		return ""
	}
	if _, err := os.Lstat(filepath.Join(r.dir, endpoint)); err == nil {
		return ""
	}
	hint := fmt.Sprintf("the plugin's socket %q is not in the checker's plugin directory %s", endpoint, r.dir)
	if _, err := os.Lstat(filepath.Join(KubeletPluginDir, endpoint)); err == nil {
		hint += fmt.Sprintf(" but in %s", KubeletPluginDir)
	}
	return hint + ": the plugin seems to hard-code its directory; run the checker with --mount-namespace (root), which bind-mounts the checker's directory on " +
		KubeletPluginDir + " for the plugin, or point the plugin at {plugin-dir}"
}

func describeOptions(o *v1beta1.DevicePluginOptions) string {
	return fmt.Sprintf("pre_start_required=%t get_preferred_allocation_available=%t", o.GetPreStartRequired(), o.GetGetPreferredAllocationAvailable())
}
