// Tokens per second: prompt tokens as stacked bars (cached under computed)
// and completion tokens/s below, sharing one time axis and one hover readout.
// Drawn with uPlot (vendor/uPlot.iife.min.js, a global loaded before the modules).
import { si, clock, el } from './format.js';

const NICE_STEPS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800];
let instances = 0;

// UTC wall-clock time, 24-hour (operators compare it with their logs);
// seconds only when ticks are closer than a minute.
function tickLabel(ts, incr) {
  return incr < 60 ? clock(ts) : clock(ts).slice(0, 5);
}

function cssVar(name) {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
}

// Averages the API's series into buckets wide enough for bars of a few pixels.
// Buckets are aligned to absolute time, so bars do not shift as time advances.
export function bucketSeries(stats, plotWidth, from = -Infinity) {
  const s = stats.series;
  const step = stats.step_s || 1;
  const first = Math.max(0, s.t.findIndex((t) => t >= from));
  const n = s.t.length - first;
  const maxBars = Math.max(20, Math.floor(plotWidth / 7));
  const wanted = Math.ceil((n * step) / maxBars);
  const width = NICE_STEPS.find((w) => w >= wanted && w % step === 0) ?? Math.ceil(wanted / step) * step;
  const out = { t: [], cached: [], computed: [], completion: [], width };
  let key = null;
  let count = 0;
  const flush = () => {
    if (key === null) return;
    const i = out.t.length - 1;
    out.cached[i] /= count;
    out.computed[i] /= count;
    out.completion[i] /= count;
  };
  for (let i = first; i < s.t.length; i++) {
    const k = Math.floor(s.t[i] / width) * width;
    if (k !== key) {
      flush();
      key = k;
      count = 0;
      out.t.push(k + width / 2);  // bars are centred on their bucket
      out.cached.push(0);
      out.computed.push(0);
      out.completion.push(0);
    }
    const j = out.t.length - 1;
    out.cached[j] += s.prompt_cached[i] || 0;
    out.computed[j] += s.prompt_computed[i] || 0;
    out.completion[j] += s.completion[i] || 0;
    count++;
  }
  flush();
  // The bucket holding "now" is still filling: drawn, it would always dip.
  const last = out.t.length - 1;
  if (last > 0 && out.t[last] + width / 2 > stats.now) {
    for (const k of ['t', 'cached', 'computed', 'completion']) out[k].pop();
  }
  // Replies under way book their tokens when they end, from the second of
  // their first byte on (settled_until): bars reaching past it can still grow.
  const settled = stats.settled_until ?? stats.now;
  out.firstOpen = out.t.findIndex((t) => t + width / 2 > settled);
  if (out.firstOpen < 0) out.firstOpen = out.t.length;
  out.openRequests = stats.open_requests ?? 0;
  return out;
}

// Veils the bars that can still grow, so that they read as provisional, and
// says so at the top of the veil.
function drawFilling(u, chart) {
  const b = chart.data;
  if (!b || b.firstOpen >= b.t.length) return;
  const { ctx, bbox } = u;
  const left = Math.max(bbox.left, u.valToPos(b.t[b.firstOpen] - b.width / 2, 'x', true));
  const right = bbox.left + bbox.width;
  if (right - left < 1) return;
  ctx.save();
  ctx.fillStyle = cssVar('--surface-2');
  ctx.globalAlpha = 0.6;
  ctx.fillRect(left, bbox.top, right - left, bbox.height);
  ctx.globalAlpha = 1;
  ctx.strokeStyle = cssVar('--muted');
  ctx.setLineDash([4 * devicePixelRatio, 3 * devicePixelRatio]);
  ctx.lineWidth = devicePixelRatio;
  ctx.beginPath();
  ctx.moveTo(Math.round(left) + 0.5, bbox.top);
  ctx.lineTo(Math.round(left) + 0.5, bbox.top + bbox.height);
  ctx.stroke();
  ctx.restore();
}

export class TokensChart {
  constructor(container, { promptHeight = 240, completionHeight = 140 } = {}) {
    this.container = container;
    this.heights = [promptHeight, completionHeight];
    this.key = `tokens-${++instances}`;
    this.stats = null;
    this.data = null;

    this.readout = el('div', { class: 'readout', 'aria-live': 'off' });
    this.fillingKey = el('span', { class: 'filling-key', hidden: true, 'data-testid': 'filling-key' });
    this.promptBox = el('div', { class: 'chart', role: 'img', 'aria-label': 'Prompt tokens per second, cached and computed, stacked bars' });
    this.completionBox = el('div', { class: 'chart', role: 'img', 'aria-label': 'Completion tokens per second' });
    container.append(
      this.readout,
      el('div', { class: 'chart-title' },
        el('h3', { text: 'Prompt tokens/s' }),
        el('span', {}, el('span', { class: 'swatch cached' }), 'cached'),
        el('span', {}, el('span', { class: 'swatch computed' }), 'computed'),
        this.fillingKey),
      this.promptBox,
      el('div', { class: 'chart-title' },
        el('h3', { text: 'Completion tokens/s' })),
      this.completionBox,
    );
    this.resizer = new ResizeObserver(() => this.resize());
    this.resizer.observe(container);
  }

  width() {
    return Math.max(280, Math.floor(this.container.clientWidth));
  }

  build() {
    const uPlot = window.uPlot;
    const colors = {
      cached: cssVar('--cached'), computed: cssVar('--computed'), completion: cssVar('--completion'),
      grid: cssVar('--border'), text: cssVar('--muted'),
    };
    const sync = uPlot.sync(this.key);
    const bars = uPlot.paths.bars({ size: [0.86, 40], gap: 1 });
    const yRange = (u, min, max) => [0, max > 0 ? uPlot.rangeNum(0, max, 0.1, true)[1] : 1];
    const axis = (label) => ({
      stroke: colors.text, grid: { stroke: colors.grid, width: 1 }, ticks: { stroke: colors.grid, width: 1 },
      label, labelSize: 18, labelFont: '12px system-ui, sans-serif', font: '11px system-ui, sans-serif',
      values: (u, vals) => vals.map(si), size: 52,
    });
    const timeAxis = {
      stroke: colors.text, grid: { stroke: colors.grid, width: 1 }, ticks: { stroke: colors.grid, width: 1 },
      // Room for an "HH:MM:SS" label and a gap (uPlot's default of 50 px
      // ran the labels together when ticks came every few seconds).
      font: '11px system-ui, sans-serif', size: 28, space: 72,
      values: (u, splits, _axis, _space, incr) => splits.map((ts) => tickLabel(ts, incr)),
    };
    const common = (height) => ({
      width: this.width(),
      height,
      // Ticks fall on UTC's round minutes and hours, as their labels read.
      tzDate: (ts) => uPlot.tzDate(new Date(ts * 1000), 'Etc/UTC'),
      legend: { show: false },
      cursor: { sync: { key: this.key, setSeries: false }, points: { size: 6 }, drag: { x: false, y: false } },
      scales: {
        x: { time: true, range: () => this.xRange() },
        y: { range: yRange },
      },
      hooks: { setCursor: [(u) => this.showReadout(u.cursor.idx)], draw: [(u) => drawFilling(u, this)] },
    });
    // Computed is drawn as the stack's total first; cached is drawn over its
    // lower part, so each bar reads cached (bottom) + computed (top).
    this.prompt = new uPlot({
      ...common(this.heights[0]),
      axes: [timeAxis, axis('tokens/s')],
      series: [
        {},
        { label: 'Prompt computed', fill: colors.computed, stroke: colors.computed, width: 0, paths: bars, points: { show: false } },
        { label: 'Prompt cached', fill: colors.cached, stroke: colors.cached, width: 0, paths: bars, points: { show: false } },
      ],
    }, [[], [], []], this.promptBox);
    this.completion = new uPlot({
      ...common(this.heights[1]),
      axes: [timeAxis, axis('tokens/s')],
      series: [
        {},
        { label: 'Completion', stroke: colors.completion, fill: colors.completion + '33', width: 1.5, points: { show: false } },
      ],
    }, [[], []], this.completionBox);
    sync.sub(this.prompt);
    sync.sub(this.completion);
  }

  xRange() {
    if (!this.stats) return [0, 1];
    return [this.from, this.stats.now + 1];
  }

  // `since` (unix s, optional): when the warden started. Nothing can exist
  // before it, so the axis starts there when that is inside the window
  // (at least two minutes shown, so a young warden's bars stay readable).
  update(stats, since) {
    this.stats = stats;
    const windowStart = stats.now - stats.window_s;
    this.from = since ? Math.max(windowStart, Math.min(since, stats.now - 120)) : windowStart;
    if (!this.prompt) this.build();
    this.render();
  }

  render() {
    const b = bucketSeries(this.stats, this.width() - 70, this.from);
    this.data = b;
    const total = b.cached.map((c, i) => c + b.computed[i]);
    this.prompt.setData([b.t, total, b.cached]);
    this.completion.setData([b.t, b.completion]);
    const sum = (a) => a.reduce((x, y) => x + y, 0);
    // Exposed for tests and scripts: the plotted sums, not the API's totals.
    this.container.dataset.cachedSum = String(sum(b.cached));
    this.container.dataset.computedSum = String(sum(b.computed));
    this.container.dataset.completionSum = String(sum(b.completion));
    this.container.dataset.bucketSeconds = String(b.width);
    const open = b.firstOpen < b.t.length;
    this.container.dataset.fillingFrom = open ? String(b.t[b.firstOpen] - b.width / 2) : '';
    this.fillingKey.hidden = !open;
    if (open) {
      const n = b.openRequests;
      this.fillingKey.replaceChildren(el('span', { class: 'swatch filling' }),
        n > 0 ? `still filling: ${n} ${n === 1 ? 'reply' : 'replies'} under way` : 'still filling');
      this.fillingKey.title = 'A reply\'s tokens are counted when it ends, from the second of its first byte on; '
        + 'until then these bars read low.';
    }
    this.showReadout(this.prompt.cursor.idx);
  }

  showReadout(idx) {
    const b = this.data;
    if (!b || !b.t.length) { this.readout.replaceChildren(); return; }
    const live = idx == null;
    // Unhovered, the readout shows the latest bar that can no longer grow.
    const settled = b.firstOpen > 0 ? b.firstOpen - 1 : b.t.length - 1;
    const i = live ? settled : idx;
    const span = `${clock(b.t[i] - b.width / 2)}–${clock(b.t[i] + b.width / 2)} UTC`;
    const filling = i >= b.firstOpen;
    let label = span;
    if (live) label = `${b.firstOpen > 0 && b.firstOpen < b.t.length ? 'Latest complete' : 'Latest'}, ${span}`;
    if (filling) label += ' (still filling)';
    const key = `${label}|${b.cached[i]}|${b.computed[i]}|${b.completion[i]}`;
    if (this.readout.dataset.key === key) return;
    this.readout.dataset.key = key;
    const v = (x) => el('b', { text: si(x) });
    this.readout.replaceChildren(
      `${label}: cached `, v(b.cached[i]), ' · computed ', v(b.computed[i]),
      ' · completion ', v(b.completion[i]), ' tokens/s');
  }

  resize() {
    if (!this.prompt) return;
    const w = this.width();
    if (w === this.prompt.width) return;
    this.prompt.setSize({ width: w, height: this.heights[0] });
    this.completion.setSize({ width: w, height: this.heights[1] });
    if (this.stats) this.render();
  }

  destroy() {
    this.resizer.disconnect();
    this.prompt?.destroy();
    this.completion?.destroy();
  }
}

