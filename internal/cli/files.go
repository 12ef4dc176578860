package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
)

func init() {
	commands = append(commands,
		&command{path: "files read", args: "ID PATH", summary: "print a file of a sandbox on stdout", run: filesRead},
		&command{path: "files write", args: "ID PATH", summary: "write stdin to a file of a sandbox", run: filesWrite},
		&command{path: "files ls", args: "ID [PATH] [--depth N | --limit N [--page-token T]] [-o json]", summary: "list a directory of a sandbox (default /); by pages with --limit", run: filesList},
		&command{path: "files stat", args: "ID PATH [-o json]", summary: "show one file's type, mode, owner, size and time", run: filesStat},
		&command{path: "files rm", args: "ID PATH", summary: "remove a file or directory tree", run: filesRemove},
		&command{path: "files mv", args: "ID FROM TO", summary: "rename a file or directory", run: filesMove},
		&command{path: "files mkdir", args: "ID PATH", summary: "create a directory and its parents", run: filesMkdir},
		&command{path: "files watch", args: "ID PATH [--recursive] [-o json]", summary: "print changes under a path until interrupted", run: filesWatch},
	)
}

// idAndPath parses a files command taking exactly ID PATH.
func idAndPath(name string, args []string) (id, path string, err error) {
	fs := newFlags(name)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return "", "", err
	}
	if err := wantArgs(fs, pos, 2, 2, "ID", "PATH"); err != nil {
		return "", "", err
	}
	return pos[0], pos[1], nil
}

func filesRead(ctx context.Context, e *env, args []string) error {
	id, path, err := idAndPath("files read", args)
	if err != nil {
		return err
	}
	rc, err := e.c.ReadFile(ctx, id, path)
	if err != nil {
		return err
	}
	defer rc.Close()
	if _, err := io.Copy(e.stdout, rc); err != nil {
		return fmt.Errorf("read %s in sandbox %s: %w", path, id, err)
	}
	return nil
}

func filesWrite(ctx context.Context, e *env, args []string) error {
	id, path, err := idAndPath("files write", args)
	if err != nil {
		return err
	}
	return e.c.WriteFile(ctx, id, path, e.stdin)
}

func filesRemove(ctx context.Context, e *env, args []string) error {
	id, path, err := idAndPath("files rm", args)
	if err != nil {
		return err
	}
	return e.c.RemoveFile(ctx, id, path)
}

func filesMkdir(ctx context.Context, e *env, args []string) error {
	id, path, err := idAndPath("files mkdir", args)
	if err != nil {
		return err
	}
	return e.c.MakeDir(ctx, id, path)
}

func filesMove(ctx context.Context, e *env, args []string) error {
	fs := newFlags("files mv")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(fs, pos, 3, 3, "ID", "FROM", "TO"); err != nil {
		return err
	}
	return e.c.MoveFile(ctx, pos[0], pos[1], pos[2])
}

func filesList(ctx context.Context, e *env, args []string) error {
	fs := newFlags("files ls")
	depth := fs.Int("depth", 1, "levels to descend")
	limit := fs.Int("limit", 0, "list one page of at most N entries (one level, in the directory's order); the next page's token is printed")
	pageToken := fs.String("page-token", "", "continue a paged listing where the page that printed this token ended")
	out := outputFlag(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(fs, pos, 1, 2, "ID", "PATH"); err != nil {
		return err
	}
	if *depth < 1 {
		return usagef(fs, "--depth %d: want 1 or more", *depth)
	}
	paged := *limit != 0 || *pageToken != ""
	if *limit < 0 || (paged && *depth != 1) {
		return usagef(fs, "--limit %d --depth %d: a paged listing takes a limit of 1 or more and lists one level", *limit, *depth)
	}
	path := "/"
	if len(pos) == 2 {
		path = pos[1]
	}
	var list sandboxv1.FileList
	if paged {
		list, err = e.c.ListFilesPage(ctx, pos[0], path, *limit, *pageToken)
	} else {
		list.Entries, err = e.c.ListFiles(ctx, pos[0], path, *depth)
	}
	if err != nil {
		return err
	}
	entries := list.Entries
	if out.json() {
		list.Entries = nonNil(entries)
		return writeJSON(e.stdout, list)
	}
	if list.NextPageToken != "" {
		defer fmt.Fprintf(e.stderr, "more entries follow: --page-token %s\n", list.NextPageToken)
	}
	rows := make([][]string, 0, len(entries))
	for _, f := range entries {
		name := f.Path
		if f.SymlinkTarget != "" {
			name += " -> " + f.SymlinkTarget
		}
		rows = append(rows, []string{f.Type, fmt.Sprintf("%04o", f.Mode&0o7777), f.Owner, strconv.FormatInt(f.Size, 10), formatTime(f.ModifiedAt), name})
	}
	return writeTable(e.stdout, []string{"TYPE", "MODE", "OWNER", "SIZE", "MODIFIED", "PATH"}, rows)
}

func filesStat(ctx context.Context, e *env, args []string) error {
	fs := newFlags("files stat")
	out := outputFlag(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(fs, pos, 2, 2, "ID", "PATH"); err != nil {
		return err
	}
	f, err := e.c.StatFile(ctx, pos[0], pos[1])
	if err != nil {
		return err
	}
	if out.json() {
		return writeJSON(e.stdout, f)
	}
	name := f.Path
	if f.SymlinkTarget != "" {
		name += " -> " + f.SymlinkTarget
	}
	return writeTable(e.stdout, []string{"TYPE", "MODE", "OWNER", "SIZE", "MODIFIED", "PATH"},
		[][]string{{f.Type, fmt.Sprintf("%04o", f.Mode&0o7777), f.Owner, strconv.FormatInt(f.Size, 10), formatTime(f.ModifiedAt), name}})
}

func filesWatch(ctx context.Context, e *env, args []string) error {
	fs := newFlags("files watch")
	recursive := fs.Bool("recursive", false, "watch the whole tree under PATH")
	out := outputFlag(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(fs, pos, 2, 2, "ID", "PATH"); err != nil {
		return err
	}
	w, err := e.c.WatchFiles(ctx, pos[0], pos[1], *recursive)
	if err != nil {
		return err
	}
	defer w.Close()
	for {
		ev, err := w.Next(ctx)
		switch {
		case errors.Is(err, io.EOF), err != nil && ctx.Err() != nil:
			return nil // the server ended the watch, or the user interrupted it
		case err != nil:
			return err
		}
		if out.json() {
			err = writeJSONLine(e.stdout, ev)
		} else {
			_, err = fmt.Fprintf(e.stdout, "%s %s\n", printable(ev.Type), printable(ev.Name))
		}
		if err != nil {
			return fmt.Errorf("write output: %w", err)
		}
	}
}
