// Polls fn every `ms` while the page is mounted and visible, never overlapping
// two requests. Returns a stop function.
export function poll(fn, ms) {
  let timer = null;
  let stopped = false;
  const tick = async () => {
    timer = null;
    if (stopped) return;
    if (!document.hidden) {
      try { await fn(); } catch { /* fn reports its own errors */ }
    }
    if (!stopped) timer = setTimeout(tick, ms);
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

