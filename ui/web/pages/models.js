// Models page: every configured model, its replicas and how the warden routes it.
import { api, modelPath } from '../api.js';
import { poll } from '../poll.js';
import { duration, el, int, pct, si, setText, tableScroll, utc } from '../format.js';

export function mountModels(root, _params, ctx) {
  document.title = 'Models · LM Warden';
  const tiles = el('div', { class: 'tiles', 'aria-label': 'Fleet summary' });
  const tbody = el('tbody');
  const table = el('table', { 'aria-label': 'Models' },
      el('thead', {}, el('tr', {},
        el('th', { scope: 'col', text: 'Model' }),
        el('th', { scope: 'col', text: 'Replicas' }),
        el('th', { scope: 'col', class: 'num', text: 'In flight' }),
        el('th', { scope: 'col', text: 'Affinity' }),
        el('th', { scope: 'col', class: 'num', text: 'Spill threshold' }),
        el('th', { scope: 'col', class: 'num', text: 'Prompt from cache, 1 h', title: 'Share of prompt tokens served from the prefix cache over the last hour' }))),
      tbody);
  const body = tableScroll(table);
  const scrolled = body.firstElementChild;  // the box that scrolls, the table in it
  const empty = el('div', { class: 'empty' },
    el('strong', { text: 'No models configured' }),
    'Add a model with its backends under ', el('code', { text: 'models:' }),
    ' in the config file (see docs/configuration.md) and restart the warden.');
  const card = el('section', { class: 'card', 'aria-labelledby': 'models-h' },
    el('div', { class: 'card-head' }, el('h2', { id: 'models-h', text: 'Models' }),
      el('span', { class: 'muted', text: 'Refreshes every 2 s' })),
    body);
  // Homes shared with other wardens through Redis (shared_homes): shown only
  // when the warden shares them.
  const sharedWhere = el('span', { class: 'muted' });
  const sharedPills = el('div', { class: 'pills' });
  const shared = el('section', { class: 'card', 'aria-labelledby': 'shared-h', 'data-testid': 'shared-homes', hidden: true },
    el('div', { class: 'card-head' }, el('h2', { id: 'shared-h', text: 'Homes shared with other wardens' }), sharedWhere),
    el('div', { class: 'card-body' }, sharedPills));
  // A reload the file did not pass: the configuration in force is older
  // than the file, and a restart would fail on it. Shown until one applies.
  // A region, not a live one: its "N s ago" changes at every refresh, which
  // a screen reader would announce each time.
  const refusedWhen = el('span', { class: 'muted' });
  const problems = el('ul', { class: 'problems' });
  const refused = el('section', { class: 'card refused', 'aria-labelledby': 'refused-h',
    'data-testid': 'reload-refused', hidden: true },
  el('div', { class: 'card-head' }, el('h2', { id: 'refused-h', text: 'The configuration file does not load' }), refusedWhen),
  el('p', { class: 'card-body', text: 'The last reload was refused: the warden serves the configuration it read ' +
    'before, and a restart would fail on the file as it is. Fix what the lines below say, then reload ' +
    '(SIGHUP, or systemctl reload lmwarden).' }),
  problems);
  root.append(
    el('div', { class: 'page-head' },
      el('div', {}, el('h1', { text: 'Models' }),
        el('div', { class: 'subtitle', text: 'Each conversation stays on the replica that holds its prefix cache.' }))),
    refused, tiles, card, shared);

  let refusalShown = '';
  function showRefusal(c) {
    const r = c?.reload_refused;
    refused.hidden = !r;
    if (!r) { refusalShown = ''; return; }
    const ago = (Date.now() - new Date(r.at).getTime()) / 1000;
    setText(refusedWhen, `Refused at ${utc(r.at)} (${duration(ago)} ago); in force: the file as read at ${utc(c.loaded_at)}`);
    const key = `${r.at}|${r.problems.join('\n')}`;
    if (key === refusalShown) return;  // the same lines: left as they are (a selection survives)
    refusalShown = key;
    problems.replaceChildren(...r.problems.map((line) => el('li', { text: line })));
  }

  const countPill = (label, n, title, cls = '') =>
    el('span', { class: `pill small ${cls}`.trim(), title }, `${label} `, el('b', { text: int(n) }));
  function showShared(s) {
    shared.hidden = !s;
    if (!s) return;
    setText(sharedWhere, `through ${s.redis}`);
    const pills = [
      el('span', { class: `pill small ${s.connected ? 'on' : 'bad'}`, 'data-pill': 'redis',
        text: s.connected ? 'Redis connected' : 'Redis not connected',
        title: s.connected ? 'Conversations placed by other wardens are found here'
          : 'Each warden places conversations alone until Redis answers again' }),
      countPill('found in Redis', s.lookups.found, 'Conversations this warden did not know, found where another warden had placed them'),
      countPill('new to every warden', s.lookups.absent, 'Asked, and no warden had placed them: placed as new'),
      countPill('lookups failed', s.lookups.failed, 'Redis unreachable, an error, or later than the timeout', s.lookups.failed ? 'off' : ''),
      countPill('followed another warden’s home', s.claims.yielded, 'Writes answered with another warden’s home, which this warden then follows: both placed the conversation at once, or the other moved it'),
    ];
    if (s.claims.kept) {
      pills.push(countPill('another warden’s home not followed', s.claims.kept,
        'Another warden’s home that this warden sees unhealthy (or the conversation had moved on here): each keeps its own'));
    }
    if (s.claims.unchecked) {
      pills.push(countPill('written unchecked', s.claims.unchecked,
        'Redis refuses scripts (EVAL): homes are written without the check that lets two wardens agree on one', 'off'));
    }
    const unusable = s.lookups.unusable + s.claims.unusable;
    if (unusable) {
      pills.push(countPill('naming servers not listed here', unusable,
        'Homes in Redis that name a server or rank this warden’s file does not list: is every warden’s backend written alike?', 'off'));
    }
    sharedPills.replaceChildren(...pills);
  }

  const rows = new Map();  // model name -> row cells, updated in place
  const tileCells = {};
  const tile = (key, label) => {
    const value = el('div', { class: 'tile-value', text: '—' });
    tileCells[key] = value;
    tiles.append(el('div', { class: 'tile' }, el('div', { class: 'tile-label', text: label }), value));
  };
  tile('models', 'Models');
  tile('replicas', 'Replicas healthy');
  tile('inflight', 'Requests in flight');
  tile('hit', 'Prompt tokens from cache, last hour');

  function rowFor(m) {
    let r = rows.get(m.name);
    if (r) return r;
    const link = el('a', { href: `/models/${modelPath(m.name)}`, 'data-link': true, class: 'model-link', text: m.name });
    r = {
      tr: el('tr'),
      health: el('span', { class: 'health' }),
      inflight: el('td', { class: 'num' }),
      affinity: el('span', { class: 'pill small' }),
      spill: el('td', { class: 'num' }),
      hit: el('td', { class: 'num', text: '—' }),
    };
    const name = el('th', { scope: 'row', class: 'model-name' }, link);
    if (m.aliases?.length) name.append(el('span', { class: 'aliases', text: `also ${m.aliases.join(', ')}` }));
    r.tr.append(name, el('td', {}, r.health), r.inflight, el('td', {}, r.affinity), r.spill, r.hit);
    rows.set(m.name, r);
    return r;
  }

  async function refresh() {
    let data;
    try {
      data = await api.models();
      ctx.ok();
    } catch (err) {
      ctx.fail(err);
      return;
    }
    showRefusal(data.configuration);
    showShared(data.shared_homes);
    const models = data.models ?? [];
    const shown = models.length ? scrolled : empty;
    if (shown.parentNode !== body) body.replaceChildren(shown);
    const seen = new Set();
    let replicas = 0, healthy = 0, inflight = 0;
    models.forEach((m, i) => {
      seen.add(m.name);
      const r = rowFor(m);
      if (tbody.children[i] !== r.tr) tbody.insertBefore(r.tr, tbody.children[i] ?? null);
      const h = m.healthy_replicas ?? m.replicas;
      replicas += m.replicas; healthy += h; inflight += m.in_flight;
      setText(r.health, `${h} of ${m.replicas} healthy`);
      r.health.className = `health${h === 0 ? ' down' : h < m.replicas ? ' partial' : ''}`;
      setText(r.inflight, int(m.in_flight));
      setText(r.affinity, m.affinity ? 'Affinity on' : 'Affinity off');
      r.affinity.className = `pill small ${m.affinity ? 'on' : 'off'}`;
      setText(r.spill, m.spill_threshold_auto ? `${m.spill_threshold} (auto)` : String(m.spill_threshold));
    });
    for (const [name, r] of rows) if (!seen.has(name)) { r.tr.remove(); rows.delete(name); }
    setText(tileCells.models, int(models.length));
    setText(tileCells.replicas, `${healthy} / ${replicas}`);
    setText(tileCells.inflight, int(inflight));
    if (Date.now() - lastHit > 5000) {
      lastHit = Date.now();
      refreshHit();
    }
  }
  let lastHit = 0;

  // Tokens count from the warden's start, or a model's from its last reload
  // that changed its replicas (counted_since): when that was within the hour
  // it is said, so that a share or "no traffic" is not read as the whole
  // hour's ("no traffic yet" after a start says it already).
  const sinceCounted = (s, traffic) => {
    const since = s.counted_since ?? s.started;
    if (s.now - since >= 3600) return '';
    if (since > s.started) return ` since a reload, ${duration(s.now - since)} ago`;
    return traffic ? ` since the warden started, ${duration(s.now - since)} ago` : '';
  };

  // The hour's cache share is slower-moving: fetched less often, and hidden
  // gracefully where the stats API is unavailable. A model with a server
  // whose replies never say how many prompt tokens came from the cache
  // (cached_count_missing) has its cached tokens booked as computed: its
  // share is not shown, and the fleet's leaves it out.
  async function refreshHit() {
    let s;
    try { s = await api.stats(null, 3600); } catch { setText(tileCells.hit, '—'); return; }
    const unreported = s.cached_count_missing ?? [];
    // Per model, for a fleet of a reasonable size; those unreported always.
    const names = rows.size > 20 ? unreported : [...rows.keys()];
    const perModel = new Map();
    await Promise.all(names.map(async (name) => {
      try { perModel.set(name, await api.stats(name, 3600)); } catch { /* shown as a dash */ }
    }));
    let cached = s.totals.prompt_cached;
    let prompt = cached + s.totals.prompt_computed;
    let unknown = false;  // an unreported model's totals did not load: nothing to take away
    for (const name of unreported) {
      const t = perModel.get(name)?.totals;
      if (t) { cached -= t.prompt_cached; prompt -= t.prompt_cached + t.prompt_computed; } else unknown = true;
    }
    // Its totals were read after the fleet's: traffic in between could take
    // away more than the fleet's figures hold.
    prompt = unknown ? 0 : Math.max(0, prompt);
    cached = Math.min(Math.max(0, cached), prompt);
    const said = prompt ? ` of ${si(prompt)} tokens` : unreported.length ? ' not reported' : ' no traffic yet';
    const left = prompt && unreported.length ? `, leaving out ${unreported.join(', ')} (not reported)` : '';
    tileCells.hit.replaceChildren(prompt ? pct(cached / prompt) : '—',
      el('small', { text: said + sinceCounted(s, prompt > 0) + left }));
    for (const [name, r] of rows) {
      const m = perModel.get(name);
      if (!m) { setText(r.hit, '—'); continue; }
      const p = m.totals.prompt_cached + m.totals.prompt_computed;
      const notReported = unreported.includes(name);
      setText(r.hit, notReported ? 'not reported'
        : (p ? `${pct(m.cache_hit_ratio)} of ${si(p)}` : 'no traffic') + sinceCounted(m, p > 0));
      r.hit.classList.toggle('zero', !p || notReported);
      r.hit.title = notReported ? 'Replies from a server of this model never say how many prompt tokens came from '
        + 'the cache (vLLM started without --enable-prompt-tokens-details): see Tokens per second' : '';
    }
  }

  const stop = poll(refresh, 2000);
  return () => stop();
}
