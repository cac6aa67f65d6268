//go:build linux && cgo

package nsenter

/*
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MK_NSENTER_ENV "_MOUNTKEEPER_NSENTER_MNT_FD"
#define MK_NSENTER_EXIT 97
#define MK_HOLD_USERNS_ENV "_MOUNTKEEPER_HOLD_USERNS"

static int mk_entered;

static int mk_nsenter_entered(void) { return mk_entered; }

// mk_nsenter runs before the Go runtime starts (see doc.go). It does nothing unless the
// variable is set; then it enters the namespace or exits.
__attribute__((constructor)) static void mk_nsenter(void)
{
	const char *v = getenv(MK_NSENTER_ENV);
	char *end;
	long fd;

	if (getenv(MK_HOLD_USERNS_ENV) != NULL) {
		// A placeholder process in a user namespace of its own, whose namespace the parent
		// opens (package idmap): it waits for stdin to close, then exits, without starting Go.
		char c;
		while (read(0, &c, 1) > 0 || errno == EINTR)
			errno = 0;
		_exit(0);
	}
	if (v == NULL)
		return;
	errno = 0;
	fd = strtol(v, &end, 10);
	if (errno != 0 || end == v || *end != '\0' || fd < 3 || fd > 65535) {
		dprintf(2, "enter the container's mount namespace: %s=%s is not a file descriptor number\n",
			MK_NSENTER_ENV, v);
		_exit(MK_NSENTER_EXIT);
	}
	if (setns((int)fd, CLONE_NEWNS) != 0) {
		int e = errno;
		dprintf(2, "enter the container's mount namespace: setns(fd %ld, CLONE_NEWNS): %s\n",
			fd, strerror(e));
		_exit(MK_NSENTER_EXIT);
	}
	close((int)fd);
	unsetenv(MK_NSENTER_ENV);
	mk_entered = 1;
}
*/
import "C"

// The C side's exit code must be ExitCode: this fails to compile otherwise. (EnvVar is
// checked by the hook package's tests, which run the constructor.)
const _ = uint(ExitCode-C.MK_NSENTER_EXIT) + uint(C.MK_NSENTER_EXIT-ExitCode)

// Available reports whether this binary carries the constructor (it was built with cgo).
func Available() bool { return true }

// Entered reports whether the constructor moved this process into another mount namespace.
// Only a child started with EnvVar set sees true.
func Entered() bool { return C.mk_nsenter_entered() != 0 }
