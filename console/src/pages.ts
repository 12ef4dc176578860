// The deployment's pages beside the sandboxes: templates, credentials (their
// metadata: the API never answers a secret), the credential audit log, and
// for the admin key nodes with their warm pools and tenants with their keys
// and quotas. Each polls its list; a refusal shows as the server says it.
import * as api from "./api";
import { el, age } from "./dom";
import { quotaField, usedText } from "./forms";

const pollMs = 2000;

type Page = { node: HTMLElement; stop: () => void };
type ErrorText = (e: unknown) => string;
type Confirm = (what: string, items: string[], action?: string) => Promise<boolean>;

// table is a table with head cols whose body the caller fills.
function table(id: string, cols: string[]) {
  const body = el("tbody", { id });
  const node = el("div", { class: "table-wrap" }, el("table", {}, el("thead", {}, el("tr", {}, ...cols.map((h) => el("th", {}, h)))), body));
  return { node, body, cols: cols.length };
}

function fill(t: { body: HTMLElement; cols: number }, rows: HTMLElement[], empty: string) {
  t.body.replaceChildren(...rows);
  if (!rows.length) t.body.append(el("tr", {}, el("td", { colspan: String(t.cols), class: "empty" }, empty)));
}

// polled runs load now and every pollMs, its refusal in status.
function polled(title: string, status: HTMLElement, load: () => Promise<void>, errorText: ErrorText, ...body: Node[]): Page {
  const tick = async () => {
    try {
      await load();
      if (status.dataset.sticky !== "1") status.textContent = "";
    } catch (e) {
      status.textContent = errorText(e);
    }
  };
  void tick();
  const timer = setInterval(tick, pollMs);
  return { node: el("main", {}, el("h1", {}, title), ...body, status), stop: () => clearInterval(timer) };
}

function progressText(p?: api.Progress): string {
  if (!p) return "";
  const n = p.total ? `${p.done}/${p.total}` : String(p.done);
  return `${p.phase} ${n}${p.unit ? " " + p.unit : ""}${p.message ? ": " + p.message : ""}`;
}

// buildPollMs is how often the templates page reads while a build is under
// way: each new progress reading becomes a line of that build's log.
const buildPollMs = 1000;

function templatesPage(errorText: ErrorText): Page {
  const t = table("templates", ["name", "source", "state", "progress", "bytes", "created"]);
  const status = el("p", { class: "error", id: "templates-status", role: "alert" });
  const name = el("input", { id: "build-name", size: "16", placeholder: "name" });
  const from = el("input", { id: "build-from", size: "40", placeholder: "docker.io/library/python:3.12, dir:/srv/rootfs, ./Dockerfile" });
  const buildErr = el("span", { class: "error", id: "build-error", role: "alert" });
  const form = el("form", { id: "build", class: "row" }, el("label", {}, "build ", name), el("label", {}, "from ", from), el("button", { type: "submit" }, "Build template"), buildErr);
  // The build log: per template seen building, each progress reading the
  // server reported, in order, as it came (the REST API has no stream of a
  // build: the page reads the list every buildPollMs while one builds).
  const logs = el("div", { id: "build-logs" });
  const seen = new Map<string, { list: HTMLOListElement; last: string }>();
  const logLine = (x: api.TemplateInfo) => {
    const line = progressText(x.progress) || x.state;
    let l = seen.get(x.name);
    if (!l) {
      if (x.state !== "building") return;
      const list = el("ol", { class: "build-log", "data-name": x.name });
      logs.append(el("section", {}, el("h2", {}, "Build of ", el("code", {}, x.name)), list));
      l = { list, last: "" };
      seen.set(x.name, l);
    }
    const text = x.state === "building" ? line : x.state + (x.reason ? " (" + x.reason + ")" : "") + (x.progress ? ": " + line : "");
    if (text === l.last) return;
    l.last = text;
    l.list.append(el("li", { "data-state": x.state }, el("time", {}, new Date().toLocaleTimeString()), " ", text));
  };
  let fast: ReturnType<typeof setInterval> | null = null;
  // pending is the template this page started building: once it is no
  // longer building, the "building" line beside the form gives way to its
  // outcome (nothing when ready: the table and the log say it).
  let pending = "";
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    if (!name.value.trim() || !from.value.trim()) {
      buildErr.textContent = "a template needs a name and a source to build from";
      return;
    }
    buildErr.textContent = "starting…";
    try {
      // The answer is the template building: its log starts with it.
      logLine(await api.buildTemplate(name.value.trim(), from.value.trim()));
      pending = name.value.trim();
      buildErr.textContent = "building: its progress shows in the table and its log below";
      void load();
    } catch (e) {
      buildErr.textContent = errorText(e);
    }
  });
  const load = async () => {
    const ts = await api.listTemplateInfo();
    for (const x of ts) logLine(x);
    const mine = pending ? ts.find((x) => x.name === pending) : undefined;
    if (mine && mine.state !== "building") {
      buildErr.textContent = mine.state === "ready" ? "" : mine.name + ": " + mine.state + (mine.reason ? " (" + mine.reason + ")" : "");
      pending = "";
    }
    const building = ts.some((x) => x.state === "building");
    if (building && !fast) fast = setInterval(() => void load().catch((e) => (status.textContent = errorText(e))), buildPollMs);
    if (!building && fast) {
      clearInterval(fast);
      fast = null;
    }
    fill(
      t,
      ts.map((x) =>
        el(
          "tr",
          { "data-name": x.name },
          el("td", {}, x.name),
          el("td", {}, el("code", {}, x.source)),
          el("td", { class: "state state-" + x.state }, x.state + (x.reason ? " (" + x.reason + ")" : "")),
          el("td", { class: "progress" }, progressText(x.progress)),
          el("td", { class: "num" }, String(x.size_bytes)),
          el("td", { title: x.created_at }, age(x.created_at) + " ago"),
        ),
      ),
      "no templates",
    );
  };
  const p = polled("Templates", status, load, errorText, form, t.node, logs);
  return {
    node: p.node,
    stop: () => {
      p.stop();
      if (fast) clearInterval(fast);
    },
  };
}

function nodesPage(errorText: ErrorText, confirm: Confirm): Page {
  const t = table("nodes", ["id", "state", "live", "runtimes", "capacity", "committed", "used", "sandboxes", "warm pool", ""]);
  const status = el("p", { class: "error", id: "nodes-status", role: "alert" });
  const load = async () => {
    const [nodes, sbs] = await Promise.all([api.listNodes(), api.listSandboxes()]);
    fill(
      t,
      nodes.map((n) => {
        // Committed: what the sandboxes placed on the node were given.
        const on = sbs.filter((s) => s.node === n.id && !["stopped", "hibernated", "deleted", "failed"].includes(s.state));
        const cpus = on.reduce((a, s) => a + s.cpus, 0);
        const mem = on.reduce((a, s) => a + s.memory_mib, 0);
        const op = n.state === "draining" ? "undrain" : "drain";
        const b = el("button", { type: "button", "data-op": op, class: op === "drain" ? "danger" : "" }, op === "drain" ? "Drain" : "Undrain");
        b.addEventListener("click", async () => {
          const what = op === "drain" ? "Drain this node? Its sandboxes move away and nothing new is placed on it." : "Undrain this node? New sandboxes may be placed on it again.";
          if (!(await confirm(what, [n.id], op === "drain" ? "Drain" : "Undrain"))) return;
          try {
            await api.setNodeState(n.id, op);
            status.dataset.sticky = "";
            await load();
          } catch (e) {
            status.dataset.sticky = "1";
            status.textContent = errorText(e);
          }
        });
        const pools = (n.warm_pool ?? []).map((w) => `${w.template}/${w.runtime} ${w.cpus}c ${w.memory_mib}MiB: ${w.ready} ready, ${w.filling} filling, ${w.hits} hits, ${w.misses} misses`);
        return el(
          "tr",
          { "data-id": n.id },
          el("td", {}, el("code", {}, n.id)),
          el("td", { class: "state state-" + n.state }, n.state),
          el("td", {}, n.live ? "yes" : "no (last " + age(n.last_heartbeat) + " ago)"),
          el("td", {}, n.runtimes.join(", ")),
          el("td", { class: "capacity" }, `${n.cpus} CPU, ${n.memory_mib} MiB`),
          el("td", { class: "committed" }, `${cpus} CPU, ${mem} MiB`),
          // Used: the node's own measure of its memory (MemTotal minus
          // MemAvailable, from its heartbeats), beside what was committed.
          el("td", { class: "used" + (n.memory_pressure ? " error" : ""), title: n.memory_pressure ?? "" }, usedText(n) + (n.memory_pressure ? " (pressure)" : "")),
          el("td", { class: "num" }, String(n.sandboxes)),
          el("td", { class: "pools" }, ...pools.map((p) => el("div", {}, p))),
          el("td", {}, b),
        );
      }),
      "no nodes",
    );
  };
  return polled("Nodes and warm pools", status, load, errorText, t.node);
}

function credentialsPage(errorText: ErrorText): Page {
  const t = table("credentials", ["id", "name", "scope", "injection", "allowed hosts", "expires", "rate limit", "created"]);
  const status = el("p", { class: "error", id: "credentials-status", role: "alert" });
  const load = async () => {
    const cs = await api.listCredentials();
    fill(
      t,
      cs.map((c) =>
        el(
          "tr",
          { "data-id": c.id },
          el("td", {}, el("code", {}, c.id)),
          el("td", {}, c.name),
          el("td", {}, ["tenant " + c.scope.tenant, c.scope.project ? "project " + c.scope.project : "", c.scope.sandbox ? "sandbox " + c.scope.sandbox : ""].filter(Boolean).join(", ")),
          el("td", {}, c.injection.method + (c.injection.name ? " " + c.injection.name : "")),
          el("td", {}, c.allowed_hosts.join(", ")),
          el("td", {}, c.expires_at ?? "never"),
          el("td", { class: "num" }, c.rate_limit ? String(c.rate_limit) : ""),
          el("td", { title: c.created_at }, age(c.created_at) + " ago"),
        ),
      ),
      "no credentials",
    );
  };
  return polled("Credentials", status, load, errorText, el("p", { class: "hint" }, "Metadata only: a secret is write-only, the API never answers it."), t.node);
}

function auditPage(errorText: ErrorText): Page {
  const t = table("audit", ["time", "tenant", "sandbox", "host", "credential", "allowed", "reason", "count"]);
  const status = el("p", { class: "error", id: "audit-status", role: "alert" });
  const load = async () => {
    const es = await api.listAudit();
    fill(
      t,
      es
        .slice()
        .reverse()
        .map((e) =>
          el(
            "tr",
            { class: e.allowed ? "" : "refused" },
            el("td", {}, e.time),
            el("td", {}, e.tenant),
            el("td", {}, e.sandbox ?? ""),
            el("td", {}, e.host),
            el("td", {}, e.credential_id ?? ""),
            el("td", {}, e.allowed ? "yes" : "no"),
            el("td", {}, e.reason),
            el("td", { class: "num" }, e.count ? String(e.count) : ""),
          ),
        ),
      "no audit entries",
    );
  };
  return polled("Audit log (credentials)", status, load, errorText, t.node);
}

function tenantsPage(errorText: ErrorText, confirm: Confirm): Page {
  const t = table("tenants", ["id", "name", "sandboxes", "CPUs", "memory MiB", "created", ""]);
  const keys = table("keys", ["id", "tenant", "prefix", "admin", "created", "revoked", ""]);
  const keysOf = el("span", { id: "keys-of" });
  const status = el("p", { class: "error", id: "tenants-status", role: "alert" });
  const used = (u: number, max: number) => `${u} of ${max > 0 ? max : "unlimited"}`;
  let current: api.Tenant | null = null;

  // The quota editor of the tenant picked with its Quota button: empty or
  // 0 is unlimited; the form checks whole numbers, the server the rest,
  // and its refusal is shown as it says it.
  const qName = el("span", { id: "quota-of" });
  const qField = (id: string) => el("input", { id, inputmode: "numeric", size: "8", placeholder: "unlimited" });
  const qSandboxes = qField("quota-sandboxes"), qCPUs = qField("quota-cpus"), qMemory = qField("quota-memory");
  const qStatus = el("span", { class: "error", id: "quota-status", role: "alert" });
  const quotaForm = el(
    "form",
    { id: "quota", class: "row", hidden: "" },
    el("b", {}, "Quota of ", qName),
    el("label", {}, "sandboxes ", qSandboxes),
    el("label", {}, "CPUs ", qCPUs),
    el("label", {}, "memory MiB ", qMemory),
    el("button", { type: "submit", id: "quota-save" }, "Save quota"),
    qStatus,
  );
  let quotaTenant = "";
  const editQuota = (x: api.Tenant) => {
    quotaTenant = x.id;
    qName.textContent = x.name;
    const v = (n: number) => (n > 0 ? String(n) : "");
    qSandboxes.value = v(x.quota.max_sandboxes);
    qCPUs.value = v(x.quota.max_cpus);
    qMemory.value = v(x.quota.max_memory_mib);
    qStatus.textContent = "";
    quotaForm.hidden = false;
  };
  quotaForm.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    let q: api.Tenant["quota"];
    try {
      q = { max_sandboxes: quotaField("sandboxes", qSandboxes.value), max_cpus: quotaField("CPUs", qCPUs.value), max_memory_mib: quotaField("memory MiB", qMemory.value) };
    } catch (e) {
      qStatus.textContent = (e as Error).message;
      return;
    }
    qStatus.textContent = "saving…";
    try {
      const saved = await api.setQuota(quotaTenant, q);
      editQuota(saved);
      qStatus.textContent = "saved";
      await load();
    } catch (e) {
      qStatus.textContent = errorText(e);
    }
  });

  // A new key's secret is shown here once, as the API answers it once;
  // it is not kept anywhere by the console.
  const secretBox = el("p", { id: "key-secret", hidden: "" });
  const newKey = el("button", { type: "button", id: "key-create", disabled: "" }, "Create key");
  const keyStatus = el("span", { class: "error", id: "key-status", role: "alert" });
  newKey.addEventListener("click", async () => {
    if (!current) return;
    keyStatus.textContent = "";
    try {
      const made = await api.createKey(current.id);
      secretBox.replaceChildren("New key ", el("code", {}, made.key.id), " of ", current.name, ": ", el("code", { id: "key-secret-value" }, made.secret), " — copy it now: it is shown once and never again.");
      secretBox.hidden = false;
      await showKeys(current);
    } catch (e) {
      keyStatus.textContent = errorText(e);
    }
  });
  const showKeys = async (tenant: api.Tenant) => {
    if (current?.id !== tenant.id) {
      secretBox.hidden = true;
      secretBox.replaceChildren();
    }
    current = tenant;
    keysOf.textContent = tenant.name;
    newKey.removeAttribute("disabled");
    try {
      const ks = await api.listKeysOf(tenant.id);
      fill(
        keys,
        ks.map((k) => {
          const revoke = el("button", { type: "button", class: "danger revoke" }, "Revoke");
          revoke.addEventListener("click", async () => {
            if (!(await confirm("Revoke this key? Every client using it is refused from then on.", [k.id + " (" + k.prefix + "…)"], "Revoke"))) return;
            keyStatus.textContent = "";
            try {
              await api.revokeKey(k.id);
              await showKeys(tenant);
            } catch (e) {
              keyStatus.textContent = errorText(e);
            }
          });
          return el(
            "tr",
            { "data-id": k.id },
            el("td", {}, el("code", {}, k.id)),
            el("td", {}, k.tenant),
            el("td", {}, el("code", {}, k.prefix)),
            el("td", {}, k.admin ? "admin" : ""),
            el("td", {}, k.created_at),
            el("td", { class: "revoked" }, k.revoked_at ?? ""),
            el("td", {}, k.revoked_at ? "" : revoke),
          );
        }),
        "no keys",
      );
    } catch (e) {
      status.textContent = errorText(e);
    }
  };
  const load = async () => {
    const ts = await api.listTenants();
    fill(
      t,
      ts.map((x) => {
        const b = el("button", { type: "button", class: "keys" }, "Keys");
        b.addEventListener("click", () => void showKeys(x));
        const qb = el("button", { type: "button", class: "quota" }, "Quota");
        qb.addEventListener("click", () => editQuota(x));
        return el(
          "tr",
          { "data-id": x.id },
          el("td", {}, el("code", {}, x.id)),
          el("td", {}, x.name),
          el("td", { class: "quota-sandboxes" }, used(x.usage.sandboxes, x.quota.max_sandboxes)),
          el("td", { class: "quota-cpus" }, used(x.usage.cpus, x.quota.max_cpus)),
          el("td", { class: "quota-memory" }, used(x.usage.memory_mib, x.quota.max_memory_mib)),
          el("td", { title: x.created_at }, age(x.created_at) + " ago"),
          el("td", { class: "row" }, qb, b),
        );
      }),
      "no tenants",
    );
  };
  return polled(
    "Tenants, keys and quotas",
    status,
    load,
    errorText,
    el("p", { class: "hint" }, "Usage of quota: used of the most allowed."),
    t.node,
    quotaForm,
    el("h2", {}, "Keys of ", keysOf),
    el("div", { class: "row" }, newKey, keyStatus),
    secretBox,
    keys.node,
  );
}

export const adminPages: Record<string, (errorText: ErrorText, confirm: Confirm) => Page> = {
  "#/templates": templatesPage,
  "#/credentials": credentialsPage,
  "#/audit": auditPage,
  "#/nodes": nodesPage,
  "#/tenants": tenantsPage,
};
