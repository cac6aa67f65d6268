package guard

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// TestCountRefusal: a refusal of Admit is counted under its reason, wrapped or not; any other
// error (the spec could not be read, a command line the wrapper cannot parse) is not a guard
// refusal and counts nothing.
func TestCountRefusal(t *testing.T) {
	dir := t.TempDir()
	noKey := Admit(dir, "ctr", nil) // no key in dir yet
	var r *Refused
	if !errors.As(noKey, &r) || r.Reason != ReasonNoKey {
		t.Fatalf("Admit without a key: %v, want a *Refused with reason %s", noKey, ReasonNoKey)
	}
	key, err := LoadOrCreateKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	unmarked := Admit(dir, "ctr", map[string]string{Annotation: "forged"})
	if !errors.As(unmarked, &r) || r.Reason != ReasonNotHandled {
		t.Fatalf("Admit of an unmarked container: %v, want reason %s", unmarked, ReasonNotHandled)
	}
	if err := Admit(dir, "ctr", map[string]string{Annotation: Token(key, "ctr")}); err != nil {
		t.Fatalf("Admit of a marked container: %v", err)
	}
	var stderr strings.Builder
	for _, err := range []error{noKey, fmt.Errorf("wrapped: %w", unmarked), unmarked, errors.New("read config.json: EACCES")} {
		CountRefusal(dir, "mk", err, &stderr)
	}
	got, err := ReadRefusals(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := map[Refusal]uint64{{"mk", ReasonNoKey}: 1, {"mk", ReasonNotHandled}: 2}
	if fmt.Sprint(got) != fmt.Sprint(want) || stderr.Len() != 0 {
		t.Errorf("counted %v (stderr %q), want %v", got, stderr.String(), want)
	}
}
