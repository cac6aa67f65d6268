package reexec_test

import (
	"os"
	"strings"
	"testing"

	"github.com/mountkeeper/mountkeeper/internal/reexec"
)

const echoEntry = "mountkeeper-reexec-test-echo"

func init() {
	reexec.Register(echoEntry, func() {
		os.Stdout.WriteString("entry ran with " + strings.Join(os.Args[1:], ","))
	})
}

func TestMain(m *testing.M) { reexec.RunTests(m) }

func TestCommandRunsTheRegisteredEntry(t *testing.T) {
	out, err := reexec.Command(echoEntry, "a", "b").Output()
	if err != nil {
		t.Fatalf("entry: %v", err)
	}
	if got, want := string(out), "entry ran with a,b"; got != want {
		t.Errorf("entry printed %q, want %q (the test binary ran instead of the entry?)", got, want)
	}
}

func TestInitIgnoresUnregisteredNames(t *testing.T) {
	saved := os.Args
	defer func() { os.Args = saved }()
	os.Args = []string{"mountkeeper", "nri"}
	if reexec.Init() {
		t.Error("Init ran an entry for an argv[0] nobody registered")
	}
}

func TestRegisterTwicePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("a second Register of one name did not panic")
		}
	}()
	reexec.Register(echoEntry, func() {})
}
