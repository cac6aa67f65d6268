package configs

import (
	"cmp"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// SubPathCopies bounds the private copies of atomic-writer subPaths (configMap, secret,
// downwardAPI, projected) that the plugin binds instead of kubelet's subPath binds. A subPath
// whose copy would pass a bound keeps kubelet's bind, as without mountkeeper.
type SubPathCopies struct {
	// PodBytes and PodEntries bound the copies of one pod, all its containers together. Each
	// entry (file, directory, symlink) costs at least one page of PodBytes, so empty files
	// are not free.
	PodBytes, PodEntries int64
	// NodeBytes and NodeEntries size the tmpfs that holds every pod's copies (size=,
	// nr_inodes=).
	NodeBytes, NodeEntries int64
	// Timeout bounds the subPath work of one container; a copy that overruns it stops and
	// removes what it wrote.
	Timeout time.Duration
}

// subPathCopiesFile is SubPathCopies as the config file spells it; unset keys are zero.
type subPathCopiesFile struct {
	PodBytes    Size     `yaml:"podBytes"`
	PodEntries  int64    `yaml:"podEntries"`
	NodeBytes   Size     `yaml:"nodeBytes"`
	NodeEntries int64    `yaml:"nodeEntries"`
	Timeout     Duration `yaml:"timeout"`
}

// Defaults of subPathCopies. A configMap or secret holds at most 1 MiB; the node pool holds
// the copies of at least eight pods at their budget, and one pod can take an eighth of it.
const (
	DefaultSubPathPodBytes    = 32 << 20
	DefaultSubPathPodEntries  = 4096
	DefaultSubPathNodeBytes   = 256 << 20
	DefaultSubPathNodeEntries = 65536
	// DefaultSubPathTimeout is the timeout unless createBudget asks for less: then two thirds
	// of createBudget, so that the copies give up while CreateContainer can still answer.
	DefaultSubPathTimeout = time.Second
	// PageSize is what one entry of a copy costs at least.
	PageSize = 4096
)

// resolve fills in the defaults; createBudget is the one in force.
func (f subPathCopiesFile) resolve(createBudget time.Duration) SubPathCopies {
	return SubPathCopies{
		PodBytes:    cmp.Or(int64(f.PodBytes), DefaultSubPathPodBytes),
		PodEntries:  cmp.Or(f.PodEntries, DefaultSubPathPodEntries),
		NodeBytes:   cmp.Or(int64(f.NodeBytes), DefaultSubPathNodeBytes),
		NodeEntries: cmp.Or(f.NodeEntries, DefaultSubPathNodeEntries),
		Timeout:     cmp.Or(time.Duration(f.Timeout), min(DefaultSubPathTimeout, createBudget*2/3)),
	}
}

// validate reports every problem of subPathCopies; createBudget is the one in force.
func (f subPathCopiesFile) validate(createBudget time.Duration) error {
	var errs []error
	for _, k := range []struct {
		key string
		v   int64
	}{{"podBytes", int64(f.PodBytes)}, {"podEntries", f.PodEntries}, {"nodeBytes", int64(f.NodeBytes)}, {"nodeEntries", f.NodeEntries}, {"timeout", int64(f.Timeout)}} {
		if k.v < 0 {
			errs = append(errs, fmt.Errorf("subPathCopies.%s is negative: leave it out for the default, or give a positive value", k.key))
		}
	}
	if errs != nil {
		return errors.Join(errs...)
	}
	r := f.resolve(createBudget)
	if r.PodBytes < PageSize {
		errs = append(errs, fmt.Errorf("subPathCopies.podBytes %d is below one page (%d bytes), what a single entry costs: no copy could be made", r.PodBytes, PageSize))
	}
	if r.PodBytes > r.NodeBytes {
		errs = append(errs, fmt.Errorf("subPathCopies.podBytes %d is larger than subPathCopies.nodeBytes %d: one pod could take the whole node pool and leave other pods without copies; lower podBytes or raise nodeBytes", r.PodBytes, r.NodeBytes))
	}
	if r.PodEntries > r.NodeEntries {
		errs = append(errs, fmt.Errorf("subPathCopies.podEntries %d is larger than subPathCopies.nodeEntries %d: one pod could take every inode of the node pool; lower podEntries or raise nodeEntries", r.PodEntries, r.NodeEntries))
	}
	if r.Timeout >= createBudget {
		errs = append(errs, fmt.Errorf("subPathCopies.timeout %s must be below createBudget %s: the copies must give up before CreateContainer does, so that the container still starts with kubelet's binds", r.Timeout, createBudget))
	}
	return errors.Join(errs...)
}

// Size is a number of bytes: a plain integer or one with a binary suffix (Ki, Mi, Gi), as
// Kubernetes quantities write them ("256Mi").
type Size int64

var sizeSuffixes = []struct {
	suffix string
	shift  uint
}{{"Ki", 10}, {"Mi", 20}, {"Gi", 30}}

// UnmarshalYAML reads "4096", "16Mi" or "1Gi"; decimal suffixes (k, M, G) are refused, so
// that 16M is never read as 16Mi.
func (s *Size) UnmarshalYAML(n *yaml.Node) error {
	text := strings.TrimSpace(n.Value)
	shift := uint(0)
	for _, sf := range sizeSuffixes {
		if v, ok := strings.CutSuffix(text, sf.suffix); ok {
			text, shift = v, sf.shift
			break
		}
	}
	v, err := strconv.ParseInt(text, 10, 64)
	if err != nil || v < 0 || v > (1<<62)>>shift {
		return fmt.Errorf("line %d: size %q: write bytes as an integer or with Ki, Mi or Gi, e.g. \"256Mi\"", n.Line, n.Value)
	}
	*s = Size(v << shift)
	return nil
}
