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

package registration

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// client is one connection to one device plugin. It implements DevicePlugin.
type client struct {
	id       ClientID
	resource string
	socket   string

	// Set by connect, read-only afterwards.
	conn    *grpc.ClientConn
	api     pluginapi.DevicePluginClient
	options *pluginapi.DevicePluginOptions

	// ctx bounds the ListAndWatch stream; close cancels it.
	ctx       context.Context
	cancel    context.CancelFunc
	closeOnce sync.Once
}

var _ DevicePlugin = (*client)(nil)

// newClient returns an unconnected client. parent carries the logger and
// ends the stream when the server stops.
func newClient(parent context.Context, id ClientID, resource, socket string) *client {
	logger := klog.FromContext(parent).WithValues("resourceName", resource, "socketPath", socket, "clientID", id)
	ctx, cancel := context.WithCancel(klog.NewContext(parent, logger))
	return &client{id: id, resource: resource, socket: socket, ctx: ctx, cancel: cancel}
}

func (c *client) ID() ClientID                            { return c.id }
func (c *client) Resource() string                        { return c.resource }
func (c *client) SocketPath() string                      { return c.socket }
func (c *client) Options() *pluginapi.DevicePluginOptions { return c.options }
func (c *client) API() pluginapi.DevicePluginClient       { return c.api }

// connect dials the plugin and asks for its options, as the kubelet's
// client.Connect and the start of its PluginConnected do. On error the
// client is closed.
func (c *client) connect(ctx context.Context, dialTimeout time.Duration) error {
	conn, err := dial(ctx, c.socket, dialTimeout)
	if err != nil {
		c.close()
		return fmt.Errorf(errFailedToDialDevicePlugin, err)
	}
	c.conn = conn
	c.api = pluginapi.NewDevicePluginClient(conn)

	ctx, cancel := context.WithTimeout(ctx, optionsTimeout)
	defer cancel()
	options, err := c.api.GetDevicePluginOptions(ctx, &pluginapi.Empty{})
	if err != nil {
		c.close()
		return fmt.Errorf(errFailedToGetOptions, err)
	}
	c.options = options
	return nil
}

// listAndWatch runs the ListAndWatch stream and hands every message to h. It
// returns when the stream ends: the plugin ended it or went away, or the
// client was closed (then the error is the context's). Like the kubelet it
// never re-opens the stream; the plugin must register again.
func (c *client) listAndWatch(h Handler) error {
	logger := klog.FromContext(c.ctx)
	stream, err := c.api.ListAndWatch(c.ctx, &pluginapi.Empty{})
	if err != nil {
		c.logStreamEnd(err)
		return err
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			c.logStreamEnd(err)
			return err
		}
		logger.V(2).Info("State pushed for device plugin", "resourceCapacity", len(resp.GetDevices()))
		h.PluginListAndWatchReceiver(c.ctx, c, resp)
	}
}

// logStreamEnd logs why the stream ended. A plugin that ends its stream, restarts or stops is a
// plugin's normal life, not an error of the agent: info, with the resource and the endpoint
// (socketPath) the logger carries, and the plugin's error, if any.
func (c *client) logStreamEnd(err error) {
	logger := klog.FromContext(c.ctx)
	if c.ctx.Err() != nil {
		logger.V(2).Info("ListAndWatch stopped for device plugin")
		return
	}
	logger.Info("ListAndWatch stream of device plugin ended; it must register again", "err", err)
}

// close ends the stream and the connection. It is idempotent and does not
// call the Handler.
func (c *client) close() {
	c.closeOnce.Do(func() {
		c.cancel()
		if c.conn != nil {
			if err := c.conn.Close(); err != nil {
				klog.FromContext(c.ctx).V(2).Info("Failed to close gRPC connection", "err", err)
			}
		}
	})
}

// dialBackoff paces reconnection attempts while dialing a plugin.
var dialBackoff = backoff.Config{
	BaseDelay:  20 * time.Millisecond,
	Multiplier: 1.6,
	Jitter:     0.2,
	MaxDelay:   time.Second,
}

// dial connects to a unix socket and waits until the connection is ready or
// timeout passes, like the kubelet's blocking dial. ListAndWatch messages up
// to MaxListAndWatchMessageSize are accepted.
func dial(ctx context.Context, socketPath string, timeout time.Duration) (*grpc.ClientConn, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	conn, err := grpc.NewClient("passthrough:///"+socketPath,
		// The target is a path, not a host: present a fixed authority.
		grpc.WithAuthority("localhost"),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", addr)
		}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxListAndWatchMessageSize)),
		// A local socket is either there or not: retry quickly. A plugin seen
		// between bind and listen refuses the first attempt; gRPC's default
		// backoff would add a second.
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: dialBackoff, MinConnectTimeout: timeout}),
	)
	if err != nil {
		return nil, fmt.Errorf("creating gRPC client for %s: %w", socketPath, err)
	}
	conn.Connect()
	for {
		state := conn.GetState()
		if state == connectivity.Ready {
			return conn, nil
		}
		if state == connectivity.Shutdown {
			conn.Close()
			return nil, errors.New("connection shut down")
		}
		if !conn.WaitForStateChange(ctx, state) {
			conn.Close()
			return nil, fmt.Errorf("waiting for connection to %s: %w", socketPath, ctx.Err())
		}
	}
}
