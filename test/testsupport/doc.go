// Package testsupport holds what the unit tests, the benchmarks, the demo and the e2e harness
// each need of the machine, written once: the mount table (through moby/sys/mountinfo, which
// undoes the kernel's escaping), a process's cgroup, an sshd for sshfs over loopback, waiting
// for a condition with a hang guard, running a command, and a line diff for failure messages.
// It imports nothing of the project, so test/harness and any package's tests can use it.
package testsupport
