// Command mkimage writes the mountkeeper container image as an OCI image-layout tarball:
// the static binaries (mountkeeper, mountkeeper-hook, mountkeeper-runtime) on an empty base, nothing pulled. `make image` runs it;
// import the result with `ctr -n k8s.io images import` or `podman load -i`.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/mountkeeper/mountkeeper/test/harness"
)

func main() {
	binary := flag.String("binary", "bin/mountkeeper", "static mountkeeper binary (make build)")
	hook := flag.String("hook-binary", "bin/mountkeeper-hook", "static mountkeeper-hook binary (make build)")
	runtime := flag.String("runtime-binary", "bin/mountkeeper-runtime", "static mountkeeper-runtime binary (make build)")
	name := flag.String("name", harness.AgentImage, "image name (io.containerd.image.name)")
	out := flag.String("o", "bin/mountkeeper-image.tar", "output tarball")
	flag.Parse()
	if err := run(*binary, *hook, *runtime, *name, *out); err != nil {
		fmt.Fprintln(os.Stderr, "mkimage:", err)
		os.Exit(1)
	}
}

func run(binary, hook, runtime, name, out string) error {
	bin, err := os.ReadFile(binary)
	if err != nil {
		return err
	}
	hookBin, err := os.ReadFile(hook)
	if err != nil {
		return err
	}
	runtimeBin, err := os.ReadFile(runtime)
	if err != nil {
		return err
	}
	archive, err := harness.AgentImageArchive(bin, hookBin, runtimeBin, name)
	if err != nil {
		return err
	}
	if err := os.WriteFile(out, archive, 0o644); err != nil {
		return err
	}
	fmt.Printf("%s: image %s (%d bytes); import: ctr -n k8s.io images import %s\n", out, name, len(archive), out)
	return nil
}
