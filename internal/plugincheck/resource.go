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
	"time"

	"google.golang.org/grpc"
	"k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// The labels of the two ListAndWatch streams of a resource in the evidence.
const (
	firstStream = "the first stream"
	againStream = "the stream after the kubelet restart"
)

// resourceRun is one resource the plugin registered (one socket), checked on its own: a plugin
// process may serve several.
type resourceRun struct {
	*run
	// name is the resource name; "" when it is not known (the plugin was given as a socket, or
	// registered nothing).
	name string
	// reg is the registration the checks judge; nil for a socket.
	reg *registration

	conn   *grpc.ClientConn
	client v1beta1.DevicePluginClient
	opts2  *v1beta1.DevicePluginOptions // GetDevicePluginOptions' answer
	socket string                       // the plugin's socket
	stream *listStream
	// devices is the latest list.
	devices []*v1beta1.Device
	// responses are the successful container allocation responses, for the response checks.
	responses []*v1beta1.ContainerAllocateResponse
	allocated []string // devices of a successful Allocate, for PreStartContainer
	// health and streamOpen gather list-and-watch/health-update and list-and-watch/stream-open
	// over the stream before and the stream after the kubelet restart.
	health, streamOpen verdict
}

// record adds a result for the resource.
func (r *resourceRun) record(c Check, o Outcome, started time.Time, evidence ...string) {
	if o == Warn && r.opts.Strict {
		evidence = append(evidence, "--strict: this warning fails the run")
	}
	res := Result{Check: c, Resource: r.name, Outcome: o, Evidence: evidence, Duration: time.Since(started), ended: time.Now()}
	r.report.Results = append(r.report.Results, res)
	if r.opts.Progress == nil {
		return
	}
	id := c.ID
	if len(r.report.Resources) > 1 {
		id = r.name + " " + id
	}
	fmt.Fprintf(r.opts.Progress, "%-5s %s (%s)\n", o, id, seconds(res.Duration))
	for _, e := range evidence {
		fmt.Fprintf(r.opts.Progress, "      %s\n", e)
	}
}

// skipAll records a skip with the same reason for each check.
func (r *resourceRun) skipAll(reason string, checks ...Check) {
	for _, c := range checks {
		r.record(c, Skip, time.Now(), reason)
	}
}

// verdict records Pass with ok, or Fail with the problems.
func (r *resourceRun) verdict(c Check, started time.Time, problems []string, ok ...string) {
	if len(problems) > 0 {
		r.record(c, Fail, started, problems...)
		return
	}
	r.record(c, Pass, started, ok...)
}

// checkDevices runs the checks of the resource's devices on its first stream: the list, Allocate,
// PreStartContainer and GetPreferredAllocation. False when there is no list to check (the rest is
// skipped).
func (r *resourceRun) checkDevices(ctx context.Context) bool {
	if !r.checkListAndWatch(ctx) {
		return false
	}
	r.checkAllocate(ctx)
	r.checkPreStart(ctx)
	r.checkPreferred(ctx)
	return true
}

// closeStream ends the stream and the connection, as a kubelet that goes away does.
func (r *resourceRun) closeStream() {
	if r.stream != nil {
		r.stream.close()
		r.stream = nil
	}
	if r.conn != nil {
		_ = r.conn.Close()
		r.conn = nil
	}
}

// connectSocket dials an already running plugin.
func (r *resourceRun) connectSocket(ctx context.Context) bool {
	r.skipAll("the plugin was given as a socket: its registration is not observed",
		CheckRegistered, CheckVersion, CheckResourceName, CheckEndpoint, CheckOptions)
	conn, opts, err := dialPlugin(ctx, r.opts.Socket)
	if err != nil {
		r.record(CheckFirstList, Fail, time.Now(), fmt.Sprintf("connecting to %s: %v", r.opts.Socket, err))
		r.skipAll("no connection to the plugin", afterRegistration[1:]...)
		return false
	}
	r.conn, r.client, r.opts2, r.socket = conn, v1beta1.NewDevicePluginClient(conn), opts, r.opts.Socket
	return true
}
