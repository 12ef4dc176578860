// Drives the web console in headless Chromium (Debian's, via playwright-core
// from console/'s lockfile) against a running `space server --dev`.
// Env: SPACE_URL, SPACE_KEY, XSS_ID (a sandbox whose metadata label is
// XSS_PAYLOAD), SHOTS (a directory for screenshots), PLAYWRIGHT (the
// playwright-core module's path). Prints one JSON line: {ok, steps, id}.
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
const { chromium } = require(process.env.PLAYWRIGHT);
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
const step = (s) => { steps.push(s); console.error("console.mjs: " + s); };

const browser = await chromium.launch({ executablePath: "/usr/bin/chromium", headless: true, args: ["--no-sandbox"] });
let id = "";
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  page.on("dialog", async (d) => { problems.push("a dialog opened: " + d.message()); await d.dismiss(); });
  page.on("console", (m) => {
    if (m.type() === "error" && /Content Security Policy|Refused to/i.test(m.text())) problems.push("CSP violation: " + m.text());
  });
  page.on("pageerror", (e) => problems.push("page error: " + e.message));
  page.setDefaultTimeout(60000);

  await page.goto(url + "/console/");
  step("wrong key");
  await page.fill("#key", "space_k-000000000000000000_" + "0".repeat(64));
  await page.click("#signin button[type=submit]");
  await until("the refusal", async () => (await text(page, "#signin-error")).includes("unauthenticated"));
  if (await page.evaluate(() => sessionStorage.length) !== 0) problems.push("a refused key was kept in session storage");
  await page.screenshot({ path: shots + "/signin-refused.png" });

  step("sign in");
  await page.fill("#key", key);
  await page.click("#signin button[type=submit]");
  await page.waitForSelector("#sandboxes");
  if (page.url().includes(key)) problems.push("the key is in the URL: " + page.url());

  step("create");
  await page.waitForSelector("#create-template option[value=minimal]", { state: "attached" });
  await page.selectOption("#create-template", "minimal");
  await page.selectOption("#create-runtime", "ns");
  await page.click("#create button[type=submit]");
  await page.waitForURL(/#\/sandbox\//);
  id = decodeURIComponent(page.url().split("#/sandbox/")[1]);
  await until("running", async () => (await text(page, '[data-field="state"]')) === "running");

  step("terminal");
  await until("the terminal", async () => (await text(page, "#term-status")) === "connected");
  await page.click("#terminal");
  await page.keyboard.type("echo hello\n");
  // Screen-reader mode keeps the terminal's rows as text: a row that is
  // exactly "hello" is the command's output, not its echo.
  await until("hello", () => page.$$eval(".xterm-accessibility-tree > div", (rs) => rs.some((r) => r.textContent.trim() === "hello")));
  await page.screenshot({ path: shots + "/sandbox-terminal.png" });

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
  if (await ops() !== "pause,stop,delete") problems.push("running offers " + await ops());
  step("pause");
  await page.click('#lifecycle button[data-op="pause"]');
  await until("paused", async () => (await text(page, '[data-field="state"]')) === "paused");
  await page.waitForSelector('#lifecycle button[data-op="resume"]');
  if (await ops() !== "resume,stop,delete") problems.push("paused offers " + await ops());
  step("resume");
  await page.click('#lifecycle button[data-op="resume"]');
  await until("running", async () => (await text(page, '[data-field="state"]')) === "running");

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
  await page.screenshot({ path: shots + "/sandbox-refusal.png" });
  release();
  await page.unroute(record);
  await until("stopped", async () => (await text(page, '[data-field="state"]')) === "stopped");
  await page.waitForSelector('#lifecycle button[data-op="start"]');
  if (await ops() !== "start,delete") problems.push("stopped offers " + await ops());
  step("start");
  await page.click('#lifecycle button[data-op="start"]');
  await until("running again", async () => (await text(page, '[data-field="state"]')) === "running");

  step("xss");
  await page.goto(url + "/console/#/sandbox/" + encodeURIComponent(xssID));
  await until("the label", async () => (await text(page, '[data-field="metadata label"]')) === payload);
  const imgs = await page.$$eval("img", (is) => is.length);
  if (imgs !== 0) problems.push(imgs + " img elements made from sandbox metadata");
  if (await page.evaluate(() => window.__xss)) problems.push("the metadata's script ran");
  await page.screenshot({ path: shots + "/sandbox-xss.png" });

  step("list");
  await page.goto(url + "/console/#/");
  await page.waitForSelector(`#sandboxes tr[data-id="${id}"]`);
  await page.waitForSelector(`#sandboxes tr[data-id="${xssID}"]`);
  if (await page.$$eval("img", (is) => is.length) !== 0) problems.push("img elements on the sandboxes page");
  await page.screenshot({ path: shots + "/sandboxes.png" });

  step("delete");
  await page.goto(url + "/console/#/sandbox/" + encodeURIComponent(id));
  await page.click('#lifecycle button[data-op="delete"]');
  await page.waitForURL(/#\/$/);
  await until("the delete", () => page.$$eval(`#sandboxes tr[data-id="${id}"]`, (rs) => rs.length === 0 || /deleting|deleted/.test(rs[0].textContent)));
  step("done");
} catch (e) {
  problems.push("after step " + steps.at(-1) + ": " + e.message);
} finally {
  await browser.close();
}
console.log(JSON.stringify({ ok: problems.length === 0, problems, steps, id }));
