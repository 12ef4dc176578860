package mcpserver

import (
	"bufio"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"
)

// TestStdioAnswersGarbageAndGoesOn: over stdio, a line that is not JSON, a
// line longer than a message may be, and JSON that is no JSON-RPC message
// each get a JSON-RPC error (parse error -32700 with a null id, invalid
// request -32600 with the line's id), and the session goes on: initialize
// and a tool call after them are answered, and the server ends cleanly at
// the end of its input.
func TestStdioAnswersGarbageAndGoesOn(t *testing.T) {
	api := newFakeAPI(t)
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- NewServer(Config{APIURL: api.srv.URL, Key: "space_k-stdio"}).Run(t.Context(), &stdioTransport{in: inR, out: outW})
		outW.Close()
	}()
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(outR)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	send := func(s string) {
		t.Helper()
		if _, err := io.WriteString(inW, s+"\n"); err != nil {
			t.Fatalf("write %.40q: %v", s, err)
		}
	}
	type answer struct {
		ID     any             `json:"id"`
		Result json.RawMessage `json:"result"`
		Error  *struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	next := func(what string) answer {
		t.Helper()
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("%s: the server closed its output (ended: %v)", what, <-done)
			}
			var a answer
			if err := json.Unmarshal([]byte(l), &a); err != nil {
				t.Fatalf("%s: answer %q is not JSON: %v", what, l, err)
			}
			return a
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: no answer in 30s", what)
		}
		return answer{}
	}
	wantError := func(what string, id any, code int) {
		t.Helper()
		a := next(what)
		if a.Error == nil || a.Error.Code != code || a.ID != id {
			t.Fatalf("%s: answer id %v error %+v, want id %v code %d", what, a.ID, a.Error, id, code)
		}
	}

	send("this is not json")
	wantError("a line that is not JSON", nil, -32700)
	go io.WriteString(inW, strings.Repeat("a", maxStdioLine+10)+"\n") // the pipe takes it as the filter reads it
	wantError("a line over the limit", nil, -32700)
	send(`{"jsonrpc":"1.0","id":7,"method":"tools/list"}`)
	wantError("a wrong version tag", float64(7), -32600)
	send(`{"jsonrpc":"2.0","id":"x","method":5}`)
	wantError("a method that is no string", "x", -32600)
	send(`42`)
	wantError("JSON that is no object", nil, -32600)

	send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	if a := next("initialize after the garbage"); a.ID != float64(1) || a.Error != nil || len(a.Result) == 0 {
		t.Fatalf("initialize: %+v", a)
	}
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"run_command","arguments":{"id":"sb-1","command":"echo hi"}}}`)
	if a := next("run_command after the garbage"); a.ID != float64(2) || a.Error != nil || !strings.Contains(string(a.Result), "out:sh -c echo hi") {
		t.Fatalf("run_command: %+v %s", a, a.Result)
	}
	send(`{"jsonrpc":"2.0","id":3,"method":"no/such"}`)
	wantError("an unknown method (the SDK's answer)", float64(3), -32601)

	inW.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the server ended with %v at the end of its input, want nil", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the server did not end at the end of its input")
	}
}

// TestReadLineDropsALineOverTheLimit: a line over the limit is read to its
// end and dropped; the next line is read whole.
func TestReadLineDropsALineOverTheLimit(t *testing.T) {
	br := bufio.NewReaderSize(strings.NewReader(strings.Repeat("x", 100)+"\nok\r\nlast"), 16)
	for _, want := range []struct {
		line    string
		tooLong bool
		eof     bool
	}{{"", true, false}, {"ok", false, false}, {"last", false, true}} {
		line, tooLong, err := readLine(br, 50)
		if string(line) != want.line || tooLong != want.tooLong || (err == io.EOF) != want.eof {
			t.Fatalf("readLine = %q, %v, %v; want %q, %v, eof %v", line, tooLong, err, want.line, want.tooLong, want.eof)
		}
	}
}
