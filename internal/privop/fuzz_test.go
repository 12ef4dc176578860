package privop

import (
	"encoding/binary"
	"errors"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/spacesandbox/space/internal/errdefs"
)

// FuzzReadRequest writes arbitrary bytes on a unix socket as the
// node-manager's caller (the unprivileged sandbox manager) would, and reads
// them as the root node-manager does (ReadMessage into a Request): a
// message over maxMessage is refused before its body is read, and a body
// never panics the reader. Whatever of the request the argument checks
// accept names only what may be a path element beneath a root directory
// (an execution, sandbox, snapshot, template, artifact, base or initramfs
// name: no "/", NUL, "." or ".." and at most 255 bytes), and sizes within
// their bounds.
func FuzzReadRequest(f *testing.F) {
	frame := func(body string) []byte {
		b := binary.BigEndian.AppendUint32(nil, uint32(len(body)))
		return append(b, body...)
	}
	h := strings.Repeat("0", 64)
	f.Add(frame(`{"op":"start","start":{"exec_id":"e1","sandbox_id":"sb","template":"base","runtime":"ns","hostname":"sb","cpus":1,"memory_mib":256,"pids_max":64,"snapshot":"s1"}}`))
	f.Add(frame(`{"op":"snapshot","snapshot":{"snapshot_id":"s1","exec_id":"e1","kind":"disk","sandbox_id":"sb","template":"base","runtime":"ns"}}`))
	f.Add(frame(`{"op":"seal_import","export":{"snapshot_id":"s1","export":{"snapshot":{"id":"s1","kind":"full","sandbox_id":"sb","template":"base","runtime":"vm"},"base_kind":"image","base_id":"img-` + h + `","initrd_name":"x.img","base":{"name":"base","size":1,"sha256":"` + h + `"},"files":[{"name":"cp.memory","size":1,"sha256":"` + h + `"}]}}}`))
	f.Add(frame(`{"op":"seal_import","export":{"snapshot_id":"s1","export":{"snapshot":{"id":"s1","kind":"full","sandbox_id":"sb","template":"base","runtime":"vm"},"base_kind":"tree","base_id":"tree-` + h + `","initrd_name":"x/../../../etc/x","base":{"name":"base","size":1,"sha256":"` + h + `"},"files":[{"name":"cp.memory","size":1,"sha256":"` + h + `"}]}}}`))
	f.Add(frame(`{"op":"seal_import","export":{"snapshot_id":"s1","export":{"snapshot":{"id":"s1","kind":"disk","sandbox_id":"sb","template":"base","runtime":"ns"},"base_kind":"tree","base_id":"tree-` + h + `","base":{"name":"base","size":1,"sha256":"` + h + `"},"files":[{"name":"cp.a/../../b","size":1,"sha256":"` + h + `"}]}}}`))
	f.Add(frame(`{"op":"open_export_file","export":{"snapshot_id":"s1","name":"cp.."}}`))
	f.Add(frame(`{"op":"ensure_template","template":{"name":"..","source":"oci:/x"}}`))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, '{'})
	f.Add(frame(`{"op":"cleanup","exec_id":"e1\n"}`)[:10])
	f.Fuzz(func(t *testing.T, data []byte) {
		server, client := socketPair(t)
		go func() {
			_, _ = client.Write(data)
			client.Close()
		}()
		var req Request
		files, err := ReadMessage(server, &req)
		CloseFiles(files)
		if len(data) >= 4 && binary.BigEndian.Uint32(data) > maxMessage && err == nil {
			t.Fatalf("read a message declaring %d bytes, over the %d limit", binary.BigEndian.Uint32(data), maxMessage)
		}
		if err != nil {
			return
		}
		checked := func(what string, err error, names ...string) {
			if err == nil {
				for _, n := range names {
					if !pathElement(n) {
						t.Fatalf("%s accepted %q, which is not a single path element", what, n)
					}
				}
			} else if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("%s refused with %v, not ErrInvalidArgument", what, err)
			}
		}
		checked("ValidExecID", ValidExecID(req.ExecID), req.ExecID)
		checked("ValidSnapshotID", ValidSnapshotID(req.SnapshotID), req.SnapshotID)
		if a := req.Start; a != nil {
			err := a.Validate(map[string]bool{"ns": true, "vm": true})
			checked("StartArgs.Validate", err, a.ExecID, a.SandboxID, a.Template, a.Runtime)
			if err == nil && a.Snapshot != "" {
				checked("StartArgs.Validate", nil, a.Snapshot)
			}
			if err == nil && (a.DiskBytes() < 16<<20 || a.DiskBytes() > 1<<40) {
				t.Fatalf("StartArgs.Validate accepted a disk of %d bytes", a.DiskBytes())
			}
		}
		if a := req.Snapshot; a != nil {
			checked("SnapshotArgs.Validate", a.Validate(), a.SnapshotID, a.ExecID, a.SandboxID, a.Template)
		}
		if a := req.Template; a != nil {
			checked("ValidTemplateName", ValidTemplateName(a.Name), a.Name)
		}
		if a := req.Export; a != nil {
			checked("ValidArtifactName", ValidArtifactName(a.Name), a.Name)
			if e := a.Export; e != nil {
				err := e.Validate(a.SnapshotID)
				names := []string{e.Snapshot.ID, e.Snapshot.SandboxID, e.Snapshot.Template, e.BaseID, e.Base.Name}
				if e.InitrdName != "" {
					names = append(names, e.InitrdName)
				}
				for _, f := range e.Files {
					names = append(names, f.Name)
				}
				checked("Export.Validate", err, names...)
			}
		}
	})
}

// pathElement reports whether s names one entry of a directory.
func pathElement(s string) bool {
	return s != "" && s != "." && s != ".." && len(s) <= 255 && !strings.ContainsAny(s, "/\x00")
}

// socketPair is a connected pair of unix stream sockets.
func socketPair(t *testing.T) (*net.UnixConn, *net.UnixConn) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn := func(fd int) *net.UnixConn {
		f := os.NewFile(uintptr(fd), "socketpair")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c.(*net.UnixConn)
	}
	return conn(fds[0]), conn(fds[1])
}
