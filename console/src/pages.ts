// The deployment's pages beside the sandboxes: templates, credentials (their
// metadata: the API never answers a secret), the credential audit log, and
// for the admin key nodes with their warm pools and tenants with their keys
// and quotas. Each polls its list; a refusal shows as the server says it.
import * as api from "./api";
import { el, age } from "./dom";

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

function templatesPage(errorText: ErrorText): Page {
  const t = table("templates", ["name", "source", "state", "progress", "bytes", "created"]);
  const status = el("p", { class: "error", id: "templates-status", role: "alert" });
  const name = el("input", { id: "build-name", size: "16", placeholder: "name" });
  const from = el("input", { id: "build-from", size: "40", placeholder: "docker.io/library/python:3.12, dir:/srv/rootfs, ./Dockerfile" });
  const buildErr = el("span", { class: "error", id: "build-error", role: "alert" });
  const form = el("form", { id: "build", class: "row" }, el("label", {}, "build ", name), el("label", {}, "from ", from), el("button", { type: "submit" }, "Build template"), buildErr);
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    if (!name.value.trim() || !from.value.trim()) {
      buildErr.textContent = "a template needs a name and a source to build from";
      return;
    }
    buildErr.textContent = "starting…";
    try {
      await api.buildTemplate(name.value.trim(), from.value.trim());
      buildErr.textContent = "building: its progress shows in the table";
      void load();
    } catch (e) {
      buildErr.textContent = errorText(e);
    }
  });
  const load = async () => {
    const ts = await api.listTemplateInfo();
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
  return polled("Templates", status, load, errorText, form, t.node);
}

function nodesPage(errorText: ErrorText, confirm: Confirm): Page {
  const t = table("nodes", ["id", "state", "live", "runtimes", "capacity", "committed", "sandboxes", "warm pool", ""]);
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

function tenantsPage(errorText: ErrorText): Page {
  const t = table("tenants", ["id", "name", "sandboxes", "CPUs", "memory MiB", "created", ""]);
  const keys = table("keys", ["id", "tenant", "prefix", "admin", "created", "revoked"]);
  const keysOf = el("span", { id: "keys-of" });
  const status = el("p", { class: "error", id: "tenants-status", role: "alert" });
  const used = (u: number, max: number) => `${u} of ${max > 0 ? max : "unlimited"}`;
  const showKeys = async (tenant: api.Tenant) => {
    keysOf.textContent = tenant.name;
    try {
      const ks = await api.call<{ keys: api.APIKey[] }>("GET", "/v1/keys?tenant=" + encodeURIComponent(tenant.id)).then((r) => r.keys ?? []);
      fill(
        keys,
        ks.map((k) =>
          el("tr", { "data-id": k.id }, el("td", {}, el("code", {}, k.id)), el("td", {}, k.tenant), el("td", {}, el("code", {}, k.prefix)), el("td", {}, k.admin ? "admin" : ""), el("td", {}, k.created_at), el("td", {}, k.revoked_at ?? "")),
        ),
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
        return el(
          "tr",
          { "data-id": x.id },
          el("td", {}, el("code", {}, x.id)),
          el("td", {}, x.name),
          el("td", { class: "quota-sandboxes" }, used(x.usage.sandboxes, x.quota.max_sandboxes)),
          el("td", {}, used(x.usage.cpus, x.quota.max_cpus)),
          el("td", {}, used(x.usage.memory_mib, x.quota.max_memory_mib)),
          el("td", { title: x.created_at }, age(x.created_at) + " ago"),
          el("td", {}, b),
        );
      }),
      "no tenants",
    );
  };
  return polled("Tenants, keys and quotas", status, load, errorText, el("p", { class: "hint" }, "Usage of quota: used of the most allowed."), t.node, el("h2", {}, "Keys of ", keysOf), keys.node);
}

export const adminPages: Record<string, (errorText: ErrorText, confirm: Confirm) => Page> = {
  "#/templates": templatesPage,
  "#/credentials": credentialsPage,
  "#/audit": auditPage,
  "#/nodes": nodesPage,
  "#/tenants": tenantsPage,
};
