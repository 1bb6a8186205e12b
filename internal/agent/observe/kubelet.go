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

package observe

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/kubedevice/kubedevice/internal/nodeagent/checkpoint"
)

// Defaults of the kubelet's files, as the kubelet places them.
const (
	// DefaultPodResourcesSocket is the kubelet's PodResources API socket.
	DefaultPodResourcesSocket = "/var/lib/kubelet/pod-resources/kubelet.sock"
	// DefaultCheckpointPath is the kubelet's device manager checkpoint.
	DefaultCheckpointPath = "/var/lib/kubelet/device-plugins/" + checkpoint.KubeletFileName
)

// callTimeout bounds each call to the kubelet's PodResources API.
const callTimeout = 5 * time.Second

// maxMessageSize is the largest answer taken from the kubelet: its own client's limit
// (podresources.DefaultMaxMsgSize, 16 MiB).
const maxMessageSize = 16 << 20

// kubelet is what the observer reads of the kubelet's PodResources API (v1).
type kubelet interface {
	List(ctx context.Context) ([]*podresourcesapi.PodResources, error)
	GetAllocatableResources(ctx context.Context) ([]*podresourcesapi.ContainerDevices, error)
	Get(ctx context.Context, namespace, name string) (*podresourcesapi.PodResources, error)
	Close() error
}

// podResourcesClient calls the kubelet's PodResources API over its unix socket.
type podResourcesClient struct {
	conn   *grpc.ClientConn
	client podresourcesapi.PodResourcesListerClient
}

// dialPodResources returns a client of the PodResources API served at socket. It connects on
// the first call, and again after the kubelet restarts.
func dialPodResources(socket string) (*podResourcesClient, error) {
	conn, err := grpc.NewClient("unix://"+socket,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMessageSize)))
	if err != nil {
		return nil, fmt.Errorf("creating a client of the kubelet's PodResources API at %s: %w", socket, err)
	}
	return &podResourcesClient{conn: conn, client: podresourcesapi.NewPodResourcesListerClient(conn)}, nil
}

func (c *podResourcesClient) List(ctx context.Context) ([]*podresourcesapi.PodResources, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := c.client.List(ctx, &podresourcesapi.ListPodResourcesRequest{})
	if err != nil {
		return nil, fmt.Errorf("listing the pods' resources from the kubelet: %w", err)
	}
	return resp.GetPodResources(), nil
}

func (c *podResourcesClient) GetAllocatableResources(ctx context.Context) ([]*podresourcesapi.ContainerDevices, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := c.client.GetAllocatableResources(ctx, &podresourcesapi.AllocatableResourcesRequest{})
	if err != nil {
		return nil, fmt.Errorf("getting the allocatable resources from the kubelet: %w", err)
	}
	return resp.GetDevices(), nil
}

func (c *podResourcesClient) Get(ctx context.Context, namespace, name string) (*podresourcesapi.PodResources, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := c.client.Get(ctx, &podresourcesapi.GetPodResourcesRequest{PodNamespace: namespace, PodName: name})
	if err != nil {
		return nil, fmt.Errorf("getting the resources of pod %s/%s from the kubelet: %w", namespace, name, err)
	}
	return resp.GetPodResources(), nil
}

func (c *podResourcesClient) Close() error { return c.conn.Close() }

// checkpointFile reads the kubelet's device manager checkpoint again only when the file changed
// (its modification time, size or inode), with the kubelet-format reader.
type checkpointFile struct {
	path string

	mu    sync.Mutex
	info  fs.FileInfo
	state *checkpoint.State
}

// read returns the checkpoint's state, nil when there is no file (a kubelet whose device manager
// never wrote one), and the file's modification time. A file that cannot be read or is corrupt
// (the kubelet writes it atomically, so this is not a write in progress) is an error, and the
// last good state is kept for the caller to use.
func (f *checkpointFile) read() (*checkpoint.State, time.Time, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	info, err := os.Stat(f.path)
	if errors.Is(err, fs.ErrNotExist) {
		f.info, f.state = nil, nil
		return nil, time.Time{}, nil
	}
	if err != nil {
		return f.state, modTime(f.info), fmt.Errorf("reading the kubelet's checkpoint: %w", err)
	}
	if f.info != nil && os.SameFile(f.info, info) && info.ModTime().Equal(f.info.ModTime()) && info.Size() == f.info.Size() {
		return f.state, info.ModTime(), nil
	}
	st, err := checkpoint.ReadKubeletFile(f.path)
	if errors.Is(err, checkpoint.ErrNotFound) {
		f.info, f.state = nil, nil
		return nil, time.Time{}, nil
	}
	if err != nil {
		return f.state, modTime(f.info), err
	}
	f.info, f.state = info, &st
	return f.state, info.ModTime(), nil
}

func modTime(info fs.FileInfo) time.Time {
	if info == nil {
		return time.Time{}
	}
	return info.ModTime()
}
