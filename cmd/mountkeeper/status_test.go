package main

import (
	"strings"
	"testing"
)

// TestPrintStuckCalls: `mountkeeper status` lists the agent's stuck probes by server, sorted,
// and nothing while there are none.
func TestPrintStuckCalls(t *testing.T) {
	var b strings.Builder
	printStuckCalls(&b, nil)
	if b.Len() != 0 {
		t.Errorf("no stuck calls printed %q, want nothing", b.String())
	}
	printStuckCalls(&b, map[string]int{"h:22": 2, "filer:2049": 1, "": 1})
	want := "stuck probes (threads hung until the server answers; at most one per NFS, CIFS or Ceph server):\n" +
		"  (server unknown): 1\n  filer:2049: 1\n  h:22: 2\n"
	if b.String() != want {
		t.Errorf("printed\n%s\nwant\n%s", b.String(), want)
	}
}
