package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestDockerfileFromImage builds on ns from a Dockerfile whose FROM is an
// OCI layout in the context (FROM oci:layout#e2e:1), with a RUN, a COPY and
// ADDs of a gzip tar (extracted) and of a file named like one that is not
// (copied): a sandbox sees the image's files and the steps'. A second build
// reuses the import (and the step cache); a changed layout is imported
// again; FROM docker-archive:image.tar#e2e:1 builds too; a registry ref and
// a hostile archive are refused, the latter with its line. ADD keeps the
// archive's owners and modes. `space template gc` keeps the imports cache
// holders use and deletes them once no sandbox does, and nothing else.
func TestDockerfileFromImage(t *testing.T) {
	in := startServer(t, newDataDir(t))
	defer in.stop()
	dir := t.TempDir()
	writeOCILayout(t, filepath.Join(dir, "layout"))
	writeDockerArchive(t, filepath.Join(dir, "image.tar"))
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	tw := tar.NewWriter(zw)
	// Owners and modes as docker build keeps them: the archive's.
	tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: "app/", Mode: 0o750, Uid: 1000, Gid: 1001})
	tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "app/hello", Mode: 0o4711, Size: 15, Uid: 1000, Gid: 50})
	tw.Write([]byte("from the tar.gz"))
	tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: "app/cur", Linkname: "hello", Uid: 7, Gid: 8})
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
	res = in.exec(sb.ID, "stat", "-c", "%n %u:%g %a", "/opt/app", "/opt/app/hello", "/etc/added")
	if res.Stdout != "/opt/app 1000:1001 750\n/opt/app/hello 1000:50 4711\n/etc/added 0:0 644\n" {
		t.Errorf("owners and modes: ADD keeps the archive's, COPY gives root: %+v", res)
	}
	if res = in.exec(sb.ID, "stat", "-c", "%u:%g", "/opt/app/cur"); res.Stdout != "7:8\n" {
		t.Errorf("owner of the ADDed symlink: %+v, want the archive's 7:8", res)
	}
	in.delete(sb.ID)
	in.waitGone(sb.ID)

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
		in.waitGone(sb.ID)
	}
	if log, code = build("dfreg", "Dockerfile.registry"); code == 0 || !strings.Contains(log, "pulls from no registry") {
		t.Errorf("FROM debian:12: exit %d, want refused\n%s", code, log)
	}
	if log, code = build("dfevil", "Dockerfile.evil"); code == 0 || !strings.Contains(log, "line 2: ADD evil.tar") {
		t.Errorf("ADD of a hostile tar: exit %d, want refused with line 2\n%s", code, log)
	}

	// Imports are collected once no sandbox uses them: the cache holders
	// use the layouts' and the archive's imports, so none goes.
	templates := func() (imports, others []string) {
		t.Helper()
		var list struct{ Templates []struct{ Name string } }
		if c := in.do("GET", "/v1/templates", nil, &list); c != http.StatusOK {
			t.Fatalf("list templates: HTTP %d", c)
		}
		for _, tpl := range list.Templates {
			if strings.HasPrefix(tpl.Name, "dfimg-") {
				imports = append(imports, tpl.Name)
			} else {
				others = append(others, tpl.Name)
			}
		}
		return imports, others
	}
	imports := func() []string { i, _ := templates(); return i }
	_, othersBefore := templates()
	before := imports()
	if len(before) != 3 {
		t.Fatalf("imports %v, want 3: the layout, the changed layout, the archive", before)
	}
	_, log, code = in.cli("", "template", "gc", "--older-than", "1ns")
	if code != 0 || !strings.Contains(log, "0 import(s) deleted, 3 in use kept") {
		t.Errorf("template gc with every import in use: exit %d, want all 3 kept\n%s", code, log)
	}
	if _, e, c := in.cli("", "template", "cache", "prune"); c != 0 {
		t.Fatalf("template cache prune: exit %d: %s", c, e)
	}
	for _, id := range in.wantOnlyHolders() {
		in.waitGone(id)
	}
	if _, log, code = in.cli("", "template", "gc"); code != 0 || !strings.Contains(log, "0 import(s) deleted, 0 in use kept") {
		t.Errorf("template gc of imports younger than its default 168h: exit %d, want none touched\n%s", code, log)
	}
	_, log, code = in.cli("", "template", "gc", "--older-than", "1ns")
	if code != 0 || !strings.Contains(log, "3 import(s) deleted, 0 in use kept") || len(imports()) != 0 {
		t.Errorf("template gc with no holder left: exit %d, want the 3 imports deleted (left %v)\n%s", code, imports(), log)
	}
	if _, others := templates(); !slices.Equal(others, othersBefore) || !slices.Contains(others, "dfimg1") {
		t.Errorf("templates other than imports after template gc: %v, want them all kept: %v", others, othersBefore)
	}
	// A build after the collection imports the image again.
	if log, code = build("dfimg4", "Dockerfile.archive"); code != 0 || !strings.Contains(log, "base: importing docker-archive:") {
		t.Errorf("build after template gc: exit %d, want the image imported again\n%s", code, log)
	}
	in.cli("", "template", "cache", "prune")
}
