//go:build !linux || !cgo

package nsenter

// Available reports whether this binary carries the constructor: not without cgo.
func Available() bool { return false }

// Entered is always false without the constructor.
func Entered() bool { return false }
