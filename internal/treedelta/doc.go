// Package treedelta owns the delta of a directory tree against the tree it was
// cloned from: Diff writes the entries that are new or changed and the paths
// that were deleted, Apply replays them onto a writable copy of the base. The
// ns runtime's sandbox root is a btrfs snapshot of its template directory;
// hibernate uploads the delta and restore re-applies it on another node's
// copy of the template.
//
// # Stream format (version 1)
//
// A POSIX tar stream in PAX format (archive/tar):
//
//   - The first entry is a PAX global header with the record
//     SPACE.treedelta=1 (the format version).
//   - Then one entry per new or changed path, in walk order: depth first,
//     names sorted bytewise inside a directory, so a directory comes before
//     its children. Names are relative, slash-separated and clean (no "/"
//     prefix, no "." or ".." component, no empty component); the root
//     directory itself is ".". Types: directory, regular file, symlink, hard
//     link (Linkname is the path of a regular file earlier in the stream or
//     unchanged in the base), FIFO. Each carries its permission bits with
//     setuid/setgid/sticky, numeric uid and gid, and modification time in
//     nanoseconds; a regular file carries its content.
//   - A deleted path is a whiteout: a regular-file entry of size 0 with the
//     PAX record SPACE.whiteout=1. Applying it removes the path, recursively
//     for a directory. A deleted directory has one whiteout, not one per
//     child. A path whose type changed needs no whiteout: the new entry
//     replaces whatever is there.
//   - The last entry is a PAX global header with SPACE.treedelta.end set to
//     the number of entries before it (excluding the version header); Apply
//     refuses a stream without it, so a truncated stream is detected.
//
// Not carried: extended attributes (file capabilities, SELinux labels), ACLs,
// access times, device nodes and sockets (Diff skips them and counts them; a
// base path replaced by one is whited out), and hole layout (Apply writes
// all-zero chunks as holes).
//
// # What counts as changed
//
// Diff compares type, permission bits, uid, gid, size, modification time and,
// for a symlink, its target. When those are equal and the change time (ctime)
// is equal too, the file is taken as unchanged without reading it: a btrfs
// snapshot keeps the inode's ctime, and ctime cannot be set from user space,
// so a sandbox cannot hide a content change by restoring the mtime. When only
// the ctime differs (a plain copy of the template, or a file rewritten with
// its old mtime) the contents are compared byte for byte.
//
// Hard links: among regular files with more than one link, the first path of
// an inode in walk order is written as a file and later paths as hard links
// to it, unless the link already exists unchanged in the base.
package treedelta
