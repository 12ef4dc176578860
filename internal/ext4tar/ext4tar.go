// Package ext4tar reads the tree of an ext4 filesystem image and writes it
// as a tar stream, in user space: a template is made from a vm sandbox's
// disk snapshot this way (internal/nodemanager), without the host kernel
// mounting a filesystem the guest wrote.
//
// The image is hostile: every number read from it is checked against the
// image's size and the format's bounds before it is used, directory loops
// and deep trees end the walk with an error, and a name holding '/' or NUL
// is refused. What comes out is still untrusted: the caller extracts it
// with template.Extract's rules (no absolute names or "..", nothing written
// through a symlink, hard links inside the tree, size limits).
//
// Read: directories (linear and hashed), regular files, symlinks (fast and
// in blocks), hard links (as tar links to the first path), FIFOs and
// device nodes (the extractor skips devices); mode, owner and mtime.
// Files mapped by extents only (every file ext4 writes; ext2/ext3 block
// maps and inline data are refused by name). Not read: extended
// attributes (file capabilities, ACLs), sockets, the journal (a frozen
// filesystem has none pending), /lost+found.
package ext4tar

import (
	"archive/tar"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"
	"time"
)

// ErrFormat is what an image that is not a readable ext4 filesystem fails with.
var ErrFormat = errors.New("ext4tar: not a readable ext4 image")

// Limits bound a walk of a hostile image.
type Limits struct {
	// MaxEntries is how many entries the tree may have.
	MaxEntries int
	// MaxDepth is how deep directories may nest.
	MaxDepth int
	// MaxBytes is the total size of the regular files (holes included: a
	// hostile inode may claim terabytes of them).
	MaxBytes int64
}

// DefaultLimits are template.DefaultLimits's, and a depth far beyond any
// real tree.
var DefaultLimits = Limits{MaxEntries: 4 << 20, MaxDepth: 1024, MaxBytes: 64 << 30}

const (
	incompatFiletype   = 0x2
	incompatJournalDev = 0x8
	incompatMetaBG     = 0x10
	incompatExtents    = 0x40
	incompat64bit      = 0x80
	incompatInlineData = 0x8000
	incompatEncrypt    = 0x10000

	flagExtents    = 0x80000
	flagInlineData = 0x10000000

	rootInode = 2
)

// fs is an open image.
type fs struct {
	r          io.ReaderAt
	size       int64 // of the image, bytes
	blockSize  int64
	blocks     uint64
	inodes     uint32
	perGroup   uint32
	inodeSize  int64
	descSize   int64
	gdtBlock   uint64
	groups     uint32
	inodeTable map[uint32]uint64 // group -> first block of its inode table, read once
}

func formatErr(format string, a ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrFormat}, a...)...)
}

// open reads the superblock of the image r of size bytes.
func open(r io.ReaderAt, size int64) (*fs, error) {
	sb := make([]byte, 1024)
	if _, err := r.ReadAt(sb, 1024); err != nil {
		return nil, formatErr("superblock: %v", err)
	}
	le := binary.LittleEndian
	if le.Uint16(sb[0x38:]) != 0xEF53 {
		return nil, formatErr("no ext2/3/4 superblock magic")
	}
	logBS := le.Uint32(sb[0x18:])
	if logBS > 6 {
		return nil, formatErr("block size 1024<<%d", logBS)
	}
	f := &fs{r: r, size: size, blockSize: 1024 << logBS, inodeTable: map[uint32]uint64{}}
	incompat := le.Uint32(sb[0x60:])
	switch {
	case incompat&incompatExtents == 0:
		return nil, formatErr("no extents feature: an ext2/ext3 image (block maps are not read)")
	case incompat&incompatFiletype == 0:
		return nil, formatErr("no filetype feature")
	case incompat&(incompatMetaBG|incompatJournalDev|incompatInlineData|incompatEncrypt) != 0:
		return nil, formatErr("unsupported features %#x (meta_bg, journal_dev, inline_data or encrypt)", incompat)
	}
	f.blocks = uint64(le.Uint32(sb[0x4:]))
	f.descSize = 32
	if incompat&incompat64bit != 0 {
		f.blocks |= uint64(le.Uint32(sb[0x150:])) << 32
		f.descSize = int64(le.Uint16(sb[0xFE:]))
		if f.descSize < 64 || f.descSize > 1024 || f.descSize&(f.descSize-1) != 0 {
			return nil, formatErr("group descriptor size %d", f.descSize)
		}
	}
	f.inodes = le.Uint32(sb[0x0:])
	f.perGroup = le.Uint32(sb[0x28:])
	perGroupBlocks := le.Uint32(sb[0x20:])
	firstData := le.Uint32(sb[0x14:])
	f.inodeSize = 128
	if le.Uint32(sb[0x4C:]) >= 1 {
		f.inodeSize = int64(le.Uint16(sb[0x58:]))
	}
	if f.inodeSize < 128 || f.inodeSize > f.blockSize || f.inodeSize&(f.inodeSize-1) != 0 {
		return nil, formatErr("inode size %d", f.inodeSize)
	}
	if f.perGroup == 0 || perGroupBlocks == 0 || f.inodes == 0 || f.blocks <= uint64(firstData) {
		return nil, formatErr("empty geometry")
	}
	if uint64(f.blocks) > uint64(size)/uint64(f.blockSize)+1 {
		return nil, formatErr("%d blocks of %d bytes in an image of %d bytes", f.blocks, f.blockSize, size)
	}
	f.groups = uint32((f.blocks - uint64(firstData) + uint64(perGroupBlocks) - 1) / uint64(perGroupBlocks))
	if uint64(f.groups)*uint64(f.perGroup) < uint64(f.inodes) {
		return nil, formatErr("%d groups of %d inodes for %d inodes", f.groups, f.perGroup, f.inodes)
	}
	f.gdtBlock = uint64(firstData) + 1
	return f, nil
}

// readBlock reads physical block n into buf (one block long).
func (f *fs) readBlock(n uint64, buf []byte) error {
	if n == 0 || n >= f.blocks {
		return formatErr("block %d outside the filesystem's %d", n, f.blocks)
	}
	if _, err := f.r.ReadAt(buf, int64(n)*f.blockSize); err != nil {
		return formatErr("block %d: %v", n, err)
	}
	return nil
}

// inode is what the walk uses of an inode.
type inode struct {
	num      uint32
	mode     uint16
	uid, gid uint32
	size     int64
	mtime    int64
	links    uint16
	flags    uint32
	block    [60]byte
}

const (
	typeMask = 0xF000
	typeFIFO = 0x1000
	typeChr  = 0x2000
	typeDir  = 0x4000
	typeBlk  = 0x6000
	typeReg  = 0x8000
	typeLnk  = 0xA000
	typeSock = 0xC000
)

// readInode reads inode n.
func (f *fs) readInode(n uint32) (*inode, error) {
	if n == 0 || n > f.inodes {
		return nil, formatErr("inode %d outside the filesystem's %d", n, f.inodes)
	}
	group, index := (n-1)/f.perGroup, (n-1)%f.perGroup
	table, ok := f.inodeTable[group]
	if !ok {
		desc := make([]byte, f.descSize)
		off := int64(f.gdtBlock)*f.blockSize + int64(group)*f.descSize
		if _, err := f.r.ReadAt(desc, off); err != nil {
			return nil, formatErr("group descriptor %d: %v", group, err)
		}
		table = uint64(binary.LittleEndian.Uint32(desc[0x8:]))
		if f.descSize >= 64 {
			table |= uint64(binary.LittleEndian.Uint32(desc[0x28:])) << 32
		}
		f.inodeTable[group] = table
	}
	tableBlocks := (uint64(f.perGroup)*uint64(f.inodeSize) + uint64(f.blockSize) - 1) / uint64(f.blockSize)
	if table == 0 || table >= f.blocks || f.blocks-table < tableBlocks {
		return nil, formatErr("group %d: inode table at block %d", group, table)
	}
	raw := make([]byte, 128)
	if _, err := f.r.ReadAt(raw, int64(table)*f.blockSize+int64(index)*f.inodeSize); err != nil {
		return nil, formatErr("inode %d: %v", n, err)
	}
	le := binary.LittleEndian
	in := &inode{
		num:   n,
		mode:  le.Uint16(raw[0x0:]),
		uid:   uint32(le.Uint16(raw[0x2:])) | uint32(le.Uint16(raw[0x78:]))<<16,
		gid:   uint32(le.Uint16(raw[0x18:])) | uint32(le.Uint16(raw[0x7A:]))<<16,
		size:  int64(uint64(le.Uint32(raw[0x4:])) | uint64(le.Uint32(raw[0x6C:]))<<32),
		mtime: int64(le.Uint32(raw[0x10:])),
		links: le.Uint16(raw[0x1A:]),
		flags: le.Uint32(raw[0x20:]),
	}
	copy(in.block[:], raw[0x28:0x28+60])
	if in.size < 0 || in.size > maxFile {
		return nil, formatErr("inode %d: size %d", n, in.size)
	}
	return in, nil
}

// maxFile is ext4's largest file (16 TiB with 4 KiB blocks). A file may be
// larger than the image (sparse); what a hostile size makes the stream
// carry is bounded by the reader's limits (template.Extract refuses a
// header past its byte limit before reading the data).
const maxFile = 16 << 40

// extent maps logical blocks [logical, logical+length) to physical ones
// from start; an uninitialised extent reads as zeros.
type extent struct {
	logical, length uint32
	start           uint64
	zero            bool
}

// maxExtentDepth is the deepest extent tree ext4 makes (its limit is 5).
const maxExtentDepth = 5

// extents lists in's extents in logical order.
func (f *fs) extents(in *inode) ([]extent, error) {
	if in.flags&flagInlineData != 0 {
		return nil, formatErr("inode %d: inline data is not read", in.num)
	}
	if in.flags&flagExtents == 0 {
		return nil, formatErr("inode %d: block-mapped (ext2/ext3) files are not read", in.num)
	}
	var out []extent
	// The blocks of a file's data, in all: bounded by the image.
	budget := uint64(f.blocks)
	err := f.extentNode(in, in.block[:], maxExtentDepth, &out, &budget)
	return out, err
}

func (f *fs) extentNode(in *inode, node []byte, depthLeft int, out *[]extent, budget *uint64) error {
	le := binary.LittleEndian
	if len(node) < 12 || le.Uint16(node[0:]) != 0xF30A {
		return formatErr("inode %d: bad extent header", in.num)
	}
	entries, depth := int(le.Uint16(node[2:])), int(le.Uint16(node[6:]))
	if 12+entries*12 > len(node) || depth > depthLeft {
		return formatErr("inode %d: extent node of %d entries at depth %d", in.num, entries, depth)
	}
	for i := 0; i < entries; i++ {
		e := node[12+i*12 : 24+i*12]
		if depth == 0 {
			length := uint32(le.Uint16(e[4:]))
			zero := length > 32768
			if zero {
				length -= 32768
			}
			start := uint64(le.Uint16(e[6:]))<<32 | uint64(le.Uint32(e[8:]))
			if length == 0 || start == 0 || start >= f.blocks || f.blocks-start < uint64(length) || uint64(length) > *budget {
				return formatErr("inode %d: extent of %d blocks at %d", in.num, length, start)
			}
			*budget -= uint64(length)
			x := extent{logical: le.Uint32(e[0:]), length: length, start: start, zero: zero}
			if n := len(*out); n > 0 {
				prev := (*out)[n-1]
				if uint64(x.logical) < uint64(prev.logical)+uint64(prev.length) {
					return formatErr("inode %d: extents overlap or are out of order", in.num)
				}
			}
			*out = append(*out, x)
			continue
		}
		child := uint64(le.Uint16(e[8:]))<<32 | uint64(le.Uint32(e[4:]))
		if *budget == 0 {
			return formatErr("inode %d: extent tree larger than the image", in.num)
		}
		*budget--
		buf := make([]byte, f.blockSize)
		if err := f.readBlock(child, buf); err != nil {
			return fmt.Errorf("inode %d: extent index: %w", in.num, err)
		}
		if err := f.extentNode(in, buf, depth-1, out, budget); err != nil {
			return err
		}
	}
	return nil
}

// content is a reader of in's first in.size bytes: its extents' blocks,
// zeros for holes and uninitialised extents.
type content struct {
	ctx     context.Context // nil: not cancelled
	f       *fs
	exts    []extent
	size    int64
	off     int64
	scratch []byte
}

func (f *fs) contentOf(in *inode) (*content, error) {
	exts, err := f.extents(in)
	if err != nil {
		return nil, err
	}
	return &content{f: f, exts: exts, size: in.size, scratch: make([]byte, f.blockSize)}, nil
}

func (c *content) Read(p []byte) (int, error) {
	if c.off >= c.size {
		return 0, io.EOF
	}
	if c.ctx != nil && c.off%(1<<20) == 0 {
		if err := c.ctx.Err(); err != nil {
			return 0, err
		}
	}
	bs := c.f.blockSize
	logical, within := uint64(c.off/bs), c.off%bs
	n := min(int64(len(p)), bs-within, c.size-c.off)
	for len(c.exts) > 0 && uint64(c.exts[0].logical)+uint64(c.exts[0].length) <= logical {
		c.exts = c.exts[1:]
	}
	if len(c.exts) == 0 || uint64(c.exts[0].logical) > logical || c.exts[0].zero {
		clear(p[:n])
	} else {
		e := c.exts[0]
		if err := c.f.readBlock(e.start+logical-uint64(e.logical), c.scratch); err != nil {
			return 0, err
		}
		copy(p[:n], c.scratch[within:within+n])
	}
	c.off += n
	return int(n), nil
}

// maxDirBytes bounds a directory's size (ext4's largedir reaches 4 GiB;
// 256 MiB is millions of names).
const maxDirBytes = 256 << 20

// dirent is a directory entry.
type dirent struct {
	name  string
	inode uint32
}

// readDir lists directory in, without "." and "..".
func (f *fs) readDir(in *inode) ([]dirent, error) {
	if in.size > maxDirBytes || in.size%f.blockSize != 0 {
		return nil, formatErr("directory inode %d: size %d", in.num, in.size)
	}
	c, err := f.contentOf(in)
	if err != nil {
		return nil, err
	}
	var out []dirent
	block := make([]byte, f.blockSize)
	for {
		if _, err := io.ReadFull(c, block); errors.Is(err, io.EOF) {
			return out, nil
		} else if err != nil {
			return nil, err
		}
		for off := 0; off+8 <= len(block); {
			ino := binary.LittleEndian.Uint32(block[off:])
			recLen := int(binary.LittleEndian.Uint16(block[off+4:]))
			nameLen := int(block[off+6])
			if recLen < 8 || recLen%4 != 0 || off+recLen > len(block) || 8+nameLen > recLen {
				return nil, formatErr("directory inode %d: entry at %d of a block: length %d", in.num, off, recLen)
			}
			name := string(block[off+8 : off+8+nameLen])
			off += recLen
			// Inode 0: a free slot, a hashed directory's index node or
			// the checksum tail.
			if ino == 0 || name == "." || name == ".." {
				continue
			}
			if name == "" || containsAny(name, "/\x00") {
				return nil, formatErr("directory inode %d: name %q", in.num, name)
			}
			out = append(out, dirent{name: name, inode: ino})
		}
	}
}

func containsAny(s, chars string) bool {
	for i := 0; i < len(s); i++ {
		for j := 0; j < len(chars); j++ {
			if s[i] == chars[j] {
				return true
			}
		}
	}
	return false
}

// maxSymlink is the longest symlink target read (PATH_MAX).
const maxSymlink = 4096

// symlinkTarget reads a symlink's target: in the inode when it is short
// and has no extents, else in its blocks.
func (f *fs) symlinkTarget(in *inode) (string, error) {
	if in.size > maxSymlink || in.size == 0 {
		return "", formatErr("symlink inode %d: length %d", in.num, in.size)
	}
	if in.flags&flagExtents == 0 && in.size < 60 {
		return string(in.block[:in.size]), nil
	}
	c, err := f.contentOf(in)
	if err != nil {
		return "", err
	}
	b, err := io.ReadAll(c)
	return string(b), err
}

// Write writes the tree of the ext4 image r (size bytes) to w as a tar
// stream, within lim, and closes the stream. Names are relative: "." for the root, then "a", "a/b".
func Write(ctx context.Context, r io.ReaderAt, size int64, w io.Writer, lim Limits) error {
	f, err := open(r, size)
	if err != nil {
		return err
	}
	root, err := f.readInode(rootInode)
	if err != nil {
		return err
	}
	if root.mode&typeMask != typeDir {
		return formatErr("the root inode is not a directory")
	}
	wk := &walk{f: f, tw: tar.NewWriter(w), lim: lim, dirs: map[uint32]bool{rootInode: true}, links: map[uint32]string{}}
	if err := wk.header(".", root, tar.TypeDir, ""); err != nil {
		return err
	}
	if err := wk.dir(ctx, ".", root, 0); err != nil {
		return err
	}
	return wk.tw.Close()
}

// walk is one Write's state.
type walk struct {
	f       *fs
	tw      *tar.Writer
	lim     Limits
	entries int
	bytes   int64
	dirs    map[uint32]bool   // directories entered: a second entry is a loop
	links   map[uint32]string // path of the first entry of each multiply linked file
}

func (wk *walk) dir(ctx context.Context, name string, in *inode, depth int) error {
	if depth >= wk.lim.MaxDepth {
		return formatErr("%s: directories nested deeper than %d", shown(name), wk.lim.MaxDepth)
	}
	ents, err := wk.f.readDir(in)
	if err != nil {
		return fmt.Errorf("%s: %w", shown(name), err)
	}
	// By name, so the stream (and the first path of a hard link) does not
	// depend on the order a hashed directory keeps.
	sort.Slice(ents, func(i, j int) bool { return ents[i].name < ents[j].name })
	for _, e := range ents {
		if err := ctx.Err(); err != nil {
			return err
		}
		if depth == 0 && e.name == "lost+found" {
			continue // e2fsck's, not the sandbox's
		}
		if err := wk.entry(ctx, path.Join(name, e.name), e.inode, depth); err != nil {
			return err
		}
	}
	return nil
}

func (wk *walk) entry(ctx context.Context, name string, ino uint32, depth int) error {
	if wk.entries++; wk.entries > wk.lim.MaxEntries {
		return formatErr("more than %d entries", wk.lim.MaxEntries)
	}
	in, err := wk.f.readInode(ino)
	if err != nil {
		return fmt.Errorf("%s: %w", shown(name), err)
	}
	switch in.mode & typeMask {
	case typeDir:
		if wk.dirs[ino] {
			return formatErr("%s: directory inode %d entered twice (a loop)", shown(name), ino)
		}
		wk.dirs[ino] = true
		if err := wk.header(name, in, tar.TypeDir, ""); err != nil {
			return err
		}
		return wk.dir(ctx, name, in, depth+1)
	case typeReg:
		if first, ok := wk.links[ino]; ok {
			return wk.header(name, in, tar.TypeLink, first)
		}
		if in.links > 1 {
			wk.links[ino] = name
		}
		if wk.bytes += in.size; wk.bytes > wk.lim.MaxBytes {
			return formatErr("%s: more than %d bytes of files", shown(name), wk.lim.MaxBytes)
		}
		c, err := wk.f.contentOf(in)
		if err != nil {
			return fmt.Errorf("%s: %w", shown(name), err)
		}
		if err := wk.header(name, in, tar.TypeReg, ""); err != nil {
			return err
		}
		c.ctx = ctx
		if _, err := io.Copy(wk.tw, c); err != nil {
			return fmt.Errorf("%s: %w", shown(name), err)
		}
		return nil
	case typeLnk:
		target, err := wk.f.symlinkTarget(in)
		if err != nil {
			return fmt.Errorf("%s: %w", shown(name), err)
		}
		return wk.header(name, in, tar.TypeSymlink, target)
	case typeFIFO:
		return wk.header(name, in, tar.TypeFifo, "")
	case typeChr:
		return wk.header(name, in, tar.TypeChar, "")
	case typeBlk:
		return wk.header(name, in, tar.TypeBlock, "")
	case typeSock:
		return nil
	}
	return formatErr("%s: inode %d of unknown type %#o", shown(name), ino, in.mode&typeMask)
}

func (wk *walk) header(name string, in *inode, typ byte, link string) error {
	h := &tar.Header{
		Typeflag: typ, Name: name, Linkname: link,
		Mode: int64(in.mode & 0o7777), Uid: int(in.uid), Gid: int(in.gid),
		ModTime: time.Unix(in.mtime, 0), Format: tar.FormatPAX,
	}
	if typ == tar.TypeDir && name != "." {
		h.Name += "/"
	}
	if typ == tar.TypeReg {
		h.Size = in.size
	}
	if err := wk.tw.WriteHeader(h); err != nil {
		return fmt.Errorf("%s: %w", shown(name), err)
	}
	return nil
}

// shown is a path for an error message: its last 256 bytes at most (a
// hostile tree nests a thousand levels of 255-byte names).
func shown(name string) string {
	if len(name) <= 256 {
		return name
	}
	return "…" + strings.ToValidUTF8(name[len(name)-256:], "")
}
