#!/bin/sh
# generate.sh regenerates the Go code beside the guest protocol's .proto files.
# Needs protoc, protoc-gen-go and protoc-gen-connect-go on PATH.
set -eu
cd "$(dirname "$0")"
module=github.com/spacesandbox/space/api/guest/v1
for proto in process/process.proto filesystem/filesystem.proto control/control.proto; do
	protoc -I . \
		--go_out=. --go_opt=module="$module" \
		--connect-go_out=. --connect-go_opt=module="$module" \
		"$proto"
done
