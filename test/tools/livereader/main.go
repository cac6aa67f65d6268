// Command livereader runs inside a test container and reads configMap paths in a loop, to show
// how live subPath updates look from a container (TestKubeLiveSubPath,
// BenchmarkLiveSubPathLatency). It is static and reaches the container through a hostPath
// volume, so no image is built or pulled for it.
//
//	livereader -out /out/pod.log [-interval 0] file:/etc/live/value dir:/etc/live/dir ...
//
// Every value it reads is one line the test wrote: "<seq, 6 digits> <body> <crc32 of what
// precedes it, 8 hex digits>\n", always valueSize bytes, so an empty, short or torn read is
// visible. A file: path is read whole at each turn; a dir: path is opened as a directory,
// listed (exactly a and b), and a and b are read through the directory's descriptor: both must
// carry the same seq (a directory switches whole).
//
// Every read is accounted for in -out (appended, one line per event):
//
//	start pid=<pid>
//	seen <path> seq=<n> t=<unix ns>      first read of a newer value
//	fail <path> kind=<empty|partial|torn|ENOENT|EBUSY|backwards|error> <detail>
//	held <path> old=<n> ok|bad <detail>  at each newer value: the descriptor opened before it
//	count <path> reads=<n> fails=<n>     cumulative, every second and at exit
//
// "backwards" is a read of an older value than one seen before in this run. At each newer
// value the descriptor (of the file, or of the directory) opened at the previous value is read
// again: it must still show the previous value. SIGTERM ends it after a last count.
package main

import (
	"errors"
	"flag"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// valueSize is the length of every value the tests write: "%06d " + body + " %08x\n".
const valueSize = 4096

// dirEntries are the files of a dir: path.
var dirEntries = []string{"a", "b"}

// maxFailLines bounds the fail lines per path; the count line still counts every failure.
const maxFailLines = 200

type target struct {
	path  string
	isDir bool
	seq   int      // newest seq seen; -1 before the first good read
	held  *os.File // opened when seq was first seen
	reads int
	fails int
}

type logger struct{ f *os.File }

func (l logger) printf(format string, args ...any) {
	// One write per line, O_APPEND: lines of a restarted container never interleave.
	fmt.Fprintf(l.f, format+"\n", args...)
}

func main() {
	out := flag.String("out", "", "file to append the log to")
	interval := flag.Duration("interval", 0, "pause between rounds (0: a tight loop)")
	flag.Parse()
	f, err := os.OpenFile(*out, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	log := logger{f}
	var targets []*target
	for _, arg := range flag.Args() {
		kind, path, ok := strings.Cut(arg, ":")
		if !ok || (kind != "file" && kind != "dir") {
			fmt.Fprintf(os.Stderr, "argument %q: want file:<path> or dir:<path>\n", arg)
			os.Exit(2)
		}
		targets = append(targets, &target{path: path, isDir: kind == "dir", seq: -1})
	}
	log.printf("start pid=%d", os.Getpid())
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM, syscall.SIGINT)
	lastCount := time.Now()
	for {
		select {
		case <-term:
			counts(log, targets)
			os.Exit(0)
		default:
		}
		for _, t := range targets {
			t.read(log)
		}
		if time.Since(lastCount) >= time.Second {
			counts(log, targets)
			lastCount = time.Now()
		}
		if *interval > 0 {
			time.Sleep(*interval)
		}
	}
}

func counts(log logger, targets []*target) {
	for _, t := range targets {
		log.printf("count %s reads=%d fails=%d", t.path, t.reads, t.fails)
	}
}

// read does one read of t and logs what is new.
func (t *target) read(log logger) {
	t.reads++
	seq, fd, kind, detail := t.open()
	if kind == "" && t.seq >= 0 && seq < t.seq {
		kind, detail = "backwards", fmt.Sprintf("seq=%d after seq=%d", seq, t.seq)
	}
	if kind != "" {
		if fd != nil {
			fd.Close()
		}
		t.fails++
		if t.fails <= maxFailLines {
			log.printf("fail %s kind=%s %s", t.path, kind, detail)
		}
		return
	}
	if seq == t.seq {
		fd.Close()
		return
	}
	log.printf("seen %s seq=%d t=%d", t.path, seq, time.Now().UnixNano())
	if t.held != nil {
		old, kind, detail := t.readHeld()
		if kind == "" && old == t.seq {
			log.printf("held %s old=%d ok", t.path, t.seq)
		} else {
			log.printf("held %s old=%d bad %s", t.path, t.seq, strings.TrimSpace(fmt.Sprintf("seq=%d %s %s", old, kind, detail)))
		}
		t.held.Close()
	}
	t.seq, t.held = seq, fd
}

// open reads t now; it returns the seq read and the descriptor it read through (the file, or
// the directory), or the failure's kind and detail.
func (t *target) open() (seq int, fd *os.File, kind, detail string) {
	fd, err := os.Open(t.path)
	if err != nil {
		kind, detail := errKind(err)
		return 0, nil, kind, detail
	}
	if !t.isDir {
		seq, kind, detail = readValue(fd)
		return seq, fd, kind, detail
	}
	seq, kind, detail = readDir(fd)
	return seq, fd, kind, detail
}

// readHeld reads t.held again: the file from its start, or the directory's files.
func (t *target) readHeld() (int, string, string) {
	if t.isDir {
		return readDir(t.held)
	}
	return readValue(io.NewSectionReader(t.held, 0, valueSize+1))
}

// readDir lists dir (exactly dirEntries) and reads each entry through it; all must carry one
// seq.
func readDir(dir *os.File) (int, string, string) {
	names, err := dir.Readdirnames(-1)
	if err != nil {
		return errKindSeq(err)
	}
	if _, err := dir.Seek(0, io.SeekStart); err != nil {
		return errKindSeq(err)
	}
	slices.Sort(names)
	if !slices.Equal(names, dirEntries) {
		if len(names) == 0 {
			return 0, "empty", "directory lists nothing"
		}
		return 0, "partial", fmt.Sprintf("directory lists %v, want %v", names, dirEntries)
	}
	seq := -1
	for _, name := range names {
		fd, err := openAt(dir, name)
		if err != nil {
			kind, detail := errKind(err)
			return 0, kind, name + ": " + detail
		}
		s, kind, detail := readValue(fd)
		fd.Close()
		if kind != "" {
			return 0, kind, name + ": " + detail
		}
		if seq >= 0 && s != seq {
			return 0, "torn", fmt.Sprintf("%s has seq=%d, %s seq=%d", names[0], seq, name, s)
		}
		seq = s
	}
	return seq, "", ""
}

func openAt(dir *os.File, name string) (*os.File, error) {
	fd, err := syscall.Openat(int(dir.Fd()), name, syscall.O_RDONLY|syscall.O_CLOEXEC|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, &os.PathError{Op: "openat", Path: name, Err: err}
	}
	return os.NewFile(uintptr(fd), name), nil
}

// readValue reads one whole value and checks its length and checksum.
func readValue(r io.Reader) (int, string, string) {
	b, err := io.ReadAll(io.LimitReader(r, valueSize+1))
	if err != nil {
		return errKindSeq(err)
	}
	switch {
	case len(b) == 0:
		return 0, "empty", ""
	case len(b) != valueSize:
		return 0, "partial", fmt.Sprintf("%d bytes, want %d", len(b), valueSize)
	}
	body, sum := b[:valueSize-10], strings.TrimSpace(string(b[valueSize-10:]))
	if want := fmt.Sprintf("%08x", crc32.ChecksumIEEE(body)); sum != want {
		return 0, "torn", fmt.Sprintf("checksum %s, want %s", sum, want)
	}
	seq, err := strconv.Atoi(string(b[:6]))
	if err != nil {
		return 0, "torn", fmt.Sprintf("seq %q", b[:6])
	}
	return seq, "", ""
}

func errKindSeq(err error) (int, string, string) {
	kind, detail := errKind(err)
	return 0, kind, detail
}

func errKind(err error) (string, string) {
	switch {
	case errors.Is(err, syscall.ENOENT):
		return "ENOENT", err.Error()
	case errors.Is(err, syscall.EBUSY):
		return "EBUSY", err.Error()
	}
	return "error", err.Error()
}
