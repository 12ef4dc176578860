package imagecfg

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	full := `{"User":"app:staff","Env":["PATH=/usr/bin:/bin","A=b=c","EMPTY="],"WorkingDir":"/srv/app",
		"Entrypoint":["/bin/server"],"Cmd":["--port","8080"],"ExposedPorts":{"8080/tcp":{},"53/udp":{}},
		"Labels":{"org.opencontainers.image.title":"demo"},"Volumes":{"/data":{}},"StopSignal":"SIGTERM"}`
	want := Config{
		User: "app:staff", Env: []string{"PATH=/usr/bin:/bin", "A=b=c", "EMPTY="}, WorkingDir: "/srv/app",
		Entrypoint: []string{"/bin/server"}, Cmd: []string{"--port", "8080"},
		ExposedPorts: map[string]struct{}{"8080/tcp": {}, "53/udp": {}},
		Labels:       map[string]string{"org.opencontainers.image.title": "demo"},
	}
	got, err := Parse([]byte(full))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Parse:\n got %+v\nwant %+v", got, want)
	}
	if argv := got.StartCommand(); !reflect.DeepEqual(argv, []string{"/bin/server", "--port", "8080"}) {
		t.Errorf("StartCommand = %q", argv)
	}
	if p := got.ReadyPort(); p != 8080 {
		t.Errorf("ReadyPort = %d, want 8080 (the only tcp port)", p)
	}
	if u, g := got.UserGroup(); u != "app" || g != "staff" {
		t.Errorf("UserGroup = %q, %q", u, g)
	}

	for _, tc := range []struct {
		name, in string
		want     Config
	}{
		{"empty object", `{}`, Config{}},
		{"nulls are absent", `{"User":null,"Env":null,"Cmd":null,"ExposedPorts":null}`, Config{}},
		{"names match exactly", `{"user":"root","env":["A=1"],"workingdir":"/x"}`, Config{}},
		{"uid:gid", `{"User":"1000:1000"}`, Config{User: "1000:1000"}},
		{"port without protocol", `{"ExposedPorts":{"80":{}}}`, Config{ExposedPorts: map[string]struct{}{"80": {}}}},
		{"cmd only", `{"Cmd":["sleep","1"]}`, Config{Cmd: []string{"sleep", "1"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse([]byte(tc.in))
			if err != nil {
				t.Fatalf("Parse(%s): %v", tc.in, err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Parse(%s) = %+v, want %+v", tc.in, got, tc.want)
			}
		})
	}
}

func TestParseRefuses(t *testing.T) {
	many := func(n int, f func(i int) string) string {
		parts := make([]string, n)
		for i := range parts {
			parts[i] = f(i)
		}
		return strings.Join(parts, ",")
	}
	for _, tc := range []struct {
		name, in, why string
	}{
		{"not JSON", `{"User":`, "not a JSON object"},
		{"array", `["User"]`, "not a JSON object"},
		{"null", `null`, "null"},
		{"trailing data", `{} {}`, "not a JSON object"},
		{"too big", `{"Labels":{"a":"` + strings.Repeat("x", MaxSize) + `"}}`, "more than"},
		{"env without =", `{"Env":["PATH"]}`, "is not K=V"},
		{"env bad name", `{"Env":["A B=1"]}`, "not a variable name"},
		{"env empty name", `{"Env":["=1"]}`, "not a variable name"},
		{"env digit first", `{"Env":["1A=1"]}`, "not a variable name"},
		{"env NUL", `{"Env":["A=\u0000"]}`, "NUL"},
		{"env count", `{"Env":[` + many(MaxEnv+1, func(int) string { return `"A=1"` }) + `]}`, "more than"},
		{"env wrong type", `{"Env":"A=1"}`, "field Env"},
		{"workdir relative", `{"WorkingDir":"app"}`, "absolute, clean"},
		{"workdir dotdot", `{"WorkingDir":"/app/../etc"}`, "absolute, clean"},
		{"workdir trailing slash", `{"WorkingDir":"/app/"}`, "absolute, clean"},
		{"user empty part", `{"User":":0"}`, "User"},
		{"user bad char", `{"User":"a/b"}`, "User"},
		{"user uid range", `{"User":"4294967295"}`, "out of range"},
		{"user three parts", `{"User":"a:b:c"}`, "group"},
		{"user leading dash", `{"User":"-r"}`, "User"},
		{"empty program", `{"Entrypoint":[""],"Cmd":["x"]}`, "program"},
		{"arg NUL", `{"Cmd":["a\u0000b"]}`, "NUL"},
		{"args count", `{"Cmd":[` + many(MaxArgs+1, func(int) string { return `"a"` }) + `]}`, "more than"},
		{"port zero", `{"ExposedPorts":{"0/tcp":{}}}`, "out of"},
		{"port big", `{"ExposedPorts":{"65536":{}}}`, "out of"},
		{"port proto", `{"ExposedPorts":{"80/sctp":{}}}`, "protocol"},
		{"port not a number", `{"ExposedPorts":{"http":{}}}`, "not a port"},
		{"port value", `{"ExposedPorts":{"80":1}}`, "field ExposedPorts"},
		{"ports count", `{"ExposedPorts":{` + many(MaxPorts+1, func(i int) string { return `"` + itoa(i+1) + `":{}` }) + `}}`, "more than"},
		{"labels count", `{"Labels":{` + many(MaxLabels+1, func(i int) string { return `"l` + itoa(i) + `":""` }) + `}}`, "more than"},
		{"label empty name", `{"Labels":{"":"x"}}`, "empty name"},
		{"ready cmd too long", `{"SpaceReadyCmd":"` + strings.Repeat("x", MaxReadyCmd+1) + `"}`, "more than"},
		{"ready cmd NUL", `{"SpaceReadyCmd":"test -f /a\u0000b"}`, "NUL"},
		{"ready cmd wrong type", `{"SpaceReadyCmd":["true"]}`, "field SpaceReadyCmd"},
		{"ready timeout negative", `{"SpaceReadyCmd":"true","SpaceReadyTimeout":-1}`, "want 0"},
		{"ready timeout big", `{"SpaceReadyCmd":"true","SpaceReadyTimeout":91}`, "want 0"},
		{"ready timeout fraction", `{"SpaceReadyCmd":"true","SpaceReadyTimeout":1.5}`, "field SpaceReadyTimeout"},
		{"ready timeout alone", `{"SpaceReadyTimeout":5}`, "without a SpaceReadyCmd"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.in))
			if err == nil {
				t.Fatalf("Parse(%.80s) took it; want an error saying %q", tc.in, tc.why)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error %v does not wrap ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), tc.why) {
				t.Errorf("error %q does not say %q", err, tc.why)
			}
		})
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

func TestReadyPort(t *testing.T) {
	for _, tc := range []struct {
		ports []string
		want  int
	}{
		{nil, 0},
		{[]string{"53/udp"}, 0},
		{[]string{"80"}, 80},
		{[]string{"80/tcp", "53/udp"}, 80},
		{[]string{"80/tcp", "443/tcp"}, 0},
	} {
		c := Config{ExposedPorts: map[string]struct{}{}}
		for _, p := range tc.ports {
			c.ExposedPorts[p] = struct{}{}
		}
		if got := c.ReadyPort(); got != tc.want {
			t.Errorf("ReadyPort(%v) = %d, want %d", tc.ports, got, tc.want)
		}
	}
}

func TestReadyCmd(t *testing.T) {
	c, err := Parse([]byte(`{"Cmd":["srv"],"SpaceReadyCmd":"test -f /tmp/ready","SpaceReadyTimeout":7,"spacereadycmd":"ignored"}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.SpaceReadyCmd != "test -f /tmp/ready" || c.ReadyWait() != 7*time.Second {
		t.Fatalf("Parse: ready cmd %q wait %v, want test -f /tmp/ready and 7s", c.SpaceReadyCmd, c.ReadyWait())
	}
	c, err = Parse([]byte(`{"SpaceReadyCmd":"` + strings.Repeat("x", MaxReadyCmd) + `"}`))
	if err != nil {
		t.Fatalf("a ready command of MaxReadyCmd bytes: %v", err)
	}
	if c.ReadyWait() != DefaultReadyTimeout*time.Second {
		t.Errorf("ReadyWait without a timeout = %v, want %ds", c.ReadyWait(), DefaultReadyTimeout)
	}
}

func TestMarshalRoundTrip(t *testing.T) {
	c := Config{User: "user", Env: []string{"A=1"}, WorkingDir: "/w", Entrypoint: []string{"/bin/sh", "-c"},
		Cmd: []string{"echo <&>"}, ExposedPorts: map[string]struct{}{"8080/tcp": {}}, Labels: map[string]string{"k": "v"},
		SpaceReadyCmd: "test -f /tmp/ready", SpaceReadyTimeout: 30}
	b, err := Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{`"User"`, `"Env"`, `"WorkingDir"`, `"Entrypoint"`, `"Cmd"`, `"ExposedPorts"`, `"8080/tcp": {}`, `"Labels"`, `"SpaceReadyCmd"`, `"SpaceReadyTimeout"`} {
		if !bytes.Contains(b, []byte(name)) {
			t.Errorf("Marshal output lacks %s:\n%s", name, b)
		}
	}
	got, err := Parse(b)
	if err != nil {
		t.Fatalf("Parse(Marshal): %v", err)
	}
	if !reflect.DeepEqual(got, c) {
		t.Fatalf("round trip: got %+v, want %+v", got, c)
	}
	if b, _ := Marshal(Config{}); string(b) != "{}\n" {
		t.Errorf("Marshal(Config{}) = %q, want {} (absent fields omitted)", b)
	}
	if _, err := Marshal(Config{WorkingDir: "rel"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("Marshal of an invalid config: %v, want ErrInvalid", err)
	}
}

func TestWriteRead(t *testing.T) {
	root := t.TempDir()
	c := Config{User: "user", Env: []string{"A=1"}, Cmd: []string{"sleep", "9"}}
	if err := Write(root, c); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(root, Path))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, want 0644", fi.Mode().Perm())
	}
	if os.Geteuid() == 0 {
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != 0 || st.Gid != 0 {
			t.Errorf("owner %d:%d, want root", st.Uid, st.Gid)
		}
	}
	got, err := Read(root)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, c) {
		t.Fatalf("Read = %+v, want %+v", got, c)
	}
	// A second write replaces the first.
	if err := Write(root, Config{WorkingDir: "/x"}); err != nil {
		t.Fatal(err)
	}
	if got, _ := Read(root); got.WorkingDir != "/x" || got.User != "" {
		t.Fatalf("after rewrite Read = %+v", got)
	}
	if _, err := Read(t.TempDir()); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Read of a tree without the file: %v, want fs.ErrNotExist", err)
	}
}

// TestWriteStaysInRoot: symlinks in the tree, at /etc, /etc/space or the
// file itself, pointing out of the tree, do not move the write out.
func TestWriteStaysInRoot(t *testing.T) {
	for _, link := range []string{"etc", "etc/space", "etc/space/image-config.json"} {
		t.Run(link, func(t *testing.T) {
			root, outside := t.TempDir(), t.TempDir()
			victim := filepath.Join(outside, "image-config.json")
			if err := os.WriteFile(victim, []byte("precious"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.MkdirAll(filepath.Dir(filepath.Join(root, link)), 0o755); err != nil {
				t.Fatal(err)
			}
			target := outside
			if strings.HasSuffix(link, ".json") {
				target = victim
			} else if link == "etc" {
				if err := os.MkdirAll(filepath.Join(outside, "space"), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.Symlink(target, filepath.Join(root, link)); err != nil {
				t.Fatal(err)
			}
			err := Write(root, Config{User: "user"})
			if b, _ := os.ReadFile(victim); string(b) != "precious" {
				t.Fatalf("Write through the symlink %s changed %s outside the tree (err %v)", link, victim, err)
			}
			if entries, _ := os.ReadDir(filepath.Join(outside, "space")); len(entries) > 0 {
				t.Fatalf("Write through the symlink %s wrote %s outside the tree", link, entries[0].Name())
			}
			if strings.HasSuffix(link, ".json") {
				// The symlink itself is replaced by the file.
				if err != nil {
					t.Fatalf("Write: %v", err)
				}
				if fi, err := os.Lstat(filepath.Join(root, link)); err != nil || !fi.Mode().IsRegular() {
					t.Fatalf("%s is not a regular file after Write: %v %v", link, fi, err)
				}
			} else if err == nil {
				t.Fatalf("Write through an escaping %s symlink succeeded; want an error", link)
			}
		})
	}
}

func TestReadRefuses(t *testing.T) {
	write := func(t *testing.T, f func(p string) error) string {
		root := t.TempDir()
		p := filepath.Join(root, Path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := f(p); err != nil {
			t.Fatal(err)
		}
		return root
	}
	t.Run("fifo", func(t *testing.T) {
		root := write(t, func(p string) error { return syscall.Mkfifo(p, 0o644) })
		if _, err := Read(root); !errors.Is(err, ErrInvalid) {
			t.Fatalf("Read of a FIFO: %v, want ErrInvalid without blocking", err)
		}
	})
	t.Run("huge", func(t *testing.T) {
		root := write(t, func(p string) error {
			f, err := os.Create(p)
			if err != nil {
				return err
			}
			defer f.Close()
			return f.Truncate(100 << 20)
		})
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err := Read(root)
		runtime.ReadMemStats(&after)
		if err == nil || !strings.Contains(err.Error(), "more than") {
			t.Fatalf("Read of a 100 MiB file: %v, want a size error", err)
		}
		if n := after.TotalAlloc - before.TotalAlloc; n > 4<<20 {
			t.Fatalf("Read of a 100 MiB file allocated %d bytes: it read the file instead of refusing it", n)
		}
	})
	t.Run("symlink out", func(t *testing.T) {
		outside := filepath.Join(t.TempDir(), "cfg.json")
		if err := os.WriteFile(outside, []byte(`{"User":"root"}`), 0o644); err != nil {
			t.Fatal(err)
		}
		root := write(t, func(p string) error { return os.Symlink(outside, p) })
		if c, err := Read(root); err == nil {
			t.Fatalf("Read followed a symlink out of the tree: %+v", c)
		}
	})
	t.Run("invalid", func(t *testing.T) {
		root := write(t, func(p string) error { return os.WriteFile(p, []byte(`{"WorkingDir":"../.."}`), 0o644) })
		if _, err := Read(root); !errors.Is(err, ErrInvalid) {
			t.Fatalf("Read of an invalid file: %v, want ErrInvalid", err)
		}
	})
}
