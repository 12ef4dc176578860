// httpsget is the HTTPS client the e2e tests run inside a sandbox: the
// minimal template has none. It sends GET URL with the given headers and
// prints the status line and the body; -k skips certificate verification,
// -i prints the response header between the two.
package main

import (
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
)

type headers []string

func (h *headers) String() string     { return strings.Join(*h, ",") }
func (h *headers) Set(v string) error { *h = append(*h, v); return nil }

func main() {
	var hs headers
	insecure := flag.Bool("k", false, "do not verify the server's certificate")
	include := flag.Bool("i", false, "print the response header too")
	flag.Var(&hs, "H", "header NAME: VALUE (repeatable)")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: httpsget [-k] [-H 'Name: value'] URL")
		os.Exit(2)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{InsecureSkipVerify: *insecure}
	tr.ForceAttemptHTTP2 = false
	c := &http.Client{Transport: tr, Timeout: 20 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	req, err := http.NewRequest(http.MethodGet, flag.Arg(0), nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for _, h := range hs {
		k, v, _ := strings.Cut(h, ":")
		req.Header.Set(strings.TrimSpace(k), strings.TrimSpace(v))
	}
	resp, err := c.Do(req)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if *include {
		fmt.Printf("%d\n", resp.StatusCode)
		resp.Header.Write(os.Stdout)
		fmt.Printf("\n%s\n", body)
		return
	}
	fmt.Printf("%d\n%s\n", resp.StatusCode, body)
}
