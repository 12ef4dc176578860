// Package privop is the node-manager's protocol: the wire types of its fixed
// list of operations (materialise a template, start, kill and clean up a
// sandbox execution, pause and resume, stats, snapshots), their validation,
// the error classes on the wire, and the client the unprivileged sandbox
// manager (internal/node) calls it with. The server, run by the node's only
// root process, is internal/nodemanager.
//
// Wire format: one request and one response per connection. Each message is a
// 4-byte big-endian length and a JSON body. A response may carry one file
// descriptor (the host end of a sandbox's guest channel) as SCM_RIGHTS on its
// first byte.
package privop

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"

	"golang.org/x/sys/unix"

	"github.com/spacesandbox/space/internal/progress"
)

// maxMessage bounds a request or response body.
const maxMessage = 1 << 20

// Op names one privileged operation.
type Op string

// The operations the node-manager answers.
const (
	OpHello          Op = "hello"
	OpEnsureTemplate Op = "ensure_template"
	OpDeleteTemplate Op = "delete_template"
	OpListTemplates  Op = "list_templates"
	OpStart          Op = "start"
	OpCleanup        Op = "cleanup"
	OpPause          Op = "pause"
	OpResume         Op = "resume"
	OpStats          Op = "stats"
	OpAlive          Op = "alive"
	OpSnapshot       Op = "snapshot"
	OpDeleteSnapshot Op = "delete_snapshot"
	OpListSnapshots  Op = "list_snapshots"
	OpExport         Op = "export_snapshot"
	OpOpenExport     Op = "open_export_file"
	OpCreateImport   Op = "create_import_file"
	OpSealImport     Op = "seal_import"
	OpReopenLink     Op = "reopen_link"
	OpListExecutions Op = "list_executions"
)

// Request is one call to the node-manager. Only the field for Op is read.
type Request struct {
	Op       Op            `json:"op"`
	Template *TemplateArgs `json:"template,omitempty"`
	Start    *StartArgs    `json:"start,omitempty"`
	Snapshot *SnapshotArgs `json:"snapshot,omitempty"`
	Export   *ExportArgs   `json:"export,omitempty"`
	ExecID   string        `json:"exec_id,omitempty"`
	// SnapshotID names the snapshot of OpDeleteSnapshot.
	SnapshotID string `json:"snapshot_id,omitempty"`
	// Runtime names the driver of ExecID when the caller knows it. Without
	// it every driver is asked, which misses a driver still starting up.
	Runtime string `json:"runtime,omitempty"`
}

// TemplateArgs names a template and where to build it from.
type TemplateArgs struct {
	Name   string `json:"name"`
	Source string `json:"source,omitempty"`
	// Progress asks for the build's readings: the answer to
	// OpEnsureTemplate is then preceded by Responses that carry only
	// Progress, about one a second while the build runs.
	Progress bool `json:"progress,omitempty"`
}

// StartArgs describes a sandbox execution to start.
type StartArgs struct {
	ExecID    string `json:"exec_id"`
	SandboxID string `json:"sandbox_id"`
	Template  string `json:"template"`
	Runtime   string `json:"runtime"`
	Hostname  string `json:"hostname"`
	CPUs      int    `json:"cpus"`
	MemoryMiB int    `json:"memory_mib"`
	PidsMax   int    `json:"pids_max"`
	// DiskMiB bounds what the execution writes to its root volume; 0 means
	// DefaultDiskMiB.
	DiskMiB int `json:"disk_mib,omitempty"`
	// Snapshot, when set, starts the execution from this node-local
	// snapshot instead of the template: a disk snapshot boots its disk, a
	// full snapshot restores the saved VM.
	Snapshot string `json:"snapshot,omitempty"`
	// Network gives the execution its network interface; the link's host
	// end comes back as the second descriptor (Started.Link).
	Network bool `json:"network,omitempty"`
}

// Response answers a Request. Error is empty on success; ErrorKind
// classifies it and ErrorReason refines the class (ErrorResponse sets both).
type Response struct {
	Error       string         `json:"error,omitempty"`
	ErrorKind   string         `json:"error_kind,omitempty"`
	ErrorReason string         `json:"error_reason,omitempty"`
	Hello       *Hello         `json:"hello,omitempty"`
	Started     *Started       `json:"started,omitempty"`
	Templates   []string       `json:"templates,omitempty"`
	Stats       *Stats         `json:"stats,omitempty"`
	Alive       *bool          `json:"alive,omitempty"`
	Template    *TemplateOK    `json:"template_ok,omitempty"`
	Snapshot    *SnapshotInfo  `json:"snapshot,omitempty"`
	Snapshots   []SnapshotInfo `json:"snapshots,omitempty"`
	Export      *Export        `json:"export,omitempty"`
	Executions  *Executions    `json:"executions,omitempty"`
	// Progress, on a response that precedes the answer (see
	// TemplateArgs.Progress), is a reading of the operation; the answer
	// itself never carries it.
	Progress *progress.Report `json:"progress,omitempty"`
}

// Executions lists the executions the runtimes hold state for
// (driver.Driver.List), whoever started them.
type Executions struct {
	Executions []HeldExecution `json:"executions"`
	// Pending names the runtimes still being set up, whose executions
	// are not listed yet.
	Pending []string `json:"pending,omitempty"`
}

// HeldExecution is one execution a runtime holds state for.
type HeldExecution struct {
	ExecID  string `json:"exec_id"`
	Runtime string `json:"runtime"`
	// VolumeOnly: no runtime holds the execution, only its root volume
	// is left (Runtime is empty); Cleanup with no runtime deletes it.
	VolumeOnly bool `json:"volume_only,omitempty"`
}

// Hello describes the node-manager.
type Hello struct {
	Pid      int      `json:"pid"`
	Runtimes []string `json:"runtimes"`
	// Pending lists the runtimes still being set up (the vm runtime
	// fetching its kernel): offered soon, not yet.
	Pending []string `json:"pending,omitempty"`
	// Status says, per runtime, what it runs on and what is under way
	// (the vm runtime: its machine and kernel, a kernel build's progress),
	// one human-readable line each; only runtimes with something to say.
	Status  map[string]string `json:"status,omitempty"`
	Storage string            `json:"storage"`
}

// Started reports a started execution; the guest channel travels as the
// first SCM_RIGHTS descriptor, the network link (when Link is set) as the
// second.
type Started struct {
	Pid       int    `json:"pid"`
	StartTime uint64 `json:"start_time"`
	// Link is the network link's framing (driver.LinkFraming), "" when the
	// execution has no network.
	Link string `json:"link,omitempty"`
}

// TemplateOK reports a template present on the node.
type TemplateOK struct {
	SizeBytes int64 `json:"size_bytes"`
	// Progress is the last reading of the build that made the template,
	// nil when it was already present.
	Progress *progress.Report `json:"progress,omitempty"`
}

// Stats is a point-in-time resource reading of one execution.
type Stats struct {
	MemoryBytes uint64 `json:"memory_bytes"`
	// MemoryCacheBytes is the page cache in MemoryBytes (driver.Stats).
	MemoryCacheBytes uint64 `json:"memory_cache_bytes,omitempty"`
	Pids             uint64 `json:"pids"`
	CPUNanos         uint64 `json:"cpu_nanos"`
	// DiskBytes and DiskLimitBytes are what the execution's root volume is
	// charged and its limit, when the volume store accounts them, or what a
	// VM's disk image holds allocated and its size.
	DiskBytes      uint64 `json:"disk_bytes,omitempty"`
	DiskLimitBytes uint64 `json:"disk_limit_bytes,omitempty"`
}

// maxFiles is the most descriptors one message carries (a started
// execution's guest channel and network link).
const maxFiles = 2

// WriteMessage sends v with the given descriptors attached.
func WriteMessage(c *net.UnixConn, v any, fds ...int) error {
	body, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if len(body) > maxMessage {
		return fmt.Errorf("message of %d bytes is over the %d limit", len(body), maxMessage)
	}
	if len(fds) > maxFiles {
		return fmt.Errorf("message with %d descriptors, at most %d", len(fds), maxFiles)
	}
	buf := make([]byte, 4+len(body))
	binary.BigEndian.PutUint32(buf, uint32(len(body)))
	copy(buf[4:], body)
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	n, oobn, err := c.WriteMsgUnix(buf, oob, nil)
	if err != nil {
		return err
	}
	if oobn != len(oob) {
		return errors.New("file descriptors not sent")
	}
	if n < len(buf) {
		_, err = c.Write(buf[n:])
	}
	return err
}

// ReadMessage reads one message into v and returns the files it carried, in
// order. Descriptors beyond maxFiles are closed: a peer cannot leak fds into
// us.
func ReadMessage(c *net.UnixConn, v any) ([]*os.File, error) {
	head := make([]byte, 4)
	oob := make([]byte, unix.CmsgSpace(4*(maxFiles+2)))
	n, oobn, _, _, err := c.ReadMsgUnix(head, oob)
	if err != nil {
		return nil, err
	}
	var files []*os.File
	if oobn > 0 {
		files, err = takeFDs(oob[:oobn])
		if err != nil {
			return nil, err
		}
	}
	fail := func(err error) ([]*os.File, error) {
		CloseFiles(files)
		return nil, err
	}
	if n < 4 {
		if _, err := io.ReadFull(c, head[n:]); err != nil {
			return fail(err)
		}
	}
	size := binary.BigEndian.Uint32(head)
	if size > maxMessage {
		return fail(fmt.Errorf("message of %d bytes is over the %d limit", size, maxMessage))
	}
	body := make([]byte, size)
	if _, err := io.ReadFull(c, body); err != nil {
		return fail(err)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fail(fmt.Errorf("bad message: %w", err))
	}
	return files, nil
}

func CloseFiles(fs []*os.File) {
	for _, f := range fs {
		f.Close()
	}
}

func takeFDs(oob []byte) ([]*os.File, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("control message: %w", err)
	}
	var fds []int
	for _, m := range msgs {
		got, err := unix.ParseUnixRights(&m)
		if err != nil {
			continue
		}
		fds = append(fds, got...)
	}
	var files []*os.File
	for i, fd := range fds {
		if i >= maxFiles {
			unix.Close(fd)
			continue
		}
		unix.CloseOnExec(fd)
		files = append(files, os.NewFile(uintptr(fd), fmt.Sprintf("fd-%d", i)))
	}
	return files, nil
}
