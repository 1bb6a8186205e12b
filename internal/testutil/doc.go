// Package testutil holds fluent builders for the objects tests create, so each test states only
// what matters to it: MakePod("p", "ns").Node("n1").Request("example.com/gopher", 2).Obj().
// Extend a builder rather than writing objects by hand in a test.
package testutil
