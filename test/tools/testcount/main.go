// Command testcount reads `go test -json` output (mixed with any other lines, such as make's)
// on stdin, prints it as `go test -v` would, and ends with the names of failed and skipped
// tests and one line a CI system can count:
//
//	tests: N passed, N failed, N skipped
//
// It exits 1 when a test failed, a test was skipped or no test ran. A package that fails with
// no failing test of its own (a build error, a panic or timeout outside a test) counts as one
// failed test named after the package. Subtests count one each, like their parents.
//
// .ci/run uses it: make test 2>&1 | testcount -summary FILE (FILE gets the last line too).
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
)

// event is one line of `go test -json` (see `go doc test2json`).
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
}

type counts struct {
	passed, failed, skipped int
	failedNames             []string
	skippedNames            []string
	pkgHasFailedTest        map[string]bool
}

func (c *counts) add(e event) {
	switch {
	case e.Test != "" && e.Action == "pass":
		c.passed++
	case e.Test != "" && e.Action == "fail":
		c.failed++
		c.failedNames = append(c.failedNames, e.Package+" "+e.Test)
		c.pkgHasFailedTest[e.Package] = true
	case e.Test != "" && e.Action == "skip":
		c.skipped++
		c.skippedNames = append(c.skippedNames, e.Package+" "+e.Test)
	case e.Test == "" && e.Action == "fail" && !c.pkgHasFailedTest[e.Package]:
		c.failed++
		c.failedNames = append(c.failedNames, e.Package+" (package: build, panic or timeout outside a test)")
	}
}

func (c *counts) summary() string {
	return fmt.Sprintf("tests: %d passed, %d failed, %d skipped", c.passed, c.failed, c.skipped)
}

func (c *counts) ok() bool { return c.failed == 0 && c.skipped == 0 && c.passed > 0 }

// run copies in to out as text and returns the counts.
func run(in io.Reader, out io.Writer) (*counts, error) {
	c := &counts{pkgHasFailedTest: map[string]bool{}}
	r := bufio.NewReaderSize(in, 1<<20)
	for {
		line, err := r.ReadBytes('\n')
		if len(line) > 0 {
			var e event
			if bytes.HasPrefix(line, []byte("{")) && json.Unmarshal(line, &e) == nil && e.Action != "" {
				if e.Output != "" {
					io.WriteString(out, e.Output)
				}
				c.add(e)
			} else {
				out.Write(line)
			}
		}
		if err == io.EOF {
			return c, nil
		}
		if err != nil {
			return c, err
		}
	}
}

func main() {
	summaryFile := flag.String("summary", "", "also write the summary line to this file")
	flag.Parse()
	out := os.Stdout // unbuffered: a long e2e test shows its progress as it runs
	c, err := run(os.Stdin, out)
	if err != nil {
		fmt.Fprintf(out, "testcount: reading: %v\n", err)
	}
	for _, n := range c.failedNames {
		fmt.Fprintf(out, "FAILED:  %s\n", n)
	}
	for _, n := range c.skippedNames {
		fmt.Fprintf(out, "SKIPPED: %s\n", n)
	}
	if c.passed == 0 {
		fmt.Fprintln(out, "testcount: no test ran")
	}
	fmt.Fprintln(out, c.summary())
	if *summaryFile != "" {
		if werr := os.WriteFile(*summaryFile, []byte(c.summary()+"\n"), 0o644); werr != nil {
			fmt.Fprintf(os.Stderr, "testcount: %v\n", werr)
			os.Exit(1)
		}
	}
	if err != nil || !c.ok() {
		os.Exit(1)
	}
}
