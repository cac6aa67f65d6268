package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/syslog"
	"os"
	"strings"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/mountkeeper/mountkeeper/configs"
	"github.com/mountkeeper/mountkeeper/hook"
	"github.com/mountkeeper/mountkeeper/internal/hostmount"
)

const hookUsage = `usage: %s <stage> [--config FILE] --runtime-class NAME

stages:
  prestart, createRuntime  OCI state on stdin: add the class mounts inside the container
  precreate                config.json on stdin, adjusted config.json on stdout (podman hooks.d)
  guard                    OCI state on stdin (createRuntime): refuse a container of the class
                           that the NRI plugin did not handle (installed by runtime configure)

flags:
`

// RunHook wires `mountkeeper hook <stage>` (name "mountkeeper hook") and `mountkeeper-hook
// <stage>` to package hook. The stage comes first; flags may follow it or precede it.
func RunHook(name string, args []string, stdin io.Reader, stdout, stderr io.Writer) (err error) {
	fs := NewFlags(name, stderr)
	errorLog := fs.String("error-log", "syslog", "where a refusal is also written, since some runtimes drop a hook's stderr (podman's precreate): syslog (the journal, through /dev/log), a file path, or none")
	defer func() {
		if err != nil && !errors.Is(err, ErrUsage) && !errors.Is(err, flag.ErrHelp) {
			reportHookError(*errorLog, err)
		}
	}()
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), hookUsage, name)
		fs.PrintDefaults()
	}
	_, loadConfig := ConfigFlag(fs)
	class := fs.String("runtime-class", "", "CRI runtime handler whose class mounts to add (\"default\": the runtime's default handler); required unless --trust-runtime-handler-annotation")
	trust := fs.Bool("trust-runtime-handler-annotation", false, "without --runtime-class, take the class from the "+hook.RuntimeHandlerAnnotation+" annotation, else the default class: only where pods cannot set that annotation themselves")
	stateDir := fs.String("state-dir", configs.DefaultStateDir, "guard: the plugin's stateDir, which holds the node's guard key")
	stageArg, rest := "", args
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		stageArg, rest = args[0], args[1:]
	}
	if err := fs.Parse(rest); err != nil {
		return parseError(err)
	}
	if stageArg == "" && fs.NArg() > 0 {
		// Flags first, then the stage, possibly followed by more flags.
		stageArg = fs.Arg(0)
		if err := fs.Parse(fs.Args()[1:]); err != nil {
			return parseError(err)
		}
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "unexpected arguments: %s\n", strings.Join(fs.Args(), " "))
		fs.Usage()
		return ErrUsage
	}
	if stageArg == "guard" {
		return hook.Guard(stdin, *class, *stateDir)
	}
	stage, err := hook.ParseStage(stageArg)
	if err != nil {
		fmt.Fprintln(stderr, err)
		fs.Usage()
		return ErrUsage
	}
	cfg, _, err := loadConfig()
	if err != nil {
		return err
	}
	network := hook.NewManagerNetwork(cfg, newLogger(logrus.InfoLevel, textFormatter(), stderr))
	return hook.Run(stage, hook.Options{
		Config:       cfg,
		RuntimeClass: *class,

		TrustRuntimeHandlerAnnotation: *trust,
		Host:                          hostmount.NewChecker(hostmount.System{}),
		Network:                       network,
	}, stdin, stdout)
}

// reportHookError writes a hook's refusal where an operator finds it even when the runtime drops
// the hook's stderr (podman 4.3 shows only "exit status 1" for a precreate hook): the system
// journal (syslog's /dev/log, where journald listens) or a file. Failing to report is not an
// error of the hook's own.
func reportHookError(where string, err error) {
	line := strings.ReplaceAll(err.Error(), "\n", "; ")
	switch where {
	case "none", "":
	case "syslog":
		w, serr := syslog.New(syslog.LOG_ERR|syslog.LOG_DAEMON, "mountkeeper-hook")
		if serr != nil {
			return // no syslog daemon here
		}
		defer w.Close()
		_ = w.Err(line)
	default:
		f, ferr := os.OpenFile(where, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if ferr != nil {
			return
		}
		defer f.Close()
		fmt.Fprintf(f, "%s %s\n", time.Now().UTC().Format(time.RFC3339), line)
	}
}
