// Pure helpers of the console's forms and file browser (unit-tested in
// forms.test.mjs).

// parseEnv reads the create form's environment: one KEY=VALUE a line, blank
// lines skipped. A line without "=" or with an empty key is an error that
// names the line.
export function parseEnv(text: string): Record<string, string> {
  const env: Record<string, string> = {};
  text.split("\n").forEach((raw, i) => {
    const line = raw.replace(/\r$/, "");
    if (line.trim() === "") return;
    const eq = line.indexOf("=");
    if (eq <= 0) throw new Error(`env line ${i + 1} ${JSON.stringify(line)}: want KEY=VALUE`);
    env[line.slice(0, eq).trim()] = line.slice(eq + 1);
  });
  return env;
}

// positiveInt reads a number field: empty is undefined (the server's
// default); anything but a whole number ≥ 1 is an error naming the field.
export function positiveInt(field: string, v: string): number | undefined {
  const s = v.trim();
  if (s === "") return undefined;
  if (!/^[0-9]+$/.test(s) || Number(s) < 1) throw new Error(`${field} ${JSON.stringify(s)}: want a whole number of at least 1`);
  return Number(s);
}

// joinPath is dir/name for a sandbox path.
export function joinPath(dir: string, name: string): string {
  return (dir.endsWith("/") ? dir : dir + "/") + name;
}

// parentPath is the directory holding path ("/" for "/" itself).
export function parentPath(path: string): string {
  const p = path.replace(/\/+$/, "");
  const i = p.lastIndexOf("/");
  return i <= 0 ? "/" : p.slice(0, i);
}

// filterSandboxes keeps the sandboxes in state (all when empty) whose id,
// name, template, runtime, node or a metadata value contains search
// (case-insensitive).
export function filterSandboxes<T extends { id: string; name?: string; state: string; template: string; runtime: string; node: string; metadata?: Record<string, string> }>(
  list: T[],
  state: string,
  search: string,
): T[] {
  const s = search.trim().toLowerCase();
  return list.filter((sb) => {
    if (state && sb.state !== state) return false;
    if (!s) return true;
    const fields = [sb.id, sb.name ?? "", sb.template, sb.runtime, sb.node, ...Object.values(sb.metadata ?? {})];
    return fields.some((f) => f.toLowerCase().includes(s));
  });
}

// maxView is the largest file the browser opens as text; a larger one is
// offered for download.
export const maxView = 1 << 20;

// asText decodes a file's bytes as UTF-8, or null when they are not text
// (invalid UTF-8 or a NUL byte).
export function asText(bytes: Uint8Array): string | null {
  if (bytes.includes(0)) return null;
  try {
    return new TextDecoder("utf-8", { fatal: true }).decode(bytes);
  } catch {
    return null;
  }
}

// egressList reads one egress rule list of the editor: entries separated by
// commas, spaces or lines, each checked by its kind (the server checks
// again, host bits and all); a bad one is an error naming the field and it.
export function egressList(field: string, kind: "domain" | "cidr" | "port", text: string): string[] | undefined {
  const items = text
    .split(/[\s,]+/)
    .map((s) => s.trim())
    .filter((s) => s !== "");
  for (const it of items) {
    let ok = false;
    if (kind === "domain") ok = /^(\*\.)?[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*$/.test(it);
    if (kind === "cidr") ok = /^[0-9a-fA-F.:]+(\/[0-9]{1,3})?$/.test(it) && (it.includes(".") || it.includes(":"));
    if (kind === "port") {
      const m = /^([0-9]{1,5})(-([0-9]{1,5}))?$/.exec(it);
      ok = m !== null && +m[1] >= 1 && +m[1] <= 65535 && (m[3] === undefined || (+m[3] >= +m[1] && +m[3] <= 65535));
    }
    if (!ok) {
      const want = { domain: "a lowercase name or *.name", cidr: "an IP address or prefix (10.0.0.0/8)", port: "a port 1-65535 or a range 8000-8100" }[kind];
      throw new Error(`${field} ${JSON.stringify(it)}: want ${want}`);
    }
  }
  return items.length ? items : undefined;
}

// usageText is a metrics sample as the table shows it: CPU percent of the
// sandbox's CPUs and memory used of its total, in MiB.
export function usageText(m: { cpu_used_pct: number; mem_used_bytes: number; mem_total_bytes: number } | undefined): string {
  if (!m) return "";
  return `${m.cpu_used_pct.toFixed(1)}% · ${mib(m.mem_used_bytes)}/${mib(m.mem_total_bytes)} MiB`;
}

// diskText is a sample's disk: used of the root volume's limit, in MiB, or
// that the node does not account it (the server leaves the fields out).
export function diskText(m: { disk_used_bytes?: number; disk_total_bytes?: number } | undefined): string {
  if (!m) return "";
  if (m.disk_used_bytes === undefined || !m.disk_total_bytes) return "disk not accounted on its node";
  return `disk ${mib(m.disk_used_bytes)}/${mib(m.disk_total_bytes)} MiB`;
}

const mib = (b: number) => Math.round(b / (1 << 20));

// chartPoints maps samples (t, v) to an SVG polyline's points in a w×h box,
// time across the samples' span and v from 0 to max (at least the largest
// value): "x,y x,y …", y growing downwards as SVG's does; one sample is a
// level line.
export function chartPoints(samples: [number, number][], w: number, h: number, max: number): string {
  if (!samples.length) return "";
  // One sample is a level line across the box.
  if (samples.length === 1) samples = [samples[0], [samples[0][0] + 1, samples[0][1]]];
  const t0 = samples[0][0];
  const span = Math.max(1, samples[samples.length - 1][0] - t0);
  const top = Math.max(max, ...samples.map((s) => s[1]), 1e-9);
  return samples.map(([t, v]) => `${(((t - t0) / span) * w).toFixed(1)},${(h - (v / top) * h).toFixed(1)}`).join(" ");
}

// quotaField reads one limit of the quota editor: empty or 0 is unlimited,
// else a whole number (the server checks the largest it takes).
export function quotaField(name: string, text: string): number {
  const t = text.trim();
  if (t === "") return 0;
  if (!/^[0-9]+$/.test(t)) throw new Error(`${name} ${JSON.stringify(t)}: want a whole number, 0 or empty for unlimited`);
  return Number(t);
}

// usedText is a node's measured memory as the nodes page shows it: used of
// its total, or that the node does not report it (-1 from the API).
export function usedText(n: { used_mib: number; memory_total_mib: number; memory_measured: boolean }): string {
  if (!n.memory_measured || n.used_mib < 0) return "not measured";
  return `${n.used_mib} of ${n.memory_total_mib} MiB`;
}
