package harness

import "testing"

func TestUnescapeOctal(t *testing.T) {
	for in, want := range map[string]string{
		`/plain`:               "/plain",
		`/with\040space`:       "/with space",
		`/back\134slash`:       `/back\slash`,
		`/tab\011and\012nl`:    "/tab\tand\nnl",
		`/trailing\04`:         `/trailing\04`,
		`/not\999octal\040end`: `/not\999octal end`,
	} {
		if got := unescapeOctal(in); got != want {
			t.Errorf("unescapeOctal(%q) = %q, want %q", in, got, want)
		}
	}
}

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
