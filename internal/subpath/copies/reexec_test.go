package copies

import (
	"testing"

	"github.com/mountkeeper/mountkeeper/internal/reexec"
)

// A test here may start this binary as a reexec entry (idmap's user namespace placeholder).
func TestMain(m *testing.M) { reexec.RunTests(m) }
