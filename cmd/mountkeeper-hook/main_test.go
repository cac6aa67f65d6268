package main

import (
	"testing"

	"github.com/mountkeeper/mountkeeper/cmd/internal/leantest"
)

// TestStaysLean: the point of this binary is its start-up, so it must not link what the
// plugin needs (leantest.Banned) nor any package outside the standard library that needs cgo.
func TestStaysLean(t *testing.T) { leantest.Check(t) }
