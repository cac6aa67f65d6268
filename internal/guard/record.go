package guard

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// The guard runs as a short-lived hook process, so it cannot count its refusals in the agent's
// memory: it adds them to a small file in the state dir (RecordRefusal), which the agent
// reads at every scrape (ReadRefusals) as mountkeeper_guard_refusals_total. The file holds one
// counter per class and reason, so it stays small however many refusals there are, and, kept
// on the node, its counts survive agent restarts: the refusals that happen while the agent is
// away (when the guard refuses most) are counted once it is back.
//
// Any front end that refuses a container for the guard (the hook, a runtime wrapper) calls
// RecordRefusal, so that every refusal is counted in the same place.

// RefusalsFile is the counts' file below the state dir; RefusalsFile+".lock" serialises
// writers.
const RefusalsFile = "guard-refusals"

// Refusal reasons (the reason label).
const (
	// ReasonNoKey: no guard key on the node; the plugin has never handled a container here.
	ReasonNoKey = "no_key"
	// ReasonNotHandled: the container carries no valid token; the plugin did not handle it.
	ReasonNotHandled = "not_handled"
)

// Reasons lists every refusal reason.
var Reasons = []string{ReasonNoKey, ReasonNotHandled}

// OverflowClass is the class a refusal is counted under when its class cannot be (a name
// that is not a runtime handler's, or more classes than maxRefusalLines).
const OverflowClass = "_other"

// Refusal is one counter of the file: a class and a reason.
type Refusal struct{ Class, Reason string }

const (
	maxRefusalLines = 256      // distinct class/reason pairs kept
	maxRefusalsSize = 64 << 10 // bytes read at most
)

// handlerName is what a runtime handler (a RuntimeClass's handler, a DNS label) looks like.
var handlerName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9._]{0,61}[a-z0-9])?$`)

// RecordRefusal counts one refusal of a container of class for reason in stateDir's file.
// It waits for other writers at most about 1s and returns an error rather than block a
// container's start.
func RecordRefusal(stateDir, class, reason string) error {
	if !slices.Contains(Reasons, reason) {
		return fmt.Errorf("guard refusal reason %q is not one of %v", reason, Reasons)
	}
	if !handlerName.MatchString(class) {
		class = OverflowClass
	}
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return err
	}
	unlock, err := lockFile(filepath.Join(stateDir, RefusalsFile+".lock"))
	if err != nil {
		return err
	}
	defer unlock()
	counts, order, err := readRefusals(stateDir)
	if err != nil {
		return err
	}
	r := Refusal{class, reason}
	if _, ok := counts[r]; !ok && len(order) >= maxRefusalLines {
		r.Class = OverflowClass
	}
	if _, ok := counts[r]; !ok {
		order = append(order, r)
	}
	counts[r]++
	var b strings.Builder
	for _, r := range order {
		fmt.Fprintf(&b, "%s %s %d\n", r.Class, r.Reason, counts[r])
	}
	return writeAtomic(filepath.Join(stateDir, RefusalsFile), []byte(b.String()))
}

// ReadRefusals returns the refusals counted in stateDir (none when nothing was recorded).
// Writers replace the file whole, so a reader needs no lock.
func ReadRefusals(stateDir string) (map[Refusal]uint64, error) {
	counts, _, err := readRefusals(stateDir)
	return counts, err
}

func readRefusals(stateDir string) (map[Refusal]uint64, []Refusal, error) {
	counts := map[Refusal]uint64{}
	f, err := os.OpenFile(filepath.Join(stateDir, RefusalsFile), os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return counts, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	var order []Refusal
	sc := bufio.NewScanner(io.LimitReader(f, maxRefusalsSize))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 3 {
			continue // a line cut by a full disk: the others still count
		}
		n, err := strconv.ParseUint(fields[2], 10, 64)
		if err != nil {
			continue
		}
		r := Refusal{fields[0], fields[1]}
		if _, ok := counts[r]; !ok {
			order = append(order, r)
		}
		counts[r] += n
	}
	return counts, order, sc.Err()
}
