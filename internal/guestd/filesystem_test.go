package guestd_test

import (
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	filesystemv1 "github.com/spacesandbox/space/api/guest/v1/filesystem"
	"github.com/spacesandbox/space/internal/guestd"
)

func TestFilesystemOperations(t *testing.T) {
	c := startGuest(t, guestd.Config{})
	fsc := c.Filesystem()
	ctx := testCtx(t)
	dir := t.TempDir()

	mk, err := fsc.MakeDir(ctx, connect.NewRequest(&filesystemv1.MakeDirRequest{Path: dir + "/a/b/c"}))
	if err != nil {
		t.Fatalf("MakeDir: %v", err)
	}
	if e := mk.Msg.GetEntry(); e.GetType() != filesystemv1.FileType_FILE_TYPE_DIRECTORY || e.GetPath() != dir+"/a/b/c" || e.GetName() != "c" {
		t.Errorf("MakeDir entry = %v, want directory %s/a/b/c", e, dir)
	}
	_, err = fsc.MakeDir(ctx, connect.NewRequest(&filesystemv1.MakeDirRequest{Path: dir + "/a/b"}))
	wantCode(t, err, connect.CodeAlreadyExists)

	if err := os.WriteFile(dir+"/a/f.txt", []byte("hello"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("f.txt", dir+"/a/link"); err != nil {
		t.Fatal(err)
	}
	st, err := fsc.Stat(ctx, connect.NewRequest(&filesystemv1.StatRequest{Path: dir + "/a/b/../f.txt"}))
	if err != nil {
		t.Fatalf("Stat: %v", err)
	}
	e := st.Msg.GetEntry()
	if e.GetType() != filesystemv1.FileType_FILE_TYPE_FILE || e.GetSize() != 5 || e.GetPermissions() != "-rw-r-----" ||
		e.GetMode() != 0o640 || e.GetPath() != dir+"/a/f.txt" || e.GetModifiedTime() == nil {
		t.Errorf("Stat = %v, want file of 5 bytes, -rw-r-----, at %s/a/f.txt", e, dir)
	}
	if os.Geteuid() == 0 && (e.GetOwner() != "root" || e.GetGroup() != "root") {
		t.Errorf("Stat owner/group = %s/%s, want root/root", e.GetOwner(), e.GetGroup())
	}
	ln, err := fsc.Stat(ctx, connect.NewRequest(&filesystemv1.StatRequest{Path: dir + "/a/link"}))
	if err != nil || ln.Msg.GetEntry().GetType() != filesystemv1.FileType_FILE_TYPE_SYMLINK || ln.Msg.GetEntry().GetSymlinkTarget() != "f.txt" {
		t.Errorf("Stat symlink = %v, %v; want symlink to f.txt", ln.Msg.GetEntry(), err)
	}

	for _, tt := range []struct {
		depth uint32
		want  []string
	}{
		{0, []string{"b", "f.txt", "link"}},
		{1, []string{"b", "f.txt", "link"}},
		{2, []string{"b", "b/c", "f.txt", "link"}},
		{5, []string{"b", "b/c", "f.txt", "link"}},
	} {
		ls, err := fsc.ListDir(ctx, connect.NewRequest(&filesystemv1.ListDirRequest{Path: dir + "/a", Depth: tt.depth}))
		if err != nil {
			t.Fatalf("ListDir depth %d: %v", tt.depth, err)
		}
		var got []string
		for _, e := range ls.Msg.GetEntries() {
			rel, _ := filepath.Rel(dir+"/a", e.GetPath())
			got = append(got, rel)
		}
		sort.Strings(got)
		if !equal(got, tt.want) {
			t.Errorf("ListDir depth %d = %v, want %v", tt.depth, got, tt.want)
		}
	}

	mv, err := fsc.Move(ctx, connect.NewRequest(&filesystemv1.MoveRequest{Source: dir + "/a/f.txt", Destination: dir + "/new/dir/g.txt"}))
	if err != nil || mv.Msg.GetEntry().GetPath() != dir+"/new/dir/g.txt" {
		t.Fatalf("Move = %v, %v; want entry at %s/new/dir/g.txt", mv, err, dir)
	}
	if _, err := os.Stat(dir + "/a/f.txt"); !os.IsNotExist(err) {
		t.Errorf("source still exists after Move: %v", err)
	}
	if _, err := fsc.Remove(ctx, connect.NewRequest(&filesystemv1.RemoveRequest{Path: dir + "/a"})); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	if _, err := os.Stat(dir + "/a"); !os.IsNotExist(err) {
		t.Errorf("%s/a still exists after Remove: %v", dir, err)
	}

	errCases := []struct {
		name string
		call func() error
		want connect.Code
	}{
		{"stat missing", func() error {
			_, err := fsc.Stat(ctx, connect.NewRequest(&filesystemv1.StatRequest{Path: dir + "/missing"}))
			return err
		}, connect.CodeNotFound},
		{"stat NUL", func() error {
			_, err := fsc.Stat(ctx, connect.NewRequest(&filesystemv1.StatRequest{Path: dir + "/x\x00y"}))
			return err
		}, connect.CodeInvalidArgument},
		{"stat empty", func() error {
			_, err := fsc.Stat(ctx, connect.NewRequest(&filesystemv1.StatRequest{}))
			return err
		}, connect.CodeInvalidArgument},
		{"remove missing", func() error {
			_, err := fsc.Remove(ctx, connect.NewRequest(&filesystemv1.RemoveRequest{Path: dir + "/missing"}))
			return err
		}, connect.CodeNotFound},
		{"remove root", func() error {
			_, err := fsc.Remove(ctx, connect.NewRequest(&filesystemv1.RemoveRequest{Path: "/../"}))
			return err
		}, connect.CodeInvalidArgument},
		{"list a file", func() error {
			_, err := fsc.ListDir(ctx, connect.NewRequest(&filesystemv1.ListDirRequest{Path: dir + "/new/dir/g.txt"}))
			return err
		}, connect.CodeInvalidArgument},
		{"move missing", func() error {
			_, err := fsc.Move(ctx, connect.NewRequest(&filesystemv1.MoveRequest{Source: dir + "/missing", Destination: dir + "/x"}))
			return err
		}, connect.CodeNotFound},
		{"mkdir through a file", func() error {
			_, err := fsc.MakeDir(ctx, connect.NewRequest(&filesystemv1.MakeDirRequest{Path: dir + "/new/dir/g.txt/sub"}))
			return err
		}, connect.CodeInvalidArgument},
	}
	for _, tt := range errCases {
		t.Run(tt.name, func(t *testing.T) { wantCode(t, tt.call(), tt.want) })
	}
}

func TestMakeDirOwnedByUser(t *testing.T) {
	requireRoot(t, "switches to another user")
	c := startGuest(t, guestd.Config{})
	dir := t.TempDir()
	req := connect.NewRequest(&filesystemv1.MakeDirRequest{Path: dir + "/x/y"})
	req.Header().Set("Authorization", basicAuth("nobody"))
	resp, err := c.Filesystem().MakeDir(testCtx(t), req)
	if err != nil {
		t.Fatalf("MakeDir: %v", err)
	}
	if o := resp.Msg.GetEntry().GetOwner(); o != "nobody" {
		t.Errorf("owner of %s/x/y = %q, want nobody", dir, o)
	}
}

func TestWatchDirRecursive(t *testing.T) {
	c := startGuest(t, guestd.Config{})
	ctx := testCtx(t)
	dir := t.TempDir()
	stream, err := c.Filesystem().WatchDir(ctx, connect.NewRequest(&filesystemv1.WatchDirRequest{Path: dir, Recursive: true, IncludeEntry: true}))
	if err != nil || !stream.Receive() || stream.Msg().GetStart() == nil {
		t.Fatalf("WatchDir: want a start event first: %v %v", err, stream.Err())
	}
	if err := os.Mkdir(dir+"/sub", 0o755); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, stream, "sub", filesystemv1.EventType_EVENT_TYPE_CREATE)
	// The daemon has seen sub appear; a file in it must be reported too.
	if err := os.WriteFile(dir+"/sub/f", []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	ev := waitEvent(t, stream, "sub/f", filesystemv1.EventType_EVENT_TYPE_CREATE)
	if ev.GetEntry().GetType() != filesystemv1.FileType_FILE_TYPE_FILE {
		t.Errorf("event entry = %v, want a file entry (include_entry)", ev.GetEntry())
	}
	waitEvent(t, stream, "sub/f", filesystemv1.EventType_EVENT_TYPE_WRITE)
	if err := os.Remove(dir + "/sub/f"); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, stream, "sub/f", filesystemv1.EventType_EVENT_TYPE_REMOVE)

	_, err = c.Filesystem().WatchDir(ctx, connect.NewRequest(&filesystemv1.WatchDirRequest{Path: dir + "/missing"}))
	if err == nil {
		s, _ := c.Filesystem().WatchDir(ctx, connect.NewRequest(&filesystemv1.WatchDirRequest{Path: dir + "/missing"}))
		for s.Receive() {
		}
		err = s.Err()
	}
	wantCode(t, err, connect.CodeNotFound)
}

func waitEvent(t *testing.T, stream *connect.ServerStreamForClient[filesystemv1.WatchDirResponse], name string, typ filesystemv1.EventType) *filesystemv1.FilesystemEvent {
	t.Helper()
	for stream.Receive() {
		if ev := stream.Msg().GetFilesystem(); ev.GetName() == name && ev.GetType() == typ {
			return ev
		}
	}
	t.Fatalf("stream ended before event %v %s: %v", typ, name, stream.Err())
	return nil
}

func TestPolledWatcher(t *testing.T) {
	c := startGuest(t, guestd.Config{})
	ctx := testCtx(t)
	dir := t.TempDir()
	cw, err := c.Filesystem().CreateWatcher(ctx, connect.NewRequest(&filesystemv1.CreateWatcherRequest{Path: dir}))
	if err != nil {
		t.Fatalf("CreateWatcher: %v", err)
	}
	id := cw.Msg.GetWatcherId()
	if err := os.WriteFile(dir+"/f", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for found := false; !found; {
		resp, err := c.Filesystem().GetWatcherEvents(ctx, connect.NewRequest(&filesystemv1.GetWatcherEventsRequest{WatcherId: id}))
		if err != nil {
			t.Fatalf("GetWatcherEvents: %v", err)
		}
		for _, ev := range resp.Msg.GetEvents() {
			found = found || (ev.GetName() == "f" && ev.GetType() == filesystemv1.EventType_EVENT_TYPE_CREATE)
		}
		if !found {
			select {
			case <-ctx.Done():
				t.Fatal("no create event for f")
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	if _, err := c.Filesystem().RemoveWatcher(ctx, connect.NewRequest(&filesystemv1.RemoveWatcherRequest{WatcherId: id})); err != nil {
		t.Fatalf("RemoveWatcher: %v", err)
	}
	_, err = c.Filesystem().GetWatcherEvents(ctx, connect.NewRequest(&filesystemv1.GetWatcherEventsRequest{WatcherId: id}))
	wantCode(t, err, connect.CodeNotFound)
}

func TestWatcherLimit(t *testing.T) {
	c := startGuest(t, guestd.Config{MaxWatchers: 2})
	ctx := testCtx(t)
	dir := t.TempDir()
	for i := 0; i < 2; i++ {
		if _, err := c.Filesystem().CreateWatcher(ctx, connect.NewRequest(&filesystemv1.CreateWatcherRequest{Path: dir})); err != nil {
			t.Fatalf("CreateWatcher %d: %v", i, err)
		}
	}
	_, err := c.Filesystem().CreateWatcher(ctx, connect.NewRequest(&filesystemv1.CreateWatcherRequest{Path: dir}))
	wantCode(t, err, connect.CodeResourceExhausted)
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// kernelWatches counts the inotify watches this process holds, as the kernel
// reports them in /proc/self/fdinfo (the daemon under test runs in it).
func kernelWatches(t *testing.T) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fdinfo")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, fd := range fds {
		b, err := os.ReadFile("/proc/self/fdinfo/" + fd.Name())
		if err != nil {
			continue // closed meanwhile
		}
		n += strings.Count(string(b), "inotify wd:")
	}
	return n
}

// TestWatchBudget: the inotify watches of all of a daemon's watchers are
// bounded together, counted by the real kernel. A recursive watch that would
// pass the budget is refused whole with a clear error and holds no watch
// after; removing a watcher gives its watches back.
func TestWatchBudget(t *testing.T) {
	const budget, subdirs = 60, 40
	c := startGuest(t, guestd.Config{MaxWatches: budget})
	ctx := testCtx(t)
	fsc := c.Filesystem()
	dir := t.TempDir()
	for i := range subdirs {
		if err := os.Mkdir(filepath.Join(dir, strconv.Itoa(i)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	base := kernelWatches(t)
	first, err := fsc.CreateWatcher(ctx, connect.NewRequest(&filesystemv1.CreateWatcherRequest{Path: dir, Recursive: true}))
	if err != nil {
		t.Fatalf("a recursive watch of %d directories in a budget of %d: %v", subdirs+1, budget, err)
	}
	if got := kernelWatches(t) - base; got != subdirs+1 {
		t.Fatalf("the kernel holds %d watches for a watch of %d directories", got, subdirs+1)
	}
	_, err = fsc.CreateWatcher(ctx, connect.NewRequest(&filesystemv1.CreateWatcherRequest{Path: dir, Recursive: true}))
	wantCode(t, err, connect.CodeResourceExhausted)
	if !strings.Contains(err.Error(), "inotify watches") {
		t.Errorf("refusal %q does not say which limit", err)
	}
	if got := kernelWatches(t) - base; got != subdirs+1 {
		t.Errorf("after the refused watch the kernel holds %d watches, want %d: a refused watch kept part of its tree", got, subdirs+1)
	}
	if _, err := fsc.CreateWatcher(ctx, connect.NewRequest(&filesystemv1.CreateWatcherRequest{Path: dir})); err != nil {
		t.Errorf("a one-directory watch within the budget after a refusal: %v (the refused watch leaked budget)", err)
	}
	if _, err := fsc.RemoveWatcher(ctx, connect.NewRequest(&filesystemv1.RemoveWatcherRequest{WatcherId: first.Msg.GetWatcherId()})); err != nil {
		t.Fatal(err)
	}
	if _, err := fsc.CreateWatcher(ctx, connect.NewRequest(&filesystemv1.CreateWatcherRequest{Path: dir, Recursive: true})); err != nil {
		t.Errorf("a recursive watch after its twin was removed: %v (removal did not give its watches back)", err)
	}
}

// TestWatchDeepTree watches the root of a tree 1,000 directories deep with a
// budget of 500: refused, and no watch is left in the kernel.
func TestWatchDeepTree(t *testing.T) {
	c := startGuest(t, guestd.Config{MaxWatches: 500})
	ctx := testCtx(t)
	root := t.TempDir()
	p := root
	for range 1000 {
		p = filepath.Join(p, "d")
	}
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
	base := kernelWatches(t)
	_, err := c.Filesystem().CreateWatcher(ctx, connect.NewRequest(&filesystemv1.CreateWatcherRequest{Path: root, Recursive: true}))
	wantCode(t, err, connect.CodeResourceExhausted)
	if got := kernelWatches(t) - base; got != 0 {
		t.Errorf("a refused watch of a 1,000-deep tree left %d kernel watches", got)
	}
}

// TestListDirPagedRPC pages a directory through the Filesystem service: the
// pages hold every entry once, a damaged token is invalid_argument, and a
// paged listing of more than one level is refused.
func TestListDirPagedRPC(t *testing.T) {
	c := startGuest(t, guestd.Config{})
	ctx := testCtx(t)
	fsc := c.Filesystem()
	dir := t.TempDir()
	for i := range 5 {
		if err := os.WriteFile(filepath.Join(dir, strconv.Itoa(i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]bool{}
	token, pages := "", 0
	for {
		resp, err := fsc.ListDir(ctx, connect.NewRequest(&filesystemv1.ListDirRequest{Path: dir, PageSize: 2, PageToken: token}))
		if err != nil {
			t.Fatalf("page %d: %v", pages, err)
		}
		pages++
		for _, e := range resp.Msg.GetEntries() {
			if seen[e.GetName()] {
				t.Fatalf("%s served twice", e.GetName())
			}
			seen[e.GetName()] = true
		}
		if token = resp.Msg.GetNextPageToken(); token == "" {
			break
		}
		if pages > 3 {
			t.Fatalf("%d pages of 2 for 5 entries and still a next token", pages)
		}
	}
	if pages != 3 || len(seen) != 5 {
		t.Errorf("%d pages, %d entries; want 3 pages of all 5", pages, len(seen))
	}
	_, err := fsc.ListDir(ctx, connect.NewRequest(&filesystemv1.ListDirRequest{Path: dir, PageSize: 2, PageToken: "garbage"}))
	wantCode(t, err, connect.CodeInvalidArgument)
	_, err = fsc.ListDir(ctx, connect.NewRequest(&filesystemv1.ListDirRequest{Path: dir, Depth: 2, PageSize: 2}))
	wantCode(t, err, connect.CodeInvalidArgument)
}

// TestRemoveMissingAsEnvd: SPACE's Remove of a missing path is NotFound;
// with the E2B proxy's compatibility header it succeeds, as envd's does,
// and a path that exists is still removed.
func TestRemoveMissingAsEnvd(t *testing.T) {
	c := startGuest(t, guestd.Config{})
	ctx := testCtx(t)
	dir := t.TempDir()
	remove := func(p string, compat bool) error {
		req := connect.NewRequest(&filesystemv1.RemoveRequest{Path: p})
		if compat {
			req.Header().Set(filesystemv1.EnvdCompatHeader, filesystemv1.EnvdCompatE2B)
		}
		_, err := c.Filesystem().Remove(ctx, req)
		return err
	}
	wantCode(t, remove(dir+"/missing", false), connect.CodeNotFound)
	if err := remove(dir+"/missing", true); err != nil {
		t.Errorf("Remove of a missing path as envd: %v, want success", err)
	}
	if err := os.WriteFile(dir+"/f", []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := remove(dir+"/f", true); err != nil {
		t.Fatalf("Remove as envd: %v", err)
	}
	if _, err := os.Lstat(dir + "/f"); !os.IsNotExist(err) {
		t.Errorf("%s/f still exists after Remove: %v", dir, err)
	}
	wantCode(t, remove("/", true), connect.CodeInvalidArgument)
}

// TestSymlinkTargetAsEnvd: SPACE's Stat and ListDir report a symlink's
// text; the E2B proxy's requests get envd's symlinkTarget, the absolute
// path the link resolves to (chains followed), or for a dangling link the
// absolute form of its text.
func TestSymlinkTargetAsEnvd(t *testing.T) {
	c := startGuest(t, guestd.Config{})
	ctx := testCtx(t)
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir+"/real", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir+"/real/f", []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for link, text := range map[string]string{"rel": "real/f", "chain": "rel", "up": "real/../real/f", "dangling": "nowhere/x", "dir": "real"} {
		if err := os.Symlink(text, dir+"/"+link); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]string{"rel": dir + "/real/f", "chain": dir + "/real/f", "up": dir + "/real/f", "dangling": dir + "/nowhere/x", "dir": dir + "/real"}
	stat := func(p string, envd bool) string {
		req := connect.NewRequest(&filesystemv1.StatRequest{Path: p})
		if envd {
			req.Header().Set(filesystemv1.EnvdCompatHeader, filesystemv1.EnvdCompatE2B)
		}
		resp, err := c.Filesystem().Stat(ctx, req)
		if err != nil {
			t.Fatalf("Stat %s: %v", p, err)
		}
		return resp.Msg.GetEntry().GetSymlinkTarget()
	}
	for link, w := range want {
		if got := stat(dir+"/"+link, true); got != w {
			t.Errorf("envd Stat %s: symlinkTarget %q, want %q", link, got, w)
		}
	}
	if got := stat(dir+"/chain", false); got != "rel" {
		t.Errorf("SPACE Stat chain: symlink target %q, want the link's text rel", got)
	}
	req := connect.NewRequest(&filesystemv1.ListDirRequest{Path: dir})
	req.Header().Set(filesystemv1.EnvdCompatHeader, filesystemv1.EnvdCompatE2B)
	ls, err := c.Filesystem().ListDir(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ls.Msg.GetEntries() {
		if w, ok := want[e.GetName()]; ok && e.GetSymlinkTarget() != w {
			t.Errorf("envd ListDir %s: symlinkTarget %q, want %q", e.GetName(), e.GetSymlinkTarget(), w)
		}
	}
}
