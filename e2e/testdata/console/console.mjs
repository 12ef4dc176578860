// Drives the web console in headless Chromium or Firefox (Debian's chromium
// or firefox-esr, as BROWSER says, via playwright-core from console/'s
// lockfile) against a running `space server --dev`.
// Env: SPACE_URL, SPACE_KEY, XSS_ID (a sandbox whose metadata label is
// XSS_PAYLOAD), SHOTS (a directory for screenshots), PLAYWRIGHT (the
// playwright-core module's path), BROWSER (chromium, the default, or
// firefox). Prints one JSON line: {ok, problems,
// steps, id, fork, victim}.
import { createRequire } from "node:module";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const require = createRequire(import.meta.url);
const pw = require(process.env.PLAYWRIGHT);
const url = process.env.SPACE_URL, key = process.env.SPACE_KEY, shots = process.env.SHOTS;
const xssID = process.env.XSS_ID, payload = process.env.XSS_PAYLOAD;
const steps = [];
const problems = [];
// until polls cond from here: page.waitForFunction evaluates a string in
// the page, which the console's policy (no unsafe-eval) rightly refuses.
async function until(what, cond, ms = 60000) {
  const end = Date.now() + ms;
  for (;;) {
    if (await cond().catch(() => false)) return;
    if (Date.now() > end) throw new Error("timed out waiting for " + what);
    await new Promise((r) => setTimeout(r, 100));
  }
}
const text = (page, sel) => page.$eval(sel, (e) => e.textContent);
// go opens u. Over BiDi, playwright-core 1.49 waits for a load that a
// change of the fragment alone (the console's routes) never fires in
// Firefox: there such a move sets location.hash, as a link would.
async function go(page, u) {
  await cspSeen(page);
  const doc = (x) => x.split("#")[0];
  if (which !== "firefox" || doc(page.url()) !== doc(u)) return page.goto(u);
  await page.evaluate((h) => { location.hash = h; }, new URL(u).hash);
}
// cspSeen moves the violations the page's document saw into problems.
const cspProbe = "csp-probe.invalid";
async function cspSeen(page) {
  for (const v of await page.evaluate(() => (window.__csp ?? []).splice(0))) problems.push("CSP violation (by step " + steps.at(-1) + "): " + v);
}
// count: how many elements sel matches (page.$$ of none fails over BiDi).
const count = (page, sel) => page.$$eval(sel, (es) => es.length);
const step = (s) => { steps.push(s); console.error("console.mjs: " + s); };
// rest calls the REST API as the test, beside the console.
async function rest(method, path, body, as = key) {
  const headers = { Authorization: "Bearer " + as };
  if (body !== undefined && !(body instanceof Uint8Array) && typeof body !== "string") {
    headers["Content-Type"] = "application/json";
    body = JSON.stringify(body);
  }
  const res = await fetch(url + path, { method, headers, body });
  const text = await res.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: res.status, text, json };
}
const rows = (page) => page.$$eval(".xterm-accessibility-tree > div", (rs) => rs.map((r) => r.textContent.trim()));
// typed runs a command in the terminal and waits for a row that is exactly want.
async function typed(page, cmd, want) {
  await page.click("#terminal");
  await page.keyboard.type(cmd + "\n");
  try {
    await until(JSON.stringify(want) + " in the terminal", async () => (await rows(page)).includes(want), 30000);
  } catch (e) {
    throw new Error(e.message + "; the terminal shows " + JSON.stringify((await rows(page)).filter((r) => r !== "")));
  }
}
// noHorizontalScroll: at a phone's width the page itself never scrolls
// sideways (a wide table scrolls in its own box).
async function noHorizontalScroll(page, where) {
  const [sw, iw] = await page.evaluate(() => [document.documentElement.scrollWidth, window.innerWidth]);
  if (sw > iw) problems.push(`${where} at ${iw}px wide scrolls sideways: the page is ${sw}px wide`);
}
const hostile = "<img src=x onerror=alert(1)>";
// shot keeps a screenshot in SHOTS. Over BiDi, playwright-core 1.49 sends
// a PNG's quality as 80 where BiDi wants 0..1, which Firefox refuses
// ("invalid argument"): Firefox's are JPEGs of quality 1, BiDi's best. And
// there the caret is left as it is: hiding it injects an inline <style>,
// which the console's policy rightly refuses (a violation the watch sees).
const shot = (page, name, opts = {}) =>
  which === "firefox"
    ? page.screenshot({ ...opts, path: shots + "/" + name + ".jpg", type: "jpeg", quality: 1, caret: "initial" })
    : page.screenshot({ ...opts, path: shots + "/" + name + ".png" });

// BROWSER picks the browser: chromium (Debian's, over CDP) or firefox
// (Debian's firefox-esr over WebDriver BiDi, playwright-core's BiDi
// Firefox: Playwright's own patched Firefox cannot be downloaded here).
const which = process.env.BROWSER || "chromium";
// files holds what the firefox branch of upload and download writes (the
// picked file, the saved download); removed at the end.
const files = mkdtempSync(join(tmpdir(), "space-console-files-"));
const launchers = {
  chromium: () => pw.chromium.launch({ executablePath: "/usr/bin/chromium", headless: true, args: ["--no-sandbox"] }),
  // Firefox saves a download without asking, into files/saved.
  firefox: () => pw._bidiFirefox.launch({ executablePath: "/usr/bin/firefox-esr", headless: true, firefoxUserPrefs: {
    "browser.download.dir": join(files, "saved"), "browser.download.folderList": 2, "browser.download.useDownloadDir": true,
    "browser.download.always_ask_before_handling_new_types": false } }),
};
if (!launchers[which]) throw new Error("BROWSER=" + which + ": want chromium or firefox");
const browser = await launchers[which]();
console.error("console.mjs: " + which + " " + browser.version());

// bidi is the WebDriver BiDi session of page's browsing context, in
// Firefox: playwright-core 1.49's BiDi Firefox implements neither
// setInputFiles nor download events, while Firefox's BiDi has both
// (input.setFiles; browsingContext.downloadWillBegin and downloadEnd,
// to which playwright-core's subscription to "browsingContext" already
// listens), so upload and download send and read them on this session.
const bidi = (page) => pw._toImpl(page)._delegate._session;

// upload puts a file (name, bytes) into the file input at sel (a CSS
// selector), as a user's pick would: playwright's setInputFiles in
// Chromium; in Firefox the file, written to disk, is set by the browser's
// own input.setFiles, which fires the input and change events a pick does.
async function upload(page, sel, name, bytes) {
  if (which !== "firefox") return page.setInputFiles(sel, { name, mimeType: "application/octet-stream", buffer: bytes });
  const dir = mkdtempSync(join(files, "pick-"));
  writeFileSync(join(dir, name), bytes);
  const s = bidi(page);
  const r = await s.send("script.callFunction", { functionDeclaration: "(sel) => document.querySelector(sel)",
    target: { context: s.sessionId }, arguments: [{ type: "string", value: sel }], awaitPromise: false, resultOwnership: "none" });
  if (r.type !== "success" || r.result.type !== "node") throw new Error("upload: no element " + sel + ": " + JSON.stringify(r).slice(0, 300));
  await s.send("input.setFiles", { context: s.sessionId, element: { sharedId: r.result.sharedId }, files: [join(dir, name)] });
}
// download clicks sel and returns the file the browser saved: {name,
// bytes}. Chromium: playwright's download event. Firefox: the browser's
// browsingContext.downloadWillBegin (the suggested name) and downloadEnd
// (the status and the path it saved to), the saved file read back.
async function download(page, sel) {
  if (which !== "firefox") {
    const [dl] = await Promise.all([page.waitForEvent("download"), page.click(sel)]);
    return { name: dl.suggestedFilename(), bytes: readFileSync(await dl.path()) };
  }
  const s = bidi(page);
  const next = (ev) => new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error("download: no " + ev + " in 30 s")), 30000);
    s.once(ev, (p) => { clearTimeout(t); resolve(p); });
  });
  const [will, end] = await Promise.all([next("browsingContext.downloadWillBegin"), next("browsingContext.downloadEnd"), page.click(sel)]);
  if (end.status !== "complete" || !end.filepath) throw new Error("download: " + JSON.stringify(end));
  return { name: will.suggestedFilename, bytes: readFileSync(end.filepath) };
}
let id = "", fork = "", victim = "";
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  page.on("dialog", async (d) => { problems.push("a dialog opened: " + d.message()); await d.dismiss(); });
  page.on("console", (m) => {
    if (m.type() === "error" && /Content Security Policy|Refused to/i.test(m.text()) && !m.text().includes(cspProbe)) problems.push("CSP violation: " + m.text());
  });
  // Every browser reports a violation to the page as a
  // securitypolicyviolation event (Firefox's console messages do not reach
  // playwright over BiDi): each document keeps them, read by cspSeen.
  // An inline <style> added by a script the driver evaluated (source
  // "… > eval": playwright-core's screenshots over BiDi add one) is not the
  // console's, whose policy allows no eval, so none of its scripts is one.
  await page.addInitScript(() => {
    window.__csp = [];
    const driverStyle = (e) => e.violatedDirective === "style-src-elem" && / > eval$/.test(decodeURIComponent(e.sourceFile));
    document.addEventListener("securitypolicyviolation", (e) => driverStyle(e) || window.__csp.push(`${e.violatedDirective} ${e.blockedURI} from ${e.sourceFile}:${e.lineNumber} ${JSON.stringify(e.sample)}`), true);
  });
  page.on("pageerror", (e) => problems.push("page error: " + e.message));
  page.setDefaultTimeout(60000);

  await go(page, url + "/console/");
  step("csp probe");
  // The watch sees a violation: a fetch from a foreign origin, refused.
  await page.evaluate((u) => { fetch(u).catch(() => {}); }, "http://" + cspProbe + "/");
  let probed = [];
  await until("the probe's violation reported", async () => (probed = await page.evaluate(() => window.__csp.splice(0))).some((v) => v.includes(cspProbe)), 10000)
    .catch(() => problems.push("the CSP watch saw no violation of a fetch to " + cspProbe + ": " + JSON.stringify(probed)));
  step("wrong key");
  await page.fill("#key", "space_k-000000000000000000_" + "0".repeat(64));
  await page.click("#signin button[type=submit]");
  await until("the refusal", async () => (await text(page, "#signin-error")).includes("unauthenticated"));
  if (await page.evaluate(() => sessionStorage.length) !== 0) problems.push("a refused key was kept in session storage");
  await shot(page, "signin-refused");

  step("sign in");
  await page.fill("#key", key);
  await page.click("#signin button[type=submit]");
  await page.waitForSelector("#sandboxes");
  if (page.url().includes(key)) problems.push("the key is in the URL: " + page.url());

  // The bulk delete's third sandbox, made now through the API (a
  // shared machine's node may refuse new ones under memory pressure for a
  // while: retried for a minute).
  await until("the bulk delete's third sandbox", async () => {
    const r = await rest("POST", "/v1/sandboxes", { template: "minimal", runtime: "ns", memory_mib: 256 });
    if (r.status !== 201) console.error("console.mjs: create the third sandbox: HTTP " + r.status + " " + r.text);
    return (victim = r.json?.id ?? "") !== "";
  }, 60000);
  step("create");
  await page.waitForSelector("#create-template option[value=minimal]", { state: "attached" });
  await page.selectOption("#create-template", "minimal");
  await page.selectOption("#create-runtime", "ns");
  step("create refused");
  // A bad field is refused in the form, naming it; nothing is created.
  await page.fill("#create-env", "GREETING");
  await page.click("#create button[type=submit]");
  await until("the env refusal", async () => (await text(page, "#create-error")).includes("want KEY=VALUE"));
  await page.fill("#create-env", "GREETING=hi-console\nSECOND=2");
  await page.fill("#create-cpus", "1");
  await page.fill("#create-memory", "300");
  await page.fill("#create-timeout", "45m");
  await page.click("#create button[type=submit]");
  await page.waitForURL(/#\/sandbox\/[^/]+\/terminal$/);
  id = decodeURIComponent(page.url().split("#/sandbox/")[1].split("/")[0]);
  await until("running", async () => (await text(page, '[data-field="state"]')) === "running");
  const created = (await rest("GET", "/v1/sandboxes/" + id)).json;
  if (created.memory_mib !== 300 || created.cpus !== 1 || !created.expires_at) problems.push("the create form's size or timeout did not reach the server: " + JSON.stringify(created));

  step("terminal");
  await until("the terminal", async () => (await text(page, "#term-status")) === "connected");
  // Created from the form: the page lands in the terminal, focused.
  if (!(await page.evaluate(() => document.getElementById("terminal").contains(document.activeElement)))) problems.push("the new sandbox's terminal is not focused");
  await typed(page, 'echo "env=$GREETING"', "env=hi-console");
  await page.click("#terminal");
  await page.keyboard.type("echo hello\n");
  // Screen-reader mode keeps the terminal's rows as text: a row that is
  // exactly "hello" is the command's output, not its echo.
  await until("hello", () => page.$$eval(".xterm-accessibility-tree > div", (rs) => rs.some((r) => r.textContent.trim() === "hello")));
  // A process's output that is markup stays text in the terminal's rows.
  await typed(page, "printf '%s\\n' '" + hostile + "'", hostile);
  if (await page.$$eval("img", (is) => is.length) !== 0) problems.push("an img element made from a process's output");
  await shot(page, "sandbox-terminal");

  step("resize");
  // The terminal follows the window: the PTY gets the new size.
  const sizes = () =>
    page.$$eval(".xterm-accessibility-tree > div", (rs) => rs.map((r) => r.textContent.trim()).filter((t) => /^\d+ \d+$/.test(t)));
  await page.keyboard.type("stty size\n");
  let before = [];
  await until("stty size", async () => (before = await sizes()).length === 1, 20000);
  await page.setViewportSize({ width: 800, height: 700 });
  await new Promise((r) => setTimeout(r, 300));
  await page.keyboard.type("stty size\n");
  let after = [];
  await until("the PTY's size after the resize", async () => (after = await sizes()).length === 2, 20000);
  if (after[1] === before[0]) problems.push("the PTY kept its size " + before[0] + " after the window shrank");
  console.error("console.mjs: PTY size " + before[0] + " then " + after[1]);
  await page.setViewportSize({ width: 1280, height: 800 });

  const ops = () => page.$$eval("#lifecycle button", (bs) => bs.map((b) => b.dataset.op).join(","));
  if (await ops() !== "pause,hibernate,stop,delete") problems.push("running offers " + await ops());
  step("pause");
  await page.click('#lifecycle button[data-op="pause"]');
  await until("paused", async () => (await text(page, '[data-field="state"]')) === "paused");
  await page.waitForSelector('#lifecycle button[data-op="resume"]');
  if (await ops() !== "resume,hibernate,stop,delete") problems.push("paused offers " + await ops());
  step("resume");
  await page.click('#lifecycle button[data-op="resume"]');
  await until("running", async () => (await text(page, '[data-field="state"]')) === "running");
  await until("the terminal after resume", async () => (await text(page, "#term-status")) === "connected");
  await typed(page, "echo resumed-$((2+3))", "resumed-5");

  step("refusal");
  // The server's refusal, as it says it: the sandbox is stopped behind the
  // console's back, while its record's reads are held so the page still
  // offers pause.
  let release;
  const held = new Promise((r) => (release = r));
  const record = url + "/v1/sandboxes/" + encodeURIComponent(id);
  await page.route(record, async (route) => {
    await held;
    await route.continue();
  });
  const stopped = await fetch(record + "/stop", { method: "POST", headers: { Authorization: "Bearer " + key } });
  if (!stopped.ok) problems.push("stop through the API: HTTP " + stopped.status);
  const direct = await (await fetch(record + "/pause", { method: "POST", headers: { Authorization: "Bearer " + key } })).json();
  await page.click('#lifecycle button[data-op="pause"]');
  await until("the refusal", async () => (await text(page, "#refusal")) !== "");
  const shown = await text(page, "#refusal");
  if (shown !== direct.code + ": " + direct.message) problems.push(`refusal shown as ${JSON.stringify(shown)}, the server says ${JSON.stringify(direct)}`);
  // The refusal is an event of the sandbox on the server, shown in the
  // timeline as the server recorded it (the test's own pause and the
  // console's were both refused).
  const refusedWant = "pause refused: " + direct.code + ": " + direct.message;
  const refusedEvents = (await rest("GET", "/v1/sandboxes/" + id + "/events")).json.events.filter((e) => e.type === "refused");
  if (!refusedEvents.some((e) => e.message === refusedWant)) problems.push("the server's events hold no refused pause: " + JSON.stringify(refusedEvents));
  await until("the refused event in the timeline", async () =>
    page.$$eval('#events li[data-type="refused"] .message', (ms, want) => ms.some((m) => m.textContent === want), refusedWant), 20000);
  await shot(page, "sandbox-refusal");
  await page.$eval("#events", (e) => e.scrollIntoView({ block: "center" }));
  await shot(page, "sandbox-events-refused");
  release();
  await page.unroute(record);
  await until("stopped", async () => (await text(page, '[data-field="state"]')) === "stopped");
  await page.waitForSelector('#lifecycle button[data-op="start"]');
  if (await ops() !== "start,delete") problems.push("stopped offers " + await ops());
  step("start");
  await page.click('#lifecycle button[data-op="start"]');
  await until("running again", async () => (await text(page, '[data-field="state"]')) === "running");
  step("terminal reconnect");
  // The stop ended the shell; the start opens a new one by itself.
  await until("the terminal reconnected", async () => (await text(page, "#term-status")) === "connected");
  await typed(page, "echo again-$((1+1))", "again-2");

  step("processes");
  // The terminal's shell is among the guest daemon's processes, listed as
  // GET /v1/sandboxes/{id}/processes says.
  const procs = (await rest("GET", "/v1/sandboxes/" + id + "/processes")).json?.processes ?? [];
  if (!procs.length) problems.push("GET processes lists nothing with a terminal open");
  await until("the processes table", async () => {
    const shownPids = await page.$$eval("#processes tr[data-pid]", (rs) => rs.map((r) => Number(r.dataset.pid)));
    return procs.length > 0 && procs.every((p) => shownPids.includes(p.pid));
  }, 20000);

  step("usage");
  // CPU, memory and disk now, from the native metrics route
  // (GET /v1/sandboxes/{id}/metrics), as text and a chart over the
  // sandbox's whole life.
  await until("the usage now", async () => (await text(page, "#usage-now")).startsWith("now: "), 30000);
  const m = (await rest("GET", "/v1/sandboxes/" + id + "/metrics")).json?.metrics;
  if (!Array.isArray(m) || !m.length || !(m.at(-1).mem_total_bytes > 0)) problems.push("the metrics route answers " + JSON.stringify(m));
  const nowShown = await text(page, "#usage-now");
  const memShown = /· \d+\/(\d+) MiB/.exec(nowShown);
  if (!memShown || Number(memShown[1]) !== Math.round(m.at(-1).mem_total_bytes / (1 << 20))) problems.push("usage shown " + JSON.stringify(nowShown) + ", the route says " + JSON.stringify(m.at(-1)));
  // Disk as the route says it: used of the limit, or not accounted.
  const mibOf = (b) => Math.round(b / (1 << 20));
  const wantDisk = m.at(-1).disk_total_bytes ? `disk ${mibOf(m.at(-1).disk_used_bytes)}/${mibOf(m.at(-1).disk_total_bytes)} MiB` : "disk not accounted on its node";
  const diskShown = /disk [^,]*$/.exec(nowShown)?.[0] ?? "";
  // The used bytes move between the two reads: the limit and the form must agree.
  if (diskShown.replace(/ \d+\//, " N/") !== wantDisk.replace(/ \d+\//, " N/")) problems.push("disk shown " + JSON.stringify(diskShown) + ", the route says " + JSON.stringify(wantDisk));
  console.error("console.mjs: disk " + diskShown);
  // The whole life: by now (a pause, a stop and a start later) the server
  // kept samples from before the stop; the chart draws every one the route
  // has over the life (the live one at the end moves on).
  // The kept samples (5 s or more each; the one taken at the request
  // covers a quarter second): one comes within 5 s of running.
  const lifeOf = async () => (await rest("GET", "/v1/sandboxes/" + id + "/metrics")).json.metrics.filter((x) => x.span_seconds >= 1);
  let life = [];
  await until("a kept metrics sample", async () => (life = await lifeOf()).length > 0, 30000).catch(() => problems.push("the metrics route kept no sample of a sandbox running for 30 s"));
  let lifeShown = "";
  await until("the chart over the whole life", async () => {
    lifeShown = await text(page, "#usage-life");
    life = await lifeOf();
    const first = lifeShown.split(" from ")[1]?.split(" to ")[0] ?? "";
    return life.length > 0 && first === life[0].time && Number(await page.$eval("#usage-life", (e) => e.dataset.samples)) >= life.length;
  }, 20000).catch((e) => problems.push(e.message + ": the page says " + JSON.stringify(lifeShown) + ", the route's first sample is " + JSON.stringify(life[0]) + " of " + life.length));
  console.error("console.mjs: chart " + lifeShown);
  const chart = await page.$eval("#usage-chart", (svg) => ({
    kids: [...svg.children].map((c) => c.tagName).join(","),
    cpu: svg.querySelector("polyline.cpu").getAttribute("points"),
    disk: svg.querySelector("polyline.disk").getAttribute("points"),
  }));
  if (chart.kids !== "title,rect,polyline,polyline,polyline" || !/^[0-9.]+,[0-9.]+/.test(chart.cpu)) problems.push("the usage chart: " + JSON.stringify(chart));
  if (m.at(-1).disk_total_bytes && !/^[0-9.]+,[0-9.]+/.test(chart.disk)) problems.push("the route reports disk but the chart draws none: " + JSON.stringify(chart));
  await shot(page, "sandbox-usage");

  step("hibernate");
  await page.click('#lifecycle button[data-op="hibernate"]');
  await until("hibernated", async () => (await text(page, '[data-field="state"]')) === "hibernated", 120000);
  await page.waitForSelector('#lifecycle button[data-op="restore"]');
  if (await ops() !== "restore,delete") problems.push("hibernated offers " + await ops());
  step("restore");
  await page.click('#lifecycle button[data-op="restore"]');
  await until("running after restore", async () => (await text(page, '[data-field="state"]')) === "running", 120000);
  await until("the terminal after restore", async () => (await text(page, "#term-status")) === "connected");
  await typed(page, "echo restored-$((3+4))", "restored-7");

  step("files");
  const notes = "line one\n<b>not bold</b>\n";
  await rest("POST", "/v1/sandboxes/" + id + "/files/mkdir?path=/home/user");
  for (const [p, body] of [["/home/user/notes.txt", notes], ["/home/user/" + hostile, "hostile\n"]]) {
    const r = await rest("PUT", "/v1/sandboxes/" + id + "/files?path=" + encodeURIComponent(p), body);
    if (r.status >= 300) problems.push("write " + p + ": HTTP " + r.status + " " + r.text);
  }
  await page.fill("#files-path", "/");
  await page.press("#files-path", "Enter");
  await page.waitForSelector('#files tr[data-name="home"] button');
  await page.click('#files tr[data-name="home"] button');
  await until("/home listed", async () => (await page.inputValue("#files-path")) === "/home");
  await page.click('#files tr[data-name="user"] button');
  await until("/home/user listed", async () => (await page.inputValue("#files-path")) === "/home/user");
  await page.waitForSelector('#files tr[data-name="notes.txt"]');
  const names = await page.$$eval("#files tr", (rs) => rs.map((r) => r.dataset.name));
  if (!names.includes(hostile)) problems.push("the hostile file name is not listed as itself: " + JSON.stringify(names));
  const hostileShown = await page.$$eval("#files tr", (rs, h) => rs.filter((r) => r.dataset.name === h).map((r) => r.querySelector("button").textContent), hostile);
  if (hostileShown[0] !== hostile) problems.push("the hostile file name is shown as " + JSON.stringify(hostileShown));
  if (await page.$$eval("img", (is) => is.length) !== 0) problems.push("an img element made from a file name");
  step("open");
  await page.click('#files tr[data-name="notes.txt"] button.link');
  await until("the file's text", async () => (await text(page, "#file-view")) === notes);
  if (await page.$$eval("#file-view *", (es) => es.length) !== 0) problems.push("the opened file's text made elements");
  step("up");
  await page.click("#files-up");
  await until("/home again", async () => (await page.inputValue("#files-path")) === "/home");
  await page.click('#files tr[data-name="user"] button');
  await page.waitForSelector('#files tr[data-name="notes.txt"]');
  step("upload");
  const upBytes = Buffer.from("uploaded from the console\n" + "x".repeat(100000));
  await upload(page, "#files-upload", "up.bin", upBytes);
  await page.waitForSelector('#files tr[data-name="up.bin"]');
  const back = await fetch(url + "/v1/sandboxes/" + id + "/files?path=/home/user/up.bin", { headers: { Authorization: "Bearer " + key } });
  if (!Buffer.from(await back.arrayBuffer()).equals(upBytes)) problems.push("the uploaded file in the sandbox differs from what was uploaded");
  step("download");
  const dl = await download(page, '#files tr[data-name="notes.txt"] button.download');
  if (dl.name !== "notes.txt") problems.push("download named " + dl.name);
  const got = dl.bytes.toString("utf8");
  if (got !== notes) problems.push("downloaded " + JSON.stringify(got) + ", the file is " + JSON.stringify(notes));
  const dl2 = await download(page, '#files tr[data-name="up.bin"] button.download');
  if (!dl2.bytes.equals(upBytes)) problems.push("the uploaded file downloaded differs");
  await page.click('#files tr[data-name="up.bin"] button.link');
  await until("a binary-or-text view", async () => (await text(page, "#file-view")).startsWith("uploaded from the console"));
  await shot(page, "sandbox-files", { fullPage: true });
  if (await page.evaluate(() => window.__xss)) problems.push("a script from a file ran");

  step("ports");
  const exposed = await rest("POST", "/v1/sandboxes/" + id + "/ports", { port: 8080 });
  if (exposed.status !== 201) problems.push("expose 8080: HTTP " + exposed.status + " " + exposed.text);
  await page.waitForSelector('#ports tr[data-port="8080"]', { timeout: 20000 });
  const portURL = await text(page, '#ports tr[data-port="8080"] td:nth-child(4)');
  if (portURL !== exposed.json?.url) problems.push(`port URL shown ${JSON.stringify(portURL)}, the server says ${JSON.stringify(exposed.json?.url)}`);

  step("egress");
  // The form refuses a bad entry itself, the server's refusal is shown as
  // it says it, and a saved policy is the sandbox's (read back by the API).
  await page.fill("#egress-deny-domains", "Not A Domain");
  await page.click("#egress-save");
  await until("the form's refusal", async () => (await text(page, "#egress-status")).includes('deny domains "Not"'));
  await page.fill("#egress-deny-domains", "");
  await page.fill("#egress-allow-cidrs", "10.0.0.1/8");
  const badPolicy = await rest("PUT", "/v1/sandboxes/" + id + "/egress", { allow_internet: true, allow: { cidrs: ["10.0.0.1/8"] } });
  await page.click("#egress-save");
  await until("the server's refusal", async () => (await text(page, "#egress-status")) !== "saving…" && (await text(page, "#egress-status")) !== "");
  if (badPolicy.status !== 400 || (await text(page, "#egress-status")) !== badPolicy.json.code + ": " + badPolicy.json.message)
    problems.push(`egress refusal shown as ${JSON.stringify(await text(page, "#egress-status"))}, the server says ${badPolicy.status} ${badPolicy.text}`);
  await page.fill("#egress-allow-cidrs", "");
  await page.fill("#egress-allow-domains", "example.com, *.pypi.org");
  await page.fill("#egress-allow-ports", "443");
  await page.uncheck("#egress-internet");
  await page.click("#egress-save");
  await until("saved", async () => (await text(page, "#egress-status")) === "saved");
  const saved = (await rest("GET", "/v1/sandboxes/" + id + "/egress")).json;
  if (saved.allow_internet !== false || JSON.stringify(saved.allow?.domains) !== '["example.com","*.pypi.org"]' || JSON.stringify(saved.allow?.ports) !== '["443"]')
    problems.push("the saved egress policy is not the sandbox's: " + JSON.stringify(saved));
  await shot(page, "sandbox-egress", { fullPage: true });

  step("snapshots");
  // takeSnapshot takes one from the console and returns its id once it is
  // listed ready (the stop left one of its own already).
  const snapIDs = () => page.$$eval("#snapshots tr[data-id]", (rs) => rs.map((r) => r.dataset.id));
  const takeSnapshot = async () => {
    const before = await snapIDs();
    await page.selectOption("#snap-kind", "disk");
    await page.click("#snap-create");
    let made = "";
    await until("a new ready snapshot", async () => {
      made = (await snapIDs()).find((s) => !before.includes(s)) ?? "";
      return made !== "" && (await text(page, `#snapshots tr[data-id="${made}"]`)).includes("ready");
    });
    return made;
  };
  await page.waitForSelector("#snapshots tr");
  const snap1 = await takeSnapshot();
  step("snapshot refusal");
  const fullDirect = await rest("POST", "/v1/sandboxes/" + id + "/snapshots", { kind: "full" });
  await page.selectOption("#snap-kind", "full");
  await page.click("#snap-create");
  await until("the snapshot refusal", async () => (await text(page, "#snap-refusal")) !== "");
  const fullShown = await text(page, "#snap-refusal");
  if (fullDirect.status < 400 || fullShown !== fullDirect.json.code + ": " + fullDirect.json.message)
    problems.push(`full snapshot on ns: shown ${JSON.stringify(fullShown)}, the server says HTTP ${fullDirect.status} ${fullDirect.text}`);
  step("rollback");
  await rest("PUT", "/v1/sandboxes/" + id + "/files?path=/home/user/after-snapshot.txt", "gone after the rollback\n");
  const createdGen = await text(page, '[data-field="generation"]');
  await page.click(`#snapshots tr[data-id="${snap1}"] button[data-op="rollback"]`);
  await page.waitForSelector("#confirm");
  await page.click("#confirm-yes");
  await until("the rollback", async () => (await rest("GET", "/v1/sandboxes/" + id + "/files/stat?path=/home/user/after-snapshot.txt")).status === 404, 60000);
  await until("running after the rollback", async () => (await text(page, '[data-field="state"]')) === "running");
  // The rollback is a new execution: the console opens a new shell.
  await until("the terminal after the rollback", async () => (await text(page, '[data-field="generation"]')) !== createdGen && (await text(page, "#term-status")) === "connected");
  await typed(page, "echo rolled-$((3+4))", "rolled-7");
  const kept = await rest("GET", "/v1/sandboxes/" + id + "/files/stat?path=/home/user/notes.txt");
  if (kept.status !== 200) problems.push("after the rollback to a snapshot taken after notes.txt was written: stat notes.txt HTTP " + kept.status + " " + kept.text);
  step("snapshot delete refused");
  // The current execution started from snap1: the server refuses to delete it.
  const delDirect = await rest("DELETE", "/v1/sandboxes/" + id + "/snapshots/" + snap1);
  await page.click(`#snapshots tr[data-id="${snap1}"] button[data-op="delete"]`);
  await page.click("#confirm-yes");
  await until("the delete refusal", async () => (await text(page, "#snap-refusal")) !== "");
  const delShown = await text(page, "#snap-refusal");
  if (delDirect.status !== 409 || delShown !== delDirect.json.code + ": " + delDirect.json.message)
    problems.push(`delete of the running execution's snapshot: shown ${JSON.stringify(delShown)}, the server says HTTP ${delDirect.status} ${delDirect.text}`);
  step("snapshot delete");
  const snap2 = await takeSnapshot();
  await page.click(`#snapshots tr[data-id="${snap2}"] button[data-op="delete"]`);
  await page.click("#confirm-yes");
  await until("the snapshot deleted", async () => (await count(page, `#snapshots tr[data-id="${snap2}"]`)) === 0);
  step("events");
  await until("snapshot and state events", () =>
    page.$$eval("#events li", (ls) => ls.some((l) => l.dataset.type === "snapshot") && ls.some((l) => l.dataset.type === "state")),
  );
  const apiEvents = (await rest("GET", "/v1/sandboxes/" + id + "/events")).json.events;
  const last = apiEvents.at(-1);
  await until("the newest event first", async () => (await text(page, "#events li:first-child .message")) === last.message, 20000);
  await shot(page, "sandbox-snapshots", { fullPage: true });
  step("fork");
  await page.click(`#snapshots tr[data-id="${snap1}"] button[data-op="fork"]`);
  await until("the child's page", async () => !page.url().includes(encodeURIComponent(id)), 60000);
  fork = decodeURIComponent(page.url().split("#/sandbox/")[1].split("/")[0]);
  await until("the child running", async () => (await text(page, '[data-field="state"]')) === "running", 90000);
  await until("the child's terminal", async () => (await text(page, "#term-status")) === "connected");
  await typed(page, "cat /home/user/notes.txt | head -1", "line one");

  step("phone");
  await page.setViewportSize({ width: 390, height: 844 });
  await new Promise((r) => setTimeout(r, 300));
  await noHorizontalScroll(page, "a sandbox's page");
  await shot(page, "phone-sandbox", { fullPage: true });
  step("delete confirmation");
  await page.click('#lifecycle button[data-op="delete"]');
  await page.waitForSelector("#confirm");
  await page.click("#confirm-no");
  await new Promise((r) => setTimeout(r, 500));
  if ((await rest("GET", "/v1/sandboxes/" + fork)).json?.state !== "running") problems.push("a cancelled delete deleted the sandbox");
  // Escape cancels it too.
  await page.click('#lifecycle button[data-op="delete"]');
  await page.waitForSelector("#confirm");
  await page.keyboard.press("Escape");
  await until("the dialog gone after Escape", async () => (await count(page, "#confirm")) === 0, 5000);
  await new Promise((r) => setTimeout(r, 500));
  if ((await rest("GET", "/v1/sandboxes/" + fork)).json?.state !== "running") problems.push("an Escaped delete deleted the sandbox");
  await go(page, url + "/console/#/");
  await page.waitForSelector(`#sandboxes tr[data-id="${fork}"]`);
  await noHorizontalScroll(page, "the sandboxes table");
  await shot(page, "phone-sandboxes", { fullPage: true });
  await page.setViewportSize({ width: 1280, height: 800 });

  step("xss");
  await go(page, url + "/console/#/sandbox/" + encodeURIComponent(xssID));
  await until("the label", async () => (await text(page, '[data-field="metadata label"]')) === payload);
  const imgs = await page.$$eval("img", (is) => is.length);
  if (imgs !== 0) problems.push(imgs + " img elements made from sandbox metadata");
  if (await page.evaluate(() => window.__xss)) problems.push("the metadata's script ran");
  await shot(page, "sandbox-xss");

  step("list");
  await go(page, url + "/console/#/");
  await page.waitForSelector(`#sandboxes tr[data-id="${id}"]`);
  await page.waitForSelector(`#sandboxes tr[data-id="${xssID}"]`);
  if (await page.$$eval("img", (is) => is.length) !== 0) problems.push("img elements on the sandboxes page");
  await shot(page, "sandboxes");
  // The table refreshes by itself: its status says when.
  const updated = await text(page, "#list-status");
  await until("the table's next refresh", async () => {
    const now = await text(page, "#list-status");
    return now.startsWith("updated ") && now !== updated;
  }, 10000);
  const listed = () => page.$$eval("#sandboxes tr[data-id]", (rs) => rs.map((r) => r.dataset.id).sort().join(","));
  await until("CPU and memory in the table", async () => /% · \d+\/\d+ MiB/.test(await text(page, `#sandboxes tr[data-id="${id}"] td.usage`)), 30000);
  await shot(page, "sandboxes-usage");
  step("filters");
  await page.fill("#filter-search", fork.slice(-8));
  await until("the search", async () => (await listed()) === fork);
  await page.fill("#filter-search", "");
  await page.selectOption("#filter-state", "stopped");
  await until("the state filter", async () => (await listed()) === "");
  await page.selectOption("#filter-state", "");
  await page.fill("#filter-search", payload.slice(0, 12));
  await until("a search by metadata", async () => (await listed()) === xssID);
  await page.fill("#filter-search", "");

  step("delete");
  // One row's delete asks first.
  await page.click(`#sandboxes tr[data-id="${xssID}"] button.danger`);
  await page.waitForSelector("#confirm");
  if (!(await text(page, "#confirm-items")).includes(xssID)) problems.push("the confirmation does not name " + xssID);
  await page.click("#confirm-yes");
  await until("the xss sandbox deleted", async () => [404].includes((await rest("GET", "/v1/sandboxes/" + xssID)).status) || /deleting|deleted/.test((await rest("GET", "/v1/sandboxes/" + xssID)).json?.state));
  step("credentials");
  // Every response the console reads from here on is kept: a secret must
  // be in none of them, nor in the page.
  // Over BiDi, playwright-core 1.49 gives no response bodies: there the
  // page's fetch (all the console reads with) keeps a copy of each.
  const bodies = [];
  const keep = async (r) => { if (r.url().includes("/v1/")) bodies.push(await r.text().catch(() => "")); };
  const copyFetch = () => {
    if (window.__bodies) return;
    window.__bodies = [];
    const f = window.fetch;
    window.fetch = async (...args) => {
      const r = await f(...args);
      if (r.url.includes("/v1/")) r.clone().text().then((t) => window.__bodies.push(t), () => {});
      return r;
    };
  };
  if (which === "firefox") {
    await page.addInitScript(copyFetch);
    await page.evaluate(copyFetch);
  } else page.on("response", keep);
  const secret = "console-secret-" + Math.random().toString(36).slice(2);
  const cred = await rest("POST", "/v1/credentials", { name: "console-cred", secret, injection: { method: "header", name: "X-Token" }, allowed_hosts: ["api.example.test"], sandbox: id });
  if (cred.status !== 201) problems.push("create credential: HTTP " + cred.status + " " + cred.text);
  await go(page, url + "/console/#/credentials");
  await page.waitForSelector(`#credentials tr[data-id="${cred.json.id}"]`);
  const credRow = await page.$eval(`#credentials tr[data-id="${cred.json.id}"]`, (r) => r.textContent);
  if (!credRow.includes("console-cred") || !credRow.includes("header X-Token") || !credRow.includes("api.example.test")) problems.push("the credential's row: " + credRow);
  if ((await page.content()).includes(secret)) problems.push("the credentials page holds the secret");
  await shot(page, "credentials");
  step("audit");
  await page.click('#nav a[data-page="audit log"]');
  await page.waitForSelector("#audit tr");
  if ((await text(page, "#audit-status")) !== "") problems.push("audit log refused: " + (await text(page, "#audit-status")));

  step("templates");
  await page.click('#nav a[data-page="templates"]');
  await page.waitForSelector('#templates tr[data-name="minimal"]');
  await page.fill("#build-name", "console-tiny");
  await page.fill("#build-from", "dir:" + process.env.TEMPLATE_DIR);
  await page.click("#build button[type=submit]");
  let progressSeen = "";
  await until("the template built", async () => {
    const st = await page.$eval('#templates tr[data-name="console-tiny"] td:nth-child(3)', (e) => e.textContent).catch(() => "");
    const pr = await page.$eval('#templates tr[data-name="console-tiny"] td.progress', (e) => e.textContent).catch(() => "");
    if (pr) progressSeen = pr;
    if (st.startsWith("failed")) throw new Error("the template build failed: " + st);
    return st === "ready";
  }, 120000);
  console.error("console.mjs: template progress seen: " + JSON.stringify(progressSeen));
  // The build's log: the readings as they came, from the building one the
  // build's answer gave to the final state, newest last.
  await until("the build log's final line", async () => (await page.$$eval('.build-log[data-name="console-tiny"] li', (ls) => ls.at(-1)?.dataset.state ?? "")) === "ready", 20000);
  const logLines = await page.$$eval('.build-log[data-name="console-tiny"] li', (ls) => ls.map((l) => l.dataset.state + " " + l.textContent));
  console.error("console.mjs: build log: " + JSON.stringify(logLines));
  if (logLines.length < 2 || !logLines[0].startsWith("building ")) problems.push("the build log does not start with the build under way: " + JSON.stringify(logLines));
  if (new Set(logLines.map((l) => l.replace(/^\S+ \S+ /, ""))).size !== logLines.length) problems.push("the build log repeats a reading: " + JSON.stringify(logLines));
  // The "building" line beside the form gives way once the build is done.
  await until("the building line cleared", async () => (await text(page, "#build-error")) === "", 20000).catch(async () =>
    problems.push("after the build was ready the form still says: " + JSON.stringify(await text(page, "#build-error"))),
  );
  const built = (await rest("GET", "/v1/templates")).json.templates.find((x) => x.name === "console-tiny");
  if (built?.state !== "ready") problems.push("the console's template build is not ready in the API: " + JSON.stringify(built));
  await shot(page, "templates");

  step("nodes");
  await page.click('#nav a[data-page="nodes"]');
  await page.waitForSelector("#nodes tr[data-id]");
  const sbNode = (await rest("GET", "/v1/sandboxes/" + id)).json.node;
  const committed = await page.$eval(`#nodes tr[data-id="${sbNode}"] td.committed`, (e) => e.textContent);
  const mine = (await rest("GET", "/v1/sandboxes")).json.sandboxes.filter((x) => x.node === sbNode && !["stopped", "hibernated", "deleted", "failed"].includes(x.state));
  const wantCommitted = `${mine.reduce((a, x) => a + x.cpus, 0)} CPU, ${mine.reduce((a, x) => a + x.memory_mib, 0)} MiB`;
  if (committed !== wantCommitted) problems.push(`node ${sbNode} committed shown ${JSON.stringify(committed)}, the sandboxes on it hold ${wantCommitted}`);
  // Used beside committed: the node's measured memory as GET /v1/nodes says it.
  let usedShown = "", usedWant = "";
  await until("the node's used memory as the API says it", async () => {
    usedShown = await page.$eval(`#nodes tr[data-id="${sbNode}"] td.used`, (e) => e.textContent);
    const n = (await rest("GET", "/v1/nodes")).json.nodes.find((x) => x.id === sbNode);
    usedWant = !n.memory_measured || n.used_mib < 0 ? "not measured" : `${n.used_mib} of ${n.memory_total_mib} MiB`;
    return usedShown.replace(/ \(pressure\)$/, "") === usedWant;
  }, 20000).catch(() => problems.push(`node ${sbNode} used shown ${JSON.stringify(usedShown)}, the API says ${JSON.stringify(usedWant)}`));
  console.error("console.mjs: node used " + usedShown);
  // A drain asks first; Cancel leaves the node as it was.
  await page.click(`#nodes tr[data-id="${sbNode}"] button[data-op="drain"]`);
  await page.waitForSelector("#confirm");
  await page.click("#confirm-no");
  if ((await rest("GET", "/v1/nodes")).json.nodes.find((n) => n.id === sbNode).state !== "ready") problems.push("a cancelled drain drained the node");
  await shot(page, "nodes");
  await page.click('#nav a[data-page="sandboxes"]');
  await page.waitForSelector(`#sandboxes tr[data-id="${id}"]`);

  step("bulk delete");
  // Three picked; one is deleted behind the console's back while the
  // confirmation is open: the other two are deleted, and that one's
  // refusal is shown as the server says it.
  await page.waitForSelector(`#sandboxes tr[data-id="${victim}"]`);
  for (const x of [id, fork, victim]) await page.check(`#sandboxes tr[data-id="${x}"] input.pick`);
  await until("three picked", async () => (await text(page, "#bulk-delete")) === "Delete selected (3)");
  await page.click("#bulk-delete");
  await page.waitForSelector("#confirm");
  const items = await page.$$eval("#confirm-items li", (ls) => ls.map((l) => l.textContent).sort().join(","));
  if (items !== [id, fork, victim].sort().join(",")) problems.push("the bulk confirmation lists " + items);
  await shot(page, "sandboxes-bulk-delete");
  await rest("DELETE", "/v1/sandboxes/" + victim);
  await until("the third sandbox gone", async () => (await rest("GET", "/v1/sandboxes/" + victim)).status === 404, 60000);
  const goneDirect = await rest("DELETE", "/v1/sandboxes/" + victim);
  await page.click("#confirm-yes");
  await until("the delete", () =>
    page.$$eval(`#sandboxes tr[data-id]`, (rs, ids) => rs.filter((r) => ids.includes(r.dataset.id)).every((r) => /deleting|deleted/.test(r.textContent)), [id, fork]),
  );
  const wantFail = victim + ": " + goneDirect.json?.code + ": " + goneDirect.json?.message;
  await until("the failure shown", async () => (await text(page, "#list-status")).includes(victim), 20000).catch(() => {});
  if (goneDirect.status !== 404 || (await text(page, "#list-status")) !== wantFail)
    problems.push(`bulk delete's failure shown ${JSON.stringify(await text(page, "#list-status"))}, the server says HTTP ${goneDirect.status} ${JSON.stringify(wantFail)}`);
  for (const x of [id, fork]) {
    const r = await rest("GET", "/v1/sandboxes/" + x);
    if (r.status !== 404 && !/deleting|deleted/.test(r.json?.state)) problems.push("the bulk delete left " + x + " " + r.text);
  }
  await shot(page, "sandboxes-bulk-delete-failed");
  step("drain");
  await page.click('#nav a[data-page="nodes"]');
  await page.click(`#nodes tr[data-id="${sbNode}"] button[data-op="drain"]`);
  await page.waitForSelector("#confirm");
  await page.click("#confirm-yes");
  await until("draining", async () => (await text(page, `#nodes tr[data-id="${sbNode}"] td:nth-child(2)`)) === "draining");
  if ((await rest("GET", "/v1/nodes")).json.nodes.find((n) => n.id === sbNode).state !== "draining") problems.push("the console's drain did not reach the server");
  await page.click(`#nodes tr[data-id="${sbNode}"] button[data-op="undrain"]`);
  await page.waitForSelector("#confirm");
  await page.click("#confirm-yes");
  await until("ready again", async () => (await text(page, `#nodes tr[data-id="${sbNode}"] td:nth-child(2)`)) === "ready");

  step("tenants");
  const made = await rest("POST", "/v1/tenants", { name: "console-tenant" });
  if (made.status !== 201) throw new Error("create tenant: HTTP " + made.status + " " + made.text);
  await page.click('#nav a[data-page="tenants"]');
  await page.waitForSelector(`#tenants tr[data-id="${made.json.tenant.id}"]`);
  await page.click(`#tenants tr[data-id="${made.json.tenant.id}"] button.keys`);
  await page.waitForSelector("#keys tr[data-id]");
  step("quota");
  const tid = made.json.tenant.id;
  await page.click(`#tenants tr[data-id="${tid}"] button.quota`);
  await page.fill("#quota-sandboxes", "-1");
  await page.click("#quota-save");
  await until("the form's quota refusal", async () => (await text(page, "#quota-status")).startsWith('sandboxes "-1": want a whole number'));
  const tooBig = String(2 ** 31);
  const bigDirect = await rest("PUT", "/v1/tenants/" + tid + "/quota", { max_sandboxes: 3, max_cpus: 0, max_memory_mib: 2 ** 31 });
  await page.fill("#quota-sandboxes", "3");
  await page.fill("#quota-memory", tooBig);
  await page.click("#quota-save");
  await until("the server's quota refusal", async () => !["saving…", ""].includes(await text(page, "#quota-status")));
  if (bigDirect.status !== 400 || (await text(page, "#quota-status")) !== bigDirect.json.code + ": " + bigDirect.json.message)
    problems.push(`quota refusal shown ${JSON.stringify(await text(page, "#quota-status"))}, the server says HTTP ${bigDirect.status} ${bigDirect.text}`);
  await page.fill("#quota-memory", "2048");
  await page.fill("#quota-cpus", "4");
  await page.click("#quota-save");
  await until("the quota saved", async () => (await text(page, "#quota-status")) === "saved");
  const q = (await rest("GET", "/v1/tenants")).json.tenants.find((x) => x.id === tid).quota;
  if (q.max_sandboxes !== 3 || q.max_cpus !== 4 || q.max_memory_mib !== 2048) problems.push("the saved quota is not the tenant's: " + JSON.stringify(q));
  await until("the table's quota", async () => (await text(page, `#tenants tr[data-id="${tid}"] td.quota-sandboxes`)) === "0 of 3");
  step("key create");
  await page.click("#key-create");
  await page.waitForSelector("#key-secret-value");
  const newSecret = await text(page, "#key-secret-value");
  if ((await rest("GET", "/v1/sandboxes", undefined, newSecret)).status !== 200) problems.push("the key the console made does not sign in");
  const newKeyID = (await rest("GET", "/v1/keys?tenant=" + tid)).json.keys.find((k) => newSecret.startsWith(k.prefix) && !k.revoked_at)?.id;
  if (!newKeyID) problems.push("the new key is not in the tenant's keys");
  await page.waitForSelector(`#keys tr[data-id="${newKeyID}"]`);
  await shot(page, "tenants-key-created");
  // The secret is shown once: another tenant's keys, and back, and it is gone.
  await page.click(`#tenants tr[data-id="${(await rest("GET", "/v1/tenants")).json.tenants.find((x) => x.id !== tid).id}"] button.keys`);
  await until("the secret gone", async () => !(await page.content()).includes(newSecret));
  await page.click(`#tenants tr[data-id="${tid}"] button.keys`);
  await page.waitForSelector(`#keys tr[data-id="${newKeyID}"] button.revoke`);
  if ((await page.content()).includes(newSecret)) problems.push("the key's secret is shown again");
  step("key revoke");
  // Escape cancels the confirmation: nothing done.
  await page.click(`#keys tr[data-id="${newKeyID}"] button.revoke`);
  await page.waitForSelector("#confirm");
  await page.keyboard.press("Escape");
  await until("the dialog gone", async () => (await count(page, "#confirm")) === 0, 5000);
  await new Promise((r) => setTimeout(r, 300));
  if ((await rest("GET", "/v1/sandboxes", undefined, newSecret)).status !== 200) problems.push("an Escaped revoke revoked the key");
  await page.click(`#keys tr[data-id="${newKeyID}"] button.revoke`);
  await page.waitForSelector("#confirm");
  if (!(await text(page, "#confirm-items")).includes(newKeyID)) problems.push("the revoke confirmation does not name " + newKeyID);
  await page.click("#confirm-yes");
  await until("revoked in the table", async () => (await text(page, `#keys tr[data-id="${newKeyID}"] td.revoked`)) !== "");
  if ((await rest("GET", "/v1/sandboxes", undefined, newSecret)).status !== 401) problems.push("the key the console revoked still signs in");
  await shot(page, "tenants");

  step("tenant key");
  // A tenant's key: the admin pages are not offered, and the API refuses
  // them when asked anyway; the admin tenant's credential is not shown.
  const tkey = made.json.key;
  await page.click("#signout");
  await page.fill("#key", tkey);
  await page.click("#signin button[type=submit]");
  await page.waitForSelector("#sandboxes");
  await until("the nav decided", async () => (await page.$$eval("#nav a", (as) => as.filter((a) => !a.hidden).length)) === 4);
  const offered = await page.$$eval("#nav a", (as) => as.filter((a) => !a.hidden).map((a) => a.dataset.page).join(","));
  if (offered !== "sandboxes,templates,credentials,audit log") problems.push("a tenant key is offered " + offered);
  if ((await count(page, `#sandboxes tr[data-id="${id}"]`)) !== 0) problems.push("a tenant key sees another tenant's sandbox");
  for (const [path, want] of [["/v1/nodes", 403], ["/v1/tenants", 403]]) {
    const r = await rest("GET", path, undefined, tkey);
    if (r.status !== want) problems.push(`a tenant key's GET ${path}: HTTP ${r.status}, want ${want}`);
  }
  await go(page, url + "/console/#/nodes");
  await until("the nodes refusal", async () => (await text(page, "#nodes-status")) !== "");
  const nodesRefusal = await text(page, "#nodes-status");
  const direct403 = (await rest("GET", "/v1/nodes", undefined, tkey)).json;
  if (nodesRefusal !== direct403.code + ": " + direct403.message) problems.push("a tenant on #/nodes sees " + JSON.stringify(nodesRefusal));
  await go(page, url + "/console/#/templates");
  await page.fill("#build-name", "tenant-try");
  await page.fill("#build-from", "dir:" + process.env.TEMPLATE_DIR);
  await page.click("#build button[type=submit]");
  await until("the build refusal", async () => (await text(page, "#build-error")).startsWith("permission_denied"));
  await go(page, url + "/console/#/credentials");
  await until("the credentials listed", async () => (await count(page, "#credentials tr")) > 0);
  await new Promise((r) => setTimeout(r, 300));
  if ((await count(page, `#credentials tr[data-id="${cred.json.id}"]`)) !== 0) problems.push("a tenant key sees another tenant's credential");
  if (which === "firefox") bodies.push(...(await page.evaluate(() => window.__bodies ?? [])));
  else page.off("response", keep);
  const html = await page.evaluate(() => document.documentElement.outerHTML);
  if (html.includes(secret) || bodies.some((b) => b.includes(secret))) problems.push("a credential's secret reached the console");
  if (!bodies.some((b) => b.includes(cred.json.id))) problems.push("the kept responses miss the credential listing: the secret check saw nothing");
  await cspSeen(page);
  step("done");
} catch (e) {
  problems.push("after step " + steps.at(-1) + ": " + e.message);
  // What the page showed when it failed: a screenshot and its text.
  const [page] = browser.contexts().flatMap((c) => c.pages());
  if (page) {
    await shot(page, "failed", { fullPage: true }).catch(() => {});
    console.error("console.mjs: the page at the failure:\n" + (await page.evaluate(() => document.body.innerText.slice(0, 4000)).catch((e) => e.message)));
  }
} finally {
  await browser.close();
  rmSync(files, { recursive: true, force: true });
}
console.log(JSON.stringify({ ok: problems.length === 0, problems, steps, id, fork, victim }));
