package main

import (
	"errors"
	"fmt"
	"io"
	"net"

	"github.com/mountkeeper/mountkeeper/internal/netmount"
)

// runCheck prints, for every network filesystem mount of the config, one line per check with
// OK or the fix, and fails when any check does.
func runCheck(args []string, stdout, stderr io.Writer) error {
	cfg, from, err := parseConfigOnly("check", args, stderr)
	if err != nil {
		return err
	}
	problems, mounts := 0, 0
	for _, class := range cfg.ClassNames() {
		for _, s := range cfg.RuntimeClasses[class].NetworkSpecs() {
			mounts++
			fmt.Fprintf(stdout, "runtime class %q: %s\n", class, s)
			for _, f := range netmount.Check(netmount.LiveEnv{}, netmount.DetectScoper, (&net.Dialer{}).DialContext, s) {
				verdict := "OK  "
				if !f.OK {
					verdict = "FIX "
					problems++
				}
				fmt.Fprintf(stdout, "  %s %-17s %s\n", verdict, f.What+":", f.Text)
			}
		}
	}
	if mounts == 0 {
		fmt.Fprintf(stdout, "%s: no network filesystem mounts to check\n", from)
	}
	if problems > 0 {
		return errors.New(plural(problems, "problem") + " found")
	}
	return nil
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}
