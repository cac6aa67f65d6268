package main

import (
	"strings"
	"testing"
)

func TestRun(t *testing.T) {
	in := strings.Join([]string{
		`go vet ./...`,
		`{"Action":"run","Package":"p","Test":"TestA"}`,
		`{"Action":"output","Package":"p","Test":"TestA","Output":"=== RUN   TestA\n"}`,
		// A re-executed child's result, logged by its parent: output, not a result.
		`{"Action":"output","Package":"p","Test":"TestA","Output":"        --- PASS: TestA (0.01s)\n"}`,
		`{"Action":"pass","Package":"p","Test":"TestA/sub"}`,
		`{"Action":"pass","Package":"p","Test":"TestA"}`,
		`{"Action":"skip","Package":"p","Test":"TestB"}`,
		`{"Action":"fail","Package":"p","Test":"TestC"}`,
		`{"Action":"fail","Package":"p"}`,
		`{"Action":"output","Package":"q","Output":"FAIL\tq [build failed]\n"}`,
		`{"Action":"fail","Package":"q"}`,
		`{"Action":"skip","Package":"r"}`,
		`{not json`,
		`make: *** [Makefile:1: unit] Error 1`,
	}, "\n") + "\n"
	var out strings.Builder
	c, err := run(strings.NewReader(in), &out)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.summary(), "tests: 2 passed, 2 failed, 1 skipped"; got != want {
		t.Errorf("summary = %q, want %q", got, want)
	}
	if c.ok() {
		t.Error("ok() with failures and a skip")
	}
	for _, want := range []string{"go vet ./...\n", "=== RUN   TestA\n", "FAIL\tq [build failed]\n", "{not json\n", "make: *** [Makefile:1: unit] Error 1\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), `"Action"`) {
		t.Errorf("output has raw JSON:\n%s", out.String())
	}
}

func TestOK(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want bool
	}{
		{`{"Action":"pass","Package":"p","Test":"TestA"}`, true},
		{`{"Action":"skip","Package":"p","Test":"TestA"}`, false},
		{`{"Action":"pass","Package":"p"}`, false}, // no test ran
		{"", false},
	} {
		c, err := run(strings.NewReader(tt.in), &strings.Builder{})
		if err != nil {
			t.Fatal(err)
		}
		if c.ok() != tt.want {
			t.Errorf("ok() after %q = %v, want %v", tt.in, c.ok(), tt.want)
		}
	}
}
