// The warden's JSON API (DESIGN §7.2) and the admin token.
const TOKEN_KEY = 'lmwarden.adminToken';
// A warden that accepts connections and never answers (stopped, or hung) is
// as unreachable as one that refuses them; the pages poll every second or
// two, so an answer later than this is not waited for.
const TIMEOUT_MS = 5000;

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

async function request(method, path, body) {
  const headers = { Accept: 'application/json' };
  const init = { method, headers, cache: 'no-store', signal: AbortSignal.timeout(TIMEOUT_MS) };
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    const token = adminToken();
    if (token) headers.Authorization = `Bearer ${token}`;
    init.body = JSON.stringify(body);
  }
  let res;
  let text;
  try {
    res = await fetch(path, init);
    text = await res.text();  // the timeout covers the body too
  } catch {
    throw new ApiError(0, 'the warden is not answering');
  }
  let json = null;
  try { json = text ? JSON.parse(text) : null; } catch { /* not JSON */ }
  if (!res.ok) {
    const msg = json?.error?.message ?? (text || res.statusText);
    throw new ApiError(res.status, msg);
  }
  return json;
}

// Model names may contain slashes ("Qwen/Qwen3-4B"): keep them, escape the rest.
export function modelPath(name) {
  return name.split('/').map(encodeURIComponent).join('/');
}

export const api = {
  models: () => request('GET', '/api/models'),
  model: (name) => request('GET', `/api/models/${modelPath(name)}`),
  patchModel: (name, body) => request('PATCH', `/api/models/${modelPath(name)}`, body),
  stats: (model, windowS) => {
    const q = new URLSearchParams({ window: String(windowS) });
    if (model) q.set('model', model);
    return request('GET', `/api/stats?${q}`);
  },
};

// Kept for this tab only (sessionStorage), never in a cookie or the URL.
export function adminToken() {
  try { return sessionStorage.getItem(TOKEN_KEY) || ''; } catch { return ''; }
}
export function setAdminToken(token) {
  try {
    if (token) sessionStorage.setItem(TOKEN_KEY, token);
    else sessionStorage.removeItem(TOKEN_KEY);
  } catch { /* storage disabled: the token lives until reload */ }
}
