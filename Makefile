# Build, check and test fencelock.
#
#   make deps             build the etcd server used by the process provider
#   make images           build the local container images (needs dockerd)
#   make vet              go vet + gofmt in every module
#   make test             vet, unit tests, process-provider and
#                         containers-provider integration tests
#   make demo             the fencing demo on an embedded etcd
#   make test-unit        unit tests of the library (root module) only
#   make test-examples    tests of the examples module (runs the demo)
#   make test-process     integration tests against local processes
#   make test-containers  harness and conformance tests against containers
#   make test-fault       one short pass of the fault suite
#   make chaos            long randomized fault runs with a summary table
#   make bench            side-by-side benchmarks (see BENCHMARKS.md)
#
# Every Go module in the repository, as a directory relative to the root.
# examples/ is a module only once it has a go.mod. Like "go ... ./...",
# the gofmt check skips directories named testdata or starting with . or _
# (integration/.cache holds build output).
MODULES := . integration integration/tools/etcd $(if $(wildcard examples/go.mod),examples)

GO ?= go
CACHE_BIN := integration/.cache/bin
ETCD_BIN := $(CACHE_BIN)/etcd
ETCD_SRC := integration/tools/etcd/main.go integration/tools/etcd/go.mod integration/tools/etcd/go.sum

.PHONY: deps images vet demo test test-unit test-examples test-process test-containers test-fault chaos bench

deps: $(ETCD_BIN)

# Rebuilt only when the tool's sources or pinned versions change.
$(ETCD_BIN): $(ETCD_SRC)
	@mkdir -p $(CACHE_BIN)
	cd integration/tools/etcd && CGO_ENABLED=0 $(GO) build -trimpath -o ../../.cache/bin/etcd.tmp .
	mv $(CACHE_BIN)/etcd.tmp $(ETCD_BIN)
	@$(ETCD_BIN) --version | head -1

images: deps
	integration/images/build.sh

vet:
	@set -e; for m in $(MODULES); do \
		echo "go vet ($$m)"; \
		(cd $$m && $(GO) vet ./...); \
	done
	@echo "gofmt -l"
	@out=$$(find $(MODULES) \( -name '.?*' -o -name '_*' -o -name testdata \) -prune -o -name '*.go' -print | sed 's|^\./||' | sort -u | xargs -r gofmt -l); \
	if [ -n "$$out" ]; then echo "gofmt -l: these files need formatting:"; echo "$$out"; exit 1; fi

# The zero-setup demo: a real embedded etcd, a paused holder, a rejected
# stale write. Needs nothing installed beyond Go.
demo:
	cd examples && $(GO) run ./demo

test: vet deps
	$(MAKE) test-unit
	$(MAKE) test-examples
	$(MAKE) test-process
	$(MAKE) test-containers

test-unit:
	$(GO) test -race ./...

test-examples:
	cd examples && $(GO) test -race -count=1 ./...

# -count=1: results against real servers are never taken from the test cache.
test-process: deps
	cd integration && FENCELOCK_PROVIDER=process $(GO) test -race -count=1 -timeout 40m ./...

test-containers: deps
	cd integration && FENCELOCK_PROVIDER=containers $(GO) test -race -count=1 -timeout 20m -run 'TestHarness|TestContainersProvider|Conformance' ./...

# One short pass of every fault on both backends, the control run and the
# checker self-test (about 2 minutes on 2 cores). make test runs it too, as
# part of test-process.
test-fault: deps
	cd integration && FENCELOCK_PROVIDER=process $(GO) test -race -count=1 -timeout 20m -run '^TestFault' ./faulttest

# Random faults with random timings, FENCELOCK_CHAOS_DURATION per backend
# (default 10m); FENCELOCK_CHAOS_SEED=<n> replays a sequence. The full log
# goes to integration/.cache/chaos.log; the summary table is printed at the
# end. Without -race, for more operations per minute (make test covers -race).
chaos: deps
	@mkdir -p integration/.cache
	@cd integration && { FENCELOCK_CHAOS=1 $(GO) test -count=1 -timeout 0 -v -run '^TestChaos$$' ./faulttest; \
		echo $$? > .cache/chaos.status; } | tee .cache/chaos.log | grep --line-buffered -E '^=== RUN +TestChaos/|violation'; \
		sed -n '/^chaos run:/,/^end of chaos summary/p' .cache/chaos.log; exit $$(cat .cache/chaos.status)

# Side-by-side benchmarks on real clusters (fencelock, the reference recipe
# and the floor in one run; tables and JSON, see BENCHMARKS.md), then the Go
# benchmarks of the hot paths that need no cluster.
bench: deps
	cd integration && FENCELOCK_BENCH=1 $(GO) test -run '^TestBench$$' -timeout 60m -v ./benchtest
	$(GO) test -run '^$$' -bench . -benchmem ./lock/... ./fencing/...
