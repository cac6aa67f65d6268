//go:build e2e

package e2e

import (
	"testing"
)

// TestSubPathRepair reproduces kubernetes #68211 on real containerd and CRI-O (runc): a container whose
// subPath mounts point into configMap, secret and projected volumes is restarted after the
// volumes were updated the atomic-writer way. Without mountkeeper runc fails with ENOENT;
// with it the container starts and reads the new content.
func TestSubPathRepair(t *testing.T) { forEachRuntime(t, testSubPathRepair) }

// TestSubPathWindow closes kubernetes #127602 deterministically, with the CRI driven by hand as
// kubelet drives it: CreateContainer, then the atomic writer's update with the old timestamp
// directory removed (kubelet's volume reconciler runs beside the pod worker, so this lands in
// the ~75 ms before runc mounts), then StartContainer. Without mountkeeper runc fails with
// ENOENT; with it the container starts and reads the content it was created with, from a
// private copy that keeps the file's mode and owner and goes away with the container.
func TestSubPathWindow(t *testing.T) { forEachRuntime(t, testSubPathWindow) }
