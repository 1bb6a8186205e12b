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

package gopher

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	"k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

const (
	// EnvName is the env a container gets with its gophers' IDs.
	EnvName = "GOPHER"
	// ContainerDir is where the gopher files are mounted in a container.
	ContainerDir = "/gophers"
)

// allocate answers Allocate for one container: GOPHER=<IDs> and a read-only
// mount of every gopher file at /gophers/<ID>, in natural order.
func (g *Plugin) allocate(ctx context.Context, ids []string) (*v1beta1.ContainerAllocateResponse, error) {
	ids = sortedNatural(ids)
	resp := &v1beta1.ContainerAllocateResponse{Envs: map[string]string{EnvName: strings.Join(ids, ",")}}
	for _, id := range ids {
		hostPath, err := lookup(g.dir, id)
		if err != nil {
			return nil, status.Errorf(codes.NotFound, "allocating gophers: %v", err)
		}
		resp.Mounts = append(resp.Mounts, &v1beta1.Mount{
			ContainerPath: path.Join(ContainerDir, id),
			HostPath:      hostPath,
			ReadOnly:      true,
		})
	}
	klog.FromContext(ctx).Info("Allocated gophers", "gophers", ids)
	return resp, nil
}

// preferredAllocation picks size gophers: all of mustInclude, then the
// lowest-numbered of available, returned in natural order.
func (g *Plugin) preferredAllocation(ctx context.Context, available, mustInclude []string, size int) ([]string, error) {
	ids, err := preferred(available, mustInclude, size)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	klog.FromContext(ctx).V(2).Info("Preferred gophers", "available", len(available), "mustInclude", mustInclude, "size", size, "preferred", ids)
	return ids, nil
}

var errImpossibleAllocation = errors.New("impossible preferred allocation")

func preferred(available, mustInclude []string, size int) ([]string, error) {
	must := sets.New(mustInclude...)
	if size < must.Len() {
		return nil, fmt.Errorf("%w: %d gophers requested but %d must be included", errImpossibleAllocation, size, must.Len())
	}
	chosen := sets.List(must)
	for _, id := range sortedNatural(available) {
		if len(chosen) == size {
			break
		}
		if !must.Has(id) {
			chosen = append(chosen, id)
			must.Insert(id)
		}
	}
	if len(chosen) != size {
		return nil, fmt.Errorf("%w: %d gophers requested but only %d offered", errImpossibleAllocation, size, len(chosen))
	}
	return sortedNatural(chosen), nil
}

// preStart checks that every gopher of a starting container still exists.
func (g *Plugin) preStart(ctx context.Context, ids []string) error {
	for _, id := range ids {
		if _, err := lookup(g.dir, id); err != nil {
			return status.Errorf(codes.NotFound, "preparing gophers: %v", err)
		}
	}
	klog.FromContext(ctx).Info("Gophers ready for a container", "gophers", sortedNatural(ids))
	return nil
}

// sortedNatural returns ids without duplicates, in natural order.
func sortedNatural(ids []string) []string {
	out := slices.Clone(ids)
	slices.SortFunc(out, CompareNatural)
	return slices.Compact(out)
}
