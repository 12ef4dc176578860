package guestd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path"
	"slices"
	"strings"

	"connectrpc.com/connect"

	filesystemv1 "github.com/spacesandbox/space/api/guest/v1/filesystem"
)

// maxListEntries bounds one unpaged ListDir answer; past it the listing is
// refused and must be paged (listpage.go).
const maxListEntries = 100000

// filesystemService implements filesystem.Filesystem with envd's semantics.
// Operations run as the daemon (root); what they create is owned by the caller.
type filesystemService struct {
	d *Daemon
}

// callerPath resolves the caller and one request path.
func (s *filesystemService) callerPath(h http.Header, p string) (caller, string, error) {
	u, err := s.d.userFromHeader(h)
	if err != nil {
		return caller{}, "", err
	}
	abs, err := u.resolve(p)
	return u, abs, err
}

func (s *filesystemService) Stat(_ context.Context, req *connect.Request[filesystemv1.StatRequest]) (*connect.Response[filesystemv1.StatResponse], error) {
	u, p, err := s.callerPath(req.Header(), req.Msg.GetPath())
	if err != nil {
		return nil, rpcError(err)
	}
	e, err := entryInfo(p, u.db, envdCaller(req.Header()))
	if err != nil {
		return nil, rpcError(fmt.Errorf("stat %s: %w", p, err))
	}
	return connect.NewResponse(&filesystemv1.StatResponse{Entry: e}), nil
}

func (s *filesystemService) MakeDir(_ context.Context, req *connect.Request[filesystemv1.MakeDirRequest]) (*connect.Response[filesystemv1.MakeDirResponse], error) {
	u, p, err := s.callerPath(req.Header(), req.Msg.GetPath())
	if err != nil {
		return nil, rpcError(err)
	}
	if fi, err := os.Stat(p); err == nil {
		if fi.IsDir() {
			return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("make directory %s: directory already exists", p))
		}
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("make directory %s: a file is in the way", p))
	}
	if err := makeDirs(p, u.account); err != nil {
		return nil, rpcError(err)
	}
	e, err := entryInfo(p, u.db, envdCaller(req.Header()))
	if err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&filesystemv1.MakeDirResponse{Entry: e}), nil
}

func (s *filesystemService) Move(_ context.Context, req *connect.Request[filesystemv1.MoveRequest]) (*connect.Response[filesystemv1.MoveResponse], error) {
	u, src, err := s.callerPath(req.Header(), req.Msg.GetSource())
	if err != nil {
		return nil, rpcError(err)
	}
	dst, err := u.resolve(req.Msg.GetDestination())
	if err != nil {
		return nil, rpcError(err)
	}
	if _, err := os.Lstat(src); err != nil {
		return nil, rpcError(fmt.Errorf("move %s: %w", src, err))
	}
	if err := makeDirs(path.Dir(dst), u.account); err != nil {
		return nil, rpcError(err)
	}
	if err := os.Rename(src, dst); err != nil {
		return nil, rpcError(fmt.Errorf("move %s to %s: %w", src, dst, err))
	}
	e, err := entryInfo(dst, u.db, envdCaller(req.Header()))
	if err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&filesystemv1.MoveResponse{Entry: e}), nil
}

func (s *filesystemService) ListDir(ctx context.Context, req *connect.Request[filesystemv1.ListDirRequest]) (*connect.Response[filesystemv1.ListDirResponse], error) {
	u, root, err := s.callerPath(req.Header(), req.Msg.GetPath())
	if err != nil {
		return nil, rpcError(err)
	}
	fi, err := os.Stat(root) // the listed directory itself may be a symlink
	if err != nil {
		return nil, rpcError(fmt.Errorf("list %s: %w", root, err))
	}
	if !fi.IsDir() {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("list %s: not a directory", root))
	}
	depth := int(req.Msg.GetDepth())
	if depth < 1 {
		depth = 1
	}
	if m := req.Msg; m.GetPageSize() > 0 || m.GetPageToken() != "" {
		if depth > 1 {
			return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("list %s: a paged listing lists one level (depth 1), not %d: page each subdirectory on its own", root, depth))
		}
		entries, next, err := listPage(ctx, root, pageSizeOf(m.GetPageSize()), m.GetPageToken(), u.db)
		if err != nil {
			return nil, rpcError(err)
		}
		return connect.NewResponse(&filesystemv1.ListDirResponse{Entries: entries, NextPageToken: next}), nil
	}
	var entries []*filesystemv1.EntryInfo
	if err := listTree(ctx, root, depth, u.db, envdCaller(req.Header()), &entries, maxListEntries); err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&filesystemv1.ListDirResponse{Entries: entries}), nil
}

// listTree appends the entries under dir, descending depth levels without
// following symlinks below the first, and refuses past limit entries in all.
//
// A directory is read in batches and only as far as the limit: a directory
// of a million entries costs limit entries of memory and is refused as soon
// as the limit is passed, not after all of it is read and sorted (what
// os.ReadDir does). What is listed is sorted by name, as os.ReadDir would.
func listTree(ctx context.Context, dir string, depth int, db *accountDB, envd bool, out *[]*filesystemv1.EntryInfo, limit int) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	f, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("list %s: %w", dir, err)
	}
	var des []fs.DirEntry
	for {
		batch, err := f.ReadDir(listBatch)
		des = append(des, batch...)
		if len(*out)+len(des) > limit {
			f.Close()
			return fmt.Errorf("list %s: more than %d entries: list it by pages (page_size, page_token) or with a smaller depth: %w", dir, limit, errTooMany)
		}
		if errors.Is(err, io.EOF) || (err == nil && len(batch) == 0) {
			break
		}
		if err != nil {
			f.Close()
			return fmt.Errorf("list %s: %w", dir, err)
		}
		if err := ctx.Err(); err != nil {
			f.Close()
			return err
		}
	}
	f.Close()
	slices.SortFunc(des, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	for _, de := range des {
		p := path.Join(dir, de.Name())
		fi, err := de.Info()
		if err != nil {
			continue // removed meanwhile
		}
		*out = append(*out, entryFromInfo(p, fi, db, envd))
		if depth > 1 && de.IsDir() {
			if err := listTree(ctx, p, depth-1, db, envd, out, limit); err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, fs.ErrPermission) {
				return err
			}
		}
	}
	return nil
}

// listBatch is how many directory entries ListDir reads at a time.
const listBatch = 256

func (s *filesystemService) Remove(_ context.Context, req *connect.Request[filesystemv1.RemoveRequest]) (*connect.Response[filesystemv1.RemoveResponse], error) {
	_, p, err := s.callerPath(req.Header(), req.Msg.GetPath())
	if err != nil {
		return nil, rpcError(err)
	}
	if p == "/" {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("remove /: refusing to remove the root directory"))
	}
	if _, err := os.Lstat(p); err != nil {
		if errors.Is(err, fs.ErrNotExist) && envdCaller(req.Header()) {
			return connect.NewResponse(&filesystemv1.RemoveResponse{}), nil // envd removes a missing path without error
		}
		return nil, rpcError(fmt.Errorf("remove %s: %w", p, err))
	}
	if err := os.RemoveAll(p); err != nil {
		return nil, rpcError(fmt.Errorf("remove %s: %w", p, err))
	}
	return connect.NewResponse(&filesystemv1.RemoveResponse{}), nil
}

// makeDirs creates dir and its missing parents, owned by u.
func makeDirs(dir string, u account) error {
	if fi, err := os.Stat(dir); err == nil {
		if !fi.IsDir() {
			return fmt.Errorf("create directory %s: a file is in the way: %w", dir, errBadRequest)
		}
		return nil
	}
	if parent := path.Dir(dir); parent != dir {
		if err := makeDirs(parent, u); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("create directory %s: %w", dir, err)
	}
	return chownTo(dir, u)
}

// chownTo gives p to u when the daemon may (it is root).
func chownTo(p string, u account) error {
	if os.Geteuid() != 0 {
		return nil
	}
	if err := os.Lchown(p, int(u.UID), int(u.GID)); err != nil {
		return fmt.Errorf("give %s to %s: %w", p, u.Name, err)
	}
	return nil
}
