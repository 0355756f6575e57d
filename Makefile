# Baton. `make run` serves on :8080 (embedded store unless BATON_REDIS_URL is set);
# `make test` installs what it needs and runs the whole suite.
GO     ?= go

.PHONY: run build test lint vet fmt-check spec-lint rules-lint deps tools-test clean screenshots

run: deps
	$(GO) run ./cmd/server

# bin/baton-server is the server, bin/baton the CLI (cmd/baton).
build: deps
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags='-s -w' -o bin/baton-server ./cmd/server
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags='-s -w' -o bin/baton ./cmd/baton

deps:
	$(GO) mod download

# The tests start real redis-servers (and a redis-sentinel); the README
# quickstart test runs curl; the PHP client's tests run PHPUnit on php with
# ext-curl and Symfony Lock (neither has a command: need.sh checks them in php);
# the dashboard's browser test (ui/) drives Debian's chromium headless; deploy/'s
# tests run promtool (Debian's prometheus package) over the alert rules, their
# unit tests and the Grafana dashboard's queries, and HAProxy (haproxy.cfg) in
# front of three Batons restarted in turn.
tools-test:
	@scripts/need.sh -w "for make test (real Redis and Sentinel, curl, the Python and PHP clients' suites, the dashboard's browser test, the alert rules, HAProxy)" \
		redis-server=redis-server redis-sentinel=redis-sentinel redis-cli=redis-tools curl=curl \
		pytest-3=python3-pytest php=php-cli phpunit=phpunit \
		'php:extension_loaded("curl")=php-curl' \
		'php:is_file("/usr/share/php/Symfony/Component/Lock/LockFactory.php")=php-symfony-lock' \
		chromium=chromium promtool=prometheus haproxy=haproxy

test: deps tools-test lint
	$(GO) test -race -count=1 -timeout 15m ./...

lint: fmt-check vet spec-lint rules-lint

vet:
	$(GO) vet ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# vacuum (a maintained OpenAPI linter) is pinned in tools/go.mod.
spec-lint:
	cd tools && $(GO) run github.com/daveshanley/vacuum lint --details --ruleset ../api/vacuum.yaml ../api/openapi.yaml

# The Prometheus alert rules of deploy/ (their unit tests run in make test).
rules-lint:
	@scripts/need.sh -w "for the alert rules' check" promtool=prometheus
	promtool check rules deploy/prometheus/baton-alerts.yml

clean:
	rm -rf bin

# The README's dashboard screenshots (docs/*.png), taken by the browser test;
# make test takes them too, but into a temporary directory.
screenshots: deps tools-test
	$(GO) test -count=1 -run '^TestDashboard$$' ./ui -screenshots

# The side-by-side benchmark (bench/): it starts its own redis-server, etcd and
# Baton on free loopback ports, and prints the budgets table (Baton against the
# hello and floor rows). bench-quick: a few minutes, writes bench/results.json;
# bench: about 15 min, also bench/RESULTS.md and bench/results.svg, with the
# reference commit (b42c606, built at run time from git archive: needs git)
# run beside Baton as baton-ref. Both run the uncontended scenario in memory and
# durable (-durability), and the cluster scenario (a 3-master Redis Cluster:
# needs redis-cli).
.PHONY: bench bench-quick tools-bench

tools-bench:
	@scripts/need.sh -w "for the benchmark (its peers; git builds the reference commit)" etcd=etcd-server redis-server=redis-server redis-cli=redis-tools git=git

bench: deps tools-bench
	$(GO) run ./bench -full

bench-quick: deps tools-bench
	$(GO) run ./bench

# The fault-injection runs (chaos/): each scenario starts
# its own redis-server and two Baton processes on free loopback ports, injects its
# fault while 32+ clients work (some hang up mid-request) and watchers wait, and
# checks every history (porcupine), fenced write, hold no client was told of
# (orphans; none may live past the settle window, -settle-window), lost answer
# a keyed retry must settle, watch's lag and key left in Redis. call-faults
# faults single script calls (late copies, lost replies, stalls) through a
# proxy that reads the Redis protocol: go run ./chaos -only call-faults. chaos-quick: <= 8 min (about 6);
# chaos: <= 20 min (about 18), on a 2-CPU machine. Exit 1 on any violation, stale
# write accepted or orphan hold.
.PHONY: chaos chaos-quick

chaos: deps tools-test
	$(GO) run ./chaos -full

chaos-quick: deps tools-test
	$(GO) run ./chaos

# Native Go fuzzing, each target for FUZZTIME, one after another: handlers/
# (fuzz*_test.go) fuzzes request decoding and validation, lock names and the
# whole router (with its Authorization header in keys mode; with its Host,
# Origin, Sec-Fetch-Site, proxy headers and Content-Type in protected mode)
# over a real redis-server; auth/ (fuzz_test.go) fuzzes the Authorization
# header's parser, the keys file's, and protected mode's rules against a
# second reading of them.
# fuzz-quick: 10s each. The committed corpora (<package>/testdata/fuzz) also
# run, as ordinary tests, in make test. Each of FUZZPARALLEL workers of a
# handlers target starts its own redis-server. New inputs are minimized for at
# most 300 runs: over real HTTP and Redis, the default 60 s stalls a short run.
# FUZZTARGETS are package:target pairs.
FUZZTIME     ?= 30s
FUZZPARALLEL ?= 1
FUZZTARGETS  := handlers:FuzzAcquireBody handlers:FuzzRenewBody handlers:FuzzLockName handlers:FuzzRouter \
	handlers:FuzzProtectedRouter auth:FuzzBearer auth:FuzzParseKeys auth:FuzzProtectedMode
.PHONY: fuzz fuzz-quick

fuzz: deps tools-test
	@set -e; for pt in $(FUZZTARGETS); do \
		p=$${pt%%:*}; t=$${pt#*:}; \
		echo "fuzz: ./$$p $$t for $(FUZZTIME)"; \
		$(GO) test ./$$p -run '^$$' -fuzz "^$$t\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 300x -parallel $(FUZZPARALLEL); \
	done

fuzz-quick:
	$(MAKE) fuzz FUZZTIME=10s
