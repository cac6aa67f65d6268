//go:build !linux || !cgo

package idmap

// holderAvailable is false without cgo: there is no constructor to play the placeholder.
const holderAvailable = false
