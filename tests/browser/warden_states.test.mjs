// The dashboard in a real headless Chromium as the warden behind it changes
// state: stopped, hung, idle since its start, reloaded with other replicas.
// Each test starts a fleet of its own (dashboard.test.mjs shares one).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import {
  startFleet, driveTraffic, launchBrowser, withPage, eventually, getJson, assertEventually,
} from './harness.mjs';

let browser;

before(async () => {
  browser = await launchBrowser();
});

after(async () => {
  await browser?.close();
});

test('a warden that stops answering is said in words, even on a narrow screen, and the page dims', { timeout: 40000 }, async () => {
  const gone = await startFleet({ model: 'gone', dp: 2 });
  try {
    await withPage(browser, 'warden-gone', async (page) => {
      await page.goto(`${gone.base}/stats`);
      const live = page.locator('#live');
      await assertEventually(async () => (await live.getAttribute('data-state')) === 'ok', 'live');
      // "Live" is the dot alone at this width, its word kept for screen readers.
      assert.equal(await page.locator('.live-text').textContent(), 'Live');
      assert.ok((await page.locator('.live-text').boundingBox()).width <= 1, 'the word is hidden');
      assert.equal(await page.locator('main').getAttribute('data-stale'), null);
      await gone.stopWarden();
      await assertEventually(async () => (await live.getAttribute('data-state')) === 'error',
        async () => `state ${await live.getAttribute('data-state')}`);
      assert.equal(await page.locator('.live-text').innerText(), 'Warden unreachable — retrying');
      const said = await page.locator('.live-text').boundingBox();
      assert.ok(said.width > 150 && said.height < 30, `said in words, on one line: ${JSON.stringify(said)}`);
      assert.equal(await page.locator('main').getAttribute('data-stale'), 'true');
    }, { viewport: { width: 400, height: 800 } });
  } finally {
    await gone.stop();
  }
});

// Stopped (SIGSTOP) or hung, a warden still has its connections accepted by
// the kernel: the page gives up on a request after 5 s and says so.
test('a warden that accepts connections and never answers is said unreachable, then Live again', { timeout: 60000 }, async () => {
  const hung = await startFleet({ model: 'hung', dp: 1 });
  try {
    await withPage(browser, 'warden-hung', async (page) => {
      await page.goto(`${hung.base}/models/hung`);
      const live = page.locator('#live');
      await assertEventually(async () => (await live.getAttribute('data-state')) === 'ok', 'live');
      hung.pauseWarden();
      try {
        // The 5-s timeout of a request, the 1-s poll and some slack.
        await eventually(async () => (await live.getAttribute('data-state')) === 'error',
          { timeoutMs: 9000, what: 'the page to say the warden is unreachable' });
        assert.equal(await page.locator('.live-text').innerText(), 'Warden unreachable — retrying');
        assert.equal(await page.locator('main').getAttribute('data-stale'), 'true', 'the last figures dimmed');
      } finally {
        hung.resumeWarden();
      }
      await assertEventually(async () => (await live.getAttribute('data-state')) === 'ok', 'live again');
      assert.equal(await page.locator('main').getAttribute('data-stale'), null);
    });
  } finally {
    await hung.stop();
  }
});

test('a warden with no traffic says what to do', { timeout: 40000 }, async () => {
  const idle = await startFleet({ model: 'idle', dp: 2 });
  try {
    await withPage(browser, 'empty-state', async (page) => {
      await page.goto(`${idle.base}/stats`);
      const empty = page.locator('.chart-empty');
      await empty.waitFor();
      assert.match(await empty.innerText(), /No traffic yet — point a client at http:\/\/127\.0\.0\.1:\d+\/v1/);
    });
  } finally {
    await idle.stop();
  }
});

test('after a reload that changed the replicas the token panels say since when they count', { timeout: 60000 }, async () => {
  // Two servers of two ranks, then of one: the second server's rank 0 moves
  // from replica 2 to replica 1, so the model's counters start afresh.
  const r = await startFleet({ model: 'R', dp: 2, servers: 2 });
  try {
    await driveTraffic(r.base, 'R', { sessions: 2, turns: 2, tag: 'before' });
    const before = await getJson(`${r.base}/api/stats?window=900`);
    assert.equal(before.counted_since, before.started);
    await eventually(async () => (await getJson(`${r.base}/api/stats`)).now >= before.started + 3,
      { what: 'three seconds of the warden' });
    await r.reload(1);
    // No tokens since: not "no traffic yet", which the hour before belies.
    await withPage(browser, 'tokens-after-reload-empty', async (page, errors) => {
      await page.goto(`${r.base}/stats?window=900`);
      const summary = page.locator('[data-testid=tokens-summary]');
      await assertEventually(async () => /no tokens since a reload changed the replicas, \d+ s ago/.test(await summary.innerText()),
        'the empty panel says since when it counts');
      assert.doesNotMatch(await page.locator('main').innerText(), /No traffic yet/);
      assert.deepEqual(errors, []);
    });
    await driveTraffic(r.base, 'R', { sessions: 2, turns: 2, tag: 'after' });
    const after = await getJson(`${r.base}/api/stats?window=900`);
    const card = await getJson(`${r.base}/api/models/R`);
    assert.equal(after.started, before.started);
    assert.equal(after.counted_since, Math.floor(Date.parse(card.since) / 1000));
    assert.ok(after.counted_since >= after.started + 3, JSON.stringify(after));
    await withPage(browser, 'tokens-after-reload', async (page, errors) => {
      for (const where of [`${r.base}/stats?window=900`, `${r.base}/models/R`]) {
        await page.goto(where);
        const summary = page.locator('[data-testid=tokens-summary]');
        let text = '';
        await assertEventually(async () => /counted since a reload changed the replicas, \d+ s ago/.test(text = await summary.innerText()),
          `${where}: the summary says since when it counts`);
        assert.doesNotMatch(text, /the warden started/);
        const counted = Number(text.match(/replicas, (\d+) s ago/)[1]);
        const now = (await getJson(`${r.base}/api/stats`)).now;
        assert.ok(Math.abs(counted - (now - after.counted_since)) <= 3, `${where}: "${text}"`);
      }
      // The models page's hour share says it is only since then, too.
      await page.goto(`${r.base}/`);
      await assertEventually(async () => /since a reload, \d+ s ago/.test(await page.locator('table').first().innerText()),
        'the models table says the share is since the reload');
      assert.deepEqual(errors, []);
    });
  } finally {
    await r.stop();
  }
});
