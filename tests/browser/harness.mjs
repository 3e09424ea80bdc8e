// Real processes for the dashboard's browser tests: a simulated vLLM fleet
// (`lmwarden sim`), the warden in front of it (`lmwarden serve`), a little
// agent-shaped traffic, and Debian's headless Chromium driven by playwright-core.
import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import { mkdtempSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
export const repoRoot = path.resolve(here, '../..');
// playwright-core lives in ui/node_modules (installed by scripts/bootstrap.sh).
const requireFromUi = createRequire(path.join(repoRoot, 'ui', 'package.json'));
export const { chromium } = requireFromUi('playwright-core');

export const CHROMIUM = process.env.LMWARDEN_CHROMIUM || '/usr/bin/chromium';
export const ADMIN_TOKEN = 'browser-test-admin-token';

const live = new Set();
process.on('exit', () => { for (const p of live) p.kill('SIGKILL'); });

export function binaryPath() {
  const bin = process.env.LMWARDEN_BINARY;
  if (!bin) throw new Error('set LMWARDEN_BINARY to the lmwarden executable (ctest passes it)');
  return bin;
}

export function artifactsDir() {
  const dir = process.env.LMWARDEN_BROWSER_ARTIFACTS || path.join(repoRoot, 'build', 'browser-artifacts');
  mkdirSync(dir, { recursive: true });
  return dir;
}

// Starts a process and resolves with the first stdout match of `pattern`.
function start(cmd, args, pattern, { env = {}, timeoutMs = 30000, name } = {}) {
  return new Promise((resolve, reject) => {
    const proc = spawn(cmd, args, { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    live.add(proc);
    let out = '';
    let err = '';
    const timer = setTimeout(() => fail(new Error(`${name} printed no ${pattern} within ${timeoutMs} ms`)), timeoutMs);
    const fail = (e) => {
      clearTimeout(timer);
      proc.kill('SIGKILL');
      e.message += `\n--- ${name} stdout ---\n${out}\n--- ${name} stderr ---\n${err.slice(-4000)}`;
      reject(e);
    };
    proc.stdout.on('data', (d) => {
      out += d;
      const m = out.match(pattern);
      if (m) { clearTimeout(timer); resolve({ proc, match: m, stderr: () => err }); }
    });
    proc.stderr.on('data', (d) => { err += d; if (err.length > 1 << 20) err = err.slice(-(1 << 19)); });
    proc.on('exit', (code, sig) => { live.delete(proc); fail(new Error(`${name} exited (${code ?? sig}) before it was ready`)); });
    proc.on('error', fail);
  });
}

async function stop(proc) {
  if (!proc || proc.exitCode !== null || proc.signalCode !== null) return;
  const exited = new Promise((r) => proc.once('exit', r));
  proc.kill('SIGTERM');
  proc.kill('SIGCONT');  // a stopped process (pauseWarden) handles SIGTERM once continued
  const t = setTimeout(() => proc.kill('SIGKILL'), 5000);
  await exited;
  clearTimeout(t);
  live.delete(proc);
}

// A Redis of its own on a free loopback port (Debian's redis-server), for
// shared homes: { url, stop() }. The port is free when probed, but another
// test running beside this one can take it before Redis binds it: Redis then
// exits, and another port is tried (five in all).
export async function startRedis() {
  const freePort = () => new Promise((resolve, reject) => {
    const probe = net.createServer();
    probe.once('error', reject);
    probe.listen(0, '127.0.0.1', () => {
      const { port: p } = probe.address();
      probe.close(() => resolve(p));
    });
  });
  const dir = mkdtempSync(path.join(tmpdir(), 'lmwarden-redis-'));
  for (let attempt = 1; ; attempt++) {
    const port = await freePort();
    let redis;
    try {
      redis = await start('/usr/bin/redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '',
        '--appendonly', 'no', '--daemonize', 'no', '--protected-mode', 'no', '--dir', dir],
      /Ready to accept connections/, { name: 'redis-server' });
    } catch (e) {
      if (attempt < 5 && /exited/.test(e.message)) continue;
      rmSync(dir, { recursive: true, force: true });
      throw e;
    }
    return {
      url: `redis://127.0.0.1:${port}`,
      async stop() {
        await stop(redis.proc);
        rmSync(dir, { recursive: true, force: true });
      },
    };
  }
}

// A simulated fleet (`servers` vLLM-like servers of `dp` ranks each) behind a
// warden. `simArgs`: more options of `lmwarden sim`; `configLines`: more
// top-level lines of the warden's file.
export async function startFleet({ model = 'M', dp = 4, servers = 1, timeScale = 20, adminToken = ADMIN_TOKEN,
  simArgs = [], configLines = [], aliases = [] } = {}) {
  const bin = binaryPath();
  const dir = mkdtempSync(path.join(tmpdir(), 'lmwarden-browser-'));
  const sims = [];
  const stopSims = () => Promise.all(sims.map((s) => stop(s.proc)));
  let warden;
  const config = path.join(dir, 'lmwarden.yaml');
  // The warden's file, with `ranks` of each server's ranks as its replicas.
  const writeConfig = (ranks) => writeFileSync(config, [
    'listen: 127.0.0.1:0',
    'admin_token_env: LMWARDEN_TEST_ADMIN_TOKEN',
    'scrape_interval: 500ms',
    ...configLines,
    'models:',
    `  - name: ${model}`,
    ...(aliases.length ? [`    aliases: [${aliases.join(', ')}]`] : []),
    '    affinity: true',
    '    spill_threshold: auto',
    '    backends:',
    ...sims.flatMap((s) => [`      - url: ${s.match[1]}`, `        data_parallel_size: ${ranks}`]),
    '',
  ].join('\n'));
  try {
    for (let i = 0; i < servers; i++) {
      sims.push(await start(bin, ['sim', '--listen', '127.0.0.1:0', '--dp', String(dp), '--model', model,
        '--time-scale', String(timeScale), ...simArgs], /listening on (http:\/\/127\.0\.0\.1:\d+)/,
      { name: `sim ${i}` }));
    }
    writeConfig(dp);
    warden = await start(bin, ['serve', '--config', config, '--listen', '127.0.0.1:0'],
      /lmwarden listening on (http:\/\/127\.0\.0\.1:\d+)/,
      { name: 'warden', env: { LMWARDEN_TEST_ADMIN_TOKEN: adminToken } });
  } catch (e) {
    await stopSims();
    throw e;
  }
  const base = warden.match[1];
  return {
    model, dp, base,
    simUrl: sims[0].match[1],
    simUrls: sims.map((s) => s.match[1]),
    async stopWarden() { await stop(warden.proc); },
    // SIGSTOP: the kernel still accepts connections, and nothing answers
    // them, as with a hung warden. A test that pauses resumes in a finally.
    pauseWarden() { warden.proc.kill('SIGSTOP'); },
    resumeWarden() { warden.proc.kill('SIGCONT'); },
    // Rewrites the file with `ranks` replicas per server and reloads it
    // (SIGHUP), once the warden lists that many.
    async reload(ranks) {
      writeConfig(ranks);
      warden.proc.kill('SIGHUP');
      await eventually(async () => (await getJson(`${base}/api/models/${model}`)).replicas.length === ranks * servers,
        { what: `${ranks * servers} replicas after the reload` });
    },
    // Writes `text` as the file and reloads it (SIGHUP): a file the warden
    // refuses, once /api/models says so.
    async refuseReload(text) {
      writeFileSync(config, text);
      warden.proc.kill('SIGHUP');
      await eventually(async () => (await getJson(`${base}/api/models`)).configuration?.reload_refused != null,
        { what: 'the reload refused' });
    },
    async stopSim(index) { await stop(sims[index].proc); },
    async stop() {
      await stop(warden.proc);
      await stopSims();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

export async function getJson(url, init) {
  const res = await fetch(url, init);
  const text = await res.text();
  if (!res.ok) throw new Error(`${init?.method ?? 'GET'} ${url}: ${res.status} ${text}`);
  return JSON.parse(text);
}

// Filler that the simulator's tokenizer turns into many full KV blocks, so
// later turns of a conversation find their prefix in the cache.
function filler(words, seed) {
  const vocab = ['replica', 'prefix', 'cache', 'token', 'warden', 'route', 'session', 'kernel', 'tensor', 'batch',
    'queue', 'decode', 'prefill', 'block', 'engine', 'rank', 'model', 'stream', 'chunk', 'latency'];
  const out = [];
  let x = seed * 2654435761 >>> 0;
  for (let i = 0; i < words; i++) {
    x = (x * 1103515245 + 12345) >>> 0;
    out.push(vocab[x % vocab.length]);
  }
  return out.join(' ');
}

// Agent-shaped traffic: `sessions` conversations of `turns` turns each, each
// turn resending the whole history with a `session-id` header (Codex style).
export async function driveTraffic(base, model, { sessions = 4, turns = 3, system = 1500, user = 600, maxTokens = 24, tag = 's', thinkMs = 0 } = {}) {
  const systemPrompt = filler(system, 1);
  const one = async (s) => {
    const messages = [{ role: 'system', content: systemPrompt }, { role: 'user', content: filler(user, 100 + s) }];
    for (let turn = 0; turn < turns; turn++) {
      const res = await getJson(`${base}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'session-id': `${tag}-${s}` },
        body: JSON.stringify({ model, messages, max_tokens: maxTokens }),
      });
      messages.push({ role: 'assistant', content: res.choices[0].message.content });
      messages.push({ role: 'user', content: filler(80, 1000 * s + turn) });
      if (thinkMs) await new Promise((r) => setTimeout(r, thinkMs * (0.5 + Math.random())));
    }
  };
  await Promise.all(Array.from({ length: sessions }, (_, s) => one(s)));
}

// Polls fn until it returns a truthy value or `timeoutMs` passes.
export async function eventually(fn, { timeoutMs = 15000, intervalMs = 250, what = 'condition' } = {}) {
  const deadline = Date.now() + timeoutMs;
  let last;
  for (;;) {
    try {
      const v = await fn();
      if (v) return v;
    } catch (e) { last = e; }
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}${last ? `: ${last.message}` : ''}`);
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}

// eventually() within 10 s, its failure said as `what` (a text, or a
// function giving one at the time).
export async function assertEventually(fn, what) {
  try {
    await eventually(fn, { timeoutMs: 10000, what: 'it' });
  } catch (e) {
    throw new Error(`${typeof what === 'function' ? await what() : what}: ${e.message}`);
  }
}

export function launchBrowser() {
  return chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    // Playwright gives each launch a fresh temporary profile (--user-data-dir).
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking',
      '--disable-component-update', '--disable-quic', '--no-first-run', '--disable-sync'],
  });
}

// Runs fn(page) in a fresh browser context (`timezoneId`: the browser's
// zone, the machine's by default); on failure saves a full-page screenshot
// to the artifacts folder and rethrows.
export async function withPage(browser, name, fn, { viewport = { width: 1366, height: 768 }, timezoneId } = {}) {
  const context = await browser.newContext({ viewport, timezoneId });
  const page = await context.newPage();
  page.setDefaultTimeout(10000);  // fail inside the test's own timeout, with a screenshot
  const consoleErrors = [];
  page.on('pageerror', (e) => consoleErrors.push(String(e)));
  page.on('console', (m) => { if (m.type() === 'error') consoleErrors.push(m.text()); });
  try {
    await fn(page, consoleErrors);
  } catch (e) {
    const file = path.join(artifactsDir(), `${name.replace(/[^A-Za-z0-9_-]+/g, '_')}.png`);
    try {
      await page.screenshot({ path: file, fullPage: true });
      e.message += `\nscreenshot: ${file}`;
    } catch { /* page gone */ }
    if (consoleErrors.length) e.message += `\nbrowser errors:\n${consoleErrors.join('\n')}`;
    throw e;
  } finally {
    await context.close();
  }
}
