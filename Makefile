# SPACE: `make run` starts the all-in-one server; `make test` runs every test.
SHELL := /bin/bash
export PATH := /usr/local/go/bin:$(PATH)
GO ?= go
BIN := bin

.PHONY: all build run test deps-run deps-test vet fmt-check proto clean

all: build

build:
	$(GO) build -o $(BIN)/space ./cmd/space
	CGO_ENABLED=0 $(GO) build -tags osusergo,netgo -trimpath -ldflags='-s -w' -o $(BIN)/space-guest ./cmd/space-guest

deps-run:
	@scripts/deps.sh run

deps-test:
	@scripts/deps.sh test

run: deps-run build
	$(BIN)/space server --dev

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

test: deps-test build fmt-check vet
	$(GO) test -count=1 -timeout 25m ./...

proto:
	api/guest/v1/generate.sh

clean:
	rm -rf $(BIN)
