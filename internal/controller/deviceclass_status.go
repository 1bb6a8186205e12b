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

package controller

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	resourcev1ac "k8s.io/client-go/applyconfigurations/resource/v1"

	kdv1alpha1 "github.com/kubedevice/kubedevice/api/v1alpha1"
	"github.com/kubedevice/kubedevice/internal/contract"
)

// deviceClassName returns the name of the DeviceClass that serves an extended resource through
// DRA. A resource whose name part is a DNS label is named by the resource read back to front, as
// DRA's own examples are: example.com/gopher → gopher.example.com. Any other resource (upper
// case, '_' or '.' in its name part, or a name too long) gets the name part lower-cased with every
// other character a '-', cut to 40 characters, and the first 10 hexadecimal digits of the
// SHA-256 of the whole resource name: example.com/Big_GPU → big-gpu-<hash>.example.com (and
// without the domain when that is still too long). The name is deterministic; two resources
// meet on one name only through a hash collision, which the controller detects (the class names
// the resource it serves) and reports instead of taking over.
func deviceClassName(resourceName string) string {
	domain, name, ok := strings.Cut(resourceName, "/")
	if !ok {
		domain, name = "", resourceName
	}
	plain := name + "." + domain
	if domain != "" && len(validation.IsDNS1123Label(name)) == 0 && len(validation.IsDNS1123Subdomain(plain)) == 0 {
		return plain
	}
	sum := sha256.Sum256([]byte(resourceName))
	label := sanitizeLabel(name, 40) + "-" + hex.EncodeToString(sum[:])[:10]
	if withDomain := label + "." + domain; domain != "" && len(validation.IsDNS1123Subdomain(withDomain)) == 0 {
		return withDomain
	}
	return label
}

// sanitizeLabel lower-cases s, turns every character a DNS label may not hold into '-', cuts it
// to at most max characters and trims '-' from both ends; "x" when nothing is left.
func sanitizeLabel(s string, max int) string {
	b := []byte(strings.ToLower(s))
	for i, c := range b {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			b[i] = '-'
		}
	}
	if len(b) > max {
		b = b[:max]
	}
	out := strings.Trim(string(b), "-")
	if out == "" {
		return "x"
	}
	return out
}

// deviceSelector is the CEL expression selecting kubedevice's devices of one resource.
func deviceSelector(resourceName string) string {
	return "device.driver == " + strconv.Quote(contract.DRADriverName) +
		" && device.attributes[" + strconv.Quote(contract.DRADriverName) + "]." + contract.DRAAttributeResourceName +
		" == " + strconv.Quote(resourceName)
}

// desiredDeviceClass returns the DeviceClass kubedevice keeps for a resource served through DRA:
// it selects the resource's devices of kubedevice's driver, and its extendedResourceName lets a
// pod's plain resources.limits request for the resource be served by it (KEP-5004).
func desiredDeviceClass(resourceName string) *resourcev1ac.DeviceClassApplyConfiguration {
	return resourcev1ac.DeviceClass(deviceClassName(resourceName)).
		WithLabels(map[string]string{contract.ManagedByLabel: contract.ManagedByValue}).
		WithAnnotations(map[string]string{contract.DeviceClassResourceAnnotation: resourceName}).
		WithSpec(resourcev1ac.DeviceClassSpec().
			WithSelectors(resourcev1ac.DeviceSelector().
				WithCEL(resourcev1ac.CELDeviceSelector().WithExpression(deviceSelector(resourceName)))).
			WithExtendedResourceName(resourceName))
}

// managedFor reports whether dc is a DeviceClass kubedevice keeps for resourceName.
func managedFor(dc *resourcev1.DeviceClass, resourceName string) bool {
	return dc.Labels[contract.ManagedByLabel] == contract.ManagedByValue &&
		dc.Annotations[contract.DeviceClassResourceAnnotation] == resourceName
}

// servedThroughDRA reports whether a live NodeDevice of the resource, on any node, says its
// resource is served through DRA there.
func servedThroughDRA(nds []kdv1alpha1.NodeDevice) bool {
	for i := range nds {
		if nds[i].DeletionTimestamp.IsZero() && nds[i].Status.EffectivePath() == kdv1alpha1.DevicePathDRA {
			return true
		}
	}
	return false
}
