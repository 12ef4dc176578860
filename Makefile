# SPACE: `make run` starts the all-in-one server; `make test` runs every test.
SHELL := /bin/bash
export PATH := /usr/local/go/bin:$(PATH)
GO ?= go
BIN := bin
# The Go modules of this tree: the server's, and the public api/ and sdk/go
# (own go.mod, older go line; `go ... ./...` at the root does not enter them).
MODULES := . api sdk/go

.PHONY: all build console run test fuzz deps-run deps-test kernel s3server vet fmt-check sdk-compat proto clean python-docs

# The vm runtime's minimal guest kernel (microvm) is compiled once from
# Debian's linux-source and cached by content hash; later runs reuse it.
# Nothing waits for it: `make run` serves at once (VMs boot Debian's cloud
# kernel on q35 while the node builds the minimal one in the background),
# and `make test` builds it beside the tests (scripts/test.sh). `make
# kernel` builds it ahead of time.
KERNEL_CACHE ?= $(or $(SPACE_CACHE_DIR),/var/cache/space)

# The real S3 server the object store tests start (versitygw, POSIX backend),
# built once from the Go module proxy into the same cache, in its own module
# context (our go.mod is untouched).
VERSITYGW_VERSION := v1.8.0
S3SERVER := $(KERNEL_CACHE)/versitygw-$(VERSITYGW_VERSION)/versitygw

all: build

# The host binaries, side by side: space (CLI, control plane, sandbox
# manager) finds the node-manager and host bridge beside itself, the
# node-manager the guest daemon. The node-manager and the host bridge are
# pure Go, as deploy/kubernetes/Dockerfile and the e2e harness build them: a
# bridge runs per sandbox, and with cgo each one maps libc and its loader
# (docs/PERFORMANCE.md, "memory per idle ns sandbox").
build: console
	$(GO) build -o $(BIN)/space ./cmd/space
	CGO_ENABLED=0 $(GO) build -o $(BIN)/space-node-manager ./cmd/space-node-manager
	CGO_ENABLED=0 $(GO) build -o $(BIN)/space-host-bridge ./cmd/space-host-bridge
	CGO_ENABLED=0 $(GO) build -tags osusergo,netgo -trimpath -ldflags='-s -w' -o $(BIN)/space-guest ./cmd/space-guest

# The web console (console/, docs/console.md): TypeScript bundled by esbuild
# from the npm packages pinned in console/package-lock.json, into the
# directory internal/console embeds. A plain `go build` without it serves a
# page saying to run make build.
CONSOLE_DIST := internal/console/dist/index.html
CONSOLE_SRC := $(wildcard console/src/*) console/index.html console/build.mjs console/tsconfig.json console/forms.test.mjs

console: $(CONSOLE_DIST)

console/node_modules/.package-lock.json: console/package-lock.json
	cd console && npm ci --no-audit --no-fund

$(CONSOLE_DIST): console/node_modules/.package-lock.json $(CONSOLE_SRC)
	cd console && node_modules/.bin/tsc -p . && node --test forms.test.mjs && node build.mjs

deps-run:
	@scripts/deps.sh run

deps-test:
	@scripts/deps.sh test

kernel:
	$(GO) run ./internal/vmimage/buildkernel -cache-dir $(KERNEL_CACHE)

s3server: $(S3SERVER)

$(S3SERVER):
	mkdir -p $(@D)/.build
	GOBIN=$(abspath $(@D))/.build $(GO) install github.com/versity/versitygw/cmd/versitygw@$(VERSITYGW_VERSION)
	mv $(@D)/.build/versitygw $@
	rmdir $(@D)/.build

run: deps-run build
	SPACE_CACHE_DIR=$(KERNEL_CACHE) $(BIN)/space server --dev

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	@set -e; for m in $(MODULES); do echo "go vet ($$m)"; $(GO) vet -C $$m ./...; done

# The public modules (api, sdk/go) built, vetted and tested with the Go of
# their go line itself, fetched once as a toolchain module from the Go
# module proxy (not part of `make test`, which vets them with this Go: the
# compiler holds them to their go line's language, vet's stdversion check
# to its standard library).
sdk-compat:
	@set -e; v=$$($(GO) -C sdk/go list -m -f '{{.GoVersion}}'); \
	for m in api sdk/go; do echo "go$$v: vet and test ($$m)"; \
	GOTOOLCHAIN=go$$v $(GO) -C $$m vet ./...; GOTOOLCHAIN=go$$v $(GO) -C $$m test -count=1 ./...; done

test: deps-test build fmt-check vet s3server
	scripts/test.sh $(KERNEL_CACHE) $(S3SERVER) $(filter-out .,$(MODULES))

# Every fuzz target for real (coverage-guided), FUZZTIME each (30s by
# default); FUZZ=PATTERN picks targets by package or name. Not part of
# `make test`, which runs only the seed corpora.
fuzz:
	FUZZTIME=$(or $(FUZZTIME),30s) scripts/fuzz.sh '$(or $(FUZZ),.)'

# The Python SDK's API reference (pdoc, from its docstrings) in docs/python/
# (not committed: make test renders it too and fails on a broken entry).
python-docs:
	SPACE_PYTHON_DOCS_OUT=$(CURDIR)/docs/python $(GO) test ./sdk/python/ -run 'TestPythonSDK/reference' -count=1 -v

proto:
	api/guest/v1/generate.sh
	api/node/v1/generate.sh

clean:
	rm -rf $(BIN)
