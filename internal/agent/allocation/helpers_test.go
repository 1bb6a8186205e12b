package allocation

import "time"

const testResource = "example.com/gopher"

var (
	t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	t1 = t0.Add(90*time.Second + 250*time.Millisecond)
)
