// The models page of a warden that shares conversation homes through Redis
// (shared_homes): a real redis-server, the simulator, the warden, and the
// page in headless Chromium. It says where homes are shared, whether Redis
// answers, and what the lookups came to, as /api/models does; and it says
// when Redis goes away.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startFleet, startRedis, driveTraffic, launchBrowser, withPage, eventually, getJson } from './harness.mjs';

const MODEL = 'M';
let redis;
let fleet;
let browser;

before(async () => {
  redis = await startRedis();
  // A lookup later than the timeout counts as failed, not absent: on a host
  // busy with other tests 50 ms (the default) can pass before Redis answers.
  fleet = await startFleet({ model: MODEL, dp: 2, configLines: ['shared_homes:', `  redis: ${redis.url}`, '  timeout: 2s'] });
  await driveTraffic(fleet.base, MODEL, { sessions: 3, turns: 2 });
  browser = await launchBrowser();
});

after(async () => {
  await browser?.close();
  await fleet?.stop();
  await redis?.stop();
});

test('the models page says where homes are shared and what the lookups found', { timeout: 40000 }, async () => {
  const api = await getJson(`${fleet.base}/api/models`);
  assert.equal(api.shared_homes.redis, `${redis.url}/0`);
  assert.equal(api.shared_homes.lookups.absent, 3, 'each conversation asked once, on its first turn');
  await withPage(browser, 'shared-homes', async (page, errors) => {
    await page.goto(`${fleet.base}/`);
    const card = page.locator('[data-testid=shared-homes]');
    await card.waitFor();
    assert.match(await card.innerText(), new RegExp(`through ${redis.url}/0`));
    await eventually(async () => (await page.locator('[data-pill=redis]').innerText()) === 'Redis connected',
      { what: 'the connected pill' });
    const text = await card.innerText();
    assert.match(text, /new to every warden\s*3/);
    assert.match(text, /found in Redis\s*0/);
    assert.match(text, /lookups failed\s*0/);
    assert.match(text, /followed another warden’s home\s*0/);
    assert.doesNotMatch(text, /not listed here|not followed|written unchecked/);

    // Redis gone: the page says so within the store's idle check (1 s).
    await redis.stop();
    await eventually(async () => (await page.locator('[data-pill=redis]').innerText()) === 'Redis not connected',
      { what: 'the not-connected pill' });
    assert.deepEqual(errors, []);
  });
});
