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

package contract

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
)

// NewScheme returns the scheme every binary's client uses: the built-in types and kubedevice.io's.
func NewScheme() (*runtime.Scheme, error) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("registering the built-in types: %w", err)
	}
	if err := kdv1alpha1.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("registering the kubedevice.io types: %w", err)
	}
	return scheme, nil
}
