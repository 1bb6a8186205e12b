// Package indexer declares the cache field indexes the controllers use, as constants in one place,
// and Setup, the one function that registers them; the controller binary and the integration tests
// both call it.
package indexer
