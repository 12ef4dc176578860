import "@xterm/xterm/css/xterm.css";
import "./style.css";
import * as api from "./api";
import { el, age } from "./dom";
import { openTerminal } from "./terminal";
import { adminPages } from "./pages";
import { asText, chartPoints, diskText, egressList, filterSandboxes, usageText, joinPath, maxView, parentPath, parseEnv, positiveInt } from "./forms";

// The sandboxes table polls every pollMs: one GET /v1/sandboxes per open
// console per period (docs/console.md gives its cost).
const pollMs = 2000;
// A sandbox's page reads its snapshots, ports and events every sideEvery
// polls (and after each move).
const sideEvery = 3;
// The table reads CPU and memory of at most usageMax running sandboxes.
const usageMax = 20;

const root = document.getElementById("app")!;
let stop: (() => void) | null = null;

function show(...nodes: Node[]) {
  if (stop) {
    stop();
    stop = null;
  }
  root.replaceChildren(...nodes);
}

// isAdmin is whether the signed-in key is the admin key: GET /v1/nodes,
// admin-only, answers it (the server decides; the console only hides the
// admin pages it would refuse).
let isAdmin: Promise<boolean> | null = null;
function adminKey(): Promise<boolean> {
  if (!isAdmin)
    isAdmin = api.listNodes().then(
      () => true,
      () => false,
    );
  return isAdmin;
}

const pages: [string, string, boolean][] = [
  ["#/", "Sandboxes", false],
  ["#/templates", "Templates", false],
  ["#/credentials", "Credentials", false],
  ["#/audit", "Audit log", false],
  ["#/nodes", "Nodes", true],
  ["#/tenants", "Tenants", true],
];

function header(): HTMLElement {
  const out = el("button", { type: "button", id: "signout" }, "Sign out");
  out.addEventListener("click", () => {
    api.clearKey();
    isAdmin = null;
    // One sign-in form: a change of the hash routes by its hashchange,
    // after this returns; routing here too would draw a second one over
    // a key being typed into the first.
    if (location.hash === "" || location.hash === "#") route();
    else location.hash = "";
  });
  const nav = el("nav", { id: "nav" });
  for (const [href, label, admin] of pages) {
    const a = el("a", { href, "data-page": label.toLowerCase() }, label);
    if (admin) {
      a.hidden = true;
      void adminKey().then((yes) => (a.hidden = !yes));
    }
    nav.append(a);
  }
  return el("header", {}, el("a", { href: "#/", class: "brand" }, "SPACE console"), nav, out);
}

function errorText(e: unknown): string {
  if (e instanceof api.APIError) return e.code + ": " + e.message;
  return String(e);
}

function signIn(message = "") {
  const input = el("input", { type: "password", id: "key", autocomplete: "off", placeholder: "space_k-…", size: "60" });
  const err = el("p", { class: "error", id: "signin-error", role: "alert" }, message);
  const form = el(
    "form",
    { id: "signin" },
    el("h1", {}, "Sign in to SPACE"),
    el("label", { for: "key" }, "API key"),
    input,
    el("button", { type: "submit" }, "Sign in"),
    err,
    el("p", { class: "hint" }, "The key stays in this tab's session storage and goes to the server as the Authorization header."),
  );
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const k = input.value.trim();
    if (!k) {
      err.textContent = "enter an API key";
      return;
    }
    try {
      await api.call("GET", "/v1/sandboxes", undefined, k);
      api.setKey(k);
      isAdmin = null;
      route();
    } catch (e) {
      err.textContent = errorText(e);
    }
  });
  show(form);
  input.focus();
}

// confirmDelete asks, in the page's own dialog (no window.confirm), before
// something is deleted or undone; it resolves true on the yes button
// (labelled yes), false on Cancel or Escape.
function confirmDelete(what: string, items: string[], action = "Delete"): Promise<boolean> {
  const list = el("ul", { id: "confirm-items" }, ...items.map((i) => el("li", {}, el("code", {}, i))));
  const yes = el("button", { type: "button", class: "danger", id: "confirm-yes" }, action);
  const no = el("button", { type: "button", id: "confirm-no" }, "Cancel");
  const dlg = el("dialog", { id: "confirm" }, el("p", { id: "confirm-text" }, what), list, el("div", { class: "row" }, yes, no));
  document.body.append(dlg);
  dlg.showModal();
  return new Promise((resolve) => {
    const done = (ok: boolean) => {
      dlg.close();
      dlg.remove();
      resolve(ok);
    };
    yes.addEventListener("click", () => done(true));
    no.addEventListener("click", () => done(false));
    dlg.addEventListener("cancel", () => done(false));
  });
}

const states = ["running", "paused", "stopped", "hibernated", "starting", "failed", "deleting"];

function createForm(): HTMLFormElement {
  const template = el("select", { id: "create-template" });
  const runtime = el("select", { id: "create-runtime" }, el("option", { value: "" }, "server default"), el("option", { value: "ns" }, "ns"), el("option", { value: "vm" }, "vm"));
  const cpus = el("input", { id: "create-cpus", inputmode: "numeric", size: "3", placeholder: "1" });
  const memory = el("input", { id: "create-memory", inputmode: "numeric", size: "6", placeholder: "512" });
  const timeout = el("input", { id: "create-timeout", size: "6", placeholder: "30m" });
  const env = el("textarea", { id: "create-env", rows: "2", cols: "30", placeholder: "KEY=VALUE, one a line" });
  const createErr = el("span", { class: "error", id: "create-error", role: "alert" });
  const form = el(
    "form",
    { id: "create" },
    el("label", {}, "template ", template),
    el("label", {}, "runtime ", runtime),
    el("label", {}, "CPUs ", cpus),
    el("label", {}, "memory MiB ", memory),
    el("label", {}, "timeout ", timeout),
    el("label", {}, "env ", env),
    el("button", { type: "submit" }, "Create sandbox"),
    createErr,
  );
  api.listTemplates().then(
    (ts) => {
      for (const t of ts) if (t.state === "ready") template.append(el("option", { value: t.name }, t.name));
      if (!template.options.length) template.append(el("option", { value: "" }, "server default"));
    },
    (e) => (createErr.textContent = errorText(e)),
  );
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    let req: api.CreateRequest;
    try {
      const e = parseEnv(env.value);
      req = {
        template: template.value || undefined,
        runtime: runtime.value || undefined,
        cpus: positiveInt("CPUs", cpus.value),
        memory_mib: positiveInt("memory MiB", memory.value),
        timeout: timeout.value.trim() || undefined,
        env: Object.keys(e).length ? e : undefined,
      };
    } catch (e) {
      createErr.textContent = (e as Error).message;
      return;
    }
    createErr.textContent = "creating…";
    try {
      const sb = await api.createSandbox(req);
      // The new sandbox's page, its terminal focused once it runs.
      location.hash = "#/sandbox/" + encodeURIComponent(sb.id) + "/terminal";
    } catch (e) {
      createErr.textContent = errorText(e);
    }
  });
  return form;
}

function sandboxesPage() {
  const status = el("p", { class: "status", id: "list-status" });
  const body = el("tbody", { id: "sandboxes" });
  const all = el("input", { type: "checkbox", id: "select-all", "aria-label": "select all shown" });
  const table = el(
    "table",
    { id: "sandboxes-table" },
    el("thead", {}, el("tr", {}, el("th", {}, all), ...["id", "name", "state", "template", "runtime", "node", "CPU · memory", "age", ""].map((h) => el("th", {}, h)))),
    body,
  );
  const search = el("input", { id: "filter-search", type: "search", placeholder: "search id, name, template, metadata" });
  const stateSel = el("select", { id: "filter-state" }, el("option", { value: "" }, "all states"), ...states.map((s) => el("option", { value: s }, s)));
  const bulk = el("button", { type: "button", class: "danger", id: "bulk-delete", disabled: "" }, "Delete selected");
  const filters = el("div", { id: "filters", class: "row" }, search, stateSel, bulk);
  const selected = new Set<string>();
  let failures = "";
  let last: api.Sandbox[] = [];
  let shown: api.Sandbox[] = [];
  // usage is each running sandbox's latest metrics sample, read every
  // sideEvery polls for the first usageMax running sandboxes shown.
  const usage = new Map<string, api.Metric>();
  let ticks = 0;
  const readUsage = async () => {
    const since = Math.floor(Date.now() / 1000) - 1;
    const running = shown.filter((sb) => sb.state === "running").slice(0, usageMax);
    await Promise.all(
      running.map((sb) =>
        api.metrics(sb.id, since).then(
          (ms) => {
            if (ms.length) usage.set(sb.id, ms[ms.length - 1]);
          },
          () => usage.delete(sb.id),
        ),
      ),
    );
    render();
  };

  const deleteAll = async (ids: string[]) => {
    const failed: string[] = [];
    for (const id of ids) {
      try {
        await api.deleteSandbox(id);
        selected.delete(id);
      } catch (e) {
        failed.push(id + ": " + errorText(e));
      }
    }
    failures = failed.join("\n");
    status.textContent = failures;
    status.classList.toggle("error", failures !== "");
    void tick();
  };
  bulk.addEventListener("click", async () => {
    const ids = shown.map((sb) => sb.id).filter((id) => selected.has(id));
    if (ids.length && (await confirmDelete(`Delete ${ids.length} sandbox${ids.length > 1 ? "es" : ""}?`, ids))) await deleteAll(ids);
  });
  all.addEventListener("change", () => {
    for (const sb of shown) {
      if (all.checked) selected.add(sb.id);
      else selected.delete(sb.id);
    }
    render();
  });
  search.addEventListener("input", () => render());
  stateSel.addEventListener("change", () => render());

  const render = () => {
    const now = Date.now();
    shown = filterSandboxes(last, stateSel.value, search.value);
    const picked = shown.filter((sb) => selected.has(sb.id)).length;
    bulk.textContent = picked ? `Delete selected (${picked})` : "Delete selected";
    bulk.toggleAttribute("disabled", picked === 0);
    all.checked = picked > 0 && picked === shown.length;
    body.replaceChildren(
      ...shown.map((sb) => {
        const pick = el("input", { type: "checkbox", class: "pick", "aria-label": "select " + sb.id });
        pick.checked = selected.has(sb.id);
        pick.addEventListener("change", () => {
          if (pick.checked) selected.add(sb.id);
          else selected.delete(sb.id);
          render();
        });
        const del = el("button", { type: "button", class: "danger" }, "Delete");
        del.addEventListener("click", async () => {
          if (await confirmDelete("Delete this sandbox?", [sb.id + (sb.name ? " (" + sb.name + ")" : "")])) await deleteAll([sb.id]);
        });
        return el(
          "tr",
          { "data-id": sb.id },
          el("td", {}, pick),
          el("td", {}, el("a", { href: "#/sandbox/" + encodeURIComponent(sb.id) }, sb.id)),
          el("td", {}, sb.name ?? ""),
          el("td", { class: "state state-" + sb.state }, sb.state),
          el("td", {}, sb.template),
          el("td", {}, sb.runtime),
          el("td", {}, sb.node),
          el("td", { class: "usage" }, sb.state === "running" ? usageText(usage.get(sb.id)) : ""),
          el("td", { title: sb.created_at }, age(sb.created_at, now)),
          el("td", {}, del),
        );
      }),
    );
    if (!shown.length) body.append(el("tr", {}, el("td", { colspan: "10", class: "empty" }, last.length ? "no sandbox matches" : "no sandboxes")));
  };
  const tick = async () => {
    try {
      last = await api.listSandboxes();
      render();
      if (ticks++ % sideEvery === 0) void readUsage();
      // A failed delete's refusal stays until the next delete.
      status.textContent = failures || "updated " + new Date().toLocaleTimeString();
    } catch (e) {
      if (e instanceof api.APIError && e.status === 401) return signIn(errorText(e));
      status.textContent = errorText(e);
    }
  };
  show(header(), el("main", {}, el("h1", {}, "Sandboxes"), createForm(), filters, el("div", { class: "table-wrap" }, table), status));
  void tick();
  const timer = setInterval(tick, pollMs);
  stop = () => clearInterval(timer);
}

// fileBrowser is a sandbox's files: a directory's listing, text files
// opened as text, upload into the directory, download of a file.
function fileBrowser(id: string) {
  let dir = "/";
  const path = el("input", { id: "files-path", size: "40", value: dir, "aria-label": "directory" });
  const up = el("button", { type: "button", id: "files-up" }, "Up");
  const go = el("button", { type: "submit" }, "List");
  const upload = el("input", { type: "file", id: "files-upload", "aria-label": "upload into this directory" });
  const status = el("p", { class: "error", id: "files-status", role: "alert" });
  const body = el("tbody", { id: "files" });
  const viewName = el("span", { id: "file-view-name" });
  const view = el("pre", { id: "file-view" });
  const nav = el("form", { class: "row" }, path, go, up, el("label", {}, "upload ", upload));

  const list = async (to: string) => {
    status.textContent = "";
    try {
      const entries = await api.listFiles(id, to);
      dir = to;
      path.value = to;
      entries.sort((a, b) => (a.type === "dir" ? 0 : 1) - (b.type === "dir" ? 0 : 1) || a.name.localeCompare(b.name));
      body.replaceChildren(
        ...entries.map((f) => {
          const name = el("button", { type: "button", class: "link", "data-type": f.type }, f.name + (f.type === "dir" ? "/" : ""));
          name.addEventListener("click", () => (f.type === "dir" ? void list(f.path) : void open(f)));
          const cells = [el("td", {}, name), el("td", {}, f.type + (f.symlink_target ? " → " + f.symlink_target : "")), el("td", { class: "num" }, f.type === "dir" ? "" : String(f.size)), el("td", {}, f.modified_at)];
          const dl = el("td", {});
          if (f.type === "file") {
            const b = el("button", { type: "button", class: "download" }, "Download");
            b.addEventListener("click", () => void download(f));
            dl.append(b);
          }
          return el("tr", { "data-name": f.name }, ...cells, dl);
        }),
      );
      if (!entries.length) body.append(el("tr", {}, el("td", { colspan: "5", class: "empty" }, "empty directory")));
    } catch (e) {
      status.textContent = errorText(e);
    }
  };
  const open = async (f: api.FileEntry) => {
    status.textContent = "";
    viewName.textContent = f.path;
    if (f.size > maxView) {
      view.textContent = `${f.size} bytes: too large to show here (over ${maxView}); download it`;
      return;
    }
    try {
      const bytes = new Uint8Array(await (await api.readFile(id, f.path)).arrayBuffer());
      const text = asText(bytes);
      view.textContent = text ?? `binary file (${bytes.length} bytes): download it`;
    } catch (e) {
      status.textContent = errorText(e);
    }
  };
  // download streams the file into a Blob, which the browser keeps in its
  // blob store (Chromium pages large ones to disk), not in script memory,
  // and saves it under its name.
  const download = async (f: api.FileEntry) => {
    status.textContent = "";
    try {
      const blob = await (await api.readFile(id, f.path)).blob();
      const href = URL.createObjectURL(blob);
      const a = el("a", { href, download: f.name });
      document.body.append(a);
      a.click();
      a.remove();
      setTimeout(() => URL.revokeObjectURL(href), 60000);
    } catch (e) {
      status.textContent = errorText(e);
    }
  };
  nav.addEventListener("submit", (ev) => {
    ev.preventDefault();
    void list(path.value.trim() || "/");
  });
  up.addEventListener("click", () => void list(parentPath(dir)));
  upload.addEventListener("change", async () => {
    const file = upload.files?.[0];
    if (!file) return;
    status.textContent = "uploading " + file.name + "…";
    try {
      await api.uploadFile(id, joinPath(dir, file.name), file);
      status.textContent = "";
      upload.value = "";
      await list(dir);
    } catch (e) {
      status.textContent = errorText(e);
    }
  });
  const node = el(
    "section",
    { id: "files-section" },
    el("h2", {}, "Files"),
    nav,
    status,
    el("div", { class: "table-wrap" }, el("table", {}, el("thead", {}, el("tr", {}, ...["name", "type", "bytes", "modified", ""].map((h) => el("th", {}, h)))), body)),
    el("h3", {}, "Open: ", viewName),
    view,
  );
  return { node, list: () => list(dir) };
}

// snapshotsPanel lists the sandbox's snapshots with take, fork, rollback
// and delete; each refusal shown as the server says it.
function snapshotsPanel(id: string, changed: () => void) {
  const body = el("tbody", { id: "snapshots" });
  const kind = el("select", { id: "snap-kind" }, el("option", { value: "" }, "default kind"), el("option", { value: "disk" }, "disk"), el("option", { value: "full" }, "full"));
  const take = el("button", { type: "button", id: "snap-create" }, "Take snapshot");
  const status = el("p", { class: "error", id: "snap-refusal", role: "alert" });
  const run = async (what: () => Promise<unknown>) => {
    status.textContent = "";
    try {
      await what();
    } catch (e) {
      status.textContent = errorText(e);
    }
    await refresh();
    changed();
  };
  take.addEventListener("click", () =>
    void run(() => api.call("POST", "/v1/sandboxes/" + encodeURIComponent(id) + "/snapshots", kind.value ? { kind: kind.value } : {})),
  );
  const refresh = async () => {
    try {
      const snaps = await api.listSnapshots(id);
      body.replaceChildren(
        ...snaps.map((s) => {
          const btn = (op: string, label: string, f: () => Promise<unknown>, cls = "") => {
            const b = el("button", { type: "button", "data-op": op, class: cls }, label);
            b.addEventListener("click", () => void f());
            return b;
          };
          const fork = btn("fork", "Fork", () =>
            run(async () => {
              const child = await api.fork(id, s.id);
              location.hash = "#/sandbox/" + encodeURIComponent(child.id);
            }),
          );
          const rollback = btn("rollback", "Roll back", async () => {
            if (await confirmDelete("Roll back? The sandbox's files go back to this snapshot; what changed since is lost.", [s.id], "Roll back"))
              await run(() => api.rollback(id, s.id));
          });
          const del = btn(
            "delete",
            "Delete",
            async () => {
              if (await confirmDelete("Delete this snapshot?", [s.id])) await run(() => api.deleteSnapshot(id, s.id));
            },
            "danger",
          );
          return el(
            "tr",
            { "data-id": s.id },
            el("td", {}, el("code", {}, s.id)),
            el("td", {}, s.kind),
            el("td", {}, s.tier),
            el("td", { class: "state state-" + s.state }, s.state + (s.reason ? " (" + s.reason + ")" : "")),
            el("td", { class: "num" }, s.size_bytes ? String(s.size_bytes) : ""),
            el("td", { title: s.created_at }, age(s.created_at) + " ago"),
            el("td", { class: "row" }, fork, rollback, del),
          );
        }),
      );
      if (!snaps.length) body.append(el("tr", {}, el("td", { colspan: "7", class: "empty" }, "no snapshots")));
    } catch (e) {
      status.textContent = errorText(e);
    }
  };
  const node = el(
    "section",
    { id: "snapshots-section" },
    el("h2", {}, "Snapshots"),
    el("div", { class: "row" }, kind, take),
    status,
    el("div", { class: "table-wrap" }, el("table", {}, el("thead", {}, el("tr", {}, ...["id", "kind", "tier", "state", "bytes", "taken", ""].map((h) => el("th", {}, h)))), body)),
  );
  return { node, refresh };
}

// egressPanel shows the sandbox's egress policy and edits it: the form
// checks each entry before it is sent, the server's refusal is shown as it
// says it, and a saved policy is read back from the server.
function egressPanel(id: string) {
  const internet = el("input", { type: "checkbox", id: "egress-internet" });
  const area = (fid: string, ph: string) => el("textarea", { id: fid, rows: "2", cols: "28", placeholder: ph });
  const fields = {
    allowDomains: area("egress-allow-domains", "example.com, *.pypi.org"),
    allowCIDRs: area("egress-allow-cidrs", "10.1.0.0/16"),
    allowPorts: area("egress-allow-ports", "443, 8000-8100"),
    denyDomains: area("egress-deny-domains", "evil.example"),
    denyCIDRs: area("egress-deny-cidrs", "169.254.0.0/16"),
  };
  const status = el("p", { class: "error", id: "egress-status", role: "alert" });
  const fill = (p: api.EgressPolicy) => {
    internet.checked = p.allow_internet;
    fields.allowDomains.value = (p.allow?.domains ?? []).join("\n");
    fields.allowCIDRs.value = (p.allow?.cidrs ?? []).join("\n");
    fields.allowPorts.value = (p.allow?.ports ?? []).join("\n");
    fields.denyDomains.value = (p.deny?.domains ?? []).join("\n");
    fields.denyCIDRs.value = (p.deny?.cidrs ?? []).join("\n");
  };
  const form = el(
    "form",
    { id: "egress" },
    el("label", {}, internet, " allow the internet (what no rule decides)"),
    el("label", {}, "allow domains ", fields.allowDomains),
    el("label", {}, "allow CIDRs ", fields.allowCIDRs),
    el("label", {}, "allow ports only ", fields.allowPorts),
    el("label", {}, "deny domains ", fields.denyDomains),
    el("label", {}, "deny CIDRs ", fields.denyCIDRs),
    el("button", { type: "submit", id: "egress-save" }, "Save policy"),
  );
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    let p: api.EgressPolicy;
    try {
      const rules = (r: api.EgressRules) => (r.domains || r.cidrs || r.ports ? r : undefined);
      p = {
        allow_internet: internet.checked,
        allow: rules({
          domains: egressList("allow domains", "domain", fields.allowDomains.value),
          cidrs: egressList("allow CIDRs", "cidr", fields.allowCIDRs.value),
          ports: egressList("allow ports", "port", fields.allowPorts.value),
        }),
        deny: rules({ domains: egressList("deny domains", "domain", fields.denyDomains.value), cidrs: egressList("deny CIDRs", "cidr", fields.denyCIDRs.value) }),
      };
    } catch (e) {
      status.textContent = (e as Error).message;
      return;
    }
    status.textContent = "saving…";
    try {
      await api.setEgress(id, p);
      fill(await api.getEgress(id));
      status.textContent = "saved";
    } catch (e) {
      status.textContent = errorText(e);
    }
  });
  const load = async () => {
    try {
      fill(await api.getEgress(id));
    } catch (e) {
      status.textContent = errorText(e);
    }
  };
  return { node: el("section", { id: "egress-section" }, el("h2", {}, "Egress policy"), form, status), load };
}

// processesPanel lists what the guest daemon started in the sandbox (GET
// /v1/sandboxes/{id}/processes) while it runs.
function processesPanel(id: string) {
  const body = el("tbody", { id: "processes" });
  const status = el("p", { class: "error", id: "processes-status", role: "alert" });
  const refresh = async (state: string) => {
    status.textContent = "";
    if (state !== "running") {
      body.replaceChildren(el("tr", {}, el("td", { colspan: "4", class: "empty" }, "sandbox " + state + ": no processes run")));
      return;
    }
    try {
      const list = await api.listProcesses(id);
      body.replaceChildren(
        ...list.map((p) => el("tr", { "data-pid": String(p.pid) }, el("td", { class: "num" }, String(p.pid)), el("td", {}, el("code", {}, [p.cmd, ...p.args].join(" "))), el("td", {}, p.cwd ?? ""), el("td", {}, p.tag ?? ""))),
      );
      if (!list.length) body.append(el("tr", {}, el("td", { colspan: "4", class: "empty" }, "no processes")));
    } catch (e) {
      status.textContent = errorText(e);
    }
  };
  const node = el(
    "section",
    { id: "processes-section" },
    el("h2", {}, "Processes"),
    status,
    el("div", { class: "table-wrap" }, el("table", {}, el("thead", {}, el("tr", {}, ...["pid", "command", "cwd", "tag"].map((h) => el("th", {}, h)))), body)),
  );
  return { node, refresh };
}

// usagePanel is a sandbox's CPU, memory and disk: the latest sample as text
// and a chart over its whole life (every sample the server kept), drawn as
// SVG (points and labels set as attributes and text, never markup).
function usagePanel(id: string) {
  const svgNS = "http://www.w3.org/2000/svg";
  const w = 600, h = 120;
  const svg = document.createElementNS(svgNS, "svg");
  svg.setAttribute("id", "usage-chart");
  svg.setAttribute("viewBox", `0 0 ${w} ${h}`);
  svg.setAttribute("role", "img");
  const title = document.createElementNS(svgNS, "title");
  const line = (cls: string, colour: string) => {
    const l = document.createElementNS(svgNS, "polyline");
    l.setAttribute("class", cls);
    l.setAttribute("fill", "none");
    l.setAttribute("stroke", colour);
    l.setAttribute("stroke-width", "2");
    return l;
  };
  const cpu = line("cpu", "#1a4fd6");
  const mem = line("mem", "#0a7d32");
  const disk = line("disk", "#b35c00");
  const frame = document.createElementNS(svgNS, "rect");
  for (const [k, v] of [["x", "0"], ["y", "0"], ["width", String(w)], ["height", String(h)], ["fill", "#fff"], ["stroke", "#e3e5ea"]]) frame.setAttribute(k, v);
  svg.append(title, frame, cpu, mem, disk);
  const now = el("p", { id: "usage-now" });
  const life = el("p", { id: "usage-life", class: "hint" });
  const refresh = async (state: string) => {
    try {
      // The whole life: a stopped or paused sandbox keeps its chart.
      const ms = await api.metrics(id);
      const last = ms[ms.length - 1];
      if (state !== "running") now.textContent = "sandbox " + state + ": no use now";
      else now.textContent = last ? "now: " + usageText(last) + (last.cpu_count ? ` (${last.cpu_count} CPU)` : "") + ", " + diskText(last) : "no samples yet";
      const t = (m: api.Metric) => Date.parse(m.time) / 1000;
      cpu.setAttribute("points", chartPoints(ms.map((m) => [t(m), m.cpu_used_pct]), w, h, 100));
      mem.setAttribute("points", chartPoints(ms.map((m) => [t(m), m.mem_total_bytes ? (100 * m.mem_used_bytes) / m.mem_total_bytes : 0]), w, h, 100));
      const withDisk = ms.filter((m) => m.disk_total_bytes);
      disk.setAttribute("points", withDisk.length === ms.length ? chartPoints(ms.map((m) => [t(m), (100 * (m.disk_used_bytes ?? 0)) / (m.disk_total_bytes ?? 1)]), w, h, 100) : "");
      const since = ms.length ? ms[0].time : "";
      life.textContent = ms.length ? `${ms.length} samples from ${since} to ${last.time}` : "";
      life.dataset.samples = String(ms.length);
      title.textContent = "CPU % (blue), memory % of total (green) and disk % of its limit (orange) over the sandbox's life: " + ms.length + " samples";
    } catch (e) {
      now.textContent = errorText(e);
    }
  };
  const node = el(
    "section",
    { id: "usage-section" },
    el("h2", {}, "CPU, memory and disk"),
    now,
    svg,
    life,
    el("p", { class: "hint" }, "blue: CPU % of its CPUs; green: memory % of its total; orange: disk % of its limit (when its node accounts it); 0 to 100 % bottom to top, over the sandbox's life"),
  );
  return { node, refresh };
}

function sandboxPage(id: string, focusTerminal: boolean) {
  const record = el("dl", { id: "record" });
  const buttons = el("div", { id: "lifecycle" });
  const refusal = el("p", { class: "error", id: "refusal", role: "alert" });
  const termStatus = el("span", { id: "term-status" });
  const reconnect = el("button", { type: "button", id: "term-reconnect" }, "Reconnect");
  const termHost = el("div", { id: "terminal" });
  const ports = el("tbody", { id: "ports" });
  const events = el("ol", { id: "events" });
  const files = fileBrowser(id);
  const egress = egressPanel(id);
  const procs = processesPanel(id);
  const usage = usagePanel(id);
  let closeTerm: (() => void) | null = null;
  let lastState = "";
  let lastGeneration: number | undefined;
  let ticks = 0;

  // The terminal runs while the sandbox does: a pause keeps it (its shell
  // is frozen with the sandbox), a stop or hibernate closes it, and when the
  // sandbox runs again without a live shell a new one is opened.
  let termLive = false;
  const openTerm = () => {
    if (closeTerm) closeTerm();
    termHost.replaceChildren();
    termLive = true;
    closeTerm = openTerminal(termHost, id, (s) => {
      termLive = s === "connecting" || s === "connected";
      termStatus.textContent = s;
    });
    if (focusTerminal) termHost.scrollIntoView({ block: "nearest" });
  };
  const closeTermNow = (why: string) => {
    if (closeTerm) closeTerm();
    closeTerm = null;
    termLive = false;
    termStatus.textContent = why;
  };
  reconnect.addEventListener("click", () => {
    if (lastState === "running") openTerm();
  });

  const render = (sb: api.Sandbox) => {
    const rows: [string, string][] = [
      ["id", sb.id],
      ["name", sb.name ?? ""],
      ["state", sb.state + (sb.reason ? " (" + sb.reason + ")" : "")],
      ["template", sb.template],
      ["runtime", sb.runtime],
      ["node", sb.node],
      ["generation", String(sb.generation ?? "")],
      ["size", sb.cpus + " CPU, " + sb.memory_mib + " MiB, disk " + sb.disk_mib + " MiB"],
      ["created", sb.created_at + " (" + age(sb.created_at) + " ago)"],
      ["expires", sb.expires_at ?? "never"],
    ];
    for (const [k, v] of Object.entries(sb.metadata ?? {})) rows.push(["metadata " + k, v]);
    record.replaceChildren(...rows.flatMap(([k, v]) => [el("dt", {}, k), el("dd", { "data-field": k }, v)]));
    // A new execution while running (a rollback) ends the shell: a new one.
    const newExecution = sb.generation !== lastGeneration && lastGeneration !== undefined;
    lastGeneration = sb.generation;
    if (newExecution && sb.state === "running" && sb.state === lastState) openTerm();
    if (sb.state !== lastState) {
      const was = lastState;
      lastState = sb.state;
      buttons.replaceChildren(
        ...api.moves(sb.state).map((op) => {
          const b = el("button", { type: "button", "data-op": op, class: op === "delete" ? "danger" : "" }, op);
          b.addEventListener("click", () => act(op));
          return b;
        }),
      );
      if (sb.state === "running") {
        if (!closeTerm || !termLive) openTerm();
        if (was === "") void files.list();
      } else if (sb.state !== "paused" && closeTerm) {
        closeTermNow("sandbox " + sb.state + ": the terminal reconnects when it runs again");
      }
      void side();
    }
  };
  const renderPorts = (list: api.Port[]) => {
    ports.replaceChildren(
      ...list.map((p) => {
        const link = (u: string) => (/^https?:\/\//.test(u) ? el("a", { href: u, target: "_blank", rel: "noopener noreferrer" }, u) : el("code", {}, u));
        return el(
          "tr",
          { "data-port": String(p.port) },
          el("td", { class: "num" }, String(p.port)),
          el("td", {}, p.protocol),
          el("td", {}, p.public ? "public" : "private (token)"),
          el("td", {}, link(p.url)),
          el("td", {}, p.proxy_url ? link(p.proxy_url) : ""),
        );
      }),
    );
    if (!list.length) ports.append(el("tr", {}, el("td", { colspan: "5", class: "empty" }, "no exposed ports")));
  };
  const renderEvents = (list: api.Event[]) => {
    events.replaceChildren(
      ...list
        .slice()
        .reverse()
        .map((e) => el("li", { "data-type": e.type, class: "event-" + e.type }, el("time", { datetime: e.time }, e.time), " ", el("b", {}, e.type), " ", el("span", { class: "message" }, e.message))),
    );
    if (!list.length) events.append(el("li", { class: "empty" }, "no events"));
  };
  const snaps = snapshotsPanel(id, () => void tick());
  // side reads the snapshots, ports and events: after each move, and every
  // sideEvery polls.
  const side = async () => {
    await Promise.all([
      snaps.refresh(),
      procs.refresh(lastState),
      usage.refresh(lastState),
      api.listPorts(id).then(renderPorts, (e) => (refusal.textContent = errorText(e))),
      api.listEvents(id).then(renderEvents, (e) => (refusal.textContent = errorText(e))),
    ]);
  };
  const act = async (op: string) => {
    refusal.textContent = "";
    try {
      if (op === "delete") {
        if (!(await confirmDelete("Delete this sandbox?", [id]))) return;
        await api.deleteSandbox(id);
        location.hash = "#/";
        return;
      }
      render(await api.lifecycle(id, op));
    } catch (e) {
      refusal.textContent = errorText(e);
    }
    void tick();
    void side();
  };
  const tick = async () => {
    try {
      render(await api.getSandbox(id));
      if (++ticks % sideEvery === 0) void side();
    } catch (e) {
      if (e instanceof api.APIError && e.status === 401) return signIn(errorText(e));
      refusal.textContent = errorText(e);
    }
  };
  show(
    header(),
    el(
      "main",
      {},
      el("p", {}, el("a", { href: "#/" }, "← sandboxes")),
      el("h1", {}, "Sandbox ", el("code", {}, id)),
      record,
      buttons,
      refusal,
      usage.node,
      el("h2", {}, "Terminal ", termStatus, " ", reconnect),
      termHost,
      procs.node,
      files.node,
      snaps.node,
      egress.node,
      el("section", {}, el("h2", {}, "Exposed ports"), el("div", { class: "table-wrap" }, el("table", {}, el("thead", {}, el("tr", {}, ...["port", "protocol", "access", "URL", "proxy URL"].map((h) => el("th", {}, h)))), ports))),
      el("section", {}, el("h2", {}, "Events"), events),
    ),
  );
  void tick();
  void egress.load();
  const timer = setInterval(tick, pollMs);
  stop = () => {
    clearInterval(timer);
    if (closeTerm) closeTerm();
  };
}

function route() {
  if (!api.getKey()) return signIn();
  const m = /^#\/sandbox\/([^/]+)(\/terminal)?$/.exec(location.hash);
  if (m) return sandboxPage(decodeURIComponent(m[1]), m[2] !== undefined);
  const other = adminPages[location.hash];
  if (other) {
    const p = other(errorText, confirmDelete);
    show(header(), p.node);
    stop = p.stop;
    return;
  }
  sandboxesPage();
}

window.addEventListener("hashchange", route);
route();
