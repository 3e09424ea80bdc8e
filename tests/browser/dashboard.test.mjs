// The dashboard in a real headless Chromium against a real warden with the
// simulator behind it (issue 5, "Tests that must exist"). One fleet per file:
// starting it is the slow part; each test leaves the model as it found it.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import {
  ADMIN_TOKEN, startFleet, driveTraffic, launchBrowser, withPage, eventually, getJson, assertEventually,
} from './harness.mjs';
import { startDevServer } from '../../ui/dev_server.mjs';

const MODEL = 'M';
let fleet;
let browser;
let ui;  // where the pages are loaded from: the warden itself

before(async () => {
  // Storing Responses, as vLLM with VLLM_ENABLE_RESPONSES_API_STORE=1.
  fleet = await startFleet({ model: MODEL, dp: 4, simArgs: ['--enable-responses-store'] });
  ui = fleet.base;
  const probe = await fetch(`${fleet.base}/ui/app.js`);
  assert.equal(probe.status, 200, 'the warden serves the dashboard assets');
  await driveTraffic(fleet.base, MODEL, { sessions: 4, turns: 3 });
  await eventually(async () => (await getJson(`${fleet.base}/api/models/${MODEL}`)).in_flight === 0,
    { what: 'the traffic to finish' });
  // Give the scraper a moment so the engine columns hold numbers, not dashes
  // (the comparison below holds either way).
  await eventually(async () => (await getJson(`${fleet.base}/api/models/${MODEL}`))
    .replicas.every((r) => r.running !== null && r.kv_used !== null), { timeoutMs: 5000 }).catch(() => {});
  browser = await launchBrowser();
});

after(async () => {
  await browser?.close();
  await fleet?.stop();
});

test('the models page lists the model with its replicas', { timeout: 30000 }, async () => {
  await withPage(browser, 'models-page', async (page, errors) => {
    await page.goto(`${ui}/`);
    const link = page.getByRole('link', { name: MODEL, exact: true });
    await link.waitFor();
    const row = page.locator('tbody tr', { has: link });
    await assertEventually(async () => (await row.innerText()).includes('4 of 4 healthy'), 'healthy count');
    assert.match(await row.innerText(), /Affinity on/);
    assert.match(await row.innerText(), /8 \(auto\)/);
    // The warden started within the hour: the hour's share says it covers less.
    await assertEventually(async () => /\d+% of \S+ since the warden started, \d+ (s|min) ago/.test(await row.innerText()),
      async () => `the hour's share in the row: "${await row.innerText()}"`);
    assert.match(await page.locator('main').innerText(), /of \S+ tokens since the warden started, \d+ (s|min) ago/);
    await link.click();
    await page.waitForURL(`${ui}/models/${MODEL}`);
    await page.locator('[data-testid=replicas] tbody tr').first().waitFor();
    assert.deepEqual(errors, []);
  });
});

test('the model page shows one row per replica matching /api/models/{name}', { timeout: 40000 }, async () => {
  await withPage(browser, 'model-page', async (page, errors) => {
    await page.goto(`${ui}/models/${MODEL}`);
    const rows = page.locator('[data-testid=replicas] tbody tr');
    await assertEventually(async () => (await rows.count()) === fleet.dp, 'one row per replica');

    const pct = (v) => (v == null ? '—'
      : v > 0 && v < 0.1 ? `${Math.max(v * 100, 0.1).toFixed(1)}%`
        : v > 0.99 && v < 1 ? `${Math.min(v * 100, 99.9).toFixed(1)}%` : `${Math.round(v * 100)}%`);
    const expected = (r) => ({
      health: r.healthy ? 'healthy' : 'unhealthy',
      in_flight: String(r.in_flight),
      live_conversations: String(r.live_conversations),
      sticky: String(r.sticky),
      spilled_in: String(r.spilled_in),
      client_pinned: String(r.client_pinned),
      new: String(r.new + r.rehomed + r.anonymous + r.balanced),
      upstream_errors: String(Object.values(r.upstream_errors).reduce((a, b) => a + b, 0)),
      running: r.running == null ? '—' : String(r.running),
      waiting: r.waiting == null ? '—' : String(r.waiting),
      kv_used: pct(r.kv_used),
      prefix_hit_rate: pct(r.prefix_hit_rate),
    });
    // The page refreshes every second: compare a page and an API reading
    // taken close together, and retry until two agree.
    let last;
    await assertEventually(async () => {
      const card = await getJson(`${fleet.base}/api/models/${MODEL}`);
      const shown = await page.$$eval('[data-testid=replicas] tbody tr', (trs) => trs.map((tr) => {
        const cells = {};
        for (const td of tr.querySelectorAll('td[data-field]')) cells[td.dataset.field] = td.innerText.trim();
        return { index: Number(tr.dataset.replica), cells };
      }));
      last = { card: card.replicas.map(expected), shown: shown.map((s) => s.cells) };
      return shown.length === card.replicas.length &&
        card.replicas.every((r, i) => shown[i].index === r.index &&
          JSON.stringify(shown[i].cells) === JSON.stringify(expected(r)));
    }, () => `table matches the API\n${JSON.stringify(last, null, 1)}`);

    // The traffic made sticky requests (turns 2 and 3 of each conversation).
    const card = await getJson(`${fleet.base}/api/models/${MODEL}`);
    assert.ok(card.replicas.reduce((n, r) => n + r.sticky, 0) > 0, 'sticky requests counted');
    assert.equal(await page.locator('[data-pill=in_flight] b').innerText(), String(card.in_flight));
    assert.match(await page.locator('[data-testid=routing-card]').innerText(), /Counters since \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC/);
    assert.equal(await page.locator('[data-testid=refused]').isVisible(), false, 'no refusals, no note');
    // Backends with URL and DP size.
    const backend = await page.locator('[data-testid=backends] tbody tr').innerText();
    assert.ok(backend.includes(fleet.simUrl) && backend.includes(String(fleet.dp)), backend);
    assert.deepEqual(errors, []);
  });
});

test('the stored-responses pill appears once a response is stored', { timeout: 30000 }, async () => {
  await withPage(browser, 'stored-responses', async (page, errors) => {
    await page.goto(`${ui}/models/${MODEL}`);
    const pill = page.locator('[data-pill=stored_responses]');
    await page.locator('[data-pill=conversations] b').waitFor();
    const before = (await getJson(`${fleet.base}/api/models/${MODEL}`)).stored_responses;
    assert.equal(await pill.isVisible(), before > 0, 'hidden while none is stored');
    const made = await getJson(`${fleet.base}/v1/responses`, {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, input: 'Hello there', max_output_tokens: 4 }),
    });
    assert.match(made.id, /^resp_/);
    await assertEventually(async () => await pill.isVisible() &&
      (await text(pill)) === `Stored responses ${before + 1}`,
    async () => `pill reads "${await text(pill)}"`);
    assert.deepEqual(errors, []);
  });
});

test('without a token the pills are read-only; with it affinity and the spill threshold change', { timeout: 40000 }, async () => {
  await withPage(browser, 'admin-controls', async (page, errors) => {
    await page.goto(`${ui}/models/${MODEL}`);
    const affinity = page.locator('[data-pill=affinity]');
    await assertEventually(async () => (await affinity.innerText()) === 'Affinity on', 'affinity pill');
    // Read-only: no control is offered.
    assert.equal(await affinity.evaluate((e) => e.tagName), 'SPAN');
    assert.equal(await page.locator('[data-testid=pills] button').count(), 0);
    assert.equal(await page.getByRole('switch').count(), 0);

    // A wrong token is refused and leaves the page read-only.
    await page.getByLabel('Admin token').fill('not-the-token');
    await page.getByRole('button', { name: 'Unlock' }).click();
    await page.getByText(/Not unlocked: wrong admin token/).waitFor();
    assert.equal(await page.getByRole('switch').count(), 0);

    // The right token turns the pills into controls.
    await page.getByLabel('Admin token').fill(ADMIN_TOKEN);
    await page.getByRole('button', { name: 'Unlock' }).click();
    const toggle = page.getByRole('switch', { name: /Affinity/ });
    await toggle.waitFor();
    assert.equal(await toggle.getAttribute('aria-checked'), 'true');
    assert.equal(await page.evaluate(() => sessionStorage.getItem('lmwarden.adminToken')), ADMIN_TOKEN);

    await toggle.click();
    await assertEventually(async () => (await toggle.getAttribute('aria-checked')) === 'false', 'switch off');
    assert.equal(await toggle.innerText(), 'Affinity off');
    assert.equal((await getJson(`${fleet.base}/api/models/${MODEL}`)).affinity, false);
    // Affinity off on this multi-rank server: its own balancer places the
    // requests, and the card counts them apart from the replica rows.
    const note = page.locator('[data-testid=unassigned]');
    const unassignedBefore = (await getJson(`${fleet.base}/api/models/${MODEL}`)).unassigned;
    const placedBefore = Object.entries(unassignedBefore)
      .filter(([k]) => !['in_flight', 'retried', 'upstream_errors'].includes(k)).reduce((n, [, v]) => n + v, 0);
    const sent = await fetch(`${fleet.base}/v1/chat/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, max_tokens: 4, messages: [{ role: 'user', content: 'hi' }] }),
    });
    assert.equal(sent.status, 200);
    await assertEventually(async () => (await note.isVisible()) &&
      (await text(note)).startsWith('Placed by the server\'s own balancer (sent without a rank: affinity off, ' +
        `or a route the server does not pin by rank, such as /v1/responses): ${placedBefore + 1} request`),
    async () => `unassigned note: "${await text(note)}"`);
    // The next refresh keeps showing the warden's state.
    await page.waitForTimeout(1200);
    assert.equal(await toggle.getAttribute('aria-checked'), 'false');

    await toggle.click();
    await assertEventually(async () => (await toggle.getAttribute('aria-checked')) === 'true', 'switch on');
    assert.equal((await getJson(`${fleet.base}/api/models/${MODEL}`)).affinity, true);

    // Spill threshold: a number, then back to auto.
    await page.locator('button[data-pill=spill]').click();
    const editor = page.locator('[data-testid=spill-editor]');
    await editor.getByLabel('Automatic spill threshold').uncheck();
    await editor.getByLabel('Spill threshold (requests in flight)').fill('3');
    await editor.getByRole('button', { name: 'Apply' }).click();
    await assertEventually(async () => (await text(page.locator('[data-pill=spill]'))) === 'Spill threshold 3',
      async () => `spill pill shows 3: "${await text(page.locator('[data-pill=spill]'))}"`);
    let card = await getJson(`${fleet.base}/api/models/${MODEL}`);
    assert.equal(card.spill_threshold, 3);
    assert.equal(card.spill_threshold_auto, false);
    await page.locator('button[data-pill=spill]').click();
    await editor.getByLabel('Automatic spill threshold').check();
    await editor.getByRole('button', { name: 'Apply' }).click();
    await assertEventually(async () => /\(auto\)/.test(await text(page.locator('[data-pill=spill]'))), 'spill auto');
    card = await getJson(`${fleet.base}/api/models/${MODEL}`);
    assert.equal(card.spill_threshold_auto, true);

    // Locking forgets the token and the controls.
    await page.getByRole('button', { name: 'Lock' }).click();
    assert.equal(await page.getByRole('switch').count(), 0);
    assert.equal(await page.evaluate(() => sessionStorage.getItem('lmwarden.adminToken')), null);
    assert.deepEqual(errors.filter((e) => !/403/.test(e)), []);
  });
});

test('the stats page charts non-zero cached and computed prompt tokens', { timeout: 30000 }, async () => {
  await withPage(browser, 'stats-page', async (page, errors) => {
    await page.goto(`${ui}/stats`);
    const chart = page.locator('[data-testid=tokens-chart][data-ready=true]');
    await assertEventually(async () => {
      const d = await chart.evaluate((e) => ({ ...e.dataset })).catch(() => null);
      return d && Number(d.cachedSum) > 0 && Number(d.computedSum) > 0 && Number(d.completionSum) > 0;
    }, 'non-zero cached, computed and completion series');
    assert.equal(await page.locator('[data-testid=tokens-chart] canvas').count(), 2);
    assert.equal(await page.locator('.chart-empty:visible').count(), 0);

    const stats = await getJson(`${fleet.base}/api/stats?window=3600`);
    assert.ok(stats.totals.prompt_cached > 0 && stats.totals.prompt_computed > 0, JSON.stringify(stats.totals));
    const share = await page.locator('[data-testid=hit-share]').innerText();
    assert.match(share, /^\d+(\.\d)?%$/);
    assert.match(await page.locator('[data-testid=tokens-summary]').innerText(), /served from cache, last 1 h/);
    assert.ok(await page.locator('[data-testid=cached-count-missing]').isHidden(), 'the engine reports cached counts');

    // Window and model pickers; the choice goes into the URL.
    await page.getByRole('button', { name: '15 min' }).click();
    await page.waitForURL(/window=900/);
    await assertEventually(async () => /last 15 min/.test(await page.locator('[data-testid=tokens-summary]').innerText()), '15 min summary');
    await page.getByLabel('Model').selectOption(MODEL);
    await page.waitForURL(/model=M/);
    await assertEventually(async () => Number(await chart.getAttribute('data-cached-sum')) > 0, 'per-model series');

    // Hovering the chart shows a readout for that bucket.
    const box = await page.locator('[data-testid=tokens-chart] .u-over').first().boundingBox();
    await page.mouse.move(box.x + box.width - 4, box.y + box.height / 2);
    await assertEventually(async () => /^\d\d:\d\d:\d\d–\d\d:\d\d:\d\d UTC: cached/.test(await page.locator('.readout').innerText()), 'hover readout');
    assert.deepEqual(errors, []);
  });
});

test('chart times are UTC, as every other time on the page, whatever the browser\'s zone', { timeout: 30000 }, async () => {
  await withPage(browser, 'stats-utc', async (page, errors) => {
    await page.goto(`${ui}/stats?window=900`);
    const readout = page.locator('.readout');
    await assertEventually(async () => /^Latest.*, \d\d:\d\d:\d\d–\d\d:\d\d:\d\d UTC: cached/.test(await readout.innerText()),
      async () => `readout: ${await readout.innerText()}`);
    // New York is 4 or 5 hours from UTC: the bucket's start is within
    // minutes of now in UTC.
    const [h, m, sec] = (await readout.innerText()).match(/(\d\d):(\d\d):(\d\d)–/).slice(1).map(Number);
    const now = new Date();
    const apart = Math.abs(now.getUTCHours() * 3600 + now.getUTCMinutes() * 60 + now.getUTCSeconds() - (h * 3600 + m * 60 + sec));
    assert.ok(Math.min(apart, 86400 - apart) < 300, `the readout's ${h}:${m}:${sec} is not the UTC time of ${now.toISOString()}`);
    assert.match(await page.locator('#live').getAttribute('title'), /^Updated \d\d:\d\d:\d\d UTC$/);
    assert.deepEqual(errors, []);
  }, { timezoneId: 'America/New_York' });
});

test('the 6 h window, opened from a link, refreshes every 10 s', { timeout: 30000 }, async () => {
  await withPage(browser, 'stats-6h', async (page, errors) => {
    const asked = [];
    page.on('request', (r) => { if (r.url().includes('/api/stats?')) asked.push(Date.now()); });
    await page.goto(`${ui}/stats?window=21600`);
    await assertEventually(async () => /last 6 h/.test(await page.locator('[data-testid=tokens-summary]').innerText()), '6 h summary');
    await page.waitForTimeout(6000);
    const first = asked[0];
    assert.equal(asked.filter((t) => t - first < 6000).length, 1, `asked at ${asked.map((t) => t - first).join(', ')} ms`);
    assert.deepEqual(errors, []);
  });
});

// A reply's tokens are counted when it ends; while one streams, the bars from
// its first second on are veiled and the readout shows the last complete one.
test('bars that a reply under way will still fill are marked as such', { timeout: 60000 }, async () => {
  const slow = await startFleet({ model: 'slow', dp: 1, timeScale: 1 });
  const stream = new AbortController();
  try {
    await driveTraffic(slow.base, 'slow', { sessions: 1, turns: 1, system: 200, user: 50, maxTokens: 4, tag: 'f' });
    const res = await fetch(`${slow.base}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'session-id': 'long' },
      body: JSON.stringify({ model: 'slow', stream: true, max_tokens: 6000,
        messages: [{ role: 'user', content: 'write at length' }] }),
      signal: stream.signal,
    });
    assert.equal(res.status, 200);
    const reader = res.body.getReader();
    await reader.read();  // the reply has begun
    const drain = (async () => { try { while (!(await reader.read()).done); } catch { /* aborted */ } })();
    await eventually(async () => (await getJson(`${slow.base}/api/stats?window=900`)).open_requests === 1,
      { what: 'the stream to count as open' });

    await withPage(browser, 'filling', async (page, errors) => {
      await page.goto(`${slow.base}/stats?window=900`);
      const chart = page.locator('[data-testid=tokens-chart][data-ready=true]');
      // At least one whole bar behind the open one, so "Latest complete" has one to show.
      await assertEventually(async () => {
        const d = await chart.evaluate((e) => ({ ...e.dataset })).catch(() => null);
        const s = await getJson(`${slow.base}/api/stats?window=900`);
        return d && d.fillingFrom !== '' && Number(d.fillingFrom) <= s.settled_until
          && s.now - s.settled_until >= 2 * Number(d.bucketSeconds) + 1;
      }, async () => `filling band: ${JSON.stringify(await chart.evaluate((e) => ({ ...e.dataset })).catch(() => null))}`);
      assert.match(await page.locator('[data-testid=filling-key]').innerText(), /still filling: 1 reply under way/);
      await assertEventually(async () => /^Latest complete, \d\d:\d\d:\d\d–/.test(await page.locator('.readout').innerText()),
        async () => `readout: ${await page.locator('.readout').innerText()}`);
      // Hovering the newest bar names it as still filling.
      const box = await page.locator('[data-testid=tokens-chart] .u-over').first().boundingBox();
      await page.mouse.move(box.x + box.width - 3, box.y + box.height / 2);
      await assertEventually(async () => /\(still filling\): cached/.test(await page.locator('.readout').innerText()),
        async () => `hover readout: ${await page.locator('.readout').innerText()}`);
      await page.mouse.move(0, 0);

      stream.abort();  // the client leaves: nothing is open any more
      await drain;
      await assertEventually(async () => (await chart.getAttribute('data-filling-from')) === ''
        && (await page.locator('[data-testid=filling-key]').isHidden()), 'the band to go');
      await assertEventually(async () => /^Latest, /.test(await page.locator('.readout').innerText()),
        async () => `readout after: ${await page.locator('.readout').innerText()}`);
      assert.deepEqual(errors, []);
    });
  } finally {
    stream.abort();
    await slow.stop();
  }
});

// An engine that never says how many prompt tokens it served from the cache
// (vLLM without --enable-prompt-tokens-details): the chart can only book them
// as computed, and says why.
test('a server whose replies never give a cached count is named, with the flag to set', { timeout: 60000 }, async () => {
  const bare = await startFleet({ model: 'bare', dp: 2, simArgs: ['--no-enable-prompt-tokens-details'] });
  const pages = await pagesOf(bare);
  try {
    await driveTraffic(bare.base, 'bare', { sessions: 4, turns: 5, system: 300, user: 60, maxTokens: 4, tag: 'b' });
    const stats = await getJson(`${bare.base}/api/stats?window=900`);
    assert.deepEqual(stats.cached_count_missing, ['bare']);
    assert.deepEqual(stats.cached_count_missing_servers, [{ model: 'bare', url: bare.simUrl }]);
    assert.equal(stats.totals.prompt_cached, 0);
    await withPage(browser, 'cached-count-missing', async (page, errors) => {
      for (const where of [`${pages.url}/stats?window=900`, `${pages.url}/models/bare`]) {
        await page.goto(where);
        const notice = page.locator('[data-testid=cached-count-missing]');
        await notice.waitFor();
        assert.equal(await text(notice), `Replies from ${bare.simUrl} (model bare) never say how many of their prompt `
          + 'tokens came from the cache, so the chart counts all of those as computed. vLLM reports the count only '
          + 'when started with --enable-prompt-tokens-details.');
      }
      // The models page does not give its share as 0%, nor count its tokens
      // in the fleet's share.
      await page.goto(`${pages.url}/`);
      const cell = page.locator('tbody tr', { has: page.getByRole('link', { name: 'bare', exact: true }) }).locator('td').last();
      await assertEventually(async () => (await text(cell)) === 'not reported', async () => `the row's share: "${await text(cell)}"`);
      assert.match(await cell.getAttribute('title'), /--enable-prompt-tokens-details/);
      const tile = page.locator('.tile', { hasText: 'Prompt tokens from cache' }).locator('.tile-value');
      await assertEventually(async () => /^— not reported/.test(await text(tile)), async () => `the fleet's share: "${await text(tile)}"`);
      assert.deepEqual(errors, []);
    });
  } finally {
    await pages.close();
    await bare.stop();
  }
});

test('the stats page asked for an alias selects its model, and one not served says so calmly', { timeout: 30000 }, async () => {
  const fleet2 = await startFleet({ model: 'named', dp: 1, aliases: ['nick'] });
  const pages = await pagesOf(fleet2);
  try {
    await withPage(browser, 'stats-alias', async (page, errors) => {
      await page.goto(`${pages.url}/stats?model=nick`);
      const select = page.locator('[data-testid=model-select]');
      await assertEventually(async () => (await select.inputValue()) === 'named',
        async () => `the select reads ${await select.inputValue()}`);
      // A model chosen from the list stays chosen.
      await select.selectOption('');
      await new Promise((r) => setTimeout(r, 1500));
      assert.equal(await select.inputValue(), '');
      assert.deepEqual(errors, []);
    });
    // A model's page asked by an alias is the model's page, by its name.
    await withPage(browser, 'model-alias', async (page, errors) => {
      await page.goto(`${pages.url}/models/nick`);
      await page.waitForURL(`${pages.url}/models/named`);
      assert.equal(await text(page.locator('h1')), 'named');
      assert.equal(await page.title(), 'named · LM Warden');
      await page.locator('[data-testid=replicas] tbody tr').first().waitFor();
      assert.deepEqual(errors, []);
    });
    // A model not served here is said in the panel, not as a failing warden.
    await withPage(browser, 'stats-unknown-model', async (page) => {
      await page.goto(`${pages.url}/stats?model=nosuch`);
      const said = page.locator('.card-body .error, [role=alert]').filter({ hasText: 'nosuch' }).first();
      await said.waitFor();
      assert.equal(await page.locator('#live').getAttribute('data-state'), 'ok');
      // No empty chart under it, and the name is not listed as a model.
      assert.equal(await page.locator('.chart-title:visible').count(), 0, 'no chart headings');
      assert.equal(await page.locator('[data-testid=model-select] option:checked').textContent(), 'nosuch (not served)');
    });
  } finally {
    await pages.close();
    await fleet2.stop();
  }
});

test('a table wider than the screen fades at the edge its hidden columns are behind', { timeout: 30000 }, async () => {
  const scroller = (page) => page.locator('[data-testid=routing-card] .table-scroll');
  await withPage(browser, 'table-scroll-narrow', async (page) => {
    await page.goto(`${ui}/models/${MODEL}`);
    await page.locator('[data-testid=replicas] tbody tr').first().waitFor();
    await assertEventually(async () => (await scroller(page).getAttribute('data-more')) === 'right',
      async () => `data-more ${await scroller(page).getAttribute('data-more')}`);
    await scroller(page).locator('.table-wrap').evaluate((w) => { w.scrollLeft = w.scrollWidth; });
    await assertEventually(async () => (await scroller(page).getAttribute('data-more')) === 'left',
      async () => `after scrolling: data-more ${await scroller(page).getAttribute('data-more')}`);
    // The Models page's table scrolls in its box too: the page itself does not.
    await page.goto(`${ui}/`);
    await page.locator('table[aria-label=Models] tbody tr').first().waitFor();
    const models = page.locator('.table-scroll').filter({ has: page.locator('table[aria-label=Models]') });
    await assertEventually(async () => (await models.getAttribute('data-more')) === 'right',
      async () => `Models: data-more ${await models.getAttribute('data-more')}`);
    const [pageWidth, viewWidth] = await page.evaluate(() => [document.documentElement.scrollWidth, window.innerWidth]);
    assert.ok(pageWidth <= viewWidth, `the Models page is ${pageWidth} px wide on a ${viewWidth}-px screen`);
  }, { viewport: { width: 400, height: 800 } });
  await withPage(browser, 'table-scroll-wide', async (page) => {
    await page.goto(`${ui}/models/${MODEL}`);
    await page.locator('[data-testid=replicas] tbody tr').first().waitFor();
    assert.equal(await scroller(page).getAttribute('data-more'), null, 'the whole table is in view');
  }, { viewport: { width: 1600, height: 900 } });
});

test('on a 1280-px laptop the routing table fits, with a server down', { timeout: 40000 }, async () => {
  const fleet = await startFleet({ model: 'half', dp: 2, servers: 2 });
  try {
    await driveTraffic(fleet.base, 'half', { sessions: 4, turns: 2, system: 300, user: 60, maxTokens: 4, tag: 'w' });
    await fleet.stopSim(1);
    await withPage(browser, 'table-fits-1280', async (page) => {
      await page.goto(`${fleet.base}/models/half`);
      const health = page.locator('[data-testid=replicas] tbody tr td:nth-child(2)');
      const healthy = async () => (await health.allTextContents()).map((t) => t.trim()).join(',');
      await assertEventually(async () => (await healthy()) === 'healthy,healthy,unhealthy,unhealthy',
        async () => `health ${await healthy()}`);
      const wrap = page.locator('[data-testid=routing-card] .table-wrap');
      const [scroll, client] = await wrap.evaluate((w) => [w.scrollWidth, w.clientWidth]);
      assert.ok(scroll <= client, `the table is ${scroll} px wide in a ${client}-px card`);
      // Why they are out, once for the server's two ranks, and since when.
      const outages = page.locator('[data-testid=outages] li');
      assert.equal(await outages.count(), 1);
      const said = await text(outages.first());
      const host = new URL(fleet.simUrls[1]).host;
      assert.match(said, new RegExp(`^#2, #3 unhealthy \\(${host.replace(/\./g, '\\.')}\\): `
        + '(\\d+ failed probes in a row|cannot connect)'), said);
      assert.match(said, / Since \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC \(\d+ s ago\)\.$/, said);
    }, { viewport: { width: 1280, height: 800 } });
  } finally {
    await fleet.stop();
  }
});

test('on a 390-px phone no page scrolls sideways, a long model name wraps with its health in view, and "Live" stays in the bar', { timeout: 60000 }, async () => {
  const name = 'Qwen/Qwen3-Coder-30B-A3B-Instruct-long-name';
  const long = await startFleet({ model: name, dp: 1 });
  const pages = await pagesOf(long);
  try {
    await driveTraffic(long.base, name, { sessions: 1, turns: 2, system: 300, user: 60, maxTokens: 4, tag: 'p' });
    await withPage(browser, 'phone', async (page, errors) => {
      for (const where of ['/', `/models/${name}`, '/stats', `/stats?model=${encodeURIComponent(name)}`, '/modles']) {
        await page.goto(`${pages.url}${where}`);
        await assertEventually(async () => (await page.locator('#live').getAttribute('data-state')) === 'ok', `${where}: live`);
        await page.locator('main h1').waitFor();
        const [pageWidth, viewWidth] = await page.evaluate(() => [document.documentElement.scrollWidth, window.innerWidth]);
        assert.ok(pageWidth <= viewWidth, `${where} is ${pageWidth} px wide on a ${viewWidth}-px screen`);
        // The dot on the bar's one line, beside the pages.
        const [dot, nav] = [await page.locator('#live .live-dot').boundingBox(), await page.locator('nav').boundingBox()];
        assert.ok(dot.y > nav.y && dot.y + dot.height < nav.y + nav.height, `${where}: the dot ${JSON.stringify(dot)} beside the pages ${JSON.stringify(nav)}`);
      }
      await page.goto(`${pages.url}/`);
      const health = page.locator('tbody tr .health');
      await health.waitFor();
      const box = await health.boundingBox();
      assert.ok(box.x + box.width <= 390, `the model's health is at ${box.x}..${box.x + box.width}`);
      // The fleet's share, wrapped under its figure, reads as small lines.
      const small = page.locator('.tile-value small');
      await assertEventually(async () => /tokens/.test(await text(small)), 'the fleet\'s share');
      const tops = await small.evaluate((e) => {
        const range = document.createRange();
        range.selectNodeContents(e);
        return [...new Set([...range.getClientRects()].map((r) => Math.round(r.top)))];
      });
      assert.ok(tops.length >= 2, `wrapped: lines at ${tops}`);
      for (let i = 1; i < tops.length; i++) assert.ok(tops[i] - tops[i - 1] <= 20, `lines ${tops[i] - tops[i - 1]} px apart`);
      assert.ok(errors.every((e) => /404/.test(e)), errors.join('\n'));
    }, { viewport: { width: 390, height: 844 } });
  } finally {
    await pages.close();
    await long.stop();
  }
});

test('a replica\'s failed exchanges are counted in its row, their kinds said in words', { timeout: 40000 }, async () => {
  // A slow engine and a short first-byte timeout: each request gets a 504.
  const fleet = await startFleet({ model: 'slow', dp: 1, timeScale: 0.5, configLines: ['timeouts:', '  first_byte: 150ms'] });
  try {
    for (let i = 0; i < 2; i++) {
      const res = await fetch(`${fleet.base}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'slow', messages: [{ role: 'user', content: `turn ${i}` }], max_tokens: 64 }),
      });
      assert.equal(res.status, 504, await res.text());
    }
    const card = await getJson(`${fleet.base}/api/models/slow`);
    assert.deepEqual(card.replicas[0].upstream_errors, { first_byte_timeout: 2 });
    await withPage(browser, 'upstream-errors', async (page) => {
      await page.goto(`${fleet.base}/models/slow`);
      const cell = page.locator('[data-testid=replicas] td[data-field=upstream_errors]');
      await assertEventually(async () => (await text(cell)) === '2', async () => `errors cell ${await text(cell)}`);
      assert.equal(await cell.getAttribute('title'), '2 no first byte in time');
      assert.match(await cell.getAttribute('class'), /\bbad\b/);
      const heading = page.locator('[data-testid=replicas] th', { hasText: 'Errors' });
      assert.match(await heading.getAttribute('title'), /failed/);
    });
  } finally {
    await fleet.stop();
  }
});

test('requests the warden refused for a model are said under its table', { timeout: 40000 }, async () => {
  const fleet = await startFleet({ model: 'gone', dp: 1 });
  try {
    await fleet.stopSim(0);
    await eventually(async () => (await getJson(`${fleet.base}/api/models/gone`)).replicas[0].healthy === false,
      { what: 'the replica out of service' });
    for (let i = 0; i < 2; i++) {
      const res = await fetch(`${fleet.base}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'gone', messages: [{ role: 'user', content: 'hello' }], max_tokens: 4 }),
      });
      assert.equal(res.status, 503, await res.text());
    }
    assert.deepEqual((await getJson(`${fleet.base}/api/models/gone`)).refused, { no_healthy_replica: 2 });
    await withPage(browser, 'refused', async (page) => {
      await page.goto(`${fleet.base}/models/gone`);
      const note = page.locator('[data-testid=refused]');
      await assertEventually(async () => (await note.isVisible()) && (await text(note)) ===
        'Refused by the warden before any replica, since it started: 2 for no healthy replica (503).',
      async () => `refused note: "${await text(note)}"`);
    });
  } finally {
    await fleet.stop();
  }
});

// The element's text with whitespace collapsed (pills are flex boxes, whose
// innerText splits their parts onto lines).
async function text(locator) {
  return (await locator.textContent()).replace(/\s+/g, ' ').trim();
}

// Where the pages of a test's own fleet load from: its warden, or, while
// `ui` is a dev server (ui/web as edited, before a build embeds it), a dev
// server of its own in front of that warden.
async function pagesOf(f) {
  if (ui === fleet.base) return { url: f.base, close: async () => {} };
  return startDevServer({ warden: f.base });
}

// A model the warden does not serve: the page says so, and shows no empty
// cards (no routing table, no admin token box, no charts) under it.
test('the page of a model that is not served says so and nothing else', { timeout: 30000 }, async () => {
  await withPage(browser, 'model-not-served', async (page, errors) => {
    await page.goto(`${ui}/models/nope`);
    const box = page.locator('.error-box[role=alert]');
    await assertEventually(async () => (await box.isVisible()) &&
      (await box.innerText()).includes('No model named “nope” on this warden.'), 'the notice');
    assert.equal(await page.locator('section.card:visible').count(), 0);
    assert.equal(await page.locator('[data-testid=token-form]:visible').count(), 0);
    assert.equal(await page.locator('[role=alert]:visible').count(), 1, 'one error, the notice');
    // Asked again every 5 s, not every second (a reload can still add it).
    const asked = { card: 0, stats: 0 };
    page.on('request', (r) => {
      if (/\/api\/models\/nope$/.test(r.url())) asked.card++;
      if (/\/api\/stats\?.*model=nope/.test(r.url())) asked.stats++;
    });
    await page.waitForTimeout(6000);
    assert.ok(asked.card <= 2 && asked.stats <= 2, `asked in 6 s: ${JSON.stringify(asked)}`);
    assert.ok(errors.every((e) => /404/.test(e)), errors.join('\n'));
  });
});

test('an address that is no page says so, with links to the pages, not JSON', { timeout: 30000 }, async () => {
  await withPage(browser, 'no-such-page', async (page, errors) => {
    const res = await page.goto(`${ui}/modles`);
    assert.equal(res.status(), 404);
    const box = page.locator('[data-testid=not-found]');
    await assertEventually(async () => (await box.isVisible()) &&
      (await text(box)) === 'There is no page at /modles. See the models or tokens per second.', 'the notice');
    assert.equal(await page.title(), 'No such page · LM Warden');
    assert.equal(await page.locator('nav a[aria-current]').count(), 0, 'no page of the nav is current');
    await box.getByRole('link', { name: 'the models' }).click();
    await assertEventually(async () => (await page.locator('h1').innerText()) === 'Models', 'the models page');
    assert.equal(new URL(page.url()).pathname, '/');
    assert.ok(errors.every((e) => /404/.test(e)), errors.join('\n'));
  });
});

// A reload that changes a model's replicas counts its tokens (and its card)
// afresh: the token panels say so, rather than that the warden just started.
test('a reload the file does not pass is said on the models page, and in a line on the others, until one applies', { timeout: 40000 }, async () => {
  await fleet.refuseReload(`models:\n  - name: ${MODEL}\n    spill_threshold: lots\n`);
  const { configuration } = await getJson(`${fleet.base}/api/models`);
  assert.match(configuration.reload_refused.problems.join('\n'), /spill_threshold/);
  await withPage(browser, 'reload-refused', async (page, errors) => {
    await page.goto(`${ui}/`);
    const box = page.getByRole('region', { name: 'The configuration file does not load' });
    await box.waitFor();
    const said = await box.innerText();
    assert.match(said, /Refused at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC \(\d+ s ago\); in force: the file as read at \d{4}-/);
    for (const problem of configuration.reload_refused.problems) assert.ok(said.includes(problem), `${problem} in\n${said}`);
    // The model is still served as before.
    const line = page.locator('[data-testid=reload-refused-line]');
    assert.equal(await line.isVisible(), false, 'the models page has the card, not the line');
    // Its page, as every other page, says it in one line.
    await page.getByRole('link', { name: MODEL, exact: true }).click();
    await assertEventually(async () => (await line.isVisible()) && /^The configuration file does not load: a reload was refused \d+ s ago\. The warden serves the configuration before it\. See why on the models page\.$/.test(await text(line)),
      async () => `the line on the model page: "${await text(line)}"`);
    await fleet.reload(fleet.dp);
    await eventually(async () => (await getJson(`${fleet.base}/api/models`)).configuration.reload_refused === null,
      { what: 'the next reload applied' });
    await assertEventually(async () => line.isHidden(), 'the line goes once a reload applies');
    await page.getByRole('link', { name: 'Models' }).first().click();
    await assertEventually(async () => box.isHidden(), 'the box goes once a reload applies');
    assert.deepEqual(errors, []);
  });
});
