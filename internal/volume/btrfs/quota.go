package btrfs

// Quotas: how a sandbox's disk size is enforced.
//
// Every sandbox volume (a clone of a template or of a snapshot) gets its own
// level-0 quota group with a limit (Limit), and is made a member of one
// level-1 group, sandboxesQgroup, whose limit keeps the node's reserve free:
// what sandboxes together may still write is what the filesystem has free
// minus the reserve, recomputed whenever a volume is limited and whenever
// Usage is read. A limit set on a group in the hierarchy fails the write
// with EDQUOT in the volume that crossed it and nowhere else; the node's own
// files (templates, snapshots' metadata, staged uploads, and for a loopback
// store everything on the host filesystem the image grows into) keep the
// reserve.
//
// Simple quotas (kernel 6.7 and later) are used where the kernel has them:
// an extent is charged to the subvolume that allocated it, with no backref
// walk when snapshots are made or deleted, which makes them cheap enough to
// leave on (BenchmarkSnapshotQuota measures it). They are enabled with the
// quota-control ioctl, so an older btrfs-progs (6.2 has no
// "quota enable --simple") does not matter. The consequence of owner
// accounting: data a volume wrote stays charged to it while a snapshot of
// it still holds the data, so a sandbox's snapshots count against its own
// disk; a volume cloned from a snapshot starts with nothing charged.
// Metadata (inodes, directory entries, extended attributes) is charged the
// same way, so btrfs's dynamic inodes are bounded by the limit as well.
//
// Older kernels get classic quota groups: the volume's exclusive bytes are
// limited (its template's shared data is not charged), and there is no
// level-1 group, because a snapshot into a group its source is not in marks
// classic accounting inconsistent until a full rescan.

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/volume"
)

// Quota modes, as /sys/fs/btrfs/<fsid>/qgroups/mode names them.
const (
	quotaSimple  = "squota"
	quotaClassic = "qgroup"
)

// sandboxesQgroup holds every sandbox volume's quota group; its limit keeps
// the node's reserve.
const sandboxesQgroup = "1/1"

// Reserve bounds: DefaultReserve is a twentieth of the filesystem within them.
const (
	minReserve = 64 << 20
	maxReserve = 4 << 30
)

// DefaultReserve is the space kept from sandboxes on a filesystem of total
// bytes: a twentieth of it, at least 64 MiB and at most 4 GiB.
func DefaultReserve(total uint64) uint64 {
	return min(max(total/20, minReserve), maxReserve)
}

// quota is the driver's quota state.
type quota struct {
	root string
	// mode is quotaSimple, quotaClassic, or "" when quotas are off; why
	// says then why.
	mode, why string
	// sysfs is /sys/fs/btrfs/<fsid>/qgroups.
	sysfs   string
	reserve uint64
	image   string
	// mu serialises updates of the sandboxes group's limit.
	mu sync.Mutex
}

func openQuota(ctx context.Context, root string, cfg Config) *quota {
	q := &quota{root: root, reserve: cfg.Reserve, image: cfg.Image}
	if cfg.NoQuota {
		q.why = "quotas disabled by configuration"
		return q
	}
	if err := q.enable(ctx); err != nil {
		q.mode, q.why = "", err.Error()
	}
	return q
}

// enable turns quotas on (simple where the kernel has them) unless the
// filesystem already has them, and prepares the sandboxes group.
func (q *quota) enable(ctx context.Context) error {
	fsid, err := fsID(q.root)
	if err != nil {
		return err
	}
	q.sysfs = filepath.Join("/sys/fs/btrfs", fsid, "qgroups")
	if q.mode = q.currentMode(); q.mode == "" {
		if _, err := os.Stat("/sys/fs/btrfs/features/simple_quota"); err == nil {
			err = quotaCtl(q.root, quotaCtlEnableSimple)
		} else {
			err = run(ctx, "quota", "enable", q.root)
		}
		if err != nil {
			return fmt.Errorf("enable quotas on %s: %w", q.root, err)
		}
		if q.mode = q.currentMode(); q.mode == "" {
			return fmt.Errorf("quotas on %s: enabled, but %s does not show them", q.root, q.sysfs)
		}
	}
	if q.reserve == 0 {
		u, err := volume.StatfsUsage(q.root)
		if err != nil {
			return err
		}
		q.reserve = DefaultReserve(u.TotalBytes)
	}
	if q.mode != quotaSimple {
		return nil
	}
	if _, err := os.Stat(filepath.Join(q.sysfs, qgroupDir(sandboxesQgroup))); err != nil {
		if err := run(ctx, "qgroup", "create", sandboxesQgroup, q.root); err != nil {
			return fmt.Errorf("create the sandboxes' quota group: %w", err)
		}
	}
	return q.refreshCap(ctx)
}

// currentMode reads the filesystem's quota mode, "" when quotas are off.
func (q *quota) currentMode() string {
	if b, err := os.ReadFile(filepath.Join(q.sysfs, "enabled")); err != nil || strings.TrimSpace(string(b)) != "1" {
		return ""
	}
	b, err := os.ReadFile(filepath.Join(q.sysfs, "mode"))
	if err != nil {
		return quotaClassic // kernels before simple quotas have no mode file
	}
	return strings.TrimSpace(string(b))
}

// refreshCap sets the sandboxes group's limit to what they use now plus
// what the node can spare: the filesystem's free space (and, for a loopback
// store, the free space of the filesystem its image grows into) less the
// reserve.
func (q *quota) refreshCap(ctx context.Context) error {
	if q.mode != quotaSimple {
		return nil
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	used, err := readUint(filepath.Join(q.sysfs, qgroupDir(sandboxesQgroup), "referenced"))
	if err != nil {
		return err
	}
	free, err := q.free()
	if err != nil {
		return err
	}
	// Already inside the reserve, sandboxes may not grow; the limit stays
	// at what they hold, so deleting gives them room again.
	limit := used
	if free > q.reserve {
		limit += free - q.reserve
	}
	limit = max(limit, 1<<20)
	if err := qgroupLimit(q.root, sandboxesQgroupID, limitReferenced, limit); err != nil {
		return fmt.Errorf("limit the sandboxes' quota group to %d bytes: %w", limit, err)
	}
	return nil
}

// free is the space the store can still grow by.
func (q *quota) free() (uint64, error) {
	u, err := volume.StatfsUsage(q.root)
	if err != nil {
		return 0, err
	}
	free := u.FreeBytes
	if q.image != "" {
		host, err := volume.StatfsUsage(filepath.Dir(q.image))
		if err != nil {
			return 0, err
		}
		free = min(free, host.FreeBytes)
	}
	return free, nil
}

// Limit caps what volume id may write at bytes: its own quota group's limit,
// within the sandboxes group. Without quotas it fails with an error that
// wraps errors.ErrUnsupported and says why.
func (d *Driver) Limit(ctx context.Context, id string, bytes uint64) error {
	q := d.quota
	if q.mode == "" {
		return fmt.Errorf("btrfs: volume %s: no disk limit: %s: %w", id, q.why, errors.ErrUnsupported)
	}
	p, err := d.existingVolume(id)
	if err != nil {
		return err
	}
	sub, err := subvolumeID(p)
	if err != nil {
		return fmt.Errorf("volume %s: %w", id, err)
	}
	which := uint64(limitReferenced)
	if q.mode == quotaClassic {
		which = limitExclusive // the template's shared extents are not the sandbox's
	}
	// The limit is set through the store's root, not the volume: the
	// transaction is charged to the subvolume it is made in, and a full
	// sandboxes group must not stop limits from being set.
	if err := qgroupLimit(q.root, sub, which, bytes); err != nil {
		if errors.Is(err, unix.EDQUOT) {
			return fmt.Errorf("volume %s: limit: %w: the node's disk is full: %v", id, errdefs.ErrResourceExhausted, err)
		}
		return fmt.Errorf("volume %s: limit %d bytes: %w", id, bytes, err)
	}
	return q.refreshCap(ctx)
}

// DiskUsage reports what volume id is charged and its limit.
func (d *Driver) DiskUsage(ctx context.Context, id string) (volume.DiskUsage, error) {
	q := d.quota
	if q.mode == "" {
		return volume.DiskUsage{}, fmt.Errorf("btrfs: volume %s: no disk accounting: %s: %w", id, q.why, errors.ErrUnsupported)
	}
	p, err := d.existingVolume(id)
	if err != nil {
		return volume.DiskUsage{}, err
	}
	sub, err := subvolumeID(p)
	if err != nil {
		return volume.DiskUsage{}, fmt.Errorf("volume %s: %w", id, err)
	}
	dir := filepath.Join(q.sysfs, "0_"+strconv.FormatUint(sub, 10))
	used, limit := "referenced", "max_referenced"
	if q.mode == quotaClassic {
		used, limit = "exclusive", "max_exclusive"
	}
	var u volume.DiskUsage
	if u.UsedBytes, err = readUint(filepath.Join(dir, used)); err != nil {
		return volume.DiskUsage{}, fmt.Errorf("volume %s: %w", id, err)
	}
	if u.LimitBytes, err = readUint(filepath.Join(dir, limit)); err != nil {
		return volume.DiskUsage{}, fmt.Errorf("volume %s: %w", id, err)
	}
	return u, nil
}

// QuotaMode names how volumes are bounded: "squota" (simple quotas),
// "qgroup" (classic quota groups), or "" with the reason when they are not.
func (d *Driver) QuotaMode() (mode, why string) { return d.quota.mode, d.quota.why }

// snapshotArgs are the arguments that make a writable volume from src: in
// the sandboxes group when it exists.
func (d *Driver) snapshotArgs(src, dst string) []string {
	if d.quota.mode == quotaSimple {
		return []string{"subvolume", "snapshot", "-i", sandboxesQgroup, src, dst}
	}
	return []string{"subvolume", "snapshot", src, dst}
}

func (d *Driver) existingVolume(id string) (string, error) {
	p, err := d.layout.Volume(id)
	if err != nil {
		return "", err
	}
	if fi, err := os.Lstat(p); err != nil || !fi.IsDir() {
		return "", fmt.Errorf("volume %s: %w", id, errdefs.ErrNotFound)
	}
	return p, nil
}

func qgroupDir(id string) string { return strings.ReplaceAll(id, "/", "_") }

func readUint(p string) (uint64, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, fmt.Errorf("read quota group: %w", err)
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("read quota group %s: %w", p, err)
	}
	return n, nil
}

// The ioctls, from linux/btrfs.h.
const (
	iocQuotaCtl  = 0xc0109428 // _IOWR(0x94, 40, struct btrfs_ioctl_quota_ctl_args)
	iocFSInfo    = 0x8400941f // _IOR(0x94, 31, struct btrfs_ioctl_fs_info_args)
	iocInoLookup = 0xd0009412 // _IOWR(0x94, 18, struct btrfs_ioctl_ino_lookup_args)
	iocQgroupLim = 0x8030942b // _IOR(0x94, 43, struct btrfs_ioctl_qgroup_limit_args)

	quotaCtlEnableSimple = 4 // BTRFS_QUOTA_CTL_ENABLE_SIMPLE_QUOTA
	firstFreeObjectID    = 256
)

func ioctl(path string, req uintptr, arg unsafe.Pointer) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), req, uintptr(arg)); errno != 0 {
		return errno
	}
	return nil
}

// What a quota group's limit bounds (BTRFS_QGROUP_LIMIT_MAX_RFER and
// _MAX_EXCL): all it references, or only what it alone holds.
const (
	limitReferenced = 1 << 0
	limitExclusive  = 1 << 1
)

// sandboxesQgroupID is sandboxesQgroup as the kernel numbers it: level 1,
// id 1.
const sandboxesQgroupID = 1<<48 | 1

// qgroupLimit sets quota group id's limit (which: limitReferenced or
// limitExclusive) to bytes, through the filesystem root at path — the
// ioctl btrfs-progs' `qgroup limit` makes, without a process per call.
func qgroupLimit(path string, id uint64, which uint64, bytes uint64) error {
	// struct btrfs_ioctl_qgroup_limit_args: the qgroup id, then struct
	// btrfs_qgroup_limit {flags, max_rfer, max_excl, rsv_rfer, rsv_excl}.
	var args struct{ qgroupID, flags, maxRfer, maxExcl, rsvRfer, rsvExcl uint64 }
	args.qgroupID, args.flags = id, which
	if which == limitExclusive {
		args.maxExcl = bytes
	} else {
		args.maxRfer = bytes
	}
	if err := ioctl(path, iocQgroupLim, unsafe.Pointer(&args)); err != nil {
		return fmt.Errorf("quota group %d/%d limit %d bytes: %w", id>>48, id&(1<<48-1), bytes, err)
	}
	return nil
}

func quotaCtl(path string, cmd uint64) error {
	args := struct{ cmd, status uint64 }{cmd: cmd}
	if err := ioctl(path, iocQuotaCtl, unsafe.Pointer(&args)); err != nil {
		return fmt.Errorf("quota control %d on %s: %w", cmd, path, err)
	}
	return nil
}

// fsID is the filesystem's id as /sys/fs/btrfs names it.
func fsID(path string) (string, error) {
	var info [1024]byte // struct btrfs_ioctl_fs_info_args; fsid at 16
	if err := ioctl(path, iocFSInfo, unsafe.Pointer(&info)); err != nil {
		return "", fmt.Errorf("btrfs filesystem info of %s: %w", path, err)
	}
	h := hex.EncodeToString(info[16:32])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:], nil
}

// subvolumeID is the id of the subvolume whose root is path.
func subvolumeID(path string) (uint64, error) {
	var args struct {
		treeID, objectID uint64
		name             [4080]byte
	}
	args.objectID = firstFreeObjectID
	if err := ioctl(path, iocInoLookup, unsafe.Pointer(&args)); err != nil {
		return 0, fmt.Errorf("subvolume id of %s: %w", path, err)
	}
	return args.treeID, nil
}
