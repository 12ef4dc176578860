// The REST API as the console uses it: the same routes, the same
// Authorization header, the same authorization as every other client.

const keyItem = "space.apiKey";

export function getKey(): string | null {
  return sessionStorage.getItem(keyItem);
}
export function setKey(k: string): void {
  sessionStorage.setItem(keyItem, k);
}
export function clearKey(): void {
  sessionStorage.removeItem(keyItem);
}

export interface Sandbox {
  id: string;
  name?: string;
  state: string;
  reason?: string;
  template: string;
  runtime: string;
  node: string;
  cpus: number;
  memory_mib: number;
  disk_mib: number;
  metadata?: Record<string, string>;
  created_at: string;
  expires_at?: string;
}

export interface Template {
  name: string;
  state: string;
}

// APIError is a refusal as the server said it: its code and message.
export class APIError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

export async function call<T>(method: string, path: string, body?: unknown, key?: string): Promise<T> {
  const k = key ?? getKey();
  const headers: Record<string, string> = {};
  if (k) headers["Authorization"] = "Bearer " + k;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const res = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    credentials: "omit",
    cache: "no-store",
  });
  const text = await res.text();
  if (!res.ok) {
    let code = "http_" + res.status;
    let message = text || res.statusText;
    try {
      const e = JSON.parse(text) as { code?: string; message?: string };
      if (e.code) code = e.code;
      if (e.message) message = e.message;
    } catch {
      // not JSON: the body as it came
    }
    throw new APIError(res.status, code, message);
  }
  return (text ? JSON.parse(text) : {}) as T;
}

export const listSandboxes = () => call<{ sandboxes: Sandbox[] }>("GET", "/v1/sandboxes").then((r) => r.sandboxes ?? []);
export const getSandbox = (id: string) => call<Sandbox>("GET", "/v1/sandboxes/" + encodeURIComponent(id));
export const listTemplates = () => call<{ templates: Template[] }>("GET", "/v1/templates").then((r) => r.templates ?? []);
export const createSandbox = (template: string, runtime: string) =>
  call<Sandbox>("POST", "/v1/sandboxes", { template: template || undefined, runtime: runtime || undefined });
export const deleteSandbox = (id: string) => call<unknown>("DELETE", "/v1/sandboxes/" + encodeURIComponent(id));
export const lifecycle = (id: string, op: string) => call<Sandbox>("POST", "/v1/sandboxes/" + encodeURIComponent(id) + "/" + op, {});

// moves are the lifecycle buttons each state offers: the legal moves of the
// server's state machine (internal/sandbox/lifecycle.go) that change the
// state. Delete is legal from every state but deleted.
export function moves(state: string): string[] {
  switch (state) {
    case "running":
      return ["pause", "stop", "delete"];
    case "paused":
      return ["resume", "stop", "delete"];
    case "stopped":
      return ["start", "delete"];
    case "hibernated":
      return ["resume", "delete"];
    case "deleted":
      return [];
    default:
      return ["delete"];
  }
}
