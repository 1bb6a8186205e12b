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
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/validate/content"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// IsExtendedResourceName reports whether name is a valid extended resource
// name, with the rule of the kubelet's v1helper.IsExtendedResourceName: it
// has a domain prefix outside *kubernetes.io/, does not start with
// "requests.", and "requests.<name>" is a qualified name (a label key).
func IsExtendedResourceName(name string) bool {
	if !strings.Contains(name, "/") || strings.Contains(name, v1.ResourceDefaultNamespacePrefix) {
		return false
	}
	if strings.HasPrefix(name, v1.DefaultResourceRequestsPrefix) {
		return false
	}
	return len(content.IsLabelKey(v1.DefaultResourceRequestsPrefix+name)) == 0
}

// isVersionSupported reports whether any of versions is one we speak.
func isVersionSupported(versions ...string) bool {
	for _, v := range versions {
		if slices.Contains(pluginapi.SupportedVersions[:], v) {
			return true
		}
	}
	return false
}

// validateRequest applies the kubelet's checks to a Register request, in the
// kubelet's order, plus ours on the endpoint.
func validateRequest(r *pluginapi.RegisterRequest, pluginDir string) error {
	if !isVersionSupported(r.GetVersion()) {
		return fmt.Errorf(errUnsupportedVersion, r.GetVersion(), pluginapi.SupportedVersions)
	}
	if !IsExtendedResourceName(r.GetResourceName()) {
		return fmt.Errorf(errInvalidResourceName, r.GetResourceName())
	}
	if !isPlainFileName(r.GetEndpoint()) {
		return fmt.Errorf(errInvalidEndpoint, r.GetEndpoint(), pluginDir)
	}
	return nil
}

// isPlainFileName reports whether name names an entry directly inside a
// directory: not empty, no separator, not "." or "..", and no NUL (no file
// name holds one, and the kernel would cut a socket path there: "..\x00"
// would name the directory's parent; until now only checkEndpoint's Lstat
// refused it, with an error about checking rather than the endpoint).
func isPlainFileName(name string) bool {
	return name != "" && name != "." && name != ".." &&
		!strings.ContainsAny(name, "/\x00") && filepath.Base(name) == name
}

// validatePlugin is the kubelet's ValidatePlugin for the pluginwatcher path,
// plus an absolute-path check on the endpoint.
func validatePlugin(name, endpoint string, versions []string) error {
	if !isVersionSupported(versions...) {
		return fmt.Errorf(errWatcherBadVersion, pluginapi.Version, versions)
	}
	if !IsExtendedResourceName(name) {
		return fmt.Errorf(errWatcherBadName, fmt.Sprintf(errInvalidResourceName, name))
	}
	if !filepath.IsAbs(endpoint) {
		return fmt.Errorf(errWatcherBadEndpoint, endpoint)
	}
	return nil
}
