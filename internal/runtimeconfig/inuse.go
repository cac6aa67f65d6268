package runtimeconfig

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/mountkeeper/mountkeeper/internal/runtimewrap"
)

// Use is a process through which the runtime still runs containers of a class.
type Use struct {
	PID int
	// What is the process and what it runs for: "conmon, container k8s_app_web-0_shop_...".
	What string
	// Link is the class link it runs.
	Link string
}

func (u Use) String() string { return fmt.Sprintf("pid %d (%s) runs %s", u.PID, u.What, u.Link) }

// InUse lists the processes through which the runtime still runs containers of a class, by
// the class links they use: CRI-O's conmon names the runtime on its command line (-r LINK),
// containerd's runc shim runs in its pod's bundle, whose options.json names the runtime binary
// (BinaryName). Their containers can be stopped only while the links exist.
func InUse(procRoot string, links []string) ([]Use, error) {
	if len(links) == 0 {
		return nil, nil
	}
	entries, err := os.ReadDir(procRoot)
	if err != nil {
		return nil, err
	}
	var out []Use
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		dir := filepath.Join(procRoot, e.Name())
		cmdline, _ := os.ReadFile(filepath.Join(dir, "cmdline"))
		args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
		var options []byte
		if cwd, err := os.Readlink(filepath.Join(dir, "cwd")); err == nil {
			options, _ = os.ReadFile(filepath.Join(cwd, "options.json"))
		}
		if link := usedLink(links, args, options); link != "" {
			out = append(out, Use{PID: pid, What: filepath.Base(args[0]) + whose(args), Link: link})
		}
	}
	return out, nil
}

// usedLink is the link of links that a process with command line args and, in its working
// directory, a shim's options.json names; "" for none.
func usedLink(links, args []string, options []byte) string {
	for _, l := range links {
		for _, a := range args {
			if a == l {
				return l
			}
		}
		if len(options) > 0 && bytes.Contains(options, []byte(strconv.Quote(l))) {
			return l
		}
	}
	return ""
}

// whose names, from a runtime process's command line, what it runs for, so that the operator
// finds the pod: CRI-O's conmon the container (-n, its name k8s_<container>_<pod>_<namespace>_...,
// else -c, its ID), containerd's shim its pod sandbox (-id); "" for another process.
func whose(args []string) string {
	value := func(flags ...string) string {
		for i := 1; i+1 < len(args); i++ {
			for _, f := range flags {
				if args[i] == f {
					return args[i+1]
				}
			}
		}
		return ""
	}
	switch {
	case value("-n", "--name") != "":
		return ", container " + value("-n", "--name")
	case value("-c", "--cid") != "":
		return ", container " + value("-c", "--cid")
	case value("-id") != "":
		return ", pod sandbox " + value("-id")
	}
	return ""
}

// classUses is which of the class links among own (ownClassFiles' changes) the runtime still
// uses (InUse, processes under procRoot), by class: configure keeps those classes' links and
// handlers, unconfigure refuses to remove them.
func classUses(procRoot string, own []Change) (map[string][]Use, error) {
	var links []string
	for _, c := range own {
		if c.OldLink != "" {
			links = append(links, c.Path)
		}
	}
	uses, err := InUse(procRoot, links)
	if err != nil {
		return nil, err
	}
	out := map[string][]Use{}
	for _, u := range uses {
		class := filepath.Base(u.Link)
		out[class] = append(out[class], u)
	}
	return out, nil
}

// classOf is the class of a class link or entry path.
func classOf(path string) string {
	return strings.TrimSuffix(filepath.Base(path), runtimewrap.EntrySuffix)
}

// joinUses lists uses in a line, class by class in name order.
func joinUses(byClass map[string][]Use) string {
	var out []string
	for _, class := range slices.Sorted(maps.Keys(byClass)) {
		for _, u := range byClass[class] {
			out = append(out, u.String())
		}
	}
	return strings.Join(out, "; ")
}
