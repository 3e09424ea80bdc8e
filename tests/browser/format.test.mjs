// The dashboard's number formatting (ui/web/format.js), run by Node as the
// browser runs it: the module touches no page until a function that builds
// one is called.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { DASH, clock, pct } from '../../ui/web/format.js';

test('a share reads as 0% or 100% only when it is exactly that', () => {
  const cases = [
    [null, DASH], [Number.NaN, DASH], [0, '0%'], [0.0004, '0.1%'], [0.05, '5.0%'], [0.099, '9.9%'],
    [0.5, '50%'], [0.874, '87%'], [0.99, '99%'], [0.99689, '99.7%'], [0.99999, '99.9%'], [1, '100%'],
  ];
  for (const [share, shown] of cases) assert.equal(pct(share), shown, `pct(${share})`);
});

test('clock times are UTC in any zone', () => {
  const zone = process.env.TZ;
  process.env.TZ = 'America/New_York';  // Node reads TZ again when it changes
  try {
    assert.equal(clock(Date.UTC(2026, 0, 2, 3, 4, 5) / 1000), '03:04:05');
  } finally {
    if (zone === undefined) delete process.env.TZ;
    else process.env.TZ = zone;
  }
});
