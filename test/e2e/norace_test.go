//go:build !race

package e2e

// raceEnabled: this test runs without the race detector, and builds the binaries without it.
const raceEnabled = false
