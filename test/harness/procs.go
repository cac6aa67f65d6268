package harness

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// process is what cleanup needs to know about a running process. start (the boot-relative
// start time from /proc/PID/stat) tells a process apart from a later one that reused its PID.
type process struct {
	pid, ppid int
	comm      string // the command name, from /proc/PID/stat
	state     byte   // R, S, D, Z, ...
	start     uint64
	cmdline   []string
	cgroups   []string // one path per hierarchy, from /proc/PID/cgroup
}

// readProcess reads /proc/PID. A process that exits meanwhile yields an error wrapping
// os.ErrNotExist (or ESRCH), which callers treat as "gone".
func readProcess(pid int) (process, error) {
	p := process{pid: pid}
	dir := filepath.Join("/proc", strconv.Itoa(pid))
	stat, err := os.ReadFile(filepath.Join(dir, "stat"))
	if err != nil {
		return p, err
	}
	// The command name in parentheses may hold spaces and parentheses: parse after the last ')'.
	rest := string(stat)
	if i := strings.LastIndexByte(rest, ')'); i >= 0 {
		if open := strings.IndexByte(rest, '('); open >= 0 && open < i {
			p.comm = rest[open+1 : i]
		}
		rest = rest[i+1:]
	}
	fields := strings.Fields(rest) // fields[0] is field 3 (state) of proc(5)
	if len(fields) < 20 {
		return p, fmt.Errorf("parse %s/stat: %d fields", dir, len(fields))
	}
	p.state = fields[0][0]
	if p.ppid, err = strconv.Atoi(fields[1]); err != nil {
		return p, fmt.Errorf("parse ppid in %s/stat: %w", dir, err)
	}
	if p.start, err = strconv.ParseUint(fields[19], 10, 64); err != nil {
		return p, fmt.Errorf("parse starttime in %s/stat: %w", dir, err)
	}
	cmdline, err := os.ReadFile(filepath.Join(dir, "cmdline"))
	if err != nil {
		return p, err
	}
	p.cmdline = strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
	cgroups, err := os.ReadFile(filepath.Join(dir, "cgroup"))
	if err != nil {
		return p, err
	}
	for _, line := range strings.Split(strings.TrimSpace(string(cgroups)), "\n") {
		// hierarchy-ID:controllers:path
		if parts := strings.SplitN(line, ":", 3); len(parts) == 3 {
			p.cgroups = append(p.cgroups, parts[2])
		}
	}
	return p, nil
}

// listProcesses returns every process that could be read; processes that exit while being
// read are skipped.
func listProcesses() ([]process, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("list /proc: %w", err)
	}
	var out []process
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if p, err := readProcess(pid); err == nil {
			out = append(out, p)
		}
	}
	return out, nil
}

// sameProcess reports whether p is still running (and not a new process with its PID).
func sameProcess(p process) bool {
	now, err := readProcess(p.pid)
	return err == nil && now.start == p.start
}

// descendants returns the processes below root in the parent tree (not root itself).
func descendants(root int) ([]process, error) {
	all, err := listProcesses()
	if err != nil {
		return nil, err
	}
	children := map[int][]process{}
	for _, p := range all {
		children[p.ppid] = append(children[p.ppid], p)
	}
	var out []process
	for queue := children[root]; len(queue) > 0; queue = queue[1:] {
		out = append(out, queue[0])
		queue = append(queue, children[queue[0].pid]...)
	}
	return out, nil
}

// mentions reports whether any argument of p names dir or a path below it.
func (p process) mentions(dir string) bool {
	for _, arg := range p.cmdline {
		if arg == dir || strings.Contains(arg, dir+"/") {
			return true
		}
	}
	return false
}

// inCgroup reports whether p is in cgroup parent or below it, in any hierarchy.
func (p process) inCgroup(parent string) bool {
	for _, cg := range p.cgroups {
		if cg == parent || strings.HasPrefix(cg, parent+"/") {
			return true
		}
	}
	return false
}

// killAll SIGKILLs every process for which match is true (never the calling process) until
// none is left, or fails after timeout naming the survivors.
func killAll(match func(process) bool, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		all, err := listProcesses()
		if err != nil {
			return err
		}
		var left []int
		for _, p := range all {
			// A zombie is already dead; only its parent can make it go away.
			if p.pid == os.Getpid() || p.state == 'Z' || !match(p) {
				continue
			}
			left = append(left, p.pid)
			if err := syscall.Kill(p.pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
				return fmt.Errorf("kill %d: %w", p.pid, err)
			}
		}
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes survived SIGKILL for %v: %s", timeout, describeProcs(left))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// describeProcs says, for each pid, its command name, state, parent, where in the kernel it
// waits and its command line, from /proc: enough to understand from a CI log alone why a
// process outlived SIGKILL.
func describeProcs(pids []int) string {
	if len(pids) == 0 {
		return "no process listed"
	}
	var out []string
	for _, pid := range pids {
		p, err := readProcess(pid)
		if err != nil {
			out = append(out, fmt.Sprintf("%d (gone)", pid))
			continue
		}
		wchan, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "wchan"))
		out = append(out, fmt.Sprintf("%d (%s, state %c, parent %d, waiting in %q, command %q)",
			pid, p.comm, p.state, p.ppid, wchan, strings.Join(p.cmdline, " ")))
	}
	return strings.Join(out, ", ")
}
