package e2e

import (
	"archive/tar"
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
)

// progressReading is the API's progress object as the tests read it.
type progressReading struct {
	Phase   string  `json:"phase"`
	Message string  `json:"message"`
	Done    int64   `json:"done"`
	Total   int64   `json:"total"`
	Unit    string  `json:"unit"`
	Rate    float64 `json:"rate"`
	Final   bool    `json:"final"`
}

// progressEvent is a sandbox event with its reading.
type progressEvent struct {
	Seq      int64            `json:"seq"`
	Type     string           `json:"type"`
	Message  string           `json:"message"`
	Progress *progressReading `json:"progress"`
}

// TestTemplateBuildProgress builds a template from a directory with the CLI
// on a pipe (plain lines) and on a pseudo-terminal (a bar redrawn with
// carriage returns), and reads the build's progress on the record.
func TestTemplateBuildProgress(t *testing.T) {
	in := startServer(t, newDataDir(t))
	defer in.stop()
	root := filepath.Join(t.TempDir(), "rootfs")
	for i := range 20 {
		dir := filepath.Join(root, "d"+strconv.Itoa(i))
		os.MkdirAll(dir, 0o755)
		os.WriteFile(filepath.Join(dir, "f"), bytes.Repeat([]byte("x"), 64<<10), 0o644)
	}

	_, stderr, code := in.cli("", "template", "build", "progplain", "--from", root)
	if code != 0 {
		t.Fatalf("template build: exit %d %s\n%s", code, stderr, in.logs())
	}
	t.Logf("template build on a pipe:\n%s", stderr)
	if strings.ContainsAny(stderr, "\r\x1b") {
		t.Errorf("template build on a pipe wrote a carriage return or an escape:\n%q", stderr)
	}
	if !strings.Contains(stderr, "build: built from dir:"+root+": ") {
		t.Errorf("template build on a pipe: no plain line with the build's last reading:\n%s", stderr)
	}

	var list struct {
		Templates []struct {
			Name     string           `json:"name"`
			State    string           `json:"state"`
			Progress *progressReading `json:"progress"`
		} `json:"templates"`
	}
	if code := in.do("GET", "/v1/templates", nil, &list); code != http.StatusOK {
		t.Fatalf("list templates: HTTP %d", code)
	}
	var found bool
	for _, tp := range list.Templates {
		if tp.Name != "progplain" {
			continue
		}
		found = true
		p := tp.Progress
		if p == nil || p.Phase != "build" || !p.Final || p.Unit != "steps" || !strings.HasPrefix(p.Message, "built from dir:"+root) {
			t.Errorf("template record's progress = %+v, want the final build reading \"built from dir:%s…\"", p, root)
		}
	}
	if !found {
		t.Fatalf("template progplain not listed: %+v", list)
	}

	// On a terminal: the bar is redrawn in place.
	got := in.cliOnTerminal("template", "build", "progtty", "--from", root)
	t.Logf("template build on a terminal: %q", got)
	if !strings.Contains(got, "\rbuild: built from dir:"+root) {
		t.Errorf("template build on a terminal: no bar redrawn with a carriage return:\n%q", got)
	}
	if !strings.Contains(got, "template progtty ready") {
		t.Errorf("template build on a terminal: no ready line:\n%q", got)
	}
}

// TestTemplateProgressWhileBuilding builds a template from a tar archive
// that the test feeds through a named pipe, slowly, until the template's
// record shows the extraction's progress: a reading made while the build
// runs crosses the node-manager, the node and the server to the API and the
// CLI waiting on it.
func TestTemplateProgressWhileBuilding(t *testing.T) {
	in := startServer(t, newDataDir(t))
	defer in.stop()
	fifo := filepath.Join(t.TempDir(), "slow.tar")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// Read-write: opening does not wait for the reader, and the reader
	// sees the end when this is closed.
	w, err := os.OpenFile(fifo, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()

	// The CLI's stderr is read as it comes: the archive is fed slowly
	// until the CLI has printed a reading of the extraction.
	cmd := exec.Command(bin.space, "template", "build", "slow", "--from", "tar:"+fifo)
	cmd.Env = append(os.Environ(), "SPACE_API_URL="+in.url, "SPACE_API_KEY="+in.key)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if cmd.ProcessState == nil { // a failure before the wait below
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}()
	var mu sync.Mutex
	var lines []string
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			mu.Lock()
			lines = append(lines, sc.Text())
			mu.Unlock()
		}
	}()
	cliShowed := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, "build: extracting: ") })
	}

	const size = 32 << 20
	tw := tar.NewWriter(w)
	if err := tw.WriteHeader(&tar.Header{Name: "big.bin", Mode: 0o644, Size: size, Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 16<<10)
	written, onRecord := 0, false
	for written+len(chunk) <= size && !(onRecord && cliShowed()) {
		if _, err := tw.Write(chunk); err != nil {
			t.Fatalf("write the archive: %v", err)
		}
		written += len(chunk)
		onRecord = onRecord || strings.HasPrefix(templateProgress(in, "slow"), "extracting: ")
		time.Sleep(50 * time.Millisecond)
	}
	if !onRecord || !cliShowed() {
		t.Fatalf("after %d bytes of the archive: extraction progress on the record %v, printed by the CLI %v\n%q\n%s", written, onRecord, cliShowed(), lines, in.logs())
	}
	// The rest at once, then the end of the archive.
	if _, err := io.CopyN(tw, zeroReader{}, int64(size-written)); err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(tw.Close(), w.Close()); err != nil {
		t.Fatal(err)
	}
	<-scanned
	if err := cmd.Wait(); err != nil {
		t.Fatalf("template build: %v\n%q\n%s", err, lines, in.logs())
	}
	if !slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, "build: built from tar:"+fifo) }) {
		t.Errorf("template build printed no last reading:\n%q", lines)
	}
}

// templateProgress is the message of template name's progress, "" for none.
func templateProgress(in *instance, name string) string {
	var list struct {
		Templates []struct {
			Name     string           `json:"name"`
			Progress *progressReading `json:"progress"`
		} `json:"templates"`
	}
	in.do("GET", "/v1/templates", nil, &list)
	for _, tp := range list.Templates {
		if tp.Name == name && tp.Progress != nil {
			return tp.Progress.Message
		}
	}
	return ""
}

// zeroReader reads zeros.
type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// cliOnTerminal runs the CLI with a pseudo-terminal as its stdin, stdout
// and stderr, and returns what it wrote there.
func (in *instance) cliOnTerminal(args ...string) string {
	in.t.Helper()
	cmd := exec.Command(bin.space, args...)
	cmd.Env = append(os.Environ(), "SPACE_API_URL="+in.url, "SPACE_API_KEY="+in.key)
	ptmx, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 24, Cols: 120})
	if err != nil {
		in.t.Fatal(err)
	}
	defer ptmx.Close()
	var out bytes.Buffer
	done := make(chan struct{})
	go func() { io.Copy(&out, ptmx); close(done) }()
	if err := cmd.Wait(); err != nil {
		in.t.Fatalf("space %v on a terminal: %v\n%q\n%s", args, err, out.String(), in.logs())
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		in.t.Fatalf("space %v: no end of the terminal's output", args)
	}
	return out.String()
}

// TestHibernateRestoreProgress hibernates and restores an ns sandbox with
// the CLI and finds upload and download progress in its events, their last
// readings adding up to the snapshot's artifact bytes.
func TestHibernateRestoreProgress(t *testing.T) {
	in := startServer(t, newDataDir(t))
	defer in.stop()
	sb := in.createWith("minimal", "ns")
	defer in.delete(sb.ID)
	if res := in.exec(sb.ID, "sh", "-c", "head -c 3000000 /dev/urandom > /home/user/blob && sync"); res.ExitCode != 0 {
		t.Fatalf("write the blob: %+v", res)
	}

	_, hibErr, code := in.cli("", "sandbox", "hibernate", sb.ID)
	if code != 0 {
		t.Fatalf("hibernate: exit %d %s\n%s", code, hibErr, in.logs())
	}
	_, resErr, code := in.cli("", "sandbox", "restore", sb.ID)
	if code != 0 {
		t.Fatalf("restore: exit %d %s\n%s", code, resErr, in.logs())
	}
	for name, s := range map[string]string{"hibernate": hibErr, "restore": resErr} {
		if strings.ContainsAny(s, "\r\x1b") {
			t.Errorf("%s on a pipe wrote a carriage return or an escape: %q", name, s)
		}
	}
	if !strings.Contains(hibErr, "upload: ") || !strings.Contains(hibErr, "(100%)") {
		t.Errorf("hibernate printed no upload progress:\n%s", hibErr)
	}
	if !strings.Contains(resErr, "download: ") || !strings.Contains(resErr, "(100%)") {
		t.Errorf("restore printed no download progress:\n%s", resErr)
	}

	var list struct{ Events []progressEvent }
	if code := in.do("GET", "/v1/sandboxes/"+sb.ID+"/events", nil, &list); code != http.StatusOK {
		t.Fatalf("events: HTTP %d", code)
	}
	t.Logf("hibernate:\n%s\nrestore:\n%s", hibErr, resErr)
	var artifactBytes int64 = -1
	last := map[string]*progressReading{}
	for _, ev := range list.Events {
		if m := benchUploadRE.FindStringSubmatch(ev.Message); m != nil {
			artifactBytes, _ = strconv.ParseInt(m[1], 10, 64)
		}
		if ev.Type != "progress" {
			continue
		}
		p := ev.Progress
		if p == nil || p.Unit != "bytes" || (p.Phase != "upload" && p.Phase != "download") {
			t.Errorf("progress event %+v: want a byte reading of an upload or download", ev)
			continue
		}
		if prev := last[p.Phase]; prev != nil && (prev.Final || p.Done < prev.Done) {
			t.Errorf("%s readings out of order: %+v after %+v", p.Phase, p, prev)
		}
		last[p.Phase] = p
	}
	if artifactBytes <= 0 {
		t.Fatalf("no upload event with the artifact bytes in %+v", list.Events)
	}
	for _, phase := range []string{"upload", "download"} {
		p := last[phase]
		if p == nil {
			t.Errorf("no %s progress event in %+v", phase, list.Events)
			continue
		}
		if !p.Final || p.Done != artifactBytes || p.Total != artifactBytes {
			t.Errorf("last %s reading = %+v, want final with done = total = %d (the snapshot's artifact bytes)", phase, p, artifactBytes)
		}
	}
	if res := in.exec(sb.ID, "sh", "-c", "wc -c < /home/user/blob"); strings.TrimSpace(res.Stdout) != "3000000" {
		t.Errorf("after restore the blob holds %q bytes", res.Stdout)
	}

	// On a terminal: a byte bar redrawn in place, ended by a newline.
	for _, step := range [][2]string{{"hibernate", "upload"}, {"restore", "download"}} {
		verb, phase := step[0], step[1]
		out := in.cliOnTerminal("sandbox", verb, sb.ID)
		if !strings.Contains(out, "\r"+phase+" [") || !strings.Contains(out, "] 100% ") {
			t.Errorf("%s on a terminal: no %s bar redrawn with a carriage return:\n%q", verb, phase, out)
		}
		if strings.Contains(out, "\x1b") {
			t.Errorf("%s on a terminal wrote an escape sequence: %q", verb, out)
		}
	}
}
