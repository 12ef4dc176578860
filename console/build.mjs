// Bundles the console into ../internal/console/dist, which the server
// embeds (go:embed). Run by `make build` (after `npm ci`).
import * as esbuild from "esbuild";
import { copyFileSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";

const out = "../internal/console/dist";
mkdirSync(out, { recursive: true });
await esbuild.build({
  entryPoints: { app: "src/main.ts" },
  bundle: true,
  minify: true,
  format: "iife",
  target: ["chrome120", "firefox120"],
  outdir: out,
  legalComments: "none",
  logLevel: "warning",
});
copyFileSync("index.html", out + "/index.html");
// The bundled packages' licenses, served beside the bundle.
const bundled = ["@xterm/xterm", "@xterm/addon-canvas", "@xterm/addon-fit"];
writeFileSync(
  out + "/LICENSES.txt",
  bundled.map((p) => p + "\n\n" + readFileSync("node_modules/" + p + "/LICENSE", "utf8")).join("\n\n"),
);
