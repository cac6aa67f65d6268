package testenv

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// KernelAtLeast says whether the running kernel is Linux major.minor or newer (from uname's
// release, e.g. "6.1.0-50-cloud-amd64"), for a test whose expectation is the kernel's own
// answer and that answer changed in a release.
func KernelAtLeast(major, minor int) bool {
	var uts unix.Utsname
	if err := unix.Uname(&uts); err != nil {
		return true
	}
	var ma, mi int
	if _, err := fmt.Sscanf(unix.ByteSliceToString(uts.Release[:]), "%d.%d", &ma, &mi); err != nil {
		return true
	}
	return ma > major || ma == major && mi >= minor
}
