package restapi

import (
	"bufio"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/errdefs"
)

func TestInterpreterExecute(t *testing.T) {
	body, timeout, err := interpreterExecute(&sandboxv1.CodeRequest{Code: "1+1", Language: "python", Env: map[string]string{"A_1": "v"}, Timeout: "5s"})
	if err != nil || timeout != 5*time.Second {
		t.Fatalf("%v %v", timeout, err)
	}
	var got map[string]any
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatal(err)
	}
	if got["code"] != "1+1" || got["language"] != "python" || got["env_vars"].(map[string]any)["A_1"] != "v" || got["context_id"] != nil {
		t.Errorf("body %s", body)
	}
	if body, timeout, err = interpreterExecute(&sandboxv1.CodeRequest{Code: "x", Context: "c"}); err != nil || timeout != defaultCodeTimeout || !strings.Contains(string(body), `"context_id":"c"`) {
		t.Errorf("%s %v %v", body, timeout, err)
	}
	for _, bad := range []struct {
		req  sandboxv1.CodeRequest
		want string
	}{
		{sandboxv1.CodeRequest{Context: "c", Language: "bash"}, "not both"},
		{sandboxv1.CodeRequest{Env: map[string]string{"A B": "v"}}, `env "A B"`},
		{sandboxv1.CodeRequest{Env: map[string]string{"A": "a\x00"}}, "NUL"},
		{sandboxv1.CodeRequest{Timeout: "soon"}, `timeout "soon"`},
		{sandboxv1.CodeRequest{Timeout: "-1s"}, "timeout"},
		{sandboxv1.CodeRequest{Timeout: "25h"}, "timeout"},
	} {
		_, _, err := interpreterExecute(&bad.req)
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%+v: %v, want invalid argument with %q", bad.req, err, bad.want)
		}
	}
}

func TestCodeEvent(t *testing.T) {
	for _, c := range []struct {
		line string
		want sandboxv1.CodeEvent
		ok   bool
	}{
		{`{"type": "stdout", "text": "hi\n", "timestamp": 1}`, sandboxv1.CodeEvent{Type: "stdout", Text: "hi\n"}, true},
		{`{"type": "stderr", "text": "e"}`, sandboxv1.CodeEvent{Type: "stderr", Text: "e"}, true},
		{`{"type": "number_of_executions", "execution_count": 3}`, sandboxv1.CodeEvent{Type: "execution_count", ExecutionCount: 3}, true},
		{`{"type": "end_of_execution"}`, sandboxv1.CodeEvent{Type: "end"}, true},
		{`{"type": "error", "name": "ValueError", "value": "bad", "traceback": "tb"}`,
			sandboxv1.CodeEvent{Type: "error", Error: &sandboxv1.CodeError{Name: "ValueError", Value: "bad", Traceback: "tb"}}, true},
		{`{"type": "something_new"}`, sandboxv1.CodeEvent{}, false},
	} {
		got, ok, err := codeEvent([]byte(c.line))
		if err != nil || ok != c.ok {
			t.Errorf("%s: ok %v err %v", c.line, ok, err)
			continue
		}
		g, _ := json.Marshal(got)
		w, _ := json.Marshal(c.want)
		if string(g) != string(w) {
			t.Errorf("%s: got %s, want %s", c.line, g, w)
		}
	}
	ev, ok, err := codeEvent([]byte(`{"type": "result", "is_main_result": true, "text": "2", "png": "iVBO", "json": {"a": [1]}, "application/x-custom": "c"}`))
	if err != nil || !ok || ev.Type != "result" {
		t.Fatalf("%+v %v %v", ev, ok, err)
	}
	r := ev.Result
	if !r.Main || r.Text != "2" || r.PNG != "iVBO" || string(r.JSON) != `{"a": [1]}` || string(r.Extra["application/x-custom"]) != `"c"` || len(r.Extra) != 1 {
		t.Errorf("result %+v", r)
	}
	for _, bad := range []string{`[1]`, `{"text": "no type"}`, `{"type": "stdout", "text": 3}`, `not json`} {
		if _, _, err := codeEvent([]byte(bad)); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}

func TestReadLine(t *testing.T) {
	long := strings.Repeat("x", 200<<10)
	br := bufio.NewReaderSize(strings.NewReader("a\n"+long+"\nend"), 16)
	for _, want := range []string{"a", long} {
		got, err := readLine(br, 1<<20)
		if err != nil || string(got) != want {
			t.Fatalf("got %d bytes, %v; want %d", len(got), err, len(want))
		}
	}
	if got, err := readLine(br, 1<<20); string(got) != "end" || err == nil {
		t.Errorf("last line: %q %v", got, err)
	}
	if _, err := readLine(bufio.NewReaderSize(strings.NewReader(long+"\n"), 16), 1<<10); err == nil || !strings.Contains(err.Error(), "over 1024 bytes") {
		t.Errorf("a line over the limit: %v", err)
	}
}
