package harness

import "testing"

func TestUnder(t *testing.T) {
	for _, c := range []struct {
		path string
		want bool
	}{
		{"/tmp/mk-1", true},
		{"/tmp/mk-1/a/b", true},
		{"/tmp/mk-12", false},
		{"/tmp", false},
	} {
		if got := under(c.path, "/tmp/mk-1"); got != c.want {
			t.Errorf("under(%q) = %v", c.path, got)
		}
	}
}
