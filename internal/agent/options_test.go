package agent

import "testing"

func TestParseRuntimeInjection(t *testing.T) {
	for _, s := range []string{"nri", "none"} {
		if got, err := ParseRuntimeInjection(s); err != nil || string(got) != s {
			t.Errorf("%q: got %q, %v", s, got, err)
		}
	}
	if _, err := ParseRuntimeInjection("cri"); err == nil {
		t.Error("an unknown value was accepted")
	}
}
