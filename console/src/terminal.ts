import { Terminal } from "@xterm/xterm";
import { FitAddon } from "@xterm/addon-fit";
import { CanvasAddon } from "@xterm/addon-canvas";
import { getKey } from "./api";

// The exec WebSocket's subprotocols (internal/restapi/wsauth.go): a browser
// cannot set Authorization on a WebSocket, and a key in the URL would be
// logged, so the key travels in the handshake's Sec-WebSocket-Protocol.
const execProtocol = "space.exec.v1";
const bearerProtocol = "space.bearer.";

const shell = ["/bin/sh", "-c", "if command -v bash >/dev/null 2>&1; then exec bash -l; else exec sh -l; fi"];

function b64(bytes: Uint8Array): string {
  let s = "";
  for (const b of bytes) s += String.fromCharCode(b);
  return btoa(s);
}
function unb64(s: string): Uint8Array {
  const bin = atob(s);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

// openTerminal runs an interactive shell in the sandbox on a PTY, in host.
// It returns the function that closes it.
export function openTerminal(host: HTMLElement, id: string, status: (s: string) => void): () => void {
  // The canvas renderer, loaded before open so the DOM renderer is never
  // made: it injects <style> elements, which the console's policy (no
  // inline style) refuses. Screen-reader mode keeps the rows readable as
  // text as well.
  const term = new Terminal({ cursorBlink: true, fontSize: 14, screenReaderMode: true, convertEol: false });
  const fit = new FitAddon();
  term.loadAddon(fit);
  term.loadAddon(new CanvasAddon());
  term.open(host);
  fit.fit();

  const proto = location.protocol === "https:" ? "wss:" : "ws:";
  const url = proto + "//" + location.host + "/v1/sandboxes/" + encodeURIComponent(id) + "/exec";
  const ws = new WebSocket(url, [execProtocol, bearerProtocol + (getKey() ?? "")]);
  const enc = new TextEncoder();
  const send = (m: object) => {
    if (ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify(m));
  };
  status("connecting");
  ws.onopen = () => {
    send({ cmd: shell, tty: true, cols: term.cols, rows: term.rows });
  };
  ws.onmessage = (ev) => {
    const m = JSON.parse(String(ev.data)) as { type: string; data?: string; exit_code?: number; message?: string };
    switch (m.type) {
      case "started":
        status("connected");
        term.focus();
        break;
      case "stdout":
      case "stderr":
        if (m.data) term.write(unb64(m.data));
        break;
      case "exit":
        status("shell exited (code " + (m.exit_code ?? "?") + ")");
        break;
      case "error":
        status("error: " + (m.message ?? "unknown"));
        break;
    }
  };
  ws.onclose = (ev) => {
    status(ev.reason ? "closed: " + ev.reason : "closed");
  };
  const input = term.onData((d) => send({ type: "stdin", data: b64(enc.encode(d)) }));
  const resize = term.onResize(({ cols, rows }) => send({ type: "resize", cols, rows }));
  const onWindow = () => fit.fit();
  window.addEventListener("resize", onWindow);
  return () => {
    window.removeEventListener("resize", onWindow);
    input.dispose();
    resize.dispose();
    ws.close();
    term.dispose();
  };
}
