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

package testutil

import (
	"context"

	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// AllowDisruptions writes the budget's status as the disruption controller would (envtest runs
// none): allowed disruptions of a budget whose pods are all healthy. Until a budget has a status
// for its generation, the Eviction API refuses with a Retry-After that client-go honours for
// 100 s. It reads the budget first, so a caller retries it on a conflict.
func AllowDisruptions(ctx context.Context, c client.Client, pdb *policyv1.PodDisruptionBudget, allowed int32) error {
	cur := &policyv1.PodDisruptionBudget{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(pdb), cur); err != nil {
		return err
	}
	cur.Status = policyv1.PodDisruptionBudgetStatus{
		ObservedGeneration: cur.Generation, DisruptionsAllowed: allowed,
		CurrentHealthy: 1 + allowed, DesiredHealthy: 1, ExpectedPods: 1 + allowed,
	}
	return c.Status().Update(ctx, cur)
}
