// Package nritest runs the runtime side of NRI for tests, as containerd does: the nri module's
// adaptation, with containerd's default validator enabled (so the required-plugins annotation is
// enforced), serving a socket that external plugins connect to, and asked to adjust containers
// as containerd asks when the kubelet creates them.
//
// It owns only that test runtime. It is for tests: no package of the agent but tests may import
// it, and it imports nothing of kubedevice.
package nritest
