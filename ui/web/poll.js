// Polls fn while the page is mounted and visible, never overlapping two
// requests. `ms` is the period, or a function that gives it before each wait
// (a panel that slows down for its 6 h window, or while its model is not
// served). Returns a stop function.
export function poll(fn, ms) {
  let timer = null;
  let stopped = false;
  const period = typeof ms === 'function' ? ms : () => ms;
  const tick = async () => {
    timer = null;
    if (stopped) return;
    if (!document.hidden) {
      try { await fn(); } catch { /* fn reports its own errors */ }
    }
    if (!stopped) timer = setTimeout(tick, period());
  };
  const onVisible = () => { if (!document.hidden && timer !== null && !stopped) { clearTimeout(timer); tick(); } };
  document.addEventListener('visibilitychange', onVisible);
  tick();
  return () => {
    stopped = true;
    if (timer !== null) clearTimeout(timer);
    document.removeEventListener('visibilitychange', onVisible);
  };
}
