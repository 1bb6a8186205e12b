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
// DRA's own examples are: example.com/gopher → gopher.example.com. Any other name part (upper
// case, '_' or '.' in it, or too long) becomes contract.HashedLabel of it under the domain:
// example.com/Big_GPU → big-gpu-<hash>.example.com; the whole resource's HashedLabel when even
// that is too long. The name is deterministic; two resources meet on one name only through a hash
// collision, which the controller detects (the class names the resource it serves) and reports
// instead of taking over.
func deviceClassName(resourceName string) string {
	domain, name, ok := strings.Cut(resourceName, "/")
	if !ok {
		domain, name = "", resourceName
	}
	plain := name + "." + domain
	if domain != "" && len(validation.IsDNS1123Label(name)) == 0 && len(validation.IsDNS1123Subdomain(plain)) == 0 {
		return plain
	}
	if withDomain := contract.HashedLabel(name, 51) + "." + domain; domain != "" && len(validation.IsDNS1123Subdomain(withDomain)) == 0 {
		return withDomain
	}
	return contract.HashedLabel(resourceName, validation.DNS1123LabelMaxLength)
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
