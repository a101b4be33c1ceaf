# Ingot — `make run` runs the bundled pipeline offline, `make test` runs the tests.
# Targets install the Debian packages they need when they are missing.

SWIFT      ?= swift
APT_PKGS   := libsqlite3-dev libcurl4-openssl-dev libzstd-dev zlib1g-dev libpq-dev libssl-dev postgresql
SUDO       := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
RELEASE    := .build/release/ingot
OUT        := out

.PHONY: all deps build release test check lint format run bench instructions chaos fuzz container-test consumer clean

all: build

## deps: install the system libraries (apt) when missing; postgresql brings the server binaries the
## tests start a throwaway server from (no system cluster is created: createcluster.d/ingot.conf)
deps:
	@missing=""; for p in $(APT_PKGS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  case "$$missing" in *postgresql*) \
	    $(SUDO) mkdir -p /etc/postgresql-common/createcluster.d && \
	    echo "create_main_cluster = false" | $(SUDO) tee /etc/postgresql-common/createcluster.d/ingot.conf >/dev/null;; \
	  esac; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi

## build: debug build
build: deps
	$(SWIFT) build

release: deps
	$(SWIFT) build -c release

## test: every test, no network needed; the lint runs beside the build (it takes one core for a few
## seconds while the build resolves and fetches its packages), and either failing fails the target
test: deps
	@$(MAKE) --no-print-directory lint & lint=$$!; \
	$(SWIFT) build --build-tests; built=$$?; \
	wait $$lint || exit 1; [ $$built -eq 0 ] || exit $$built; \
	$(SWIFT) test --skip-build

## check: the unit level alone (INGOT_TEST_LEVEL=unit): the tests that run in the test process and
## start nothing — no PostgreSQL, no fixture server, no ingot process; suites tagged postgres,
## process or sweep are skipped. `make test` runs every level.
check: deps lint
	INGOT_TEST_LEVEL=unit $(SWIFT) test

## lint: swift format lint with the repository's .swift-format (the toolchain ships it); `make format` rewrites
## and scripts/doclinks.py: every ``symbol`` link of the sources' doc comments names a declaration
lint:
	$(SWIFT) format lint --strict --recursive Sources Tests Package.swift
	python3 scripts/doclinks.py

format:
	$(SWIFT) format format --in-place --recursive Sources Tests Package.swift

## run: replay the archive bundled in pipelines/samples (offline) into a fresh out/people.db
run: release
	@mkdir -p $(OUT) && rm -f $(OUT)/people.db $(OUT)/people.db-wal $(OUT)/people.db-shm
	$(RELEASE) replay pipelines/samples/people.ingot --db $(OUT)/people.db
	python3 Benchmarks/people.py --check $(OUT)/people.db --expected pipelines/samples/people/expected.json

## bench: people-200k, paired with two DuckDB peers (pip, pinned), the SQLite write floor and the pipeline floor (simdjson through pysimdjson, pip, pinned)
## (BENCH_ARGS=--big adds people-1M, --huge runs people-10M alone); results go to docs/benchmarks.md by hand
bench: release
	python3 Benchmarks/bench.py --ingot $(RELEASE) $(BENCH_ARGS)

## instructions: instruction count of a people-20k run under callgrind (deterministic; see docs/performance-notes.md)
instructions: release
	@command -v valgrind >/dev/null || { $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq valgrind; }
	scripts/instructions.sh $(RELEASE)

## chaos: kill -9 a people run over HTTP 20 times, resume after each, check the exact final state
## (batch by batch, then a staged load, --bulk, then a load that turns staged at 10 MiB);
## then the same into a throwaway PostgreSQL, batch by batch and staged (--bulk: a killed load resumes in its staging file),
## then 3 jobs sharing one run there (one killed and replaced 20 times), and 2 reading local pages
## (a job whose units come in an unbroken stretch stages them: kills land in stretches too), and
## 3 running a fan-out (the pages, then each person's detail page: a for_each resource), and 3
## whose units are committed in order (persons and dogs read from both sides: inverse:);
## then the I/O-fault sweep: every load plan with its Nth write or sync failing (EIO once, ENOSPC
## from N on), 48 points each, resumed without the fault and checked exact (docs/reliability.md)
chaos: release
	python3 scripts/chaos.py --ingot $(RELEASE) --kills 20 --persons 200000 --max-delay 0.4
	python3 scripts/chaos.py --ingot $(RELEASE) --kills 20 --persons 200000 --max-delay 0.4 --bulk
	python3 scripts/chaos.py --ingot $(RELEASE) --kills 20 --persons 200000 --max-delay 0.4 --bulk-after-mib 10
	python3 scripts/chaos.py --ingot $(RELEASE) --kills 20 --persons 200000 --max-delay 0.4 --postgres
	python3 scripts/chaos.py --ingot $(RELEASE) --kills 20 --persons 200000 --max-delay 0.8 --postgres --bulk
	python3 scripts/chaos.py --ingot $(RELEASE) --kills 20 --persons 200000 --max-delay 0.4 --postgres --join 3
	python3 scripts/chaos.py --ingot $(RELEASE) --kills 20 --persons 200000 --max-delay 0.8 --postgres --join 2 --files
	python3 scripts/chaos.py --ingot $(RELEASE) --kills 20 --persons 200000 --max-delay 0.8 --postgres --join 3 --bulk --paged
	python3 scripts/chaos.py --ingot $(RELEASE) --kills 20 --persons 200000 --max-delay 0.8 --postgres --join 3 --paged --untold
	python3 scripts/chaos.py --ingot $(RELEASE) --kills 20 --persons 20000 --max-delay 0.8 --postgres --join 3 --fanout
	python3 scripts/chaos.py --ingot $(RELEASE) --kills 10 --persons 5000 --max-delay 0.8 --postgres --notes
	python3 scripts/chaos.py --ingot $(RELEASE) --kills 10 --persons 5000 --max-delay 0.8 --postgres --join 3 --notes
	python3 scripts/chaos.py --ingot $(RELEASE) --kills 10 --persons 20000 --max-delay 0.8 --postgres --join 3 --in-order
	python3 scripts/chaos.py --ingot $(RELEASE) --kills 10 --persons 20000 --max-delay 0.8 --postgres --join 3 --replace
	python3 scripts/chaos.py --ingot $(RELEASE) --kills 10 --persons 20000 --max-delay 0.8 --postgres --join 3 --in-order --replace
	python3 scripts/faultsweep.py --ingot $(RELEASE) --points 48
	python3 scripts/faultsweep.py --ingot $(RELEASE) --points 48 --postgres

## fuzz: libFuzzer + AddressSanitizer on each harness (page, archive, pipeline, pagination, draft) for
## FUZZ_SECONDS (default 600) each; crashes are kept in Tests/Fixtures/fuzz/, which make test replays
FUZZ_SECONDS ?= 600
fuzz: deps
	FUZZ_SECONDS=$(FUZZ_SECONDS) scripts/fuzz.sh

## consumer: Examples/Consumer, copied outside the repository and depending on it by path, builds
## against the public API and runs
CONSUMER_DIR ?= $(or $(TMPDIR),/tmp)/ingot-consumer
consumer: deps
	rm -rf $(CONSUMER_DIR) && mkdir -p $(CONSUMER_DIR)
	cp -R Examples/Consumer/Package.swift Examples/Consumer/Sources $(CONSUMER_DIR)/
	sed -i 's|path: "../.."|path: "$(CURDIR)"|' $(CONSUMER_DIR)/Package.swift
	$(SWIFT) build --package-path $(CONSUMER_DIR)
	$(CONSUMER_DIR)/.build/debug/Consumer

## container-test: build the image (docker/Dockerfile, target prebuilt, on a debootstrapped
## bookworm base) and run it under podman: bundled archive, fixture server, SIGTERM, the volume
CONTAINER_PKGS := podman buildah runc debootstrap
container-test: deps
	@missing=""; for p in $(CONTAINER_PKGS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi
	$(SUDO) env PATH="$$PATH" scripts/container-test.sh

clean:
	rm -rf .build .build-static .build-fuzz .fuzz $(OUT) docker/ingot
