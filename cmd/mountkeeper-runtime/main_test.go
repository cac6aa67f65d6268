package main

import (
	"testing"

	"github.com/mountkeeper/mountkeeper/cmd/internal/leantest"
)

// TestStaysLean: the runtime starts this binary for every runtime call of a class's
// containers, so it must not link what the plugin needs (leantest.Banned) nor cgo.
func TestStaysLean(t *testing.T) { leantest.Check(t) }
