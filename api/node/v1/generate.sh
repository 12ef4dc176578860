#!/bin/sh
# generate.sh regenerates the Go code beside the node API's .proto files.
# Needs protoc, protoc-gen-go and protoc-gen-connect-go on PATH, at the
# versions of google.golang.org/protobuf and connectrpc.com/connect in
# api/go.mod.
set -eu
cd "$(dirname "$0")"
module=github.com/spacesandbox/space/api/node/v1
protoc -I . \
	--go_out=. --go_opt=module="$module" \
	--connect-go_out=. --connect-go_opt=module="$module" \
	nodeapi/node.proto nodeapi/controlplane.proto
