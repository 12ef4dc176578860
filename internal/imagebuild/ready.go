package imagebuild

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"time"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"

	"github.com/spacesandbox/space/internal/template/dockerfile"
	"github.com/spacesandbox/space/internal/template/imagecfg"
)

// readyCheck starts the image's start command in build sandbox id, in the
// background with the build's environment, working directory and user,
// then runs job.Ready through /bin/sh -c once a second until it exits 0 or
// job.ReadyTimeout passes. The start command's output goes to
// /tmp/space-start.log in the sandbox; a failed check shows its tail.
func readyCheck(ctx context.Context, b Backend, id string, job Job, st *buildState, cfgJSON []byte) error {
	var cfg imagecfg.Config
	if err := json.Unmarshal(cfgJSON, &cfg); err != nil {
		return fmt.Errorf("ready check: image config: %w", err)
	}
	timeout := job.ReadyTimeout
	if timeout <= 0 {
		timeout = DefaultReadyTimeout
	}
	as := st.runStart(dockerfile.Instruction{Cmd: "RUN", Args: []string{"true"}})
	env, user := as.Env, as.User
	if argv := cfg.StartCommand(); len(argv) > 0 {
		quoted := ""
		for _, a := range argv {
			quoted += " " + shQuote(a)
		}
		start := sandboxv1.ExecStart{
			// In its own session where setsid exists, so that the end of
			// this exec does not end it.
			Cmd: []string{"/bin/sh", "-c", "S=; command -v setsid >/dev/null 2>&1 && S=setsid; $S" + quoted + " >/tmp/space-start.log 2>&1 </dev/null &"},
			Env: env, Cwd: st.workdir, User: user,
		}
		tail := &tailWriter{max: 2048}
		code, err := b.Exec(ctx, id, start, tail, tail)
		if err != nil {
			return fmt.Errorf("ready check: start command: %w", err)
		}
		if code != 0 {
			return fmt.Errorf("ready check: start command: exit code %d: %s", code, printable(tail.String()))
		}
	}
	secs := strconv.Itoa(int(timeout.Round(time.Second) / time.Second))
	loop := `end=$(( $(date +%s) + ` + secs + ` ))
until /bin/sh -c "$SPACE_READY_CMD"; do
	if [ "$(date +%s)" -ge "$end" ]; then
		echo "ready command did not exit 0 within ` + secs + `s; the start command's output:" >&2
		tail -c 2048 /tmp/space-start.log >&2 2>/dev/null
		exit 124
	fi
	sleep 1
done`
	checkEnv := map[string]string{"SPACE_READY_CMD": job.Ready}
	for k, v := range env {
		checkEnv[k] = v
	}
	tail := &tailWriter{max: 4096}
	w := io.MultiWriter(job.Log, tail)
	cctx, cancel := context.WithTimeout(ctx, timeout+time.Minute)
	defer cancel()
	code, err := b.Exec(cctx, id, sandboxv1.ExecStart{Cmd: []string{"/bin/sh", "-c", loop}, Env: checkEnv, Cwd: st.workdir, User: user}, w, w)
	if err != nil {
		return fmt.Errorf("ready check %s: %w", printable(job.Ready), err)
	}
	if code != 0 {
		return fmt.Errorf("ready check %s: exit code %d; its last output:\n%s", printable(job.Ready), code, tail.String())
	}
	return nil
}
