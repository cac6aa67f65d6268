// Command mkimage writes the mountkeeper container image as an OCI image-layout tarball: one
// image index with a manifest per architecture, each holding that architecture's three static
// binaries (mountkeeper, mountkeeper-hook, mountkeeper-runtime) on an empty base; nothing is pulled. `make image`
// cross-compiles the binaries and runs it; import the result with
// `ctr -n k8s.io images import`, or push it with a tool that reads OCI layouts (skopeo,
// crane, oras).
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/mountkeeper/mountkeeper/test/harness"
)

func main() {
	name := flag.String("name", "", "image name with its versioned tag, e.g. "+harness.AgentImageRepository+":v0.1.0")
	binDir := flag.String("bin-dir", "bin", "holds linux_<arch>/mountkeeper, linux_<arch>/mountkeeper-hook and linux_<arch>/mountkeeper-runtime, static (make image)")
	platforms := flag.String("platforms", "amd64 arm64", "the architectures (GOARCH), space- or comma-separated")
	out := flag.String("o", "bin/mountkeeper-image.tar", "output tarball")
	flag.Parse()
	if err := run(*name, *binDir, strings.FieldsFunc(*platforms, func(r rune) bool { return r == ' ' || r == ',' }), *out); err != nil {
		fmt.Fprintln(os.Stderr, "mkimage:", err)
		os.Exit(1)
	}
}

func run(name, binDir string, archs []string, out string) error {
	if name == "" {
		return errors.New("-name is required: the repository and a versioned tag (the chart and deploy/ name the tag; with imagePullPolicy IfNotPresent a moving tag such as latest never rolls out)")
	}
	if strings.HasSuffix(name, ":latest") || !strings.Contains(name[strings.LastIndex(name, "/")+1:], ":") {
		return fmt.Errorf("-name %s: name a versioned tag, not latest (with imagePullPolicy IfNotPresent a node keeps whatever image it has under a moving tag)", name)
	}
	if len(archs) == 0 {
		return errors.New("-platforms is empty")
	}
	var platforms []harness.AgentPlatform
	for _, arch := range archs {
		p, err := harness.ReadAgentPlatform(binDir, arch)
		if err != nil {
			return err
		}
		platforms = append(platforms, p)
	}
	archive, err := harness.AgentImageIndexArchive(name, platforms)
	if err != nil {
		return err
	}
	if err := os.WriteFile(out, archive, 0o644); err != nil {
		return err
	}
	fmt.Printf("%s: image %s for %s (%d bytes); import: ctr -n k8s.io images import %s\n", out, name, strings.Join(archs, ", "), len(archive), out)
	return nil
}
