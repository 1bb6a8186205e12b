//go:build !race

package install

// raceEnabled tells that the test runs with the race detector.
const raceEnabled = false
