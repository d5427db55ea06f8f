# Build, check and test fencelock.
#
#   make test             everything, against real servers: set-up (deps),
#                         vet, unit tests, examples, the integration tests on
#                         the process and the containers provider, a short
#                         fuzz pass; ends with a summary table
#   make deps             set-up only: installs missing Debian packages
#                         (as root), builds the etcd server and the images
#   make vet              go vet + gofmt in every module
#   make demo             the fencing demo on an embedded etcd
#   make test-unit        unit tests of the library and the tools only
#   make test-examples    tests of the examples module (runs the demo)
#   make test-process     deps + integration tests against local processes
#   make test-containers  deps + integration tests against containers
#   make fuzz             every Fuzz target, FUZZTIME each (default 1m)
#   make test-fault       one short pass of the fault suite (process provider)
#   make chaos            long randomized fault runs with a summary table
#   make bench            side-by-side benchmarks (see BENCHMARKS.md), then
#                         their charts
#   make charts           redraw the charts from existing results: the SVGs
#                         in CHARTS_DIR (default docs/bench) from BENCH_JSON
#                         (default integration/bench-results.json; several
#                         files are several runs)
#   make bench-spread     the target lines of several runs side by side, as
#                         Markdown (BENCH_JSON: their files)
#   make bench-report     the tables of BENCHMARKS.md and of README.md's
#                         Performance section, made again from the results
#                         files BENCHMARKS.md names; fails if a figure
#                         outside them is in no results file in docs/bench
#   make bench-report-check  the same without rewriting: fails if a table
#                         is out of date
#   make screenshot       examples/metrics/prometheus-graph.png from a real
#                         run: the metrics example scraped by Prometheus,
#                         its graph page taken by headless Chromium
#   make images           build the local container images (needs dockerd)
#
# Variables for the test targets (CONTRIBUTING.md, "Set-up and the test run"): FENCELOCK_BACKENDS
# (etcd,zookeeper), FENCELOCK_PROVIDERS (process,containers), FENCELOCK_RUN
# (a -run pattern for the integration stages, for development), FUZZTIME,
# CI=true. Every test target runs scripts/test.sh, which reads
# "go test -json" and fails on any skip that was not asked for.
#
# Every Go module in the repository, as a directory relative to the root.
# examples/ is a module only once it has a go.mod. Like "go ... ./...",
# the gofmt check skips directories named testdata or starting with . or _
# (integration/.cache holds build output).
MODULES := . integration integration/tools/etcd integration/tools/testsum $(if $(wildcard examples/go.mod),examples)

GO ?= go
CACHE_BIN := integration/.cache/bin
ETCD_BIN := $(CACHE_BIN)/etcd
ETCD_SRC := integration/tools/etcd/main.go integration/tools/etcd/go.mod integration/tools/etcd/go.sum
ETCDCTL_BIN := $(CACHE_BIN)/etcdctl

# The results make bench writes (FENCELOCK_BENCH_OUT is relative to
# integration/ unless absolute) and where their charts go.
BENCH_OUT := $(or $(FENCELOCK_BENCH_OUT),bench-results.json)
BENCH_JSON ?= $(if $(filter /%,$(BENCH_OUT)),$(BENCH_OUT),integration/$(BENCH_OUT))
CHARTS_DIR ?= docs/bench

.PHONY: deps images vet demo test test-unit test-examples test-process test-containers fuzz test-fault chaos bench charts bench-spread bench-report bench-report-check screenshot

deps:
	scripts/test.sh deps

# Rebuilt only when the tool's sources or pinned versions change.
$(ETCD_BIN): $(ETCD_SRC)
	@mkdir -p $(CACHE_BIN)
	cd integration/tools/etcd && CGO_ENABLED=0 $(GO) build -trimpath -o ../../.cache/bin/etcd.tmp .
	mv $(CACHE_BIN)/etcd.tmp $(ETCD_BIN)
	@$(ETCD_BIN) --version | head -1

# etcd's own client, for the tests that run "etcdctl lock" beside Lockers.
$(ETCDCTL_BIN): integration/tools/etcd/etcdctl/main.go $(ETCD_SRC)
	@mkdir -p $(CACHE_BIN)
	cd integration/tools/etcd/etcdctl && CGO_ENABLED=0 $(GO) build -trimpath -o ../../../.cache/bin/etcdctl.tmp .
	mv $(CACHE_BIN)/etcdctl.tmp $(ETCDCTL_BIN)

images: $(ETCD_BIN)
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

test:
	scripts/test.sh

test-unit:
	scripts/test.sh unit

test-examples:
	scripts/test.sh examples

test-process:
	scripts/test.sh deps process

test-containers:
	scripts/test.sh deps containers

fuzz:
	FUZZTIME=$${FUZZTIME:-1m} scripts/test.sh fuzz

# One short pass of every fault on both backends, the control runs, the
# lock-delay runs and the checker self-test (about 2 minutes on 2 cores). make test runs it too, in
# the process and the containers stages.
test-fault: $(ETCD_BIN)
	cd integration && FENCELOCK_PROVIDER=process $(GO) test -race -count=1 -timeout 20m -run '^TestFault' ./faulttest

# Random faults with random timings, FENCELOCK_CHAOS_DURATION per backend
# (default 10m); FENCELOCK_CHAOS_SEED=<n> replays a sequence. The full log
# goes to integration/.cache/chaos.log; the summary table is printed at the
# end. Without -race, for more operations per minute (make test covers -race).
chaos: $(ETCD_BIN)
	@mkdir -p integration/.cache
	@cd integration && { FENCELOCK_CHAOS=1 $(GO) test -count=1 -timeout 0 -v -run '^TestChaos$$' ./faulttest; \
		echo $$? > .cache/chaos.status; } | tee .cache/chaos.log | grep --line-buffered -E '^=== RUN +TestChaos/|violation'; \
		sed -n '/^chaos run:/,/^end of chaos summary/p' .cache/chaos.log; exit $$(cat .cache/chaos.status)

# Side-by-side benchmarks on real clusters (fencelock, the reference recipe
# and the floor in one run, every compared row in alternating windows, and
# the overheads of metrics, tracing and TLS to ±1%; tables and JSON, see
# BENCHMARKS.md), their charts, then the Go benchmarks of the hot paths
# that need no cluster (Guard.Apply with and without metrics among them).
bench: $(ETCD_BIN)
	cd integration && FENCELOCK_BENCH=1 $(GO) test -run '^TestBench$$' -timeout 60m -v ./benchtest
	$(MAKE) --no-print-directory charts
	cd integration && $(GO) test -run '^$$' -bench '^BenchmarkObservabilityGuardApply$$' ./benchtest
	$(GO) test -run '^$$' -bench . -benchmem ./lock/... ./fencing/...

# The SVG charts of BENCHMARKS.md, drawn by integration/benchtest/charts.
# A chart the results have no rows for is not drawn, and an older copy of
# it in CHARTS_DIR is removed.
charts:
	@mkdir -p $(CACHE_BIN)
	cd integration && $(GO) build -o .cache/bin/benchcharts ./benchtest/charts
	$(CACHE_BIN)/benchcharts -out $(CHARTS_DIR) $(BENCH_JSON)

# Every target line of the runs in BENCH_JSON, with how many met it.
bench-spread:
	@mkdir -p $(CACHE_BIN)
	@cd integration && $(GO) build -o .cache/bin/benchcharts ./benchtest/charts
	@$(CACHE_BIN)/benchcharts -spread $(BENCH_JSON)

# The generated tables of the benchmark docs (integration/benchtest/charts,
# -report). The results files they are made from are named once, by the
# "bench-report-set" lines at the top of BENCHMARKS.md; a figure outside
# the tables must match one in a results file in BENCH_SOURCES.
BENCH_REPORT_DOCS := BENCHMARKS.md README.md
BENCH_SOURCES ?= docs/bench

bench-report:
	@mkdir -p $(CACHE_BIN)
	@cd integration && $(GO) build -o .cache/bin/benchcharts ./benchtest/charts
	$(CACHE_BIN)/benchcharts -report -sources $(BENCH_SOURCES) $(BENCH_REPORT_DOCS)

# Also fails if a results file in BENCH_SOURCES is not committed: a
# figure may only come from a committed run.
bench-report-check:
	@untracked=$$(git ls-files --others --exclude-standard -- '$(BENCH_SOURCES)/*.json'); \
	if [ -n "$$untracked" ]; then echo "bench-report-check: results files not committed: $$untracked"; exit 1; fi
	@mkdir -p $(CACHE_BIN)
	@cd integration && $(GO) build -o .cache/bin/benchcharts ./benchtest/charts
	$(CACHE_BIN)/benchcharts -report -check -sources $(BENCH_SOURCES) $(BENCH_REPORT_DOCS)

# Installs Prometheus and Chromium if missing (make deps does too), then
# runs the metrics example's Prometheus test on etcd for a minute and a
# half and saves the graph page of its lost-lease, rejection and wait-time
# series.
screenshot:
	FENCELOCK_SCREENSHOT=$(CURDIR)/examples/metrics/prometheus-graph.png FENCELOCK_PROVIDERS=process FENCELOCK_BACKENDS=etcd \
		FENCELOCK_RUN='^TestExampleEtcd$$/^Metrics$$' scripts/test.sh deps process
