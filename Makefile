# SPACE: `make run` starts the all-in-one server; `make test` runs every test.
SHELL := /bin/bash
export PATH := /usr/local/go/bin:$(PATH)
GO ?= go
BIN := bin

.PHONY: all build run test deps-run deps-test kernel vet fmt-check proto clean

# The vm runtime's minimal guest kernel (microvm) is compiled once from
# Debian's linux-source and cached by content hash; later runs reuse it.
KERNEL_CACHE ?= $(or $(SPACE_CACHE_DIR),/var/cache/space)

all: build

build:
	$(GO) build -o $(BIN)/space ./cmd/space
	CGO_ENABLED=0 $(GO) build -tags osusergo,netgo -trimpath -ldflags='-s -w' -o $(BIN)/space-guest ./cmd/space-guest

deps-run:
	@scripts/deps.sh run

deps-test:
	@scripts/deps.sh test

kernel:
	$(GO) run ./internal/vmimage/buildkernel -cache-dir $(KERNEL_CACHE)

run: deps-run build kernel
	$(BIN)/space server --dev

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

test: deps-test build fmt-check vet kernel
	SPACE_TEST_CACHE_DIR=$(KERNEL_CACHE) $(GO) test -count=1 -timeout 25m ./...

proto:
	api/guest/v1/generate.sh

clean:
	rm -rf $(BIN)
