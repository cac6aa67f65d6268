package guard

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// TestRecordRefusalCountsEveryRefusal: refusals recorded at once by many writers (each opens
// the lock file itself, as separate hook processes do) are all counted, per class and reason.
// Without the writers' lock, concurrent read-modify-writes lose counts.
func TestRecordRefusalCountsEveryRefusal(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	const writers, each = 8, 40
	var wg sync.WaitGroup
	errs := make(chan error, writers*each)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				class := []string{"mk-net", "default"}[w%2]
				reason := Reasons[i%len(Reasons)]
				if err := RecordRefusal(dir, class, reason); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	got, err := ReadRefusals(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := map[Refusal]uint64{
		{"mk-net", ReasonNoKey}: writers / 2 * each / 2, {"mk-net", ReasonNotHandled}: writers / 2 * each / 2,
		{"default", ReasonNoKey}: writers / 2 * each / 2, {"default", ReasonNotHandled}: writers / 2 * each / 2,
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("counts %v, want %v", got, want)
	}
	if st, err := os.Stat(filepath.Join(dir, RefusalsFile)); err != nil || st.Mode().Perm()&0o077 != 0 {
		t.Errorf("the file is readable by others or missing: %v %v", st, err)
	}
}

// TestRecordRefusalStaysBounded: hostile or endless class names cannot grow the file past
// maxRefusalLines lines, nor put a path or a space into a label.
func TestRecordRefusalStaysBounded(t *testing.T) {
	dir := t.TempDir()
	for _, class := range []string{"../../etc", "a b", strings.Repeat("x", 300), "Upper", ""} {
		if err := RecordRefusal(dir, class, ReasonNotHandled); err != nil {
			t.Fatal(err)
		}
	}
	for i := range maxRefusalLines + 50 {
		if err := RecordRefusal(dir, fmt.Sprintf("class-%d", i), ReasonNoKey); err != nil {
			t.Fatal(err)
		}
	}
	got, err := ReadRefusals(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got[Refusal{OverflowClass, ReasonNotHandled}] != 5 {
		t.Errorf("invalid class names: %v, want all 5 under %s", got[Refusal{OverflowClass, ReasonNotHandled}], OverflowClass)
	}
	if len(got) > maxRefusalLines+1 {
		t.Errorf("%d counters kept, want at most %d", len(got), maxRefusalLines+1)
	}
	var total uint64
	for _, n := range got {
		total += n
	}
	if total != maxRefusalLines+55 {
		t.Errorf("%d refusals counted, want %d: an overflow was dropped", total, maxRefusalLines+55)
	}
}

// TestRecordRefusalDoesNotWaitForever: a writer that holds the lock and hangs (a stopped hook)
// makes RecordRefusal fail, not block the container's start.
func TestRecordRefusalDoesNotWaitForever(t *testing.T) {
	dir := t.TempDir()
	f, err := os.OpenFile(filepath.Join(dir, RefusalsFile+".lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	if err := RecordRefusal(dir, "mk-net", ReasonNoKey); err == nil || !strings.Contains(err.Error(), "lock") {
		t.Errorf("RecordRefusal under a held lock: %v, want an error naming the lock", err)
	}
}
