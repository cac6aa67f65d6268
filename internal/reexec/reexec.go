// Package reexec runs a part of this binary in a new process, in the shape of
// moby/sys/reexec: a package registers an entry point under a name, a caller starts the
// binary again (Command, or an exec through a descriptor of it) with that name as argv[0],
// and main dispatches to the entry before it does anything else.
//
// Why argv[0] and not an environment variable read in a package's init: the dispatch is one
// explicit call in main, so a reader of main sees every way the binary can start, and no
// package decides in its init to end the process. An entry runs after every package's init
// (the binaries' inits are cheap: cmd/mountkeeper-hook measures its start-up).
//
// Test binaries that start an entry (directly or through a package that does, such as idmap)
// call Init from TestMain, as main does; otherwise the child would run the tests again.
package reexec

import (
	"fmt"
	"os"
	"os/exec"
)

// Self is this binary, as the kernel knows it: valid after the binary's file was replaced or
// removed, and inside another mount namespace only through a descriptor opened before.
const Self = "/proc/self/exe"

var entries = map[string]func(){}

// Register makes fn the entry point of processes started with argv[0] name. It is called from
// package init; a name registered twice is a programming error.
func Register(name string, fn func()) {
	if _, dup := entries[name]; dup {
		panic(fmt.Sprintf("reexec: %q registered twice", name))
	}
	entries[name] = fn
}

// Init runs the entry registered under this process's argv[0], if there is one, and says
// whether it did. main calls it first and returns when it is true. An entry that returns
// ends the process with status 0.
func Init() bool {
	fn, ok := entries[os.Args[0]]
	if !ok {
		return false
	}
	fn()
	return true
}

// Command returns a command that starts the entry registered under name, with args.
func Command(name string, args ...string) *exec.Cmd {
	return &exec.Cmd{Path: Self, Args: append([]string{name}, args...)}
}

// RunTests is the body of TestMain in a test binary that may start entries (it links a
// package that does): it dispatches as main does, then runs the tests.
func RunTests(m interface{ Run() int }) {
	if Init() {
		return
	}
	os.Exit(m.Run())
}
