// Package scale benchmarks the cluster controller against a real kube-apiserver and etcd
// (envtest, the binaries of bin/k8s) at the node counts of the performance targets: cold start,
// failover, steady state and churn, counting every API write the controller makes; and the node
// agent with a plugin of 10 000 devices (register, restart) or 100 000 (rejected), counting its
// writes. Run it with `make bench-scale`; it is not part of `make test`. See docs/design.md,
// "Scale".
package scale
