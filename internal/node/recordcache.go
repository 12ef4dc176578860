package node

import (
	"os"
	"path/filepath"
	"sync"
	"syscall"
)

// maxCachedRecords bounds the parsed records a node keeps for guest requests;
// past it the cache starts over (a node runs far fewer executions).
const maxCachedRecords = 4096

// recordCache keeps the records that guest requests read, each beside the
// identity of the record.json it was parsed from (inode, size, mtime and
// ctime). Every save renames a new file into place, so a changed record —
// retired, fenced, a new generation, written by any path or process — has
// another inode and is read again: a hit costs one stat(2) instead of an
// open, a read and a JSON parse, and never answers with a record older than
// the file on disk at the stat.
type recordCache struct {
	mu sync.Mutex
	m  map[string]cachedRecord
}

type cachedRecord struct {
	ino, size    uint64
	mtime, ctime syscall.Timespec
	rec          *Record
}

func newRecordCache() *recordCache { return &recordCache{m: map[string]cachedRecord{}} }

// loadShared is load for readers that do not change the record: the
// returned Record may be shared with other requests and must not be
// modified. Without a cache it is load.
func (r records) loadShared(id string) (*Record, error) {
	if r.cache == nil {
		return r.load(id)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(r.execDir(id), "record.json"), &st); err != nil {
		r.cache.forget(id)
		return nil, &os.PathError{Op: "stat", Path: filepath.Join(r.execDir(id), "record.json"), Err: err}
	}
	key := cachedRecord{ino: st.Ino, size: uint64(st.Size), mtime: st.Mtim, ctime: st.Ctim}
	r.cache.mu.Lock()
	c, ok := r.cache.m[id]
	r.cache.mu.Unlock()
	if ok && c.ino == key.ino && c.size == key.size && c.mtime == key.mtime && c.ctime == key.ctime {
		return c.rec, nil
	}
	// The file read may be newer than the stat (a save in between): then
	// the next stat differs from key and it is read again.
	rec, err := r.load(id)
	if err != nil {
		r.cache.forget(id)
		return nil, err
	}
	key.rec = rec
	r.cache.mu.Lock()
	if len(r.cache.m) >= maxCachedRecords {
		clear(r.cache.m)
	}
	r.cache.m[id] = key
	r.cache.mu.Unlock()
	return rec, nil
}

func (c *recordCache) forget(id string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	delete(c.m, id)
	c.mu.Unlock()
}
