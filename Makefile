# paygate: `make run` starts everything, `make test` checks everything.
SHELL := /bin/bash
GO    ?= go

.PHONY: screenshots run test build temporal-cli npm soldev chromium redis unit race chaos fuzz bench vet clean

## run: the whole service on this machine (embedded profile, state in .data/)
run: build temporal-cli soldev
	./bin/paygate dev

## build: the paygate binary
build:
	$(GO) build -o bin/paygate ./cmd/paygate

## temporal-cli: build the pinned Temporal CLI once into .cache/bin (cached)
temporal-cli:
	tools/build-temporal.sh

## npm: the webhook receiver used to verify signatures with the npm standardwebhooks package,
## and the Solana dev chain's sidecar (LiteSVM), both from their lock files
npm:
	@if command -v npm >/dev/null; then npm ci --prefix webhook/testdata/receiver --no-audit --no-fund && \
	npm ci --prefix chain/soldev/sidecar --no-audit --no-fund; \
	else echo "npm not found: the Node signature and Solana dev chain tests will be skipped (they fail under CI=true)"; fi

## soldev: the Solana dev chain's npm packages, installed once (again when the lock file changes);
## without npm or the registry it warns and `paygate dev` runs without Solana
SOLDEV := chain/soldev/sidecar
soldev:
	@if [ ! -f $(SOLDEV)/node_modules/.package-lock.json ] || [ $(SOLDEV)/package-lock.json -nt $(SOLDEV)/node_modules/.package-lock.json ]; then \
	if command -v npm >/dev/null && npm ci --prefix $(SOLDEV) --no-audit --no-fund; then :; \
	else echo "warning: could not install $(SOLDEV) (npm ci); paygate dev will run without the Solana dev chain"; fi; fi

## chromium: Debian's headless Chromium for the browser tests (e2e/browser), installed once
## with apt-get when running as root; otherwise it says what to run (the tests skip without
## it, and fail under CI=true)
chromium:
	@if command -v chromium >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ]; then apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium; \
	else echo "chromium not found: run 'sudo apt-get update && sudo apt-get install -y --no-install-recommends chromium' (the browser tests skip without it, and fail under CI=true)"; fi

## redis: Debian's redis-server for the chaos suite's throwaway Redis, installed once with
## apt-get when running as root; otherwise it says what to run (the suite skips without it, and
## fails under CI=true)
redis:
	@if command -v redis-server >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ]; then apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends redis-server; \
	else echo "redis-server not found: run 'sudo apt-get update && sudo apt-get install -y --no-install-recommends redis-server' (the chaos suite skips without it, and fails under CI=true)"; fi

## test: vet, every test (PostgreSQL too when DATABASE_URL is set; the packages with
## concurrency under the race detector), the chaos suite, short fuzz runs
test: temporal-cli npm chromium redis vet unit race chaos fuzz

vet:
	$(GO) vet ./...
	$(GO) vet -tags chaos ./chaos/
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi

## RACE_PKGS: the packages with concurrency (workflows, handlers, limiter, stores, workers,
## the sender, the chain clients, the refund watcher, the processes end to end), tested by `make race` under
## the race detector; `make unit` tests every other package without it, so nothing runs twice.
RACE_PKGS := ./workflows/... ./checkout/... ./ratelimit/... ./webhook/... ./activities/... ./chain/... \
	./api/... ./models/... ./worker/... ./keyring/... ./refund/... ./e2e/...

unit:
	$(GO) test -count=1 -timeout 30m $$(comm -23 <($(GO) list ./... | sort) <($(GO) list $(RACE_PKGS) | sort))

## race: the race detector over RACE_PKGS (a race fails the run)
race:
	$(GO) test -race -count=1 -timeout 30m $(RACE_PKGS)

## chaos: the fault-injection suite against the real stack (chaos/, build tag chaos): worker
## SIGKILLs during an expiry storm and during payments, Temporal SIGKILL and restart, the
## store's PostgreSQL (a throwaway cluster) stopped and restarted, faulty webhook receivers,
## Redis stopped under the rate limiter; prints its table
chaos: temporal-cli redis
	@mkdir -p .cache
	$(GO) test -tags chaos -count=1 -timeout 15m -v -run TestChaos ./chaos/ | tee .cache/chaos.log | grep -v -E '^(=== (RUN|PAUSE|CONT)|\s*--- PASS)'; \
	rc=$${PIPESTATUS[0]}; if [ $$rc -ne 0 ]; then \
		echo "chaos failed; the suite's last log lines (a failure's cause is among them; whole log: .cache/chaos.log):"; \
		grep -E '^\s+[a-z_]+_test\.go:[0-9]+: ' .cache/chaos.log | tail -n 15; fi; exit $$rc

fuzz:
	FUZZTIME=$${FUZZTIME:-20000x} scripts/fuzz.sh

## screenshots: the browser tests of the hosted pages and the dashboard, refreshing the README's pictures in docs/screenshots
screenshots: temporal-cli chromium
	SCREENSHOT_DIR=docs/screenshots $(GO) test -count=1 -run 'TestCheckoutPage|TestDashboard.*InBrowser' ./e2e/

## bench: the service benchmark (the embedded stack under load, each figure beside its reference
## measured in the same run; table on stdout, JSON in .cache/bench.json), then the Go benchmarks
bench: temporal-cli
	PAYGATE_BENCH=1 $(GO) test -count=1 -timeout 20m -run '^TestServiceBench$$' -v ./e2e/ | grep -v '^=== \|^--- \|^PASS\|^ok'
	$(GO) test -run '^$$' -bench . -benchmem ./...

clean:
	rm -rf bin
