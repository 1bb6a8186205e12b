// Package contract holds the names and small rules every kubedevice binary shares: the namespace
// the install uses, the field owners each binary writes under, the agents' Lease names, the
// controller's leader election Lease and finalizer, and the condition and cache helpers both the
// agent and the controller use. The agent (cmd/kubedevice-agent, internal/agent), the controller
// (cmd/kubedevice-controller, internal/controller) and the CLI (cmd/kubedevice, internal/cleanup)
// import it, so that none of them imports another to learn a name.
//
// It imports only the Kubernetes API types, and nothing of kubedevice but its API: a name defined
// here is the one definition, and packages that expose it to their callers do so as an alias.
package contract
