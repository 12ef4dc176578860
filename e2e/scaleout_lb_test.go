package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// balancer is the load balancer in front of the control-plane replicas of
// the scale-out tests: a small reverse proxy that sends each API request to
// the next live replica in turn.
//
// Node heartbeats are the exception: each node's heartbeats stick to one
// replica while it lives (node i to replica i), as they do behind a real
// layer-4 balancer such as a Kubernetes Service, where a node's keep-alive
// connection stays on the replica it first reached. So every replica learns
// of some nodes only through what the replicas share (the database), which
// is what the tests are about.
//
// A replica that refuses connections (killed) is marked down for a moment
// and the request goes to the next one: nothing was sent, so that is safe
// for any request, as with nginx's proxy_next_upstream error. A request cut
// after it was sent is answered 502, and the client decides whether to
// retry.
type balancer struct {
	t   testing.TB
	ln  net.Listener
	srv *http.Server
	tr  *http.Transport

	mu sync.Mutex // guards the fields below
	// backends are the replicas' host:port, by replica index.
	backends []string
	// downUntil is when a replica that refused a connection is tried again.
	downUntil map[int]time.Time
	next      int
	// sticky maps a node id to its preferred replica, in order of first
	// heartbeat.
	sticky map[string]int
	// watch, when set, is called with the replica index of every request
	// it matches, before the request is sent.
	watch func(r *http.Request) bool
	// watched receives the replica of the first request watch matched.
	watched chan int
}

// maxProxiedBody bounds the request bodies the balancer buffers (to send
// them again to another replica): the API's JSON bodies are far smaller.
const maxProxiedBody = 16 << 20

// startBalancer listens on host (an address the nodes reach too) and
// forwards to backends.
func startBalancer(t testing.TB, host string, backends []string) *balancer {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatalf("balancer: listen: %v", err)
	}
	lb := &balancer{
		t: t, ln: ln, backends: backends, downUntil: map[int]time.Time{}, sticky: map[string]int{},
		tr: &http.Transport{
			DialContext:           (&net.Dialer{Timeout: 2 * time.Second}).DialContext,
			MaxIdleConnsPerHost:   32,
			ResponseHeaderTimeout: 5 * time.Minute,
		},
	}
	lb.srv = &http.Server{Handler: lb, ReadHeaderTimeout: 10 * time.Second}
	go lb.srv.Serve(ln)
	t.Cleanup(func() {
		lb.srv.Close()
		lb.tr.CloseIdleConnections()
	})
	return lb
}

// URL is the balancer's base URL.
func (lb *balancer) URL() string { return "http://" + lb.ln.Addr().String() }

// setBackend replaces replica i's address (a restarted replica).
func (lb *balancer) setBackend(i int, addr string) {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	for len(lb.backends) <= i {
		lb.backends = append(lb.backends, "")
	}
	lb.backends[i] = addr
	delete(lb.downUntil, i)
}

// watchFor arms a watch: the replica index of the first request match
// accepts is sent on the returned channel once the request is written to
// that replica.
func (lb *balancer) watchFor(match func(r *http.Request) bool) <-chan int {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	lb.watch, lb.watched = match, make(chan int, 1)
	return lb.watched
}

// order returns the replicas to try for r, the preferred one first.
func (lb *balancer) order(r *http.Request) []int {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	n := len(lb.backends)
	first := lb.next % n
	if node, ok := heartbeatNode(r.URL.Path); ok {
		i, seen := lb.sticky[node]
		if !seen {
			i = len(lb.sticky)
			lb.sticky[node] = i
		}
		first = i % n
	} else {
		lb.next++
	}
	var live, down []int
	now := time.Now()
	for k := range n {
		i := (first + k) % n
		if lb.backends[i] == "" {
			continue
		}
		if now.Before(lb.downUntil[i]) {
			down = append(down, i)
		} else {
			live = append(live, i)
		}
	}
	return append(live, down...) // a replica marked down may be back
}

// heartbeatNode returns the node id of a heartbeat path.
func heartbeatNode(path string) (string, bool) {
	rest, ok := strings.CutPrefix(path, "/internal/v1/nodes/")
	if !ok {
		return "", false
	}
	node, ok := strings.CutSuffix(rest, "/heartbeat")
	return node, ok && !strings.Contains(node, "/")
}

func (lb *balancer) markDown(i int) {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	lb.downUntil[i] = time.Now().Add(2 * time.Second)
}

func (lb *balancer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxProxiedBody+1))
	if err != nil || len(body) > maxProxiedBody {
		http.Error(w, "balancer: request body unreadable or too large", http.StatusBadGateway)
		return
	}
	var lastErr error
	for _, i := range lb.order(r) {
		lb.mu.Lock()
		addr := lb.backends[i]
		var watched chan int
		if lb.watch != nil && lb.watch(r) {
			watched = lb.watched
			lb.watch = nil
		}
		lb.mu.Unlock()
		resp, wrote, err := lb.send(r, i, addr, body, watched)
		if err != nil {
			lastErr = err
			var op *net.OpError
			if !wrote && errors.As(err, &op) && op.Op == "dial" {
				lb.markDown(i)
				continue // nothing was sent: the next replica may take it
			}
			http.Error(w, fmt.Sprintf("balancer: replica %d: %v", i, err), http.StatusBadGateway)
			return
		}
		copyResponse(w, resp)
		return
	}
	http.Error(w, fmt.Sprintf("balancer: no replica answered: %v", lastErr), http.StatusBadGateway)
}

// send sends r to replica i at addr and reports whether the request was
// written to it; watched, when not nil, receives i once it is.
func (lb *balancer) send(r *http.Request, i int, addr string, body []byte, watched chan int) (*http.Response, bool, error) {
	var wrote atomic.Bool
	ctx := httptrace.WithClientTrace(r.Context(), &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) {
		wrote.Store(true)
		if watched != nil {
			select {
			case watched <- i:
			default:
			}
		}
	}})
	out, err := http.NewRequestWithContext(ctx, r.Method, "http://"+addr+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		return nil, false, err
	}
	// No replay by the transport itself, which would resend a request
	// with an Idempotency-Key on a new connection after the replica died:
	// a balancer forwards a request once, the client decides on retries.
	out.GetBody = nil
	for k, vs := range r.Header {
		if k == "Connection" || k == "Keep-Alive" || k == "Upgrade" {
			continue
		}
		out.Header[k] = vs
	}
	out.Host = r.Host
	out.Header.Set("X-Forwarded-For", strings.Split(r.RemoteAddr, ":")[0])
	resp, err := lb.tr.RoundTrip(out)
	return resp, wrote.Load(), err
}

// copyResponse streams a replica's answer to the client, flushing as it
// goes (exec and file streams).
func copyResponse(w http.ResponseWriter, resp *http.Response) {
	defer resp.Body.Close()
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	w.WriteHeader(resp.StatusCode)
	f, _ := w.(http.Flusher)
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			if f != nil {
				f.Flush()
			}
		}
		if err != nil {
			return
		}
	}
}
