package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/mountkeeper/mountkeeper/cmd/internal/cli"
	"github.com/mountkeeper/mountkeeper/internal/ops"
	"github.com/mountkeeper/mountkeeper/nri"
)

// runStatus is `mountkeeper status`: what the running plugin reports on its --listen address.
func runStatus(args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlags("mountkeeper status", stderr)
	address := fs.String("address", ops.DefaultAddress, "the plugin's --listen address")
	output := fs.String("output", "text", "text or json")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	client, base := ops.Client(*address)
	resp, err := client.Get(base + "/status")
	if err != nil {
		return fmt.Errorf("ask the plugin at %s (is it running with --listen %s?): %w", *address, *address, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("the plugin at %s answered %s", *address, resp.Status)
	}
	switch *output {
	case "json":
		_, err := stdout.Write(body)
		return err
	case "text":
	default:
		fmt.Fprintln(stderr, "--output: text or json")
		return cli.ErrUsage
	}
	var st nri.Status
	if err := json.Unmarshal(body, &st); err != nil {
		return fmt.Errorf("the plugin's status: %w", err)
	}
	connected := "no"
	if st.Connected {
		connected = "yes"
	}
	fmt.Fprintf(stdout, "connected to the runtime: %s\nconfig: %s\nruntime classes: %s\n", connected, st.ConfigFrom, strings.Join(st.Classes, ", "))
	if r := st.LastReload; r != nil {
		verdict := "applied"
		if !r.Applied {
			verdict = "REFUSED (" + r.Error + "); the previous config stays in force"
		}
		fmt.Fprintf(stdout, "last reload: %s, %s\n", r.At.Format("2006-01-02 15:04:05Z07:00"), verdict)
	}
	printNetworkMounts(stdout, st.NetworkMounts)
	printStuckCalls(stdout, st.StuckCalls)
	if l := st.LiveSubPaths; l != nil && (l.Paths > 0 || l.RetiredCopies > 0 || len(l.Updates) > 0) {
		fmt.Fprintf(stdout, "live subPaths: %d followed, %d old versions held open (%d bytes), updates %v\n", l.Paths, l.RetiredCopies, l.RetiredBytes, l.Updates)
	}
	return nil
}

// printNetworkMounts lists the held network mounts, one paragraph each.
func printNetworkMounts(w io.Writer, mounts []nri.NetworkMount) {
	if len(mounts) == 0 {
		return
	}
	fmt.Fprintf(w, "network mounts: %d\n", len(mounts))
	for _, m := range mounts {
		fmt.Fprintf(w, "  %s  %s\n", m.Key, m.Spec)
		fmt.Fprintf(w, "    state: %s since %s, users: %d, deaths: %d, recoveries: %d", m.State,
			m.Since.UTC().Format("2006-01-02 15:04:05Z"), m.Users, m.Deaths, m.Recoveries)
		if m.LastRecovery != nil {
			fmt.Fprintf(w, " (last %s, took %.1fs)", m.LastRecovery.UTC().Format("15:04:05Z"), m.LastRecoverySeconds)
		}
		fmt.Fprintln(w)
		fmt.Fprintf(w, "    host path: %s\n    scope: %s\n", m.HostPath, m.Scope)
		if len(m.Classes) > 0 {
			fmt.Fprintf(w, "    classes: %s\n", strings.Join(m.Classes, ", "))
		}
		if m.LastError != "" {
			fmt.Fprintf(w, "    last error: %s\n", m.LastError)
		}
	}
}

// printStuckCalls lists the agent's threads hung on dead servers, by server.
func printStuckCalls(w io.Writer, stuck map[string]int) {
	if len(stuck) == 0 {
		return
	}
	servers := slices.Sorted(maps.Keys(stuck))
	fmt.Fprintln(w, "stuck probes (threads hung until the server answers; at most one per NFS, CIFS or Ceph server):")
	for _, s := range servers {
		fmt.Fprintf(w, "  %s: %d\n", cmp.Or(s, "(server unknown)"), stuck[s])
	}
}
