package kube

import (
	"cmp"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// OwnedConditions returns the conditions of the given types, sorted by type: the part of a status
// the agent compares with what it would apply.
func OwnedConditions(conds []metav1.Condition, types []string) []metav1.Condition {
	var out []metav1.Condition
	for _, c := range conds {
		if slices.Contains(types, c.Type) {
			out = append(out, c)
		}
	}
	slices.SortFunc(out, func(a, b metav1.Condition) int { return cmp.Compare(a.Type, b.Type) })
	return out
}
