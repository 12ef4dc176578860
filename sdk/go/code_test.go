package space

import (
	"strings"
	"testing"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
)

func TestReadExecution(t *testing.T) {
	stream := `{"type":"execution_count","execution_count":4}
{"type":"stdout","text":"hi\n"}
{"type":"stderr","text":"warn\n"}
{"type":"result","result":{"main":false,"png":"iVBO"}}
{"type":"result","result":{"main":true,"text":"2"}}
{"type":"error","error":{"name":"ValueError","value":"bad","traceback":"tb"}}
{"type":"end"}
`
	var order []string
	ex, err := readExecution(strings.NewReader(stream), RunCodeOptions{
		OnStdout: func(s string) { order = append(order, "out:"+s) },
		OnStderr: func(s string) { order = append(order, "err:"+s) },
		OnResult: func(r sandboxv1.CodeResult) { order = append(order, "result") },
		OnError:  func(e sandboxv1.CodeError) { order = append(order, "error:"+e.Name) },
	})
	if err != nil {
		t.Fatal(err)
	}
	if ex.Text() != "2" || ex.ExecutionCount != 4 || len(ex.Results) != 2 || ex.Results[0].PNG != "iVBO" ||
		ex.Error == nil || ex.Error.Value != "bad" || strings.Join(ex.Logs.Stdout, "") != "hi\n" || strings.Join(ex.Logs.Stderr, "") != "warn\n" {
		t.Errorf("execution %+v", ex)
	}
	if got := strings.Join(order, ","); got != "out:hi\n,err:warn\n,result,result,error:ValueError" {
		t.Errorf("callbacks in order %q", got)
	}
	if _, err := readExecution(strings.NewReader(`{"type":"stdout","text":"x"}`+"\n"), RunCodeOptions{}); err == nil || !strings.Contains(err.Error(), "before the execution's end") {
		t.Errorf("a stream without its end: %v", err)
	}
	if _, err := readExecution(strings.NewReader("nope\n"), RunCodeOptions{}); err == nil || !strings.Contains(err.Error(), "not JSON") {
		t.Errorf("a line that is not JSON: %v", err)
	}
}
