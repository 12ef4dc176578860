package guestd

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	filesystemv1 "github.com/spacesandbox/space/api/guest/v1/filesystem"
)

const (
	// maxWatchedDirs bounds the inotify watches of one recursive watcher.
	maxWatchedDirs = 8192
	// defaultMaxWatches bounds the inotify watches of all of a daemon's
	// watchers together (Config.MaxWatches).
	defaultMaxWatches = 32768
	// watchQueue bounds the events a watcher holds before its reader blocks
	// (then the kernel queue overflows and drops events).
	watchQueue  = 1024
	inotifyMask = unix.IN_CREATE | unix.IN_MODIFY | unix.IN_DELETE | unix.IN_MOVED_FROM |
		unix.IN_MOVED_TO | unix.IN_ATTRIB | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF
)

// networkFilesystems are the filesystem magics that WatchDir refuses unless
// allow_network_mounts is set: inotify misses changes made by other hosts.
var networkFilesystems = map[int64]string{
	0x6969: "nfs", 0xFF534D42: "cifs", 0xFE534D42: "smb2", 0x517B: "smb", 0x65735546: "fuse",
}

// watchBudget bounds the inotify watches of all of a daemon's watchers.
//
// The kernel bounds a sandbox's watches as well (fs.inotify.max_user_watches,
// charged to the user owning the sandbox's user namespace: in the ns runtime
// the sandbox's own host uid, see ns/owner.go; in a VM its own kernel). This
// budget is the part the API can take of it: what the host asks the daemon
// to watch stays bounded whatever tree it names, and a recursive watch that
// would pass the budget is refused whole rather than left watching part of
// its tree.
type watchBudget struct {
	mu   sync.Mutex // guards used
	used int
	max  int
}

// take reserves one watch for dir.
func (b *watchBudget) take(dir string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used >= b.max {
		return fmt.Errorf("watch %s: the sandbox's %d inotify watches (one per watched directory, across all its watchers) are in use; watch a smaller tree or remove a watcher: %w", dir, b.max, errTooMany)
	}
	b.used++
	return nil
}

// give returns n watches.
func (b *watchBudget) give(n int) {
	b.mu.Lock()
	b.used -= n
	b.mu.Unlock()
}

// dirWatch is one inotify instance watching a directory, optionally with its
// whole subtree. Its reader goroutine exits when close is called.
type dirWatch struct {
	root         string
	recursive    bool
	includeEntry bool
	db           *accountDB
	log          *slog.Logger
	f            *os.File // inotify fd, non-blocking, poller-managed
	budget       *watchBudget

	mu      sync.Mutex // guards wds and stopped
	wds     map[int32]string
	stopped bool // closed: its watches are given back, no more are added

	events chan *filesystemv1.FilesystemEvent // closed when the reader exits
	closed chan struct{}
	once   sync.Once
}

// newDirWatch starts watching root, which must be a directory.
func newDirWatch(root string, recursive, includeEntry, allowNetwork bool, budget *watchBudget, db *accountDB, log *slog.Logger) (*dirWatch, error) {
	fi, err := os.Stat(root)
	if err != nil {
		return nil, fmt.Errorf("watch %s: %w", root, err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("watch %s: not a directory: %w", root, errBadRequest)
	}
	var sfs unix.Statfs_t
	if err := unix.Statfs(root, &sfs); err == nil && !allowNetwork {
		if name, ok := networkFilesystems[int64(sfs.Type)]; ok {
			return nil, fmt.Errorf("watch %s: on a %s network mount; set allow_network_mounts: %w", root, name, errBadRequest)
		}
	}
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if errors.Is(err, unix.EMFILE) {
		return nil, fmt.Errorf("watch %s: the kernel's inotify instance limit (fs.inotify.max_user_instances) is reached: %w", root, errTooMany)
	}
	if err != nil {
		return nil, fmt.Errorf("watch %s: inotify: %w", root, err)
	}
	w := &dirWatch{
		root: root, recursive: recursive, includeEntry: includeEntry, db: db, log: log,
		f: os.NewFile(uintptr(fd), "inotify"), budget: budget, wds: map[int32]string{},
		events: make(chan *filesystemv1.FilesystemEvent, watchQueue), closed: make(chan struct{}),
	}
	if err := w.add(root, nil); err != nil {
		w.close()
		return nil, err
	}
	go w.read()
	return w, nil
}

// add watches dir and, when recursive, every directory below it. emit, when
// set, receives a create event for each entry found below dir, which appeared
// before its directory was watched.
//
// Reaching a limit (the watcher's, the sandbox's budget, the kernel's) stops
// the walk with its error: a watch is refused rather than left watching part
// of its tree. A subdirectory that cannot be watched otherwise (removed
// meanwhile, unreadable) is skipped.
func (w *dirWatch) add(dir string, emit func(string)) error {
	if err := w.addOne(dir); err != nil {
		return err
	}
	if !w.recursive {
		return nil
	}
	return filepath.WalkDir(dir, func(p string, de fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return nil
		}
		if emit != nil {
			emit(p)
		}
		if de.IsDir() {
			if err := w.addOne(p); err != nil {
				if errors.Is(err, errTooMany) {
					return err
				}
				w.log.Warn("watch subdirectory", "dir", p, "err", err)
				return fs.SkipDir
			}
		}
		return nil
	})
}

func (w *dirWatch) addOne(dir string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return fmt.Errorf("watch %s: %w", dir, os.ErrClosed)
	}
	if len(w.wds) >= maxWatchedDirs {
		return fmt.Errorf("watch %s: more than %d directories in one watcher: %w", dir, maxWatchedDirs, errTooMany)
	}
	if err := w.budget.take(dir); err != nil {
		return err
	}
	rc, err := w.f.SyscallConn()
	if err != nil {
		w.budget.give(1)
		return err
	}
	var wd int
	var addErr error
	if err := rc.Control(func(fd uintptr) {
		wd, addErr = unix.InotifyAddWatch(int(fd), dir, inotifyMask|unix.IN_ONLYDIR|unix.IN_DONT_FOLLOW)
	}); err != nil {
		w.budget.give(1)
		return err
	}
	if errors.Is(addErr, unix.ENOSPC) {
		w.budget.give(1)
		return fmt.Errorf("watch %s: the kernel's inotify watch limit (fs.inotify.max_user_watches, shared on the node) is reached: %w", dir, errTooMany)
	}
	if addErr != nil {
		w.budget.give(1)
		return fmt.Errorf("watch %s: %w", dir, addErr)
	}
	if _, ok := w.wds[int32(wd)]; ok {
		w.budget.give(1) // a directory already watched (a bind mount, say): no new watch
	}
	w.wds[int32(wd)] = dir
	return nil
}

// read turns inotify records into events until the watcher is closed.
func (w *dirWatch) read() {
	defer close(w.events)
	buf := make([]byte, 64<<10)
	for {
		n, err := w.f.Read(buf)
		if err != nil {
			if !errors.Is(err, os.ErrClosed) {
				w.log.Warn("read inotify", "root", w.root, "err", err)
			}
			return
		}
		for _, rec := range parseInotify(buf[:n]) {
			if !w.handle(rec) {
				return
			}
		}
	}
}

// handle emits the event for rec; false means the watcher was closed.
func (w *dirWatch) handle(rec inotifyRecord) bool {
	w.mu.Lock()
	dir, ok := w.wds[rec.wd]
	if ok && rec.mask&unix.IN_IGNORED != 0 {
		delete(w.wds, rec.wd) // the kernel dropped the watch (its directory is gone)
		w.budget.give(1)
	}
	w.mu.Unlock()
	if !ok || rec.mask&unix.IN_IGNORED != 0 {
		return true
	}
	full := dir
	if rec.name != "" {
		full = path.Join(dir, rec.name)
	}
	if typ, ok := eventType(rec.mask); ok && (full != w.root) {
		if !w.emit(full, typ) {
			return false
		}
	}
	if w.recursive && rec.mask&unix.IN_ISDIR != 0 && rec.mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0 {
		closed := false
		if err := w.add(full, func(p string) {
			if !closed && !w.emit(p, filesystemv1.EventType_EVENT_TYPE_CREATE) {
				closed = true
			}
		}); err != nil {
			w.log.Warn("watch new directory", "dir", full, "err", err)
		}
		return !closed
	}
	return true
}

func (w *dirWatch) emit(full string, typ filesystemv1.EventType) bool {
	rel := strings.TrimPrefix(strings.TrimPrefix(full, w.root), "/")
	ev := &filesystemv1.FilesystemEvent{Name: rel, Type: typ}
	if w.includeEntry && typ != filesystemv1.EventType_EVENT_TYPE_REMOVE && typ != filesystemv1.EventType_EVENT_TYPE_RENAME {
		if e, err := entryInfo(full, w.db, false); err == nil {
			ev.Entry = e
		}
	}
	select {
	case w.events <- ev:
		return true
	case <-w.closed:
		return false
	}
}

// close stops the watcher and gives its watches back to the budget; the
// events channel is closed once the reader exits.
func (w *dirWatch) close() {
	w.once.Do(func() {
		close(w.closed)
		w.mu.Lock()
		w.stopped = true
		w.f.Close() // the kernel drops all its watches
		n := len(w.wds)
		w.wds = map[int32]string{}
		w.mu.Unlock()
		w.budget.give(n)
	})
}

func eventType(mask uint32) (filesystemv1.EventType, bool) {
	switch {
	case mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0:
		return filesystemv1.EventType_EVENT_TYPE_CREATE, true
	case mask&unix.IN_MODIFY != 0:
		return filesystemv1.EventType_EVENT_TYPE_WRITE, true
	case mask&(unix.IN_DELETE|unix.IN_DELETE_SELF) != 0:
		return filesystemv1.EventType_EVENT_TYPE_REMOVE, true
	case mask&(unix.IN_MOVED_FROM|unix.IN_MOVE_SELF) != 0:
		return filesystemv1.EventType_EVENT_TYPE_RENAME, true
	case mask&unix.IN_ATTRIB != 0:
		return filesystemv1.EventType_EVENT_TYPE_CHMOD, true
	}
	return filesystemv1.EventType_EVENT_TYPE_UNSPECIFIED, false
}

// inotifyRecord is one struct inotify_event.
type inotifyRecord struct {
	wd   int32
	mask uint32
	name string
}

// parseInotify splits a read from an inotify fd into records, stopping at the
// first truncated one.
func parseInotify(b []byte) []inotifyRecord {
	var out []inotifyRecord
	for len(b) >= unix.SizeofInotifyEvent {
		wd := int32(binary.NativeEndian.Uint32(b[0:4]))
		mask := binary.NativeEndian.Uint32(b[4:8])
		nameLen := binary.NativeEndian.Uint32(b[12:16])
		if uint64(nameLen) > uint64(len(b)-unix.SizeofInotifyEvent) {
			break
		}
		name := b[unix.SizeofInotifyEvent : unix.SizeofInotifyEvent+int(nameLen)]
		if i := strings.IndexByte(string(name), 0); i >= 0 {
			name = name[:i]
		}
		out = append(out, inotifyRecord{wd: wd, mask: mask, name: string(name)})
		b = b[unix.SizeofInotifyEvent+int(nameLen):]
	}
	return out
}
