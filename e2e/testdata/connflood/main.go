// Command connflood is the hostile sandbox of the e2e connection-flood test
// (catalogue C-5). "connflood dial ADDR N DURATION" opens TCP connections to
// ADDR from 64 workers as fast as it can, up to N attempts or for DURATION,
// holds every one that was accepted, prints its counts as one JSON line to
// stdout and then holds the connections until it is killed. "connflood
// serve ADDR" accepts connections on ADDR and holds each one open, echoing
// what it reads (the exposed port the test floods through ingress).
// "connflood http ADDR" serves HTTP on ADDR: GET /hold answers "held" at
// once and then holds the request open until its client leaves (the
// port-request flood of e2e.TestPortRequestFlood), any other path "ok".
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 3 {
		fail("usage: connflood dial ADDR N DURATION | connflood serve ADDR | connflood http ADDR")
	}
	switch os.Args[1] {
	case "dial":
		if len(os.Args) != 5 {
			fail("usage: connflood dial ADDR N DURATION")
		}
		n, err := strconv.Atoi(os.Args[3])
		if err != nil {
			fail("N: " + err.Error())
		}
		d, err := time.ParseDuration(os.Args[4])
		if err != nil {
			fail("DURATION: " + err.Error())
		}
		dial(os.Args[2], n, d)
	case "serve":
		serve(os.Args[2])
	case "http":
		serveHTTP(os.Args[2])
	default:
		fail("unknown mode " + os.Args[1])
	}
}

func fail(msg string) {
	fmt.Fprintln(os.Stderr, "connflood:", msg)
	os.Exit(2)
}

// counts is what dial prints.
type counts struct {
	Attempts int64   `json:"attempts"`
	Accepted int64   `json:"accepted"`
	Refused  int64   `json:"refused"`
	Other    int64   `json:"other"`
	FirstErr string  `json:"first_other_error,omitempty"`
	Seconds  float64 `json:"seconds"`
}

func dial(addr string, n int, dur time.Duration) {
	// Hold as many as the sandbox lets this process open.
	var lim syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim) == nil {
		lim.Cur = lim.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
	}
	var (
		c        counts
		attempts atomic.Int64
		mu       sync.Mutex
		held     []net.Conn
		wg       sync.WaitGroup
	)
	start := time.Now()
	deadline := start.Add(dur)
	d := net.Dialer{Timeout: 3 * time.Second}
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for attempts.Add(1) <= int64(n) && time.Now().Before(deadline) {
				conn, err := d.Dial("tcp", addr)
				mu.Lock()
				switch {
				case err == nil:
					c.Accepted++
					held = append(held, conn)
				case errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET):
					c.Refused++
				default:
					c.Other++
					if c.FirstErr == "" {
						c.FirstErr = err.Error()
					}
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	c.Attempts = c.Accepted + c.Refused + c.Other
	c.Seconds = time.Since(start).Seconds()
	_ = json.NewEncoder(os.Stdout).Encode(c)
	// Hold every accepted connection until killed (a bare select{} would be
	// the runtime's deadlock once no goroutine is left).
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
}

func serve(addr string) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fail(err.Error())
	}
	for {
		conn, err := ln.Accept()
		if err != nil {
			fail(err.Error())
		}
		go func() {
			defer conn.Close()
			_, _ = io.Copy(conn, conn)
		}()
	}
}

func serveHTTP(addr string) {
	mux := http.NewServeMux()
	mux.HandleFunc("/hold", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "held\n")
		http.NewResponseController(w).Flush()
		<-r.Context().Done()
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok\n")
	})
	fail((&http.Server{Addr: addr, Handler: mux}).ListenAndServe().Error())
}
