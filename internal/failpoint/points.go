package failpoint

// The registry: every point the binaries hit, in the order of the
// operations' steps. A point is hit by the process its Process names
// (Server: space server or space node — the control plane and the sandbox
// manager, one process under --dev; NodeManager: space-node-manager), and
// its doc says which part of it ("control plane", "node"); Bridge and
// Guest points are hit by each host bridge and each guest daemon, which
// the node and the node-manager arm with the points they were armed with
// (ChildEnv). Adding a point here is enough for the e2e crash tests
// (e2e.TestFailpoints for the server and the node-manager,
// e2e.TestBridgeAndGuestFailpoints for the bridge and the guest) to kill
// the process there, once they know how to drive the point's operation.
var (
	// CreateAfterRecord: the control plane recorded the new sandbox and
	// has not handed it to the reconciler or answered.
	CreateAfterRecord = register("create/after-record", "create",
		"control plane: the sandbox row is recorded; not yet enqueued, not answered")
	// NodeManagerAfterClone: the node-manager cloned the execution's
	// root volume; no runtime is started.
	NodeManagerAfterClone = registerIn("create/nm-after-clone", "create", NodeManager,
		"node-manager: the root volume is cloned (and bounded); no runtime started, nothing answered")
	// NodeManagerAfterRuntime: the node-manager started the runtime and
	// has not answered the start.
	NodeManagerAfterRuntime = registerIn("create/nm-after-runtime", "create", NodeManager,
		"node-manager: the runtime (netns, cgroup, processes) is started; the start is not answered")
	// NodeManagerAfterSnapshotClone: a start from a snapshot (a restore,
	// a start after stop, a rollback, a fork's child) has its root from
	// the snapshot; no runtime is started.
	NodeManagerAfterSnapshotClone = registerIn("restore/nm-after-clone", "restore", NodeManager,
		"node-manager: a start from a snapshot (restore, start, rollback, fork) has its root cloned from the snapshot; no runtime started")
	// NodeManagerAfterSnapshotRuntime: the runtime of a start from a
	// snapshot is started; the start is not answered.
	NodeManagerAfterSnapshotRuntime = registerIn("restore/nm-after-runtime", "restore", NodeManager,
		"node-manager: the runtime of a start from a snapshot is started; the start is not answered")
	// StartAfterRuntime: the node-manager started the execution's
	// runtime; the node has recorded nothing of it.
	StartAfterRuntime = register("create/after-runtime", "create",
		"node: the runtime (netns, cgroup, root volume, processes) is started; no runtime record, no bridge")
	// StartAfterBridge: the node recorded the execution (starting) and
	// spawned its bridge; the guest has no identity yet.
	StartAfterBridge = register("create/after-bridge", "create",
		"node: runtime record saved (starting), bridge spawned; identity not installed")
	// CreateAfterNodeStart: the node answered the start; the sandbox row
	// still says creating.
	CreateAfterNodeStart = register("create/after-node-start", "create",
		"control plane: the node runs the execution; the sandbox row still says creating")
	// SnapshotAfterTake: the node took a snapshot; its row still says
	// creating.
	SnapshotAfterTake = register("snapshot/after-take", "snapshot",
		"control plane: the node holds the new snapshot; its row still says creating")
	// NodeManagerAfterVolumeSnapshot: the node-manager made the snapshot
	// subvolume and has not answered.
	NodeManagerAfterVolumeSnapshot = registerIn("snapshot/nm-after-volume", "snapshot", NodeManager,
		"node-manager: the snapshot's subvolume is made; its size not read, nothing answered")
	// NodeManagerAfterSnapshotInfo: the snapshot is complete (its
	// description written); the snapshot is not answered.
	NodeManagerAfterSnapshotInfo = registerIn("snapshot/nm-after-info", "snapshot", NodeManager,
		"node-manager: the snapshot is complete, its description written; nothing answered")
	// StopAfterSnapshot: the stop's disk snapshot is taken and
	// recorded; the execution still runs.
	StopAfterSnapshot = register("stop/after-snapshot", "stop",
		"control plane: the stop's disk snapshot is ready on its row; the execution still runs")
	// StopAfterRelease: the execution is stopped; the sandbox row still
	// says stopping.
	StopAfterRelease = register("stop/after-release", "stop",
		"control plane: the execution is stopped; the sandbox row still says stopping")
	// PauseAfterNode: the node froze the execution; the row still says
	// pausing.
	PauseAfterNode = register("pause/after-node", "pause",
		"control plane: the node froze the execution; the sandbox row still says pausing")
	// NodeManagerAfterFreeze: the node-manager froze the execution; the
	// pause is not answered.
	NodeManagerAfterFreeze = registerIn("pause/nm-after-freeze", "pause", NodeManager,
		"node-manager: the execution is frozen; the pause is not answered")
	// ResumeAfterNode: the node thawed the execution; the row still says
	// resuming.
	ResumeAfterNode = register("resume/after-node", "resume",
		"control plane: the node thawed the execution; the sandbox row still says resuming")
	// NodeManagerAfterThaw: the node-manager thawed the execution; the
	// resume is not answered.
	NodeManagerAfterThaw = registerIn("resume/nm-after-thaw", "resume", NodeManager,
		"node-manager: the execution is thawed; the resume is not answered")
	// HibernateAfterPart: the node stored one artifact of the snapshot
	// (arm it with @k to die after the k-th of n).
	HibernateAfterPart = register("hibernate/after-part", "hibernate",
		"node: k of the snapshot's n artifacts are stored (arm with @k); the others are not")
	// NodeManagerAfterExportFiles: the node-manager wrote the export's
	// artifact files; their description (export.json) is not written.
	NodeManagerAfterExportFiles = registerIn("hibernate/nm-after-export-files", "hibernate", NodeManager,
		"node-manager: the snapshot's artifact files are written; their description is not, nothing answered")
	// HibernateAfterParts: every artifact is stored; nothing records
	// them (the manifest is the snapshot row's artifact list).
	HibernateAfterParts = register("hibernate/after-parts", "hibernate",
		"control plane: every artifact is stored; not verified, no manifest recorded")
	// HibernateAfterManifest: the verified artifacts are recorded on the
	// snapshot's row; the execution still runs (paused) on its node.
	HibernateAfterManifest = register("hibernate/after-manifest", "hibernate",
		"control plane: artifacts verified and recorded on the snapshot row; the execution and the local snapshot remain")
	// HibernateAfterStop: the execution is stopped; the node's copy of
	// the snapshot remains.
	HibernateAfterStop = register("hibernate/after-stop", "hibernate",
		"control plane: the execution is stopped; the node's copy of the snapshot remains")
	// HibernateAfterLocalDelete: the node's copy is deleted; the
	// snapshot row still names the node.
	HibernateAfterLocalDelete = register("hibernate/after-local-delete", "hibernate",
		"control plane: the node's copy of the snapshot is deleted; its row still names the node")
	// NodeManagerAfterSnapshotVolumeDelete: the node-manager deleted a
	// snapshot's volume; its directory (and description) remains.
	NodeManagerAfterSnapshotVolumeDelete = registerIn("hibernate/nm-after-snapshot-volume-delete", "hibernate", NodeManager,
		"node-manager: a deleted snapshot's volume is gone; its directory is not removed, the delete not answered")
	// HibernateBeforeCommit: the snapshot row says object storage only;
	// the sandbox row still says hibernating on its node.
	HibernateBeforeCommit = register("hibernate/before-commit", "hibernate",
		"control plane: the snapshot row says object storage only; the sandbox row still says hibernating")
	// RestoreAfterDownload: the node rebuilt the snapshot from object
	// storage; the snapshot row does not say so.
	RestoreAfterDownload = register("restore/after-download", "restore",
		"control plane: the node rebuilt the snapshot from object storage; the snapshot row does not name it")
	// NodeManagerAfterImport: the node-manager rebuilt an imported
	// snapshot; its description is not written, its staging not removed.
	NodeManagerAfterImport = registerIn("restore/nm-after-import", "restore", NodeManager,
		"node-manager: an imported snapshot is rebuilt (its volume snapshot made); its description not written, the staged artifacts remain")
	// NodeManagerAfterSeal: the imported snapshot is described; its
	// staged artifacts remain, the import is not answered.
	NodeManagerAfterSeal = registerIn("restore/nm-after-seal", "restore", NodeManager,
		"node-manager: an imported snapshot is complete; the staged artifacts remain, the import not answered")
	// RestoreAfterNodeStart: the node runs the restored execution; the
	// sandbox row still says restoring (a restore after hibernate, a start
	// after stop and a rollback all pass it).
	RestoreAfterNodeStart = register("restore/after-node-start", "restore",
		"control plane: the node runs the restored execution (restore, start, rollback); the sandbox row still says restoring")
	// ForkAfterSnapshot: the fork's snapshot is taken and recorded; no
	// child is recorded.
	ForkAfterSnapshot = register("fork/after-snapshot", "fork",
		"control plane: the fork's snapshot is ready; the child sandbox is not recorded")
	// ForkAfterRecord: the child is recorded; not enqueued, not answered.
	ForkAfterRecord = register("fork/after-record", "fork",
		"control plane: the child sandbox row is recorded; not enqueued, not answered")
	// DeleteAfterSnapshots: the sandbox's snapshots (node copies, objects,
	// rows) are gone; its execution still runs.
	DeleteAfterSnapshots = register("delete/after-snapshots", "delete",
		"control plane: the sandbox's snapshots are deleted; its execution still runs, its row remains")
	// NodeManagerAfterKill: the node-manager killed the execution and
	// cleaned its runtime up; its root volume remains.
	NodeManagerAfterKill = registerIn("delete/nm-after-kill", "delete", NodeManager,
		"node-manager: the execution is killed and its runtime cleaned up; its root volume remains")
	// NodeManagerAfterRootDelete: the execution's root volume is deleted
	// too; the cleanup is not answered.
	NodeManagerAfterRootDelete = registerIn("delete/nm-after-root", "delete", NodeManager,
		"node-manager: the execution is killed and its root volume deleted; the cleanup not answered")
	// DeleteAfterStop: the execution is stopped; the sandbox row remains.
	DeleteAfterStop = register("delete/after-stop", "delete",
		"control plane: the execution is stopped and released; the sandbox row remains")

	// The node-manager's template build (Op template: POST /v1/templates
	// and a node materialising a template it lacks).

	// NodeManagerAfterBuild: the template's files are built; the
	// template is not sealed.
	NodeManagerAfterBuild = registerIn("template/nm-after-build", "template", NodeManager,
		"node-manager: a template's files are built in its volume; not sealed, nothing answered")
	// NodeManagerAfterTemplateSeal: the template is sealed; the build is
	// not answered.
	NodeManagerAfterTemplateSeal = registerIn("template/nm-after-seal", "template", NodeManager,
		"node-manager: a template is built and sealed; the build not answered")

	// The host bridge's steps (Process Bridge): every execution's start
	// passes the first two (a create, a start after stop, a restore), a
	// guest request the next ones.

	// BridgeAfterReady: the guest answered the bridge's Ready; no
	// identity is installed, the start not answered.
	BridgeAfterReady = registerIn("create/bridge-after-ready", "create", Bridge,
		"host bridge: the guest answered Ready; no identity installed, the node's start still waits")
	// BridgeAfterInit: the guest installed its identity; the bridge has
	// not admitted it nor answered the node's init.
	BridgeAfterInit = registerIn("create/bridge-after-init", "create", Bridge,
		"host bridge: the guest answered Init; the identity is not admitted by the bridge, the init not answered")
	// BridgeBeforeExec: a process request (exec) is admitted; nothing of
	// it reached the guest.
	BridgeBeforeExec = registerIn("exec/bridge-before-forward", "exec", Bridge,
		"host bridge: a process request is admitted; not forwarded to the guest")
	// BridgeAfterExec: a process request's whole answer (its end
	// included) is forwarded to the node.
	BridgeAfterExec = registerIn("exec/bridge-after-forward", "exec", Bridge,
		"host bridge: a process request's answer, its end included, is forwarded to the node")
	// BridgeBeforeFiles: a file transfer is admitted; nothing of it
	// reached the guest.
	BridgeBeforeFiles = registerIn("files/bridge-before-forward", "files", Bridge,
		"host bridge: a file transfer (/files) is admitted; not forwarded to the guest")
	// BridgeAfterFiles: a file transfer's answer is forwarded to the node.
	BridgeAfterFiles = registerIn("files/bridge-after-forward", "files", Bridge,
		"host bridge: a file transfer's answer is forwarded to the node")
	// BridgeAfterFreeze: the guest froze its root filesystem for a vm
	// disk snapshot; the bridge's thaw timer is set, the freeze not
	// answered.
	BridgeAfterFreeze = registerVM("snapshot/bridge-after-freeze", "snapshot", Bridge,
		"host bridge (vm): the guest's root filesystem is frozen for a disk snapshot; the freeze not answered")

	// The guest daemon's steps (Process Guest).

	// GuestAfterStart: the guest daemon is up; it serves nothing yet.
	GuestAfterStart = registerIn("create/guest-after-start", "create", Guest,
		"guest: the daemon started (PID 1 of an ns sandbox); the channel not served")
	// GuestAfterInit: the guest installed the identity Init gave it;
	// the Init is not answered.
	GuestAfterInit = registerIn("create/guest-after-init", "create", Guest,
		"guest: the identity, hostname, entropy and clock of Init are installed; Init not answered")
	// GuestAfterSpawn: an exec's process is started; its start is not
	// reported.
	GuestAfterSpawn = registerIn("exec/guest-after-spawn", "exec", Guest,
		"guest: an exec's process is started; its pid not reported")
	// GuestBeforeEnd: an exec's process ended; its end (exit status) is
	// not reported.
	GuestBeforeEnd = registerIn("exec/guest-before-end", "exec", Guest,
		"guest: an exec's process ended and its output was sent; its end (exit status) not reported")
	// GuestAfterWrite: an uploaded file is written; the upload not
	// answered.
	GuestAfterWrite = registerIn("files/guest-after-write", "files", Guest,
		"guest: an uploaded file is written; the upload not answered")
	// GuestAfterFreeze: the guest froze its root filesystem for a vm disk
	// snapshot; the freeze not answered (the filesystem stays frozen).
	GuestAfterFreeze = registerVM("snapshot/guest-after-freeze", "snapshot", Guest,
		"guest (vm): the root filesystem is frozen for a disk snapshot; the freeze not answered")
)
