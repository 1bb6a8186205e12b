// Package kube is what every flow of the agent says to the API server the same way: the names of
// the objects the agent writes (NodeDeviceName, DeviceAllocationName, LabelValue), server-side
// apply and delete under the agent's field owner with the write counter
// kubedevice_agent_api_writes_total (Apply, ApplyStatus, Delete), the decision "up to date in the
// cache, else read from the API server and decide again" (Fresh), the node's pods as the cache
// has them (Pods) and what the flows read of a pod (RequestedResources, RuntimeUID, ...), the
// action that keeps distinct Warning events apart (EventAction), and the start-up gate every flow
// waits on (Gate).
//
// It owns no controller and no state of its own but the gate. It may not import the core's
// manager (internal/nodeagent; of the core it knows only registration's rule of what an extended
// resource is) nor any other package of the agent: the flows (allocation, mirror, injection) and
// the agent's wiring import it, never the other way round.
package kube
