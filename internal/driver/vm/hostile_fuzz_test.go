package vm

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzQMPSession feeds a whole QMP session — greeting, capabilities, one
// command — with what a compromised QEMU (a guest that escaped into the
// VMM, catalogue A-1) could write on the QMP socket: the session ends with
// an answer or an error, never a panic, every event handed on is an event,
// and the events a session keeps stay within maxKeptEvents.
func FuzzQMPSession(f *testing.F) {
	greeting := `{"QMP": {"version": {}, "capabilities": []}}` + "\n"
	f.Add(greeting + `{"return": {}}` + "\n" + `{"event":"STOP"}` + "\n" + `{"return": {"status":"running"}}` + "\n")
	f.Add(`{"event":"X"}` + "\n" + greeting + `{"error": {"class":"C","desc":"d"}}` + "\n")
	f.Add(greeting + `{"return": {}}` + "\n" + strings.Repeat(`{"event":"E","data":{}}`+"\n", 300) + `{"return": 1}` + "\n")
	f.Add(greeting + `{"return": {}}` + "\n" + `{"return": null}` + "\n")
	f.Add("\n\n\n" + `{"QMP":null}`)
	f.Add(`{"QMP": 1}` + "\n" + `{"return": {}` + strings.Repeat(" ", 70000) + "}\n")
	f.Fuzz(func(t *testing.T, in string) {
		s := &qmpSession{}
		c := &qmpConn{rw: nopRW{strings.NewReader(in)}, onEvent: func(m *qmpMessage) {
			if m.Event == "" {
				t.Fatalf("a message that is no event handed on as one: %+v", m)
			}
			s.keep(m)
		}}
		c.r = newReader(c.rw)
		if err := c.readGreeting(); err != nil {
			return
		}
		if _, err := c.execute("qmp_capabilities"); err != nil {
			return
		}
		_, _ = c.call("query-status", map[string]any{"x": 1}, nil)
		if len(s.events) > maxKeptEvents {
			t.Fatalf("%d events kept, at most %d", len(s.events), maxKeptEvents)
		}
	})
}

// FuzzConsole copies what a guest prints on its console (catalogue A-5:
// any bytes, in reads of any size) into the capped log: neither file ever
// holds more than the limit, and the latest output is what the log ends
// with.
func FuzzConsole(f *testing.F) {
	f.Add([]byte("Linux version 6.1\r\n\x1b[0m"), uint16(7), uint16(100))
	f.Add(bytes.Repeat([]byte{0}, 5000), uint16(1), uint16(1))
	f.Add([]byte("x"), uint16(0), uint16(0))
	// One directory for every input (a directory per input made the
	// fuzzer spend its time creating them).
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, out []byte, chunk, limit uint16) {
		lim := int64(limit%4096) + 1
		path := filepath.Join(dir, "console.log")
		os.Remove(path)
		os.Remove(path + ".1")
		l, err := openCappedLog(path, lim)
		if err != nil {
			t.Fatal(err)
		}
		copyConsole(l, &chunkedReader{b: out, n: int(chunk%512) + 1})
		l.Close()
		cur, _ := os.ReadFile(path)
		old, _ := os.ReadFile(path + ".1")
		if int64(len(cur)) > lim || int64(len(old)) > lim {
			t.Fatalf("log files of %d and %d bytes, limit %d", len(cur), len(old), lim)
		}
		if !bytes.HasSuffix(out, cur) {
			t.Fatalf("the log does not end with the latest output: %q", cur)
		}
		if kept := len(cur) + len(old); int64(len(out)) >= lim && kept < int(lim) {
			t.Fatalf("%d bytes kept of %d printed, limit %d", kept, len(out), lim)
		}
	})
}

// chunkedReader returns b in reads of at most n bytes.
type chunkedReader struct {
	b []byte
	n int
}

func (r *chunkedReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, os.ErrClosed
	}
	n := min(len(p), r.n, len(r.b))
	copy(p, r.b[:n])
	r.b = r.b[n:]
	return n, nil
}
