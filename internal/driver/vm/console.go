package vm

import (
	"bytes"
	"io"
	"os"
)

// cappedLog is a log file that never grows past limit bytes: when full it is
// renamed to path+".1" (replacing the previous one) and a new file starts. So
// at most twice the limit is on disk and the latest output is always kept,
// whatever a guest prints on its console.
type cappedLog struct {
	path  string
	limit int64
	f     *os.File
	size  int64
}

func openCappedLog(path string, limit int64) (*cappedLog, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	return &cappedLog{path: path, limit: limit, f: f, size: fi.Size()}, nil
}

// Write writes b, rotating as often as needed; it fails only when the file
// system does.
func (l *cappedLog) Write(b []byte) (int, error) {
	written := 0
	for len(b) > 0 {
		if l.size >= l.limit {
			if err := l.rotate(); err != nil {
				return written, err
			}
		}
		n := int64(len(b))
		if room := l.limit - l.size; n > room {
			n = room
		}
		m, err := l.f.Write(b[:n])
		l.size += int64(m)
		written += m
		if err != nil {
			return written, err
		}
		b = b[m:]
	}
	return written, nil
}

func (l *cappedLog) rotate() error {
	l.f.Close()
	if err := os.Rename(l.path, l.path+".1"); err != nil {
		return err
	}
	f, err := os.OpenFile(l.path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	l.f, l.size = f, 0
	return nil
}

func (l *cappedLog) Close() error { return l.f.Close() }

// copyConsole copies the console stream into the log until the stream ends
// (QEMU exits); on a write error it keeps draining so QEMU never blocks.
func copyConsole(dst *cappedLog, src io.Reader) {
	buf := make([]byte, 32<<10)
	failed := false
	for {
		n, err := src.Read(buf)
		if n > 0 && !failed {
			_, werr := dst.Write(buf[:n])
			failed = werr != nil
		}
		if err != nil {
			return
		}
	}
}

// tailFile returns up to n bytes from the end of a file, for error messages.
func tailFile(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return ""
	}
	off := fi.Size() - n
	if off < 0 {
		off = 0
	}
	b := make([]byte, fi.Size()-off)
	m, _ := f.ReadAt(b, off)
	b = bytes.TrimSpace(b[:m])
	return string(bytes.Map(func(r rune) rune {
		if r < 0x20 && r != '\n' || r == 0x7f {
			return '?'
		}
		return r
	}, b))
}
