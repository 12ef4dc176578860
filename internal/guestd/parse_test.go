package guestd

import (
	"encoding/base64"
	"encoding/binary"
	"io/fs"
	"path"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestResolvePath(t *testing.T) {
	for _, tt := range []struct {
		in, want string
		bad      bool
	}{
		{in: "file.txt", want: "/home/user/file.txt"},
		{in: "~", want: "/home/user"},
		{in: "~/a/../b", want: "/home/user/b"},
		{in: "/etc/../tmp/./x", want: "/tmp/x"},
		{in: "../../../../etc", want: "/etc"},
		{in: "/a/b/", want: "/a/b"},
		{in: "", bad: true},
		{in: "a\x00b", bad: true},
		{in: strings.Repeat("a", 5000), bad: true},
	} {
		got, err := resolvePath(tt.in, "/home/user")
		if (err != nil) != tt.bad || got != tt.want {
			t.Errorf("resolvePath(%q) = %q, %v; want %q (error: %v)", tt.in, got, err, tt.want, tt.bad)
		}
	}
}

func FuzzResolvePath(f *testing.F) {
	for _, s := range []string{"", "~", "~/x", "a/../../b", "/x/./y/", "a\x00", "~user", "//", "..."} {
		f.Add(s, "/home/user")
	}
	f.Add("x", "")
	f.Add("x", "relative")
	f.Fuzz(func(t *testing.T, p, home string) {
		got, err := resolvePath(p, home)
		if err != nil {
			return
		}
		if !path.IsAbs(got) || path.Clean(got) != got || strings.IndexByte(got, 0) >= 0 {
			t.Fatalf("resolvePath(%q, %q) = %q: not a clean absolute path", p, home, got)
		}
	})
}

func TestParseBasicUser(t *testing.T) {
	enc := func(s string) string { return "Basic " + base64.StdEncoding.EncodeToString([]byte(s)) }
	for _, tt := range []struct {
		header, want string
		ok, bad      bool
	}{
		{header: ""},
		{header: enc("user:"), want: "user", ok: true},
		{header: enc("user:secret"), want: "user", ok: true},
		{header: enc("user"), want: "user", ok: true},
		{header: "basic " + base64.StdEncoding.EncodeToString([]byte("root:")), want: "root", ok: true},
		{header: enc(":"), bad: true},
		{header: enc("a b:"), bad: true},
		{header: enc("../x:"), bad: true},
		{header: "Bearer abc", bad: true},
		{header: "Basic !!!", bad: true},
	} {
		got, ok, err := parseBasicUser(tt.header)
		if got != tt.want || ok != tt.ok || (err != nil) != tt.bad {
			t.Errorf("parseBasicUser(%q) = %q, %v, %v; want %q, %v, error %v", tt.header, got, ok, err, tt.want, tt.ok, tt.bad)
		}
	}
}

func FuzzParseBasicUser(f *testing.F) {
	for _, s := range []string{"", "Basic dXNlcjo=", "Basic ", "Basic Og==", "Bearer x", "Basic cm9vdA=="} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, header string) {
		name, ok, err := parseBasicUser(header)
		if err != nil || !ok {
			return
		}
		if validUserName(name) != nil {
			t.Fatalf("parseBasicUser(%q) accepted invalid name %q", header, name)
		}
	})
}

const testPasswd = `root:x:0:0:root:/root:/bin/bash
# comment
user:x:1000:1000::/home/user:/bin/bash
broken:x:notanumber:1::/:/bin/sh
short:x:1
nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin
`

const testGroup = `root:x:0:
user:x:1000:
docker:x:999:user,other
sudo:x:27:user
bad:x:zz:user
`

func TestParseAccounts(t *testing.T) {
	users := parsePasswd([]byte(testPasswd))
	if len(users) != 3 {
		t.Fatalf("parsePasswd: %d users, want 3 (malformed lines skipped): %v", len(users), users)
	}
	names, members := parseGroup([]byte(testGroup))
	db := &accountDB{users: users, groupName: names, members: members}
	u, err := db.lookup("user")
	if err != nil || u.UID != 1000 || u.GID != 1000 || u.Home != "/home/user" {
		t.Errorf("lookup(user) = %+v, %v", u, err)
	}
	if got := members["user"]; len(got) != 2 || got[0] != 999 || got[1] != 27 {
		t.Errorf("groups of user = %v, want [999 27]", got)
	}
	if db.userName(65534) != "nobody" || db.userName(4242) != "4242" || db.groupNameOf(999) != "docker" || db.groupNameOf(5) != "5" {
		t.Errorf("names: %s %s %s %s", db.userName(65534), db.userName(4242), db.groupNameOf(999), db.groupNameOf(5))
	}
	if _, err := db.lookup("missing"); err == nil {
		t.Errorf("lookup(missing) succeeded")
	}
}

func FuzzParseAccounts(f *testing.F) {
	f.Add([]byte(testPasswd), []byte(testGroup))
	f.Add([]byte("a:b:c:d:e:f:g\n::::::\n"), []byte(":::\nx:y:1:,,,\n"))
	f.Fuzz(func(t *testing.T, passwd, group []byte) {
		for _, u := range parsePasswd(passwd) {
			if u.Name == "" || strings.ContainsAny(u.Name, ":\n") {
				t.Fatalf("parsed bad user name %q", u.Name)
			}
		}
		_, members := parseGroup(group)
		for name, gids := range members {
			if name == "" || len(gids) > 256 {
				t.Fatalf("member %q with %d groups", name, len(gids))
			}
		}
	})
}

func FuzzPartFilename(f *testing.F) {
	for _, s := range []string{`form-data; name="file"; filename="a/b.txt"`, `form-data; filename*=UTF-8''%e2%82%ac`, `;;;`, ``, `form-data; filename="x\"y"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, disposition string) {
		name := partFilename(disposition)
		if name == "" {
			return
		}
		// Whatever the header says, it resolves to a clean path or an error.
		if p, err := resolvePath(name, "/home/user"); err == nil && (!path.IsAbs(p) || path.Clean(p) != p) {
			t.Fatalf("filename %q resolved to %q", name, p)
		}
	})
}

func inotifyBytes(wd int32, mask uint32, name string) []byte {
	n := (len(name) + 1 + 15) / 16 * 16
	b := make([]byte, unix.SizeofInotifyEvent+n)
	binary.NativeEndian.PutUint32(b[0:], uint32(wd))
	binary.NativeEndian.PutUint32(b[4:], mask)
	binary.NativeEndian.PutUint32(b[12:], uint32(n))
	copy(b[16:], name)
	return b
}

func TestParseInotify(t *testing.T) {
	b := append(inotifyBytes(1, unix.IN_CREATE, "a.txt"), inotifyBytes(2, unix.IN_DELETE, "")...)
	recs := parseInotify(append(b, 1, 2, 3)) // a truncated tail is ignored
	if len(recs) != 2 || recs[0].wd != 1 || recs[0].name != "a.txt" || recs[0].mask != unix.IN_CREATE || recs[1].name != "" {
		t.Errorf("parseInotify = %+v", recs)
	}
}

func FuzzParseInotify(f *testing.F) {
	f.Add(inotifyBytes(1, unix.IN_CREATE, "name"))
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, r := range parseInotify(b) {
			if strings.IndexByte(r.name, 0) >= 0 {
				t.Fatalf("name with NUL: %q", r.name)
			}
		}
	})
}

func TestPermissionString(t *testing.T) {
	for _, tt := range []struct {
		mode fs.FileMode
		want string
	}{
		{0o644, "-rw-r--r--"},
		{fs.ModeDir | 0o755, "drwxr-xr-x"},
		{fs.ModeSymlink | 0o777, "lrwxrwxrwx"},
		{fs.ModeSetuid | 0o755, "-rwsr-xr-x"},
		{fs.ModeSetgid | 0o640, "-rw-r-S---"},
		{fs.ModeDir | fs.ModeSticky | 0o777, "drwxrwxrwt"},
	} {
		if got := permissionString(tt.mode); got != tt.want {
			t.Errorf("permissionString(%v) = %q, want %q", tt.mode, got, tt.want)
		}
	}
}
