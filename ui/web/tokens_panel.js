// The tokens-per-second panel shared by the stats page and each model page:
// window picker, the window's summary line, the two charts, the empty state.
import { api } from './api.js';
import { poll } from './poll.js';
import { TokensChart } from './tokens_chart.js';
import { el, pct, si, setText, duration } from './format.js';

export const WINDOWS = [
  { s: 900, label: '15 min' },
  { s: 3600, label: '1 h' },
  { s: 21600, label: '6 h' },
];

// A segmented control; calls onPick(value) and keeps aria-pressed in step.
export function segmented(label, options, value, onPick) {
  const group = el('div', { class: 'segmented', role: 'group', 'aria-label': label });
  const buttons = options.map((o) => {
    const b = el('button', { type: 'button', 'aria-pressed': String(o.s === value), 'data-window': o.s, text: o.label });
    b.addEventListener('click', () => {
      for (const x of buttons) x.setAttribute('aria-pressed', String(x === b));
      onPick(o.s);
    });
    return b;
  });
  group.append(...buttons);
  return group;
}

export class TokensPanel {
  // opts: { model: name | null, windowS, ctx, emptyHint }
  constructor(container, opts) {
    this.opts = opts;
    this.model = opts.model ?? null;
    this.windowS = opts.windowS ?? 3600;
    this.summary = el('div', { class: 'summary', 'data-testid': 'tokens-summary' });
    this.chartBox = el('div', { class: 'tokens-chart', 'data-testid': 'tokens-chart' });
    this.empty = el('div', { class: 'chart-empty', hidden: true });
    this.error = el('div', { class: 'notice error', hidden: true, role: 'alert' });
    // Servers whose replies never say how many prompt tokens were cached: the
    // chart books all their prompt tokens as computed (GET /api/stats,
    // cached_count_missing_servers).
    this.uncounted = el('div', { class: 'notice warn', hidden: true, role: 'status', 'data-testid': 'cached-count-missing' });
    container.append(this.summary, this.error, this.uncounted, this.empty, this.chartBox);
    this.chart = new TokensChart(this.chartBox, opts.heights);
    this.notServed = false;  // the last answer was a 404
    this.stop = poll(() => this.refresh(), () => this.period());
  }

  // The 6 h window moves slowly: every 10 s. A model not served (a stale
  // link) is asked again every 5 s, as the top bar checks a reload, so that
  // the page comes back once a reload adds it.
  period() {
    if (this.notServed) return 5000;
    return this.windowS > 3600 ? 10000 : 2000;
  }

  setWindow(s) { this.windowS = s; this.kick(); }
  setModel(m) { this.model = m || null; this.kick(); }

  // Re-fetch at once after a control changed.
  kick() {
    this.stop();
    this.chartBox.dataset.ready = 'false';
    this.stop = poll(() => this.refresh(), () => this.period());
  }

  async refresh() {
    const want = `${this.model}|${this.windowS}`;
    let s;
    try {
      s = await api.stats(this.model, this.windowS);
    } catch (err) {
      if (want !== `${this.model}|${this.windowS}`) return;  // a control changed meanwhile
      this.notServed = err.status === 404;
      this.error.hidden = false;
      // Nothing to chart: no empty headings under the notice. A warden that
      // does not answer keeps the last figures (dimmed by the top bar).
      if (this.notServed) {
        this.chartBox.hidden = true;
        this.empty.hidden = true;
        this.uncounted.hidden = true;
        this.summary.replaceChildren();
        delete this.summary.dataset.key;
      }
      // A 404 for a model names it ("unknown model M"); any other 404 is a
      // warden from before /api/stats ("no route /api/stats").
      setText(this.error, err.status === 404 && !err.message.startsWith('unknown model')
        ? 'This warden does not serve token statistics (GET /api/stats).'
        : `Token statistics unavailable: ${err.message}`);
      this.opts.onError?.(err);
      return;
    }
    if (want !== `${this.model}|${this.windowS}`) return;  // a control changed meanwhile
    this.notServed = false;
    this.error.hidden = true;
    this.renderUncounted(s.cached_count_missing_servers ?? []);
    this.opts.onStats?.(s);
    const t = s.totals;
    const prompt = t.prompt_cached + t.prompt_computed;
    const any = prompt + t.completion > 0;
    this.empty.hidden = any;
    this.chartBox.hidden = !any;
    const span = WINDOWS.find((w) => w.s === s.window_s)?.label ?? duration(s.window_s);
    // A reload that changed the replicas starts the count again: "no
    // traffic yet" would then be wrong.
    const since = s.counted_since ?? s.started;
    const reset = since > s.started;
    if (!any) {
      const url = `${location.protocol}//${location.host}/v1`;
      const key = `empty|${url}|${this.model}|${reset}`;
      if (this.empty.dataset.key !== key) {
        this.empty.dataset.key = key;
        this.empty.replaceChildren(
          el('strong', { text: reset ? `No tokens since a reload changed the replicas, ${duration(s.now - since)} ago`
            : `No traffic yet — point a client at ${url}` }),
          el('span', {}, this.model
            ? ['Requests with ', el('code', { text: `"model": "${this.model}"` }), ' will show here within a second or two.']
            : ['Prompt tokens (cached and computed) and completion tokens will show here within a second or two.']));
      }
      this.summary.replaceChildren(el('span', { class: 'muted', text: reset
        ? `Last ${span}: no tokens since a reload changed the replicas, ${duration(s.now - since)} ago`
        : `Last ${span}: no tokens` }));
    } else {
      // Tokens are counted from the warden's start, or for a model from the
      // reload that changed its replicas (GET /api/stats, counted_since).
      this.chart.update(s, since);
      const young = !since || s.now - since >= s.window_s ? ''
        : reset ? ` (counted since a reload changed the replicas, ${duration(s.now - since)} ago)`
          : ` (the warden started ${duration(s.now - since)} ago)`;
      this.renderSummary(s, span + young);
    }
    this.chartBox.dataset.ready = 'true';
  }

  renderSummary(s, span) {
    const t = s.totals;
    const prompt = t.prompt_cached + t.prompt_computed;
    const key = `${span}|${t.prompt_cached}|${t.prompt_computed}|${t.completion}|${s.cache_hit_ratio}`;
    if (this.summary.dataset.key === key) return;
    this.summary.dataset.key = key;
    this.summary.replaceChildren(
      el('div', {}, el('span', { class: 'big', 'data-testid': 'hit-share', text: pct(s.cache_hit_ratio) }),
        ` of prompt tokens served from cache, last ${span}`),
      el('div', { class: 'summary-parts' },
        el('span', { class: 'muted', text: `${si(prompt)} prompt tokens:` }),
        el('span', {}, el('span', { class: 'swatch cached' }), `${si(t.prompt_cached)} cached`),
        el('span', {}, el('span', { class: 'swatch computed' }), `${si(t.prompt_computed)} computed`),
        el('span', { class: 'muted', text: '·' }),
        el('span', {}, el('span', { class: 'swatch completion' }), `${si(t.completion)} completion tokens`)));
  }

  // servers: [{model, url}] whose replies never say how many prompt tokens were cached.
  renderUncounted(servers) {
    this.uncounted.hidden = servers.length === 0;
    const key = servers.map((s) => `${s.model}|${s.url}`).join('\n');
    if (this.uncounted.dataset.key === key) return;
    this.uncounted.dataset.key = key;
    if (!servers.length) { this.uncounted.replaceChildren(); return; }
    this.uncounted.replaceChildren(
      'Replies from ',
      ...servers.flatMap((s, i) => [i ? ', ' : '', el('code', { text: s.url }), ' (model ',
        el('code', { text: s.model }), ')']),
      ' never say how many of their prompt tokens came from the cache, so the chart counts all of those as computed. vLLM reports the count only when started with ',
      el('code', { text: '--enable-prompt-tokens-details' }),
      '.');
  }

  destroy() {
    this.stop();
    this.chart.destroy();
  }
}
