// Package sandbox holds SPACE's domain types for sandboxes and their lifecycle,
// with no I/O: the Sandbox record, the lifecycle transition table and the one
// function that applies it (Apply), identifiers, and the validation of a create
// request. The store persists these types; the server, the reconciler and the
// node act on them.
package sandbox
