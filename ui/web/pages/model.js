// Model page: the data-parallel routing card (what the warden decided, per
// replica, next to what each engine reports), the backends, and the model's
// tokens per second.
import { api, adminToken, setAdminToken, modelPath } from '../api.js';
import { poll } from '../poll.js';
import { TokensPanel, WINDOWS, segmented } from '../tokens_panel.js';
import { el, int, pct, setText, utc, duration, DASH, tableScroll } from '../format.js';

// Replica table columns: [field, heading, tooltip].
const COLUMNS = [
  ['health', 'Health', 'Health check and scrape status, or ejected for its 5xx replies; a replica not healthy takes no new work'],
  ['in_flight', 'In flight', 'Requests the warden has sent to this replica that have not finished'],
  ['live_conversations', 'Conversations', 'Live conversations whose home is this replica'],
  ['sticky', 'Sticky', 'Requests of a known conversation served by its home'],
  ['spilled_in', 'Spilled in', 'Requests sent here because their home was at the spill threshold'],
  ['client_pinned', 'Client-pinned', 'Requests whose client sent X-data-parallel-rank itself'],
  ['new', 'Placed by load', 'Requests placed here as the least-loaded replica: new conversations, re-homed ones, anonymous requests, retries of requests that failed elsewhere and, with affinity off, balanced ones'],
  ['upstream_errors', 'Errors', 'Exchanges with this replica that failed: no connection, a timeout, a reset, a reply that is not HTTP, or a server error (5xx). A failed attempt counts here also when another replica then served the request; hover a number for the kinds'],
  ['running', 'Running', 'Requests the engine is running (scraped)'],
  ['waiting', 'Waiting', 'Requests queued in the engine (scraped)'],
  ['kv_used', 'KV used', 'Share of the KV cache in use (scraped)'],
  ['prefix_hit_rate', 'Prefix hit', 'Prefix-cache hit rate since the warden started: Δhits / Δqueries, in tokens'],
];

// The card's route counters (api.md) that count each client request once:
// `retried` counts later attempts of requests counted under another.
const FIRST_ATTEMPTS = ['new', 'sticky', 'spilled_in', 'client_pinned', 'rehomed', 'anonymous', 'balanced'];

// Requests the card's `unassigned` counts.
export function unassignedRequests(u) {
  return FIRST_ATTEMPTS.reduce((n, route) => n + (u[route] ?? 0), 0);
}

// What the health column says: an ejected replica whose server then failed
// its probes is out for the second cause.
function state(r) {
  if (r.healthy) return 'healthy';
  return r.out_of_service?.cause ?? (r.ejected ? 'ejected' : 'unhealthy');
}

// The card's upstream error kinds (lmwarden_upstream_errors_total's `kind`),
// in words.
const ERROR_KINDS = {
  connect: 'could not connect',
  connect_timeout: 'connect timed out',
  reset: 'connection reset',
  protocol: 'not a valid HTTP reply',
  first_byte_timeout: 'no first byte in time',
  idle_timeout: 'silent mid-reply',
  status_5xx: 'server error (5xx)',
};

// The card's `refused` reasons (lmwarden_refused_requests_total's), in words.
const REFUSALS = {
  no_healthy_replica: 'no healthy replica (503)',
  unknown_rank: 'a rank past the model\'s replicas (400)',
  unauthorized: 'no valid API key (401)',
};

// What the warden refused for the model before any replica, or '' for none.
function refusalSummary(refused) {
  const said = Object.entries(refused ?? {}).filter(([, n]) => n > 0)
    .map(([k, n]) => `${int(n)} for ${REFUSALS[k] ?? k}`);
  return said.length ? `Refused by the warden before any replica, since it started: ${said.join(', ')}.` : '';
}

// Upstream errors as [total, "2 could not connect, 1 server error (5xx)"].
function errorSummary(errors) {
  const kinds = Object.entries(errors ?? {}).filter(([, n]) => n > 0);
  const total = kinds.reduce((sum, [, n]) => sum + n, 0);
  return [total, kinds.map(([k, n]) => `${int(n)} ${ERROR_KINDS[k] ?? k}`).join(', ')];
}

function hostOf(url) {
  try { return new URL(url).host; } catch { return url; }
}

export function mountModel(root, { name }, ctx) {
  document.title = `${name} · LM Warden`;
  let card = null;       // latest card from the API
  let editing = false;   // spill threshold editor open
  let adminMode = null;  // rendered mode of the pills (null: not yet)

  // ---- skeleton ----
  const aliases = el('div', { class: 'subtitle' });
  const errorBox = el('div', { class: 'error-box', role: 'alert', hidden: true });
  const pills = el('div', { class: 'pills', 'data-testid': 'pills' });
  const notice = el('div', { class: 'notice', role: 'status' });
  const admin = el('div', { class: 'admin', 'data-testid': 'admin' });
  const tbody = el('tbody');
  const since = el('span');
  // Requests sent without a rank (affinity off, or an unranked route, on a
  // multi-rank server): the server's own balancer placed them, so no replica
  // row counts them.
  const unassigned = el('p', { class: 'muted', 'data-testid': 'unassigned', hidden: true });
  // Why each replica out of service is out, and since when.
  const outages = el('ul', { class: 'outages', 'data-testid': 'outages', hidden: true });
  // Requests of this model the warden answered itself (503 with no healthy
  // replica, …), since the process started.
  const refusedNote = el('p', { class: 'refused-note', 'data-testid': 'refused', hidden: true });
  const thead = el('tr', {}, el('th', { scope: 'col', text: 'Replica' }),
    ...COLUMNS.map(([f, h, tip]) => el('th', { scope: 'col', class: f === 'health' ? '' : 'num', title: tip, text: h })));
  const backends = el('tbody');
  const routing = el('section', { class: 'card', 'aria-labelledby': 'routing-h', 'data-testid': 'routing-card' },
    el('div', { class: 'card-head' }, el('h2', { id: 'routing-h', text: 'Data-parallel routing' }), admin),
    el('div', { class: 'card-body' }, pills, notice),
    tableScroll(
      el('table', { 'aria-label': `Replicas of ${name}`, 'data-testid': 'replicas' }, el('thead', {}, thead), tbody)),
    outages,
    el('div', { class: 'card-foot' }, refusedNote, unassigned, since));
  const tokensBody = el('div', { class: 'card-body' });
  let panel = null;
  const windowPicker = segmented('Time window', WINDOWS, 900, (s) => panel.setWindow(s));
  root.append(
    el('div', { class: 'page-head' },
      el('div', {},
        el('div', { class: 'crumbs' }, el('a', { href: '/', 'data-link': true, text: 'Models' }), ' / '),
        el('h1', { text: name }), aliases)),
    errorBox,
    routing,
    el('section', { class: 'card', 'aria-labelledby': 'tokens-h' },
      el('div', { class: 'card-head' }, el('h2', { id: 'tokens-h', text: 'Tokens per second' }), windowPicker),
      tokensBody),
    el('section', { class: 'card', 'aria-labelledby': 'backends-h' },
      el('div', { class: 'card-head' }, el('h2', { id: 'backends-h', text: 'Backends' })),
      tableScroll(
        el('table', { 'aria-label': 'Backends', 'data-testid': 'backends' },
          el('thead', {}, el('tr', {}, el('th', { scope: 'col', text: 'URL' }),
            el('th', { scope: 'col', class: 'num', text: 'DP size' }), el('th', { scope: 'col', text: 'Replicas healthy' }))),
          backends))));
  panel = new TokensPanel(tokensBody, { model: name, windowS: 900, heights: { promptHeight: 220, completionHeight: 120 } });

  // ---- admin token ----
  function renderAdmin() {
    if (adminToken()) {
      admin.replaceChildren(
        el('span', { class: 'lock', text: 'Admin controls on' }),
        el('button', { type: 'button', class: 'btn', 'data-testid': 'lock', text: 'Lock', onclick: () => {
          setAdminToken('');
          say('');
          renderAdmin();
          renderPills();
        } }));
      return;
    }
    const input = el('input', { type: 'password', id: 'admin-token', autocomplete: 'off', placeholder: 'Admin token', 'aria-label': 'Admin token', size: 18 });
    const form = el('form', { 'data-testid': 'token-form' }, input, el('button', { type: 'submit', class: 'btn', text: 'Unlock' }));
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      const token = input.value.trim();
      if (!token) { input.focus(); return; }
      setAdminToken(token);
      // An empty PATCH changes nothing and tells whether the token is accepted.
      try {
        applyCard(await api.patchModel(name, {}));
        say('');
      } catch (err) {
        setAdminToken('');
        say(err.status === 403 || err.status === 401 ? `Not unlocked: ${err.message}` : `Could not check the token: ${err.message}`, true);
      }
      renderAdmin();
      renderPills();
    });
    admin.replaceChildren(el('span', { class: 'muted', text: 'Read-only' }), form);
  }

  function say(text, isError = false) {
    notice.className = `notice${isError ? ' error' : ''}`;
    setText(notice, text);
  }

  async function change(body, what) {
    try {
      applyCard(await api.patchModel(name, body));
      say(`${what}.`);
    } catch (err) {
      if (err.status === 401 || err.status === 403) {
        setAdminToken('');
        renderAdmin();
        editing = false;
      }
      say(`${what} failed: ${err.message}`, true);
    }
    renderPills();
  }

  // ---- pills ----
  const pill = {};
  function renderPills() {
    const isAdmin = Boolean(adminToken());
    if (isAdmin === adminMode && !pill.dirty) { updatePills(); return; }
    adminMode = isAdmin;
    pill.dirty = false;
    if (isAdmin) {
      pill.affinity = el('button', { type: 'button', class: 'pill', role: 'switch', 'data-pill': 'affinity',
        title: 'Switch conversation affinity for this model' });
      pill.affinity.addEventListener('click', () => {
        if (!card) return;
        const next = !card.affinity;
        change({ affinity: next }, `Affinity switched ${next ? 'on' : 'off'}`);
      });
      pill.spill = el('button', { type: 'button', class: 'pill', 'data-pill': 'spill', title: 'Change the spill threshold' });
      pill.spill.addEventListener('click', () => { editing = true; pill.dirty = true; renderPills(); });
    } else {
      editing = false;
      pill.affinity = el('span', { class: 'pill', 'data-pill': 'affinity' });
      pill.spill = el('span', { class: 'pill', 'data-pill': 'spill', title: 'A conversation spills to another replica when its home has this many requests in flight' });
    }
    pill.sticky = el('span', { class: 'pill', 'data-pill': 'sticky', title: 'Share of requests from known conversations served by their home replica' });
    pill.inflight = el('span', { class: 'pill', 'data-pill': 'in_flight', title: 'Requests in flight to this model' });
    pill.convs = el('span', { class: 'pill', 'data-pill': 'conversations', title: 'Live conversations the warden remembers for this model' });
    pill.stored = el('span', { class: 'pill', 'data-pill': 'stored_responses', hidden: true,
      title: 'Stored Responses API responses whose replica the warden remembers: a request chained to one (previous_response_id) goes where it is stored' });
    const spillSlot = editing ? spillEditor() : pill.spill;
    pills.replaceChildren(pill.affinity, spillSlot, pill.sticky, pill.inflight, pill.convs, pill.stored);
    updatePills();
  }

  function spillEditor() {
    const auto = Boolean(card?.spill_threshold_auto);
    const num = el('input', { type: 'number', min: 1, max: 1000000, step: 1, value: card?.spill_threshold ?? 8,
      'aria-label': 'Spill threshold (requests in flight)', disabled: auto });
    const autoBox = el('input', { type: 'checkbox', checked: auto, 'aria-label': 'Automatic spill threshold' });
    autoBox.addEventListener('change', () => { num.disabled = autoBox.checked; });
    const close = () => { editing = false; pill.dirty = true; renderPills(); pill.spill.focus(); };
    const form = el('form', { class: 'editor', 'data-testid': 'spill-editor' },
      el('label', {}, 'Spill at', num, 'in flight'),
      el('label', {}, autoBox, 'auto'),
      el('button', { type: 'submit', class: 'btn primary', text: 'Apply' }),
      el('button', { type: 'button', class: 'btn', text: 'Cancel', onclick: close }));
    form.addEventListener('keydown', (e) => { if (e.key === 'Escape') close(); });
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      let value = 'auto';
      if (!autoBox.checked) {
        value = Number(num.value);
        if (!Number.isInteger(value) || value < 1) { say('The spill threshold is a whole number of requests, 1 or more.', true); num.focus(); return; }
      }
      editing = false;
      pill.dirty = true;
      await change({ spill_threshold: value }, `Spill threshold set to ${value}`);
      pill.spill.focus();
    });
    queueMicrotask(() => (auto ? autoBox : num).focus());
    return form;
  }

  function updatePills() {
    if (!card || !pill.affinity) return;
    const on = card.affinity;
    pill.affinity.classList.toggle('on', on);
    pill.affinity.classList.toggle('off', !on);
    if (adminMode) {
      pill.affinity.setAttribute('aria-checked', String(on));
      if (!pill.affinity.firstChild) pill.affinity.append(el('span', { class: 'switch-track', 'aria-hidden': 'true' }), el('span'));
      setText(pill.affinity.lastChild, on ? 'Affinity on' : 'Affinity off');
    } else {
      setText(pill.affinity, on ? 'Affinity on' : 'Affinity off');
    }
    const spillKey = `${card.spill_threshold}|${card.spill_threshold_auto}`;
    if (pill.spill.dataset.key !== spillKey) {
      pill.spill.dataset.key = spillKey;
      pill.spill.replaceChildren('Spill threshold ', el('b', { text: String(card.spill_threshold) }),
        ...(card.spill_threshold_auto ? [el('span', { class: 'muted', text: ' (auto)' })] : []));
    }
    pillValue(pill.sticky, 'Sticky', card.sticky_ratio == null ? DASH : pct(card.sticky_ratio));
    pillValue(pill.inflight, 'In flight', int(card.in_flight));
    pillValue(pill.convs, 'Conversations', int(card.conversations));
    // Shown once there are any: most deployments store none.
    pillValue(pill.stored, 'Stored responses', int(card.stored_responses ?? 0));
    pill.stored.hidden = !card.stored_responses;
  }

  function pillValue(p, label, value) {
    if (!p.firstChild) p.append(`${label} `, el('b'));
    setText(p.lastChild, value);
  }

  // ---- replicas ----
  const rows = new Map();
  function rowFor(r) {
    let row = rows.get(r.index);
    if (row) return row;
    row = { tr: el('tr', { 'data-replica': r.index }), cells: {} };
    const head = el('th', { scope: 'row' });
    row.head = head;
    row.tr.append(head);
    for (const [f] of COLUMNS) {
      const td = el('td', { class: f === 'health' ? '' : 'num', 'data-field': f });
      if (f === 'kv_used' || f === 'prefix_hit_rate') {
        const fill = el('div', { class: `meter-fill ${f === 'kv_used' ? 'kv' : 'hit'}` });
        const text = el('span', { class: 'meter-text' });
        td.append(el('div', { class: 'meter' }, el('div', { class: 'meter-bar', 'aria-hidden': 'true' }, fill), text));
        row.cells[f] = { td, fill, text };
      } else if (f === 'health') {
        const span = el('span', { class: 'health' });
        td.append(span);
        row.cells[f] = { td, text: span };
      } else {
        row.cells[f] = { td, text: td };
      }
      row.tr.append(td);
    }
    rows.set(r.index, row);
    return row;
  }

  function updateRow(row, r, manyBackends) {
    const headKey = `${r.index}|${r.rank}|${r.url}|${manyBackends}`;
    if (row.head.dataset.key !== headKey) {
      row.head.dataset.key = headKey;
      row.head.replaceChildren(el('b', { text: `#${r.index}` }), el('span', { class: 'muted', text: ` · rank ${r.rank}` }),
        ...(manyBackends ? [el('span', { class: 'replica-host', text: hostOf(r.url) })] : []));
      row.head.title = r.url;
    }
    for (const [f] of COLUMNS) {
      const c = row.cells[f];
      let v = r[f];
      if (f === 'health') {
        setText(c.text, state(r));
        c.text.className = `health${r.healthy ? '' : ' down'}`;
        c.text.title = state(r) === 'ejected' ? 'its replies were server errors (5xx) too many times in a row; '
          + 'it takes no new work for a while (eject_for)' : '';
      } else if (f === 'kv_used' || f === 'prefix_hit_rate') {
        // Out of service: a dash, as for the engine's other figures.
        if (f === 'prefix_hit_rate' && !r.healthy) v = null;
        setText(c.text, pct(v));
        const w = v == null ? '0%' : `${Math.min(100, Math.max(0, v * 100)).toFixed(1)}%`;
        if (c.fill.style.width !== w) c.fill.style.width = w;
        if (f === 'kv_used') {
          c.fill.classList.toggle('high', v != null && v >= 0.8 && v < 0.95);
          c.fill.classList.toggle('full', v != null && v >= 0.95);
        }
        c.td.title = !r.healthy ? 'out of service' : v == null ? 'not scraped yet' : '';
      } else if (f === 'upstream_errors') {
        const [n, kinds] = errorSummary(v);
        setText(c.text, int(n));
        c.td.classList.toggle('zero', n === 0);
        c.td.classList.toggle('bad', n > 0);
        c.td.title = kinds;
      } else {
        const n = f === 'new' ? (r.new ?? 0) + (r.anonymous ?? 0) + (r.balanced ?? 0) + (r.rehomed ?? 0) + (r.retried ?? 0) : v;
        setText(c.text, int(n));
        c.td.classList.toggle('zero', n === 0 || n == null);
      }
    }
  }

  // ---- refresh ----
  function applyCard(c) {
    card = c;
    errorBox.hidden = true;
    setText(aliases, `${c.replicas.length} replica${c.replicas.length === 1 ? '' : 's'} on ${c.backends.length} backend${c.backends.length === 1 ? '' : 's'}`);
    renderPills();
    const seen = new Set();
    c.replicas.forEach((r, i) => {
      seen.add(r.index);
      const row = rowFor(r);
      if (tbody.children[i] !== row.tr) tbody.insertBefore(row.tr, tbody.children[i] ?? null);
      updateRow(row, r, c.backends.length > 1);
    });
    for (const [k, row] of rows) if (!seen.has(k)) { row.tr.remove(); rows.delete(k); }
    const u = c.unassigned ?? {};
    const placed = unassignedRequests(u);
    const [failed, failedKinds] = errorSummary(u.upstream_errors);
    unassigned.hidden = placed === 0 && !u.in_flight && failed === 0;
    setText(unassigned, 'Placed by the server\'s own balancer (sent without a rank: affinity off, or a ' +
      'route the server does not pin by rank, such as /v1/responses): ' +
      `${int(placed)} request${placed === 1 ? '' : 's'}, ${int(u.in_flight ?? 0)} in flight` +
      (failed ? `, ${failedKinds}` : '') + '. No row above counts them.');
    const refusals = refusalSummary(c.refused);
    refusedNote.hidden = refusals === '';
    setText(refusedNote, refusals);
    const up = (Date.now() - new Date(c.since).getTime()) / 1000;
    setText(since, `Counters since ${utc(c.since)} (${duration(up)} ago): the warden's start, or the ` +
      'reload that changed this model\'s replicas. ' +
      'Running, waiting, KV used and prefix hit come from each engine\'s metrics.');
    renderBackends(c);
    renderOutages(c);
  }

  // One line per cause: the ranks of a server out together share one.
  function renderOutages(c) {
    const groups = new Map();
    for (const r of c.replicas) {
      if (r.healthy) continue;
      const o = r.out_of_service ?? { cause: state(r), reason: 'no reason recorded', since: null };
      const key = `${r.url}|${o.cause}|${o.reason}|${o.since}`;
      if (!groups.has(key)) groups.set(key, { r, o, indexes: [] });
      groups.get(key).indexes.push(`#${r.index}`);
    }
    outages.hidden = groups.size === 0;
    outages.replaceChildren(...[...groups.values()].map(({ r, o, indexes }) => {
      const since = o.since
        ? ` Since ${utc(o.since)} (${duration((Date.now() - new Date(o.since).getTime()) / 1000)} ago).`
        : '';
      return el('li', {},
        el('b', { text: `${indexes.join(', ')} ${o.cause}` }),
        ` (${hostOf(r.url)}): ${o.reason}.${since}`);
    }));
  }

  function renderBackends(c) {
    const key = JSON.stringify(c.backends) + c.replicas.map((r) => r.healthy ? 1 : 0).join('');
    if (backends.dataset.key === key) return;
    backends.dataset.key = key;
    backends.replaceChildren(...c.backends.map((b) => {
      const reps = c.replicas.filter((r) => r.url === b.url);
      const ok = reps.filter((r) => r.healthy).length;
      return el('tr', {},
        el('td', {}, el('code', { text: b.url })),
        el('td', { class: 'num', text: int(b.data_parallel_size) }),
        el('td', {}, el('span', { class: `health${ok === 0 ? ' down' : ok < reps.length ? ' partial' : ''}`, text: `${ok} of ${reps.length}` })));
    }));
  }

  // The page's cards, shown only while the model exists (a reload can add
  // or remove it).
  const cards = [...root.querySelectorAll(':scope > section.card')];
  const showCards = (shown) => { for (const c of cards) c.hidden = !shown; };

  // A model not served (a stale link) is asked again every 5 s rather than
  // every second: a reload can still add it.
  let missing = false;
  async function refresh() {
    try {
      const c = await api.model(name);
      missing = false;
      // Asked by an alias: the model's own page, by its name.
      if (c.name !== name) {
        ctx.replace(`/models/${modelPath(c.name)}${location.search}`);
        return;
      }
      applyCard(c);
      errorBox.hidden = true;
      showCards(true);
      ctx.ok();
    } catch (err) {
      if (err.status === 404) {
        missing = true;
        showCards(false);
        errorBox.hidden = false;
        errorBox.replaceChildren(`No model named “${name}” on this warden. `,
          el('a', { href: '/', 'data-link': true, text: 'See all models' }));
        ctx.ok();
      } else {
        ctx.fail(err);
      }
    }
  }

  renderAdmin();
  const stop = poll(refresh, () => (missing ? 5000 : 1000));
  return () => { stop(); panel.destroy(); };
}
