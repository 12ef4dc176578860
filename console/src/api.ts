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
  generation?: number;
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
  if (!res.ok) throw await refusal(res);
  const text = await res.text();
  return (text ? JSON.parse(text) : {}) as T;
}

export const listSandboxes = () => call<{ sandboxes: Sandbox[] }>("GET", "/v1/sandboxes").then((r) => r.sandboxes ?? []);
export const getSandbox = (id: string) => call<Sandbox>("GET", "/v1/sandboxes/" + encodeURIComponent(id));
export const listTemplates = () => call<{ templates: Template[] }>("GET", "/v1/templates").then((r) => r.templates ?? []);
// CreateRequest is the part of POST /v1/sandboxes' body the console sends.
export interface CreateRequest {
  template?: string;
  runtime?: string;
  cpus?: number;
  memory_mib?: number;
  env?: Record<string, string>;
  timeout?: string;
}
export const createSandbox = (req: CreateRequest) => call<Sandbox>("POST", "/v1/sandboxes", req);
export const deleteSandbox = (id: string) => call<unknown>("DELETE", "/v1/sandboxes/" + encodeURIComponent(id));
export interface FileEntry {
  name: string;
  path: string;
  type: string;
  size: number;
  modified_at: string;
  symlink_target?: string;
}
export interface Snapshot {
  id: string;
  kind: string;
  tier: string;
  state: string;
  reason?: string;
  size_bytes?: number;
  created_at: string;
}
export interface Event {
  seq: number;
  time: string;
  type: string;
  message: string;
}
export interface Port {
  port: number;
  protocol: string;
  public: boolean;
  url: string;
  proxy_url?: string;
}

export interface Process {
  pid: number;
  cmd: string;
  args: string[];
  cwd?: string;
  tag?: string;
}
export interface EgressRules {
  domains?: string[];
  cidrs?: string[];
  ports?: string[];
}
export interface EgressPolicy {
  allow_internet: boolean;
  allow?: EgressRules;
  deny?: EgressRules;
}

const sbPath = (id: string) => "/v1/sandboxes/" + encodeURIComponent(id);
const q = (path: string) => "?path=" + encodeURIComponent(path);

export const listFiles = (id: string, path: string) =>
  call<{ entries: FileEntry[] }>("GET", sbPath(id) + "/files/list" + q(path)).then((r) => r.entries ?? []);
export const listSnapshots = (id: string) => call<{ snapshots: Snapshot[] }>("GET", sbPath(id) + "/snapshots").then((r) => r.snapshots ?? []);
export const createSnapshot = (id: string) => call<Snapshot>("POST", sbPath(id) + "/snapshots", {});
export const deleteSnapshot = (id: string, snap: string) => call<unknown>("DELETE", sbPath(id) + "/snapshots/" + encodeURIComponent(snap));
export const fork = (id: string, snap: string) => call<Sandbox>("POST", sbPath(id) + "/fork", { snapshot: snap });
export const rollback = (id: string, snap: string) => call<Sandbox>("POST", sbPath(id) + "/rollback", { snapshot: snap });
export const listEvents = (id: string) => call<{ events: Event[] }>("GET", sbPath(id) + "/events").then((r) => r.events ?? []);
export const listPorts = (id: string) => call<{ ports: Port[] }>("GET", sbPath(id) + "/ports").then((r) => r.ports ?? []);

export const listProcesses = (id: string) => call<{ processes: Process[] }>("GET", sbPath(id) + "/processes").then((r) => r.processes ?? []);
export const getEgress = (id: string) => call<EgressPolicy>("GET", sbPath(id) + "/egress");
export const setEgress = (id: string, p: EgressPolicy) => call<EgressPolicy>("PUT", sbPath(id) + "/egress", p);

// refusal reads a failed response's {code, message} as an APIError.
async function refusal(res: Response): Promise<APIError> {
  const text = await res.text();
  let code = "http_" + res.status;
  let message = text || res.statusText;
  try {
    const e = JSON.parse(text) as { code?: string; message?: string };
    if (e.code) code = e.code;
    if (e.message) message = e.message;
  } catch {
    // not JSON: the body as it came
  }
  return new APIError(res.status, code, message);
}

// fileRequest is a request on GET/PUT /v1/sandboxes/{id}/files: the file's
// bytes stream as the body (a File upload is read from disk by the browser,
// never whole into script memory).
async function fileRequest(method: string, id: string, path: string, body?: Blob): Promise<Response> {
  const headers: Record<string, string> = { Authorization: "Bearer " + (getKey() ?? "") };
  if (body) headers["Content-Type"] = "application/octet-stream";
  const res = await fetch(sbPath(id) + "/files" + q(path), { method, headers, body, credentials: "omit", cache: "no-store" });
  if (!res.ok) throw await refusal(res);
  return res;
}
export const uploadFile = (id: string, path: string, file: Blob) => fileRequest("PUT", id, path, file).then(() => undefined);
export const readFile = (id: string, path: string) => fileRequest("GET", id, path);

export const lifecycle = (id: string, op: string) => call<Sandbox>("POST", "/v1/sandboxes/" + encodeURIComponent(id) + "/" + op, {});

// moves are the lifecycle buttons each state offers: the legal moves of the
// server's state machine (internal/sandbox/lifecycle.go) that change the
// state. Delete is legal from every state but deleted.
export function moves(state: string): string[] {
  switch (state) {
    case "running":
      return ["pause", "hibernate", "stop", "delete"];
    case "paused":
      return ["resume", "hibernate", "stop", "delete"];
    case "stopped":
      return ["start", "delete"];
    case "hibernated":
      return ["restore", "delete"];
    case "deleted":
      return [];
    default:
      return ["delete"];
  }
}

export interface Progress {
  phase: string;
  message?: string;
  done: number;
  total?: number;
  unit?: string;
}
export interface TemplateInfo {
  name: string;
  source: string;
  state: string;
  reason?: string;
  size_bytes: number;
  created_at: string;
  progress?: Progress;
}
export interface WarmPool {
  template: string;
  runtime: string;
  cpus: number;
  memory_mib: number;
  ready: number;
  filling: number;
  hits: number;
  misses: number;
}
export interface Node {
  id: string;
  state: string;
  runtimes: string[];
  cpus: number;
  memory_mib: number;
  last_heartbeat: string;
  live: boolean;
  sandboxes: number;
  warm_pool?: WarmPool[];
  committed_mib: number;
  memory_measured: boolean;
  memory_total_mib: number;
  used_mib: number;
  memory_pressure?: string;
}
export interface Credential {
  id: string;
  name: string;
  scope: { tenant: string; project?: string; sandbox?: string };
  injection: { method: string; name?: string };
  allowed_hosts: string[];
  expires_at?: string;
  rate_limit?: number;
  created_at: string;
}
export interface AuditEntry {
  kind?: string;
  time: string;
  tenant: string;
  sandbox?: string;
  host: string;
  credential_id?: string;
  allowed: boolean;
  reason: string;
  count?: number;
}
export interface Tenant {
  id: string;
  name: string;
  created_at: string;
  quota: { max_sandboxes: number; max_memory_mib: number; max_cpus: number };
  usage: { sandboxes: number; memory_mib: number; cpus: number };
}
export interface APIKey {
  id: string;
  tenant: string;
  prefix: string;
  admin: boolean;
  created_at: string;
  revoked_at?: string;
}
export const listTemplateInfo = () => call<{ templates: TemplateInfo[] }>("GET", "/v1/templates").then((r) => r.templates ?? []);
export const buildTemplate = (name: string, from: string) => call<TemplateInfo>("POST", "/v1/templates", { name, from });
export const listNodes = () => call<{ nodes: Node[] }>("GET", "/v1/nodes").then((r) => r.nodes ?? []);
export const setNodeState = (id: string, op: "drain" | "undrain") => call<unknown>("POST", "/v1/nodes/" + encodeURIComponent(id) + "/" + op, {});
export const listCredentials = () => call<{ credentials: Credential[] }>("GET", "/v1/credentials").then((r) => r.credentials ?? []);
export const listAudit = () => call<{ entries: AuditEntry[] }>("GET", "/v1/credentials/audit").then((r) => r.entries ?? []);
export const listTenants = () => call<{ tenants: Tenant[] }>("GET", "/v1/tenants").then((r) => r.tenants ?? []);
export const listKeys = () => call<{ keys: APIKey[] }>("GET", "/v1/keys").then((r) => r.keys ?? []);
export const listKeysOf = (tenant: string) => call<{ keys: APIKey[] }>("GET", "/v1/keys?tenant=" + encodeURIComponent(tenant)).then((r) => r.keys ?? []);
export const setQuota = (tenant: string, q: Tenant["quota"]) => call<Tenant>("PUT", "/v1/tenants/" + encodeURIComponent(tenant) + "/quota", q);
// createKey makes a key of tenant: its secret is in this answer only.
export const createKey = (tenant: string) => call<{ key: APIKey; secret: string }>("POST", "/v1/keys", { tenant });
export const revokeKey = (id: string) => call<unknown>("DELETE", "/v1/keys/" + encodeURIComponent(id));

// Metric is one sample of GET /v1/sandboxes/{id}/metrics: the samples the
// server kept over the sandbox's life (bounded: older ones merged), and one
// taken now when the window holds the present and it runs. Disk is absent
// where the node does not account it.
export interface Metric {
  time: string;
  cpu_count: number;
  cpu_used_pct: number;
  mem_used_bytes: number;
  mem_total_bytes: number;
  disk_used_bytes?: number;
  disk_total_bytes?: number;
  span_seconds: number;
}
// metrics reads a sandbox's samples from second since (unix seconds) to
// the present, or over its whole life when since is not given.
export function metrics(id: string, since?: number): Promise<Metric[]> {
  const window = since === undefined ? "" : `?start=${since}`;
  return call<{ metrics: Metric[] }>("GET", sbPath(id) + "/metrics" + window).then((r) => r.metrics ?? []);
}
