package kube

import (
	"strings"
	"testing"
)

func TestEventAction(t *testing.T) {
	a := EventAction("AllocateDevices", "Requested: 5, Available: 4")
	if a != EventAction("AllocateDevices", "Requested: 5, Available: 4") {
		t.Error("the same note gives another action")
	}
	if a == EventAction("AllocateDevices", "Requested: 5, Available: 3") {
		t.Error("two notes give one action")
	}
	if !strings.HasPrefix(a, "AllocateDevices-") || len(a) > 128 {
		t.Errorf("action %q: want AllocateDevices-<hash>, at most 128 characters (the API's bound)", a)
	}
}
