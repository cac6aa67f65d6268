package bounded

import (
	"errors"
	"testing"
	"time"
)

func TestBoundedTimesOut(t *testing.T) {
	block := make(chan struct{})
	defer close(block) // let the abandoned call finish
	v, err := Run(10*time.Millisecond, "stat /nfs/dead", func() (int, error) {
		<-block
		return 42, nil
	})
	if err == nil {
		t.Fatalf("bounded returned %d for a call that never answers, want an error", v)
	}
	if want := "stat /nfs/dead: no answer within 10ms (is a network filesystem on the path dead?)"; err.Error() != want {
		t.Errorf("bounded error\ngot:  %s\nwant: %s", err, want)
	}
	if v != 0 {
		t.Errorf("bounded returned %d with its timeout error, want the zero value", v)
	}
}

func TestBoundedPassesResultThrough(t *testing.T) {
	cause := errors.New("boom")
	tests := []struct {
		name    string
		v       int
		err     error
		wantErr error
	}{
		{name: "value", v: 42},
		{name: "error", v: 7, err: cause, wantErr: cause},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The timeout is far beyond what the call needs; nothing here depends on timing.
			v, err := Run(time.Hour, "x", func() (int, error) { return tt.v, tt.err })
			if v != tt.v || !errors.Is(err, tt.wantErr) || (err == nil) != (tt.wantErr == nil) {
				t.Errorf("bounded = %d, %v; want %d, %v", v, err, tt.v, tt.wantErr)
			}
		})
	}
}

func TestBoundedWithoutTimeoutRunsInline(t *testing.T) {
	var ran bool
	v, err := Run(0, "inline", func() (int, error) { ran = true; return 7, nil })
	if !ran || v != 7 || err != nil {
		t.Errorf("Run(0) = %d, %v (ran %v); want 7, nil, run before it returned", v, err, ran)
	}
}
