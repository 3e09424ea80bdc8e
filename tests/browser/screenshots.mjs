// Takes the dashboard screenshots for the docs with live traffic from the
// simulator:
//   LMWARDEN_BINARY=build/dev/lmwarden node tests/browser/screenshots.mjs [out-dir]
// Writes models.png, model.png and stats.png (1366×768 laptop) and the same
// with a -wide suffix (1920×1080).
import path from 'node:path';
import { mkdirSync } from 'node:fs';
import { repoRoot, startFleet, driveTraffic, launchBrowser, eventually, getJson } from './harness.mjs';
import { startDevServer } from '../../ui/dev_server.mjs';

const out = path.resolve(process.argv[2] ?? path.join(repoRoot, 'docs', 'screenshots'));
mkdirSync(out, { recursive: true });
const MODEL = 'qwen3-4b-dp4';
const fleet = await startFleet({ model: MODEL, dp: 4, timeScale: 20 });
let dev = null;
let browser = null;
let running = true;
try {
  const served = (await fetch(`${fleet.base}/ui/app.js`).catch(() => null))?.ok;
  if (!served) dev = await startDevServer({ warden: fleet.base });
  const ui = served ? fleet.base : dev.url;
  // Conversations with a few seconds of "thinking" between turns, started in
  // a staggered way, for a few minutes before the pictures and during them.
  const background = (async () => {
    const lanes = Array.from({ length: 12 }, async (_, lane) => {
      await new Promise((r) => setTimeout(r, lane * 1500));
      for (let n = 0; running; n++) {
        await driveTraffic(fleet.base, MODEL, { sessions: 1, turns: 6, tag: `l${lane}-${n}`, system: 1800, user: 700,
          maxTokens: 64, thinkMs: 3000 }).catch(() => {});
      }
    });
    await Promise.all(lanes);
  })();
  await new Promise((r) => setTimeout(r, Number(process.env.TRAFFIC_SECONDS ?? 150) * 1000));
  await eventually(async () => (await getJson(`${fleet.base}/api/models/${MODEL}`)).replicas.every((r) => r.running !== null));
  browser = await launchBrowser();
  for (const [suffix, viewport] of [['', { width: 1366, height: 768 }], ['-wide', { width: 1920, height: 1080 }]]) {
    const context = await browser.newContext({ viewport });
    const page = await context.newPage();
    for (const [name, route] of [['models', '/'], ['model', `/models/${MODEL}`], ['stats', '/stats?window=900']]) {
      await page.goto(`${ui}${route}`);
      await page.waitForTimeout(3000);
      await page.screenshot({ path: path.join(out, `${name}${suffix}.png`), fullPage: true });
      console.log(path.join(out, `${name}${suffix}.png`));
    }
    await context.close();
  }
  running = false;
  await background;
} finally {
  running = false;
  await browser?.close();
  await dev?.close();
  await fleet.stop();
}
