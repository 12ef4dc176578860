module github.com/spacesandbox/space/api

go 1.24.0

require (
	connectrpc.com/connect v1.19.1
	google.golang.org/protobuf v1.36.12
)
