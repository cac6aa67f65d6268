package runtimewrap

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"time"

	"github.com/mountkeeper/mountkeeper/internal/engine"
	"github.com/mountkeeper/mountkeeper/internal/guard"
)

// System is what the wrapper does to the node: read its entry and the bundle's spec, report a
// refusal where the runtime's caller looks for errors, and become the real runtime.
type System interface {
	// ReadFile reads at most limit bytes of path; more is an error.
	ReadFile(path string, limit int64) ([]byte, error)
	// AppendFile appends data to path (the runtime's --log).
	AppendFile(path string, data []byte) error
	// Exec replaces the process with runtime (a path, or a name looked up on PATH) run with
	// argv; it returns only on failure.
	Exec(runtime string, argv []string) error
	// Now is the time a refusal is logged at.
	Now() time.Time
}

// Main is mountkeeper-runtime: args is the whole command line (args[0] the link it was
// started by). It returns the exit status when it does not become the real runtime.
func Main(args []string, stderr io.Writer, sys System) int {
	fail := func(err error) int {
		fmt.Fprintf(stderr, "mountkeeper-runtime: %v\n", err)
		return 1
	}
	entryPath, err := EntryPath(args[0])
	if err != nil {
		return fail(err)
	}
	data, err := sys.ReadFile(entryPath, 1<<16)
	if err != nil {
		return fail(fmt.Errorf("read the class's entry: %w: run `mountkeeper runtime configure` again", err))
	}
	entry, err := ParseEntry(entryPath, data)
	if err != nil {
		return fail(err)
	}
	call, err := ParseCall(args[1:])
	if err != nil {
		if looksLikeCreate(args[1:]) {
			return refuse(stderr, sys, call, engineRefusal(entry, err))
		}
		// Not a create: the real runtime says what is wrong with the command line, as it
		// would without the wrapper.
		call = Call{}
	}
	if call.Creates() {
		spec, err := sys.ReadFile(call.SpecPath(), MaxSpec)
		if err != nil {
			err = engine.Refuse(entry.Class, engine.Container{ID: call.ID}, fmt.Errorf("read the container's spec: %w", err))
		} else {
			err = Check(entry, call, spec)
		}
		if err != nil {
			guard.CountRefusal(entry.StateDir, entry.Class, err, stderr)
			return refuse(stderr, sys, call, err)
		}
	}
	argv := append([]string{entry.Runtime}, args[1:]...)
	return fail(fmt.Errorf("run the real runtime: %w", sys.Exec(entry.Runtime, argv)))
}

// looksLikeCreate says whether args name a subcommand that creates a container anywhere: a
// command line ParseCall could not read is refused if it may create one (fail closed), run
// otherwise.
func looksLikeCreate(args []string) bool {
	for _, a := range args {
		if slices.Contains(Creating, a) {
			return true
		}
	}
	return false
}

// refuse reports err as the runtime would report its own failure: on the --log the caller
// reads back (containerd's shim shows the last error there, in the runtime's log format), and
// on stderr (where CRI-O's conmon reads it, and a person at a shell).
func refuse(stderr io.Writer, sys System, c Call, err error) int {
	fmt.Fprintln(stderr, err)
	if c.Log != "" {
		_ = sys.AppendFile(c.Log, logLine(c.LogFormat, sys.Now(), err.Error()))
	}
	return 1
}

// logLine is an error line in runc's log format: JSON objects (level, msg, time) or logrus text.
func logLine(format string, now time.Time, msg string) []byte {
	ts := now.UTC().Format(time.RFC3339Nano)
	if format == "json" {
		b, _ := json.Marshal(struct {
			Level string `json:"level"`
			Msg   string `json:"msg"`
			Time  string `json:"time"`
		}{"error", msg, ts})
		return append(b, '\n')
	}
	return []byte("time=" + strconv.Quote(ts) + " level=error msg=" + strconv.Quote(msg) + "\n")
}
