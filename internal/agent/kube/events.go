package kube

// EventAction returns the action of an event reported once per distinct note: action followed by
// a hash of note. The events.k8s.io recorder counts the events of one type, reason, action,
// regarding and related object as a single series, which shows only the first note: with the
// note's hash in the action, a refusal that says something else is an event of its own, while the
// same refusal again counts on its series.
func EventAction(action, note string) string {
	return action + "-" + shortHash(note)
}
