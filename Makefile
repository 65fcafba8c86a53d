# paygate: `make run` starts everything, `make test` checks everything.
SHELL := /bin/bash
GO    ?= go

.PHONY: run test build temporal-cli npm unit fuzz bench vet clean

## run: the whole service on this machine (embedded profile, state in .data/)
run: build temporal-cli
	./bin/paygate dev

## build: the paygate binary
build:
	$(GO) build -o bin/paygate ./cmd/paygate

## temporal-cli: build the pinned Temporal CLI once into .cache/bin (cached)
temporal-cli:
	tools/build-temporal.sh

## npm: the webhook receiver used to verify signatures with the npm standardwebhooks package
npm:
	@if command -v npm >/dev/null; then npm ci --prefix webhook/testdata/receiver --no-audit --no-fund; \
	else echo "npm not found: the Node signature test will be skipped (it fails under CI=true)"; fi

## test: vet, every test (PostgreSQL too when DATABASE_URL is set), short fuzz runs
test: temporal-cli npm vet unit fuzz

vet:
	$(GO) vet ./...
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi

unit:
	$(GO) test -count=1 -timeout 30m ./...

fuzz:
	FUZZTIME=$${FUZZTIME:-5s} scripts/fuzz.sh

## bench: benchmarks with their figures
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

clean:
	rm -rf bin
