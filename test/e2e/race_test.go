//go:build race

package e2e

// raceEnabled: this test runs with the race detector, and builds the binaries with it.
const raceEnabled = true
