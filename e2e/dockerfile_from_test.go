package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDockerfileFromImage builds on ns from a Dockerfile whose FROM is an
// OCI layout in the context (FROM oci:layout#e2e:1), with a RUN, a COPY and
// ADDs of a gzip tar (extracted) and of a file named like one that is not
// (copied): a sandbox sees the image's files and the steps'. A second build
// reuses the import (and the step cache); a changed layout is imported
// again; FROM docker-archive:image.tar#e2e:1 builds too; a registry ref and
// a hostile archive are refused, the latter with its line.
func TestDockerfileFromImage(t *testing.T) {
	in := startServer(t, newDataDir(t))
	defer in.stop()
	dir := t.TempDir()
	writeOCILayout(t, filepath.Join(dir, "layout"))
	writeDockerArchive(t, filepath.Join(dir, "image.tar"))
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	tw := tar.NewWriter(zw)
	tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: "app/", Mode: 0o755})
	tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "app/hello", Mode: 0o644, Size: 15})
	tw.Write([]byte("from the tar.gz"))
	tw.Close()
	zw.Close()
	var evil bytes.Buffer
	tw = tar.NewWriter(&evil)
	tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "../../escape", Mode: 0o644, Size: 1})
	tw.Write([]byte("x"))
	tw.Close()
	files := map[string]string{
		"added.txt":    "copied\n",
		"app.tar.gz":   gz.String(),
		"notes.tar.gz": "not an archive\n",
		"evil.tar":     evil.String(),
		// The image's busybox has no mkdir/chmod/chown links, which COPY
		// needs: the first RUN installs them.
		"Dockerfile": "FROM oci:layout#e2e:1\nRUN /bin/busybox --install -s /bin && cat /etc/msg > /etc/seen\n" +
			"COPY added.txt /etc/added\nADD app.tar.gz /opt/\nADD notes.tar.gz /opt/\n",
		"Dockerfile.archive":  "FROM docker-archive:image.tar#e2e:1\nRUN /bin/busybox --install -s /bin && cat /etc/msg > /etc/seen2\n",
		"Dockerfile.registry": "FROM debian:12\nRUN true\n",
		"Dockerfile.evil":     "FROM minimal\nADD evil.tar /x/\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	build := func(name, df string) (string, int) {
		t.Helper()
		_, stderr, code := in.cli("", "template", "build", name, "--dockerfile", filepath.Join(dir, df), "--context", dir, "--build-runtime", "ns")
		return stderr, code
	}
	log, code := build("dfimg1", "Dockerfile")
	if code != 0 || !strings.Contains(log, "base: importing oci:"+filepath.Join(dir, "layout")+"#e2e:1 as template dfimg-") {
		t.Fatalf("build FROM oci:layout: exit %d, want the import logged\n%s\n%s", code, log, in.logs())
	}
	sb := in.createWith("dfimg1", "ns")
	res := in.exec(sb.ID, "cat", "/etc/msg", "/etc/seen", "/etc/added", "/opt/app/hello", "/opt/notes.tar.gz")
	if res.Stdout != "from the image\nfrom the image\ncopied\nfrom the tar.gznot an archive\n" {
		t.Errorf("files in a sandbox from the template: %+v", res)
	}
	in.delete(sb.ID)

	log, code = build("dfimg2", "Dockerfile")
	if code != 0 || !strings.Contains(log, "imported already as template dfimg-") || !strings.Contains(log, "step 4/4: cached: ADD notes.tar.gz /opt/") {
		t.Errorf("second build: exit %d, want the import and the steps reused\n%s", code, log)
	}
	// A changed image is imported again, not served from the stale import.
	ix := filepath.Join(dir, "layout", "index.json")
	b, _ := os.ReadFile(ix)
	os.WriteFile(ix, append(b, '\n'), 0o644)
	log, code = build("dfimg3", "Dockerfile")
	if code != 0 || !strings.Contains(log, "base: importing") || strings.Contains(log, "cached:") {
		t.Errorf("build after the layout changed: exit %d, want a new import and no cached step\n%s", code, log)
	}

	if log, code = build("dfarc", "Dockerfile.archive"); code != 0 || !strings.Contains(log, "base: importing docker-archive:"+filepath.Join(dir, "image.tar")+"#e2e:1") {
		t.Errorf("build FROM docker-archive:image.tar: exit %d, want the import logged\n%s", code, log)
	} else {
		sb := in.createWith("dfarc", "ns")
		if res := in.exec(sb.ID, "cat", "/etc/seen2"); res.Stdout != "from the image\n" {
			t.Errorf("/etc/seen2 in a sandbox from the docker-archive build: %+v", res)
		}
		in.delete(sb.ID)
	}
	if log, code = build("dfreg", "Dockerfile.registry"); code == 0 || !strings.Contains(log, "pulls from no registry") {
		t.Errorf("FROM debian:12: exit %d, want refused\n%s", code, log)
	}
	if log, code = build("dfevil", "Dockerfile.evil"); code == 0 || !strings.Contains(log, "line 2: ADD evil.tar") {
		t.Errorf("ADD of a hostile tar: exit %d, want refused with line 2\n%s", code, log)
	}
	in.cli("", "template", "cache", "prune")
}
