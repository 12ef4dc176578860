module github.com/spacesandbox/space/sdk/go

go 1.24.0

require (
	github.com/coder/websocket v1.8.15
	github.com/spacesandbox/space/api v0.0.0
)

replace github.com/spacesandbox/space/api => ../../api
