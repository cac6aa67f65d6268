//go:build linux && cgo

package idmap

/*
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#define MK_HOLD_USERNS_ENV "_MOUNTKEEPER_HOLD_USERNS"

// mk_hold_userns runs before the Go runtime starts, in every process of a binary that links
// this package, and does nothing unless the variable is set. Then the process is the
// placeholder NewUserNS started in a user namespace of its own: it waits for stdin to close
// and exits, without ever starting Go (which would take milliseconds and threads for a
// process whose only job is to exist while its namespace is opened).
__attribute__((constructor)) static void mk_hold_userns(void)
{
	char c;

	if (getenv(MK_HOLD_USERNS_ENV) == NULL)
		return;
	while (read(0, &c, 1) > 0 || errno == EINTR)
		errno = 0;
	_exit(0);
}
*/
import "C"

// holderAvailable reports whether this binary carries the placeholder's constructor (it was
// built with cgo).
const holderAvailable = true
