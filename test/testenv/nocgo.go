//go:build !cgo

package testenv

const cgoEnabled = false
