# mountkeeper: `make demo` runs the main job on the embedded default config; `make test` runs
# every test (unit, integration over NRI's in-process runtime, end-to-end on real containerd +
# runc). Both need root on Debian/Ubuntu; test/tools/install.sh installs what they need.

GO      ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
BIN     := bin/mountkeeper
HOOKBIN := bin/mountkeeper-hook
RTBIN   := bin/mountkeeper-runtime
# Only mountkeeper has a version (`mountkeeper version`, its log); mountkeeper-hook has none.
LDFLAGS := -X main.version=$(VERSION)
# Where test/tools/install.sh caches containerd and runc; exported for the tests.
export MOUNTKEEPER_CACHE ?= /var/cache/mountkeeper-test
export MOUNTKEEPER_BIN   ?= $(MOUNTKEEPER_CACHE)/bin
# Extra `go test` flags for unit and e2e: .ci/run sets -json to count the results.
TESTFLAGS ?=
# Tests that mount run in a private mount namespace of their own, so nothing they mount can
# outlive them.
PRIVATE_NS := MOUNTKEEPER_PRIVATE_MOUNT_NS=$$(readlink /proc/self/ns/mnt) unshare -m --propagation private

.PHONY: all build image test unit kernels nfs-control e2e upstream demo bench tools demo-tools vet clean

all: build

# No cgo: the binaries are static and start faster (about 1 ms less per hook). mountkeeper-hook
# is the hook alone, which starts in about a third of the time (docs/benchmarks.md).
build:
	CGO_ENABLED=0 $(GO) build -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/mountkeeper
	CGO_ENABLED=0 $(GO) build -o $(HOOKBIN) ./cmd/mountkeeper-hook
	CGO_ENABLED=0 $(GO) build -o $(RTBIN) ./cmd/mountkeeper-runtime

# The container image (deploy/): the three binaries (static, no cgo) for each of PLATFORMS on
# an empty base; nothing is pulled. One OCI image-layout tarball holding an image index (a
# manifest per architecture) tagged with the version: import it on each node with
# `ctr -n k8s.io images import bin/mountkeeper-image.tar`, or push it with your tools. The
# chart's appVersion names the tag of a release (git describe on its tag).
PLATFORMS ?= amd64 arm64
IMAGE ?= localhost/mountkeeper:$(VERSION)
image:
	@for arch in $(PLATFORMS); do \
		echo "building linux/$$arch"; \
		CGO_ENABLED=0 GOOS=linux GOARCH=$$arch $(GO) build -ldflags '$(LDFLAGS)' -o bin/linux_$$arch/mountkeeper ./cmd/mountkeeper && \
		CGO_ENABLED=0 GOOS=linux GOARCH=$$arch $(GO) build -o bin/linux_$$arch/mountkeeper-hook ./cmd/mountkeeper-hook && \
		CGO_ENABLED=0 GOOS=linux GOARCH=$$arch $(GO) build -o bin/linux_$$arch/mountkeeper-runtime ./cmd/mountkeeper-runtime || exit 1; \
	done
	$(GO) run ./test/tools/mkimage -name $(IMAGE) -bin-dir bin -platforms '$(PLATFORMS)' -o bin/mountkeeper-image.tar

# gofmt, go vet, and golangci-lint (.golangci.yml; built by test/tools/install.sh).
vet: tools
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt needed"; exit 1; }
	$(GO) vet ./...
	$(GO) vet -tags e2e ./test/e2e/
	$(GO) vet -tags 'e2e guestnfs' ./test/e2e/
	$(MOUNTKEEPER_BIN)/golangci-lint run --timeout 15m ./...
	$(GO) vet -tags kernels ./test/vm/
	$(GO) vet -tags smbguest ./internal/netmount/
	$(GO) vet -tags guestnfs ./internal/netmount/

# Everything the tests need; demo-tools only what `make demo` uses (containerd, runc, sshd,
# sshfs: docs/development.md has its cold time).
tools:
	bash test/tools/install.sh
	bash test/tools/install-helm.sh

demo-tools:
	bash test/tools/install.sh demo

# unit depends on tools: built before gcc, sshfs or runc are installed, tests would skip.
unit: tools
	$(PRIVATE_NS) $(GO) test -count=1 $(TESTFLAGS) ./...

# The kernel-dependent packages' unit tests on Debian's 5.10, 6.1 and 6.12 kernels, one QEMU
# guest after another, and NFS and SMB mounted for real in a guest each (TestNFS, TestSMB)
# (test/vm; docs/development.md); and a guest whose kernel locks up booted again
# (TestRunLockedUp).
# QEMU without KVM is CPU-bound: niced.
kernels: tools
	nice -n 10 $(GO) test -tags kernels -count=1 -timeout 30m -run '^(TestKernels|TestNFS|TestSMB|TestRunLockedUp)$$' -v $(TESTFLAGS) ./test/vm/

# TestGuestNFSDeadServer beside its control, the same node without mountkeeper and a dead hard
# NFS mount made by hand: a measurement (docs/network-filesystems.md), not part of make test.
nfs-control: tools
	MOUNTKEEPER_NFS_CONTROL=1 nice -n 10 $(GO) test -tags kernels -count=1 -timeout 20m -run '^TestNFS$$' -v $(TESTFLAGS) ./test/vm/

# TestUpstreamSubPath has a target of its own (and its own timeout): upstream.
e2e: tools build
	MOUNTKEEPER_BINARY=$(CURDIR)/$(BIN) MOUNTKEEPER_HOOK_BINARY=$(CURDIR)/$(HOOKBIN) MOUNTKEEPER_RUNTIME_BINARY=$(CURDIR)/$(RTBIN) $(GO) test -tags e2e -count=1 -timeout 30m -skip '^TestUpstreamSubPath$$' -v $(TESTFLAGS) ./test/e2e/

# The subPath tests of the upstream Kubernetes e2e suite (install.sh builds it), on a real
# node without and then with mountkeeper: any test that passes without it and fails with it
# fails the target (test/e2e/upstream_test.go).
upstream: tools build
	MOUNTKEEPER_BINARY=$(CURDIR)/$(BIN) $(GO) test -tags e2e -count=1 -timeout 60m -run '^TestUpstreamSubPath$$' -v $(TESTFLAGS) ./test/e2e/

test: tools vet unit kernels e2e upstream

demo: demo-tools build
	MOUNTKEEPER_BINARY=$(CURDIR)/$(BIN) $(PRIVATE_NS) $(GO) run ./test/demo

# Ratios against a baseline measured in the same run (see test/benchratio).
# pipefail: a failing benchmark fails the target even though grep shows only its ratio lines.
bench: SHELL := /bin/bash -o pipefail
bench: tools build
	$(PRIVATE_NS) $(GO) test -run '^$$' -bench CreateContainer -benchtime 3000x -count 3 ./nri/ | grep -E 'ratio|^ok|FAIL'
	$(PRIVATE_NS) $(GO) test -run '^$$' -bench '^BenchmarkNetworkMount$$' -benchtime 199x -count 3 ./nri/ | grep -E 'ratio|^ok|FAIL'
	$(PRIVATE_NS) $(GO) test -run '^$$' -bench HungNetworkMount -benchtime 200x -count 1 ./nri/ | grep -E 'ratio|refused|^ok|FAIL'
	$(PRIVATE_NS) $(GO) test -run '^$$' -bench NetworkFirstPod -benchtime 10x -count 1 ./nri/ | grep -E 'ratio|^ok|FAIL'
	$(PRIVATE_NS) $(GO) test -run '^$$' -bench Memory -benchtime 1x ./nri/ | grep -E 'memory:|^ok|FAIL'
	$(PRIVATE_NS) $(GO) test -run '^$$' -bench '^BenchmarkSynchronize$$' -benchtime 3x -count 1 ./nri/ | grep -E 'synchronize:|resources:|^ok|FAIL'
	$(PRIVATE_NS) $(GO) test -run '^$$' -bench '^BenchmarkLiveFanOut$$' -benchtime 3x -count 1 ./nri/ | grep -E 'fan-out:|^ok|FAIL'
	$(PRIVATE_NS) $(GO) test -run '^$$' -bench '^BenchmarkScale$$' -benchtime 1x -count 1 ./nri/ | grep -E 'scale:|^ok|FAIL' | sed 's/^ *scale_bench_test.go:[0-9]*: //'
	$(PRIVATE_NS) $(GO) test -run '^$$' -bench . -benchtime 200x -count 3 ./internal/subpath/... | grep -E 'ratio|^ok|FAIL'
	MOUNTKEEPER_BINARY=$(CURDIR)/$(BIN) MOUNTKEEPER_HOOK_BINARY=$(CURDIR)/$(HOOKBIN) $(PRIVATE_NS) $(GO) test -run '^$$' -bench RuncRunHook -benchtime 100x -count 3 ./hook/ | grep -E 'ratio|^ok|FAIL|SKIP'
	MOUNTKEEPER_BINARY=$(CURDIR)/$(BIN) $(GO) test -tags e2e -run '^$$' -bench PodStart -benchtime 150x -timeout 30m ./test/e2e/ | grep -E 'ratio|^ok|FAIL'
	MOUNTKEEPER_BINARY=$(CURDIR)/$(BIN) $(GO) test -tags e2e -run '^$$' -bench '^BenchmarkLiveSubPathLatency$$' -benchtime 20x -timeout 15m ./test/e2e/ | grep -E 'p50-ms|^ok|FAIL'

clean:
	rm -rf bin
