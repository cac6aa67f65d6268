// Package cli is the command-line wiring shared by mountkeeper and mountkeeper-hook: flag
// sets, --config, the logger, the `hook` command and how an error becomes an exit status.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/sirupsen/logrus"

	"github.com/mountkeeper/mountkeeper/configs"
	"github.com/mountkeeper/mountkeeper/internal/engine"
)

// ErrUsage is returned after a usage message was printed: exit status 2.
var ErrUsage = errors.New("usage")

// ExitStatus reports err on stderr the way every mountkeeper command does and returns the
// process's exit status: 0 for --help, 2 for a usage error, 1 for any other error. A
// refusal is printed as it is (it names mountkeeper itself), other errors after
// "mountkeeper: ".
func ExitStatus(err error, stderr io.Writer) int {
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, ErrUsage):
		return 2
	case errors.As(err, new(*engine.Error)):
		fmt.Fprintln(stderr, err)
		return 1
	}
	fmt.Fprintln(stderr, "mountkeeper:", err)
	return 1
}

// NewFlags is the flag set of command name ("mountkeeper <name>"), writing to stderr.
func NewFlags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// Parse parses args into fs and refuses arguments left over.
func Parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return parseError(err)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "unexpected arguments: %s\n", strings.Join(fs.Args(), " "))
		return ErrUsage
	}
	return nil
}

// parseError maps an error of flag.FlagSet.Parse: --help stays flag.ErrHelp, anything else
// (already printed by the flag set) is ErrUsage.
func parseError(err error) error {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return err
	}
	return ErrUsage
}

// ConfigFlag adds --config to fs and returns the flag's value (the path, once fs is parsed)
// and what loads it: the named file, or the embedded default when the flag keeps the default
// path and no file is there.
func ConfigFlag(fs *flag.FlagSet) (path *string, load func() (*configs.Config, string, error)) {
	path = fs.String("config", configs.DefaultPath, "config file; the embedded default is used when the default path does not exist")
	return path, func() (*configs.Config, string, error) { return configs.LoadOrDefault(*path) }
}

// NewLogger is a logger at level (logrus's names) in format text or json, writing to w.
func NewLogger(level, format string, w io.Writer) (*logrus.Logger, error) {
	lvl, err := logrus.ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	var f logrus.Formatter
	switch format {
	case "text":
		f = textFormatter()
	case "json":
		f = &logrus.JSONFormatter{}
	default:
		return nil, fmt.Errorf("--log-format %q: use text or json", format)
	}
	return newLogger(lvl, f, w), nil
}

func textFormatter() logrus.Formatter { return &logrus.TextFormatter{FullTimestamp: true} }

func newLogger(lvl logrus.Level, f logrus.Formatter, w io.Writer) *logrus.Logger {
	log := logrus.New()
	log.SetOutput(w)
	log.SetLevel(lvl)
	log.SetFormatter(f)
	return log
}
