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

package kube

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Fresh decides whether the agent must write an object, without ever repeating its own last
// write: when the cached object is up to date it answers (cached, true) at once; otherwise it
// reads the object of kind named key from the API server (the cache may not have seen the agent's
// last write yet) and answers that object, nil when there is none, and whether it is up to date.
// upToDate is asked only of an object that exists: one that does not is never up to date.
func Fresh[T any, PT interface {
	*T
	client.Object
}](ctx context.Context, reader client.Reader, kind string, key client.ObjectKey, cached PT, upToDate func(PT) bool) (PT, bool, error) {
	if cached != nil && upToDate(cached) {
		return cached, true, nil
	}
	var obj PT = new(T)
	if err := reader.Get(ctx, key, obj); err != nil {
		if !apierrors.IsNotFound(err) {
			return nil, false, fmt.Errorf("getting %s %s: %w", kind, klog.KRef(key.Namespace, key.Name), err)
		}
		obj = nil
	}
	return obj, obj != nil && upToDate(obj), nil
}
