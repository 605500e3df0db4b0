# Every target works on a fresh machine with Go 1.26 as root (bind mounts need it).
GO      ?= go
BIN     := bin
# The one version source: the VERSION file (no v: the git tag is v$(VERSION), the image tag
# and the chart's version and appVersion $(VERSION); internal/release's test fails when they
# differ).
VERSION ?= $(shell cat $(CURDIR)/VERSION)
# --version's gitCommit and buildDate (the commit's time: the build stays reproducible).
GIT_COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null)
BUILD_DATE ?= $(shell TZ=UTC git log -1 --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ 2>/dev/null)
LDFLAGS := -X github.com/efs-csi/efs-csi-driver/pkg/version.Version=$(VERSION) \
	-X github.com/efs-csi/efs-csi-driver/pkg/version.GitCommit=$(GIT_COMMIT) \
	-X github.com/efs-csi/efs-csi-driver/pkg/version.BuildDate=$(BUILD_DATE)

.PHONY: release-check version build run test test-short fuzz bench bench-go bench-record bench-record-quick e2e soak lint image-check readme clean sim

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/ ./cmd/...

# The quick start: emulator + driver + workload + audit, about a minute.
run: build
	$(BIN)/efs-csi-stress --embedded

# Every unit, conformance, csi-sanity and fuzz-seed test, under the race detector.
test: build image-check
	$(GO) vet ./...
	$(GO) test -race -timeout 20m ./...
	$(GO) test -count=1 -run '^TestModel$$' ./pkg/controller/core
	$(GO) test -count=1 -run '^TestModelSnapshotProtocols$$|^TestSimSnapshotProtocols$$' ./pkg/snapshot
	GO=$(GO) hack/sim.sh $(SIM_SEEDS) 1 $(SIM_PROCS)

# The deterministic simulator (internal/sim, docs/design.md): make test
# runs a fixed set of SIM_SEEDS schedules without the race detector, in
# SIM_PROCS processes (a small set runs under it with the other tests);
# make sim runs SEEDS more from FIRST, or as many as DURATION (e.g.
# DURATION=10m) allows. A failing seed of a kind not known is shrunk and
# written to internal/sim/testdata/found/. SIM_ARGS=-sim.wide draws
# larger, harsher worlds (WideConfig: three clusters of three controllers,
# six volumes, a dozen faults); SIM_ARGS=-sim.list logs every failing seed.
SIM_SEEDS ?= 100000
SIM_PROCS ?= 2
SEEDS     ?= 1000000
FIRST     ?= 100001
DURATION  ?= 0
sim:
	GO=$(GO) hack/sim.sh $(SEEDS) $(FIRST) $(SIM_PROCS) $(DURATION)

# docs/reference.md's flag tables, rewritten from efs-csi-driver's FlagSet (make test fails when
# they differ).
readme:
	$(GO) test ./cmd/efs-csi-driver -run '^TestREADMEFlagTables$$' -count=1 -update

test-short:
	$(GO) test -short ./...

# Short fuzzing runs of every fuzz target (FUZZTIME=30s make fuzz).
FUZZTIME ?= 20s
fuzz:
	@for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list 'Fuzz.*' $$pkg | grep ^Fuzz); do \
	    echo "== $$pkg $$f"; $(GO) test -run=^$$ -fuzz=^$$f$$ -fuzztime=$(FUZZTIME) $$pkg || exit 1; \
	  done; \
	done

# The Dockerfile without a container engine (hack/image-check, its own module: BuildKit's
# parser and lint rules, pinned versions = hack/versions, the image's file list = the
# driver's flag defaults). Building the image itself: docs/image.md.
image-check: build
	cd hack/image-check && $(GO) test . && $(GO) run . -repo ../.. -driver ../../$(BIN)/efs-csi-driver

# 1,000 NodePublish/NodeUnpublish cycles through mount -t efs and the test mount.efs helper,
# counting zombies, mounts, threads and file descriptors (EFS_SOAK_CYCLES=N for another count).
soak:
	EFS_SOAK=1 $(GO) test -count=1 -run TestSoakThroughMountEFSHelper -v ./pkg/node

# Issue 47's three storms (no faults; a 20/s token bucket; the fault mix with 3 callers a
# volume) against this driver with the record in Leases (default flags, an in-process API
# server), with --journal=file, and upstream's driver (its release in ../shared/fixtures,
# built once into make e2e's cache), 3 runs each in turn: the medians, the audit's
# findings and the record's cost to the API server go to the top of docs/benchmarks.md.
# About 10 minutes on 2 cores. Smaller: EFS_BENCH_RUNS (3), EFS_BENCH_VOLUMES (200),
# EFS_BENCH_BUCKET_VOLUMES (200), EFS_BENCH_FAULT_VOLUMES (60).
bench: build
	UPSTREAM=$$(bash hack/upstream-driver.sh) && EFS_BENCH_BIN=$(CURDIR)/$(BIN) EFS_BENCH_UPSTREAM=$$UPSTREAM \
	  EFS_BENCH_DOC=$(CURDIR)/docs/benchmarks.md $(GO) test -count=1 -timeout 60m -v -run '^TestStormBenchmark$$' ./pkg/kube

# Every go test benchmark of the module.
bench-go:
	$(GO) test -run=^$$ -bench=. -benchmem ./...

e2e: build
	bash hack/e2e.sh

# The record through a real kube-apiserver and etcd (make e2e's components):
# the same storm with the record in a file and in Leases, Lease requests per
# pair, then 10,000 volumes at rest. EFS_BENCH_VOLUMES (1000), EFS_BENCH_RUNS
# (2), EFS_BENCH_AT_REST (10000; 0: none). About 10 minutes on 2 cores.
# The same storm against an API server that answers at once (in-process).
bench-record-quick: build
	EFS_BENCH_BIN=$(CURDIR)/$(BIN) $(GO) test -count=1 -timeout 30m -v -run '^TestRecordBenchmarkQuickAPI$$' ./pkg/kube

bench-record: build
	cd test/e2e && EFS_BENCH_RECORD=1 EFS_E2E_BIN_DIR=$(CURDIR)/bin $(GO) test -tags e2e -count=1 -timeout 90m -v -run '^TestRecordBenchmark$$' .

# What the release workflow (.github/workflows/release.yml) builds, checked here: every binary
# for linux/amd64 and linux/arm64, helm lint and package (the version = VERSION), actionlint,
# kubeconform over the chart, the version-agreement test (docs/release.md).
release-check:
	VERSION=$(VERSION) GIT_COMMIT=$(GIT_COMMIT) BUILD_DATE=$(BUILD_DATE) bash hack/release-check.sh

version:
	@echo $(VERSION)

clean:
	rm -rf $(BIN)
