// Unit tests of src/forms.ts, run by `make build` before the bundle is made
// (node's test runner; esbuild turns the TypeScript into a module here).
import { test } from "node:test";
import assert from "node:assert/strict";
import * as esbuild from "esbuild";

const out = await esbuild.build({ entryPoints: ["src/forms.ts"], bundle: true, format: "esm", write: false, logLevel: "warning" });
const f = await import("data:text/javascript;base64," + Buffer.from(out.outputFiles[0].text).toString("base64"));

test("parseEnv reads KEY=VALUE lines and names a bad line", () => {
  assert.deepEqual(f.parseEnv("A=1\n\nB=x=y\r\nC="), { A: "1", B: "x=y", C: "" });
  assert.deepEqual(f.parseEnv(""), {});
  assert.throws(() => f.parseEnv("A=1\nNOEQUALS"), /env line 2 "NOEQUALS": want KEY=VALUE/);
  assert.throws(() => f.parseEnv("=v"), /env line 1/);
});

test("positiveInt: empty is the server's default, else a whole number ≥ 1", () => {
  assert.equal(f.positiveInt("CPUs", " "), undefined);
  assert.equal(f.positiveInt("CPUs", "2"), 2);
  for (const bad of ["0", "-1", "1.5", "2x", "1e3"]) assert.throws(() => f.positiveInt("CPUs", bad), /CPUs .*want a whole number/);
});

test("joinPath and parentPath", () => {
  assert.equal(f.joinPath("/", "a"), "/a");
  assert.equal(f.joinPath("/home/user", "a b"), "/home/user/a b");
  assert.equal(f.joinPath("/home/", "a"), "/home/a");
  assert.equal(f.parentPath("/"), "/");
  assert.equal(f.parentPath("/home"), "/");
  assert.equal(f.parentPath("/home/user/"), "/home");
  assert.equal(f.parentPath("/a/b/c"), "/a/b");
});

test("filterSandboxes by state and by a search of id, name, template and metadata", () => {
  const list = [
    { id: "aaa111", name: "web", state: "running", template: "base", runtime: "ns", node: "n1", metadata: { owner: "Alice" } },
    { id: "bbb222", state: "stopped", template: "minimal", runtime: "vm", node: "n2" },
  ];
  const ids = (l) => l.map((s) => s.id);
  assert.deepEqual(ids(f.filterSandboxes(list, "", "")), ["aaa111", "bbb222"]);
  assert.deepEqual(ids(f.filterSandboxes(list, "stopped", "")), ["bbb222"]);
  assert.deepEqual(ids(f.filterSandboxes(list, "", "alice")), ["aaa111"]);
  assert.deepEqual(ids(f.filterSandboxes(list, "", "MINI")), ["bbb222"]);
  assert.deepEqual(ids(f.filterSandboxes(list, "running", "bbb")), []);
});

test("asText: UTF-8 is text; invalid UTF-8 or a NUL byte is not", () => {
  assert.equal(f.asText(new TextEncoder().encode("héllo <b>\n")), "héllo <b>\n");
  assert.equal(f.asText(new Uint8Array([0x68, 0, 0x69])), null);
  assert.equal(f.asText(new Uint8Array([0xff, 0xfe])), null);
});

test("egressList splits on commas, spaces and lines and names a bad entry", () => {
  assert.deepEqual(f.egressList("allow domains", "domain", "example.com, *.pypi.org\n  files.io"), ["example.com", "*.pypi.org", "files.io"]);
  assert.equal(f.egressList("allow domains", "domain", "  \n"), undefined);
  assert.deepEqual(f.egressList("deny CIDRs", "cidr", "10.0.0.0/8 fd00::/8 1.2.3.4"), ["10.0.0.0/8", "fd00::/8", "1.2.3.4"]);
  assert.deepEqual(f.egressList("allow ports", "port", "443,8000-8100"), ["443", "8000-8100"]);
  assert.throws(() => f.egressList("allow domains", "domain", "Example.COM"), /allow domains "Example.COM": want a lowercase name/);
  assert.throws(() => f.egressList("allow domains", "domain", "a..b"), /"a..b"/);
  assert.throws(() => f.egressList("deny CIDRs", "cidr", "example.com"), /deny CIDRs "example.com": want an IP/);
  assert.throws(() => f.egressList("allow ports", "port", "0"), /allow ports "0"/);
  assert.throws(() => f.egressList("allow ports", "port", "9000-8000"), /"9000-8000"/);
  assert.throws(() => f.egressList("allow ports", "port", "70000"), /"70000"/);
});

test("usageText and chartPoints", () => {
  assert.equal(f.usageText(undefined), "");
  assert.equal(f.usageText({ cpu_used_pct: 12.345, mem_used_bytes: 50 << 20, mem_total_bytes: 256 << 20 }), "12.3% · 50/256 MiB");
  assert.equal(f.diskText(undefined), "");
  assert.equal(f.diskText({}), "disk not accounted on its node");
  assert.equal(f.diskText({ disk_used_bytes: 10 << 20, disk_total_bytes: 2048 * 2 ** 20 }), "disk 10/2048 MiB");
  assert.equal(f.chartPoints([], 100, 50, 100), "");
  assert.equal(f.chartPoints([[10, 0], [20, 50], [30, 100]], 100, 50, 100), "0.0,50.0 50.0,25.0 100.0,0.0");
  // A value above max raises the top; one sample is a level line.
  assert.equal(f.chartPoints([[5, 200]], 100, 50, 100), "0.0,0.0 100.0,0.0");
  assert.equal(f.chartPoints([[5, 25]], 100, 50, 100), "0.0,37.5 100.0,37.5");
});

test("quotaField and usedText", () => {
  assert.equal(f.quotaField("max CPUs", ""), 0);
  assert.equal(f.quotaField("max CPUs", " 12 "), 12);
  assert.throws(() => f.quotaField("max CPUs", "-1"), /max CPUs "-1": want a whole number/);
  assert.throws(() => f.quotaField("max CPUs", "1.5"), /want a whole number/);
  assert.equal(f.usedText({ used_mib: 900, memory_total_mib: 4096, memory_measured: true }), "900 of 4096 MiB");
  assert.equal(f.usedText({ used_mib: -1, memory_total_mib: -1, memory_measured: false }), "not measured");
});
