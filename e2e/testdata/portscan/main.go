// portscan is the scanner the e2e tests run inside a sandbox (catalogue
// it tries every TCP port of each -tcp address and sends a DNS query
// to every UDP port of each -udp address, and prints, as JSON, the TCP ports
// that accepted, the TCP attempts that neither connected nor were refused
// within the timeout, and the UDP ports that answered.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
)

type result struct {
	TCPOpen     []string `json:"tcp_open"`
	TCPTimeouts int      `json:"tcp_timeouts"`
	TCPRefused  int      `json:"tcp_refused"`
	TCPOther    []string `json:"tcp_other,omitempty"`
	UDPSent     int      `json:"udp_sent"`
	UDPAnswered []string `json:"udp_answered"`
}

func main() {
	tcpAddrs := flag.String("tcp", "", "comma-separated addresses whose TCP ports to try")
	udpAddrs := flag.String("udp", "", "comma-separated addresses whose UDP ports to probe")
	first := flag.Int("from", 1, "first port")
	last := flag.Int("to", 65535, "last port")
	workers := flag.Int("c", 64, "TCP connection attempts at once")
	timeout := flag.Duration("timeout", 2*time.Second, "TCP connect timeout")
	listen := flag.Duration("listen", 3*time.Second, "how long to wait for UDP answers after the last probe")
	flag.Parse()

	var res result
	var mu sync.Mutex
	for _, addr := range split(*tcpAddrs) {
		ports := make(chan int)
		var wg sync.WaitGroup
		for range *workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for p := range ports {
					target := net.JoinHostPort(addr, fmt.Sprint(p))
					c, err := net.DialTimeout("tcp4", target, *timeout)
					mu.Lock()
					switch {
					case err == nil:
						res.TCPOpen = append(res.TCPOpen, target)
						c.Close()
					case errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET):
						res.TCPRefused++
					case isTimeout(err):
						res.TCPTimeouts++
					default:
						if len(res.TCPOther) < 20 {
							res.TCPOther = append(res.TCPOther, target+": "+err.Error())
						}
					}
					mu.Unlock()
				}
			}()
		}
		for p := *first; p <= *last; p++ {
			ports <- p
		}
		close(ports)
		wg.Wait()
	}
	query := dnsQuery()
	for _, addr := range split(*udpAddrs) {
		pc, err := net.ListenPacket("udp4", ":0")
		if err != nil {
			fail(err)
		}
		answered := map[string]bool{}
		done := make(chan struct{})
		go func() {
			defer close(done)
			buf := make([]byte, 2048)
			for {
				_, from, err := pc.ReadFrom(buf)
				if err != nil {
					return
				}
				answered[from.String()] = true
			}
		}()
		for p := *first; p <= *last; p++ {
			to := &net.UDPAddr{IP: net.ParseIP(addr), Port: p}
			for {
				_, err := pc.WriteTo(query, to)
				if err == nil {
					res.UDPSent++
					break
				}
				if !errors.Is(err, syscall.ENOBUFS) && !errors.Is(err, syscall.EAGAIN) {
					fail(fmt.Errorf("send to %s: %w", to, err))
				}
				time.Sleep(time.Millisecond)
			}
			if p%512 == 0 {
				time.Sleep(time.Millisecond) // the tap's queue drains
			}
		}
		time.Sleep(*listen)
		pc.Close()
		<-done
		for a := range answered {
			res.UDPAnswered = append(res.UDPAnswered, a)
		}
	}
	sort.Strings(res.TCPOpen)
	sort.Strings(res.UDPAnswered)
	json.NewEncoder(os.Stdout).Encode(res)
}

// dnsQuery is a query for the A record of scan.test.
func dnsQuery() []byte {
	q := []byte{0x12, 0x34, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0}
	for _, l := range []string{"scan", "test"} {
		q = append(q, byte(len(l)))
		q = append(q, l...)
	}
	return append(q, 0, 0, 1, 0, 1)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func split(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "portscan:", err)
	os.Exit(1)
}
