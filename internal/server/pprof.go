package server

import (
	"net/http"
	"net/http/pprof"
)

// registerPprof serves Go's profiles under /debug/pprof/ to admin keys only:
// a profile shows the process's code paths and can hold request data (the
// goroutine dump includes arguments), so no tenant may read it. Example:
//
//	go tool pprof -http=: "http://127.0.0.1:7070/debug/pprof/profile?seconds=20"
//
// with the admin key in SPACE_API_KEY sent as a bearer token (pprof reads
// -H-style headers from a curl-fetched file: curl -H "Authorization: Bearer
// $SPACE_API_KEY" -o cpu.pb.gz …/profile?seconds=20; go tool pprof cpu.pb.gz).
func (s *Server) registerPprof(admin func(pattern string, h http.HandlerFunc)) {
	admin("GET /debug/pprof/", pprof.Index)
	admin("GET /debug/pprof/cmdline", pprof.Cmdline)
	admin("GET /debug/pprof/profile", pprof.Profile)
	admin("GET /debug/pprof/symbol", pprof.Symbol)
	admin("GET /debug/pprof/trace", pprof.Trace)
	// Index serves the named profiles (heap, goroutine, allocs, block,
	// mutex, threadcreate) under /debug/pprof/{name}.
}
