// Number and time formatting shared by the pages. Nulls (not scraped yet)
// render as an em dash so a missing value never reads as zero.
const intFmt = new Intl.NumberFormat('en-US');
export const DASH = '—';

export function int(v) {
  return v == null ? DASH : intFmt.format(v);
}

// 0..1 -> "87%", with one decimal below 10% and above 99%: a share that is
// not nothing never reads as 0%, and one that is not all (a sticky ratio
// with one failover in it) never as 100%.
export function pct(v) {
  if (v == null || Number.isNaN(v)) return DASH;
  const p = v * 100;
  if (p > 0 && p < 10) return `${Math.max(p, 0.1).toFixed(1)}%`;
  if (p > 99 && p < 100) return `${Math.min(p, 99.9).toFixed(1)}%`;
  return `${Math.round(p)}%`;
}

// Tokens or tokens/s with SI suffixes: 950, 9.5k, 1.2M.
export function si(v) {
  if (v == null || Number.isNaN(v)) return DASH;
  const a = Math.abs(v);
  if (a >= 1e9) return `${(v / 1e9).toFixed(a >= 1e10 ? 0 : 1)}G`;
  if (a >= 1e6) return `${(v / 1e6).toFixed(a >= 1e7 ? 0 : 1)}M`;
  if (a >= 1e3) return `${(v / 1e3).toFixed(a >= 1e4 ? 0 : 1)}k`;
  if (a >= 10 || v === 0) return `${Math.round(v)}`;
  return v.toFixed(1);
}

export function duration(seconds) {
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return `${s} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min`;
  const h = Math.floor(m / 60);
  if (h < 48) return `${h} h ${m % 60} min`;
  return `${Math.floor(h / 24)} d ${h % 24} h`;
}

// "2025-01-02 14:03:07 UTC" for an ISO 8601 instant.
export function utc(iso) {
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return iso;
  return d.toISOString().replace('T', ' ').replace(/\.\d+Z$/, ' UTC');
}

// UTC wall-clock time, 24-hour "14:03:07": every time on the dashboard is
// UTC, as in the warden's logs, whatever the browser's zone.
export function clock(unixSeconds) {
  const d = new Date(unixSeconds * 1000);
  return [d.getUTCHours(), d.getUTCMinutes(), d.getUTCSeconds()].map((x) => String(x).padStart(2, '0')).join(':');
}

// Sets text only when it changed, so live refreshes do not touch the DOM
// (no reflow, no flicker, selection and focus survive).
export function setText(el, text) {
  if (el.textContent !== text) el.textContent = text;
}

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v == null || v === false) continue;
    if (k === 'class') node.className = v;
    else if (k === 'text') node.textContent = v;
    else if (k.startsWith('on')) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children.flat(Infinity)) if (c != null && c !== false) node.append(c);
  return node;
}

// A table in a horizontally scrolling box that says it scrolls: the box's
// edge fades on each side where columns are out of view (data-more=
// "right", "left" or "both").
export function tableScroll(table) {
  const wrap = el('div', { class: 'table-wrap' }, table);
  const outer = el('div', { class: 'table-scroll' }, wrap);
  const update = () => {
    const left = wrap.scrollLeft > 1;
    const right = wrap.scrollLeft + wrap.clientWidth < wrap.scrollWidth - 1;
    const more = left && right ? 'both' : left ? 'left' : right ? 'right' : '';
    if ((outer.dataset.more ?? '') !== more) {
      if (more) outer.dataset.more = more;
      else delete outer.dataset.more;
    }
  };
  wrap.addEventListener('scroll', update, { passive: true });
  const resized = new ResizeObserver(update);
  resized.observe(table);
  resized.observe(wrap);
  return outer;
}
