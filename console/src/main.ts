import "@xterm/xterm/css/xterm.css";
import "./style.css";
import * as api from "./api";
import { el, age } from "./dom";
import { openTerminal } from "./terminal";

// The sandboxes table polls every pollMs: one GET /v1/sandboxes per open
// console per period (docs/console.md gives its cost).
const pollMs = 2000;

const root = document.getElementById("app")!;
let stop: (() => void) | null = null;

function show(...nodes: Node[]) {
  if (stop) {
    stop();
    stop = null;
  }
  root.replaceChildren(...nodes);
}

function header(): HTMLElement {
  const out = el("button", { type: "button", id: "signout" }, "Sign out");
  out.addEventListener("click", () => {
    api.clearKey();
    location.hash = "";
    route();
  });
  return el("header", {}, el("a", { href: "#/", class: "brand" }, "SPACE console"), out);
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
      route();
    } catch (e) {
      err.textContent = errorText(e);
    }
  });
  show(form);
  input.focus();
}

function sandboxesPage() {
  const status = el("p", { class: "status", id: "list-status" });
  const body = el("tbody", { id: "sandboxes" });
  const table = el(
    "table",
    {},
    el("thead", {}, el("tr", {}, ...["id", "name", "state", "template", "runtime", "node", "age", ""].map((h) => el("th", {}, h)))),
    body,
  );
  const template = el("select", { id: "create-template" });
  const runtime = el("select", { id: "create-runtime" }, el("option", { value: "" }, "server default"), el("option", { value: "ns" }, "ns"), el("option", { value: "vm" }, "vm"));
  const createErr = el("span", { class: "error", id: "create-error", role: "alert" });
  const create = el("form", { id: "create" }, el("label", {}, "template ", template), el("label", {}, "runtime ", runtime), el("button", { type: "submit" }, "Create sandbox"), createErr);
  api.listTemplates().then(
    (ts) => {
      for (const t of ts) if (t.state === "ready") template.append(el("option", { value: t.name }, t.name));
      if (!template.options.length) template.append(el("option", { value: "" }, "server default"));
    },
    (e) => (createErr.textContent = errorText(e)),
  );
  create.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    createErr.textContent = "creating…";
    try {
      const sb = await api.createSandbox(template.value, runtime.value);
      location.hash = "#/sandbox/" + encodeURIComponent(sb.id);
    } catch (e) {
      createErr.textContent = errorText(e);
    }
  });

  const render = (list: api.Sandbox[]) => {
    const now = Date.now();
    body.replaceChildren(
      ...list.map((sb) => {
        const del = el("button", { type: "button", class: "danger" }, "Delete");
        del.addEventListener("click", async () => {
          try {
            await api.deleteSandbox(sb.id);
            void tick();
          } catch (e) {
            status.textContent = errorText(e);
          }
        });
        return el(
          "tr",
          { "data-id": sb.id },
          el("td", {}, el("a", { href: "#/sandbox/" + encodeURIComponent(sb.id) }, sb.id)),
          el("td", {}, sb.name ?? ""),
          el("td", { class: "state state-" + sb.state }, sb.state),
          el("td", {}, sb.template),
          el("td", {}, sb.runtime),
          el("td", {}, sb.node),
          el("td", { title: sb.created_at }, age(sb.created_at, now)),
          el("td", {}, del),
        );
      }),
    );
    if (!list.length) body.append(el("tr", {}, el("td", { colspan: "8", class: "empty" }, "no sandboxes")));
  };
  const tick = async () => {
    try {
      render(await api.listSandboxes());
      status.textContent = "updated " + new Date().toLocaleTimeString();
    } catch (e) {
      if (e instanceof api.APIError && e.status === 401) return signIn(errorText(e));
      status.textContent = errorText(e);
    }
  };
  show(header(), el("main", {}, el("h1", {}, "Sandboxes"), create, table, status));
  void tick();
  const timer = setInterval(tick, pollMs);
  stop = () => clearInterval(timer);
}

function sandboxPage(id: string) {
  const record = el("dl", { id: "record" });
  const buttons = el("div", { id: "lifecycle" });
  const refusal = el("p", { class: "error", id: "refusal", role: "alert" });
  const termStatus = el("span", { id: "term-status" });
  const termHost = el("div", { id: "terminal" });
  let closeTerm: (() => void) | null = null;
  let lastState = "";

  const render = (sb: api.Sandbox) => {
    const rows: [string, string][] = [
      ["id", sb.id],
      ["name", sb.name ?? ""],
      ["state", sb.state + (sb.reason ? " (" + sb.reason + ")" : "")],
      ["template", sb.template],
      ["runtime", sb.runtime],
      ["node", sb.node],
      ["size", sb.cpus + " CPU, " + sb.memory_mib + " MiB, disk " + sb.disk_mib + " MiB"],
      ["created", sb.created_at + " (" + age(sb.created_at) + " ago)"],
      ["expires", sb.expires_at ?? "never"],
    ];
    for (const [k, v] of Object.entries(sb.metadata ?? {})) rows.push(["metadata " + k, v]);
    record.replaceChildren(...rows.flatMap(([k, v]) => [el("dt", {}, k), el("dd", { "data-field": k }, v)]));
    if (sb.state !== lastState) {
      lastState = sb.state;
      buttons.replaceChildren(
        ...api.moves(sb.state).map((op) => {
          const b = el("button", { type: "button", "data-op": op, class: op === "delete" ? "danger" : "" }, op);
          b.addEventListener("click", () => act(op));
          return b;
        }),
      );
      if (sb.state === "running" && !closeTerm) {
        closeTerm = openTerminal(termHost, sb.id, (s) => (termStatus.textContent = s));
      }
    }
  };
  const act = async (op: string) => {
    refusal.textContent = "";
    try {
      if (op === "delete") {
        await api.deleteSandbox(id);
        location.hash = "#/";
        return;
      }
      render(await api.lifecycle(id, op));
    } catch (e) {
      refusal.textContent = errorText(e);
    }
    void tick();
  };
  const tick = async () => {
    try {
      render(await api.getSandbox(id));
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
      el("h2", {}, "Terminal ", termStatus),
      termHost,
    ),
  );
  void tick();
  const timer = setInterval(tick, pollMs);
  stop = () => {
    clearInterval(timer);
    if (closeTerm) closeTerm();
  };
}

function route() {
  if (!api.getKey()) return signIn();
  const m = /^#\/sandbox\/(.+)$/.exec(location.hash);
  if (m) return sandboxPage(decodeURIComponent(m[1]));
  sandboxesPage();
}

window.addEventListener("hashchange", route);
route();
