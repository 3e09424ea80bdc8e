// The dashboard shell: history routing between the three pages and the
// "live" indicator in the top bar. Each page is a module exporting
// mount(root, params, ctx) -> unmount().
import { mountModels } from './pages/models.js';
import { mountModel } from './pages/model.js';
import { mountStats } from './pages/stats.js';
import { api } from './api.js';
import { poll } from './poll.js';
import { el, setText, duration, clock } from './format.js';

const main = document.getElementById('main');
const live = document.getElementById('live');
let unmount = null;
let shown = null;  // the route rendered

// On every page but Models, whose card says it in full: a line at the top
// while the configuration file's last reload was refused.
const reloadRefused = el('div', { class: 'error-box', 'data-testid': 'reload-refused-line', hidden: true });
const onModels = () => shown?.mount === mountModels;
poll(async () => {
  const refused = onModels() ? null : (await api.models()).configuration?.reload_refused;
  reloadRefused.hidden = !refused || onModels();
  if (!refused) return;
  const ago = (Date.now() - new Date(refused.at).getTime()) / 1000;
  if (reloadRefused.dataset.key !== refused.at) {
    reloadRefused.dataset.key = refused.at;
    reloadRefused.replaceChildren(el('b', { text: 'The configuration file does not load' }),
      el('span', { class: 'refused-ago' }), ' The warden serves the configuration before it. ',
      el('a', { href: '/', 'data-link': true, text: 'See why on the models page' }), '.');
  }
  setText(reloadRefused.querySelector('.refused-ago'), `: a reload was refused ${duration(ago)} ago.`);
}, 5000);

function route(pathname) {
  if (pathname === '/stats' || pathname === '/stats/') return { page: 'stats', mount: mountStats, params: {} };
  const m = pathname.match(/^\/models\/(.+)$/);
  if (m) {
    const name = m[1].replace(/\/$/, '').split('/').map(decodeURIComponent).join('/');
    return { page: 'models', mount: mountModel, params: { name } };
  }
  if (pathname === '/' || pathname === '/models' || pathname === '/models/') {
    return { page: 'models', mount: mountModels, params: {} };
  }
  return { page: null, mount: mountNotFound, params: { path: pathname } };
}

// An address that is no page here (the warden answers it 404).
function mountNotFound(root, { path }, pageCtx) {
  document.title = 'No such page · LM Warden';
  root.append(el('div', { class: 'page-head' }, el('h1', { text: 'No such page' })),
    el('div', { class: 'error-box', 'data-testid': 'not-found' }, `There is no page at ${path}. See `,
      el('a', { href: '/', 'data-link': true, text: 'the models' }), ' or ',
      el('a', { href: '/stats', 'data-link': true, text: 'tokens per second' }), '.'));
  pageCtx.ok();  // the warden answered this page
  return null;
}

// Reports each refresh to the top bar: calm when fine, plain words when not.
const ctx = {
  ok() {
    live.dataset.state = 'ok';
    delete main.dataset.stale;
    setText(live.querySelector('.live-text'), 'Live');
    live.title = `Updated ${clock(Date.now() / 1000)} UTC`;
  },
  fail(err) {
    live.dataset.state = 'error';
    // What the page still shows is the last figures it had: dimmed, so they
    // do not pass for current.
    if (err?.status === 0) main.dataset.stale = 'true';
    setText(live.querySelector('.live-text'), err?.status === 0 ? 'Warden unreachable — retrying' : 'Refresh failed — retrying');
  },
  navigate(href) {
    history.pushState({}, '', href);
    render();
  },
  // The same page under another address (an alias's model by its name),
  // without a step in the history.
  replace(href) {
    history.replaceState({}, '', href);
    render();
  },
};

function render() {
  const r = route(location.pathname);
  if (unmount) unmount();
  main.replaceChildren();
  for (const a of document.querySelectorAll('nav a[data-nav]')) {
    // "page" on the exact page; "true" on Models while a model's page is open.
    if (a.dataset.nav !== r.page) a.removeAttribute('aria-current');
    else a.setAttribute('aria-current', r.params.name ? 'true' : 'page');
  }
  shown = r;
  unmount = r.mount(main, r.params, ctx) || null;
  // Kept across pages; hidden on Models, whose card says it.
  if (onModels()) reloadRefused.hidden = true;
  main.prepend(reloadRefused);
}

// Internal links change the page without a reload.
document.addEventListener('click', (e) => {
  const a = e.target.closest('a[data-link]');
  if (!a || e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
  const url = new URL(a.href, location.href);
  if (url.origin !== location.origin) return;
  e.preventDefault();
  if (url.pathname + url.search !== location.pathname + location.search) {
    history.pushState({}, '', url.pathname + url.search);
    render();
    main.focus({ preventScroll: true });
    window.scrollTo(0, 0);
  }
});
window.addEventListener('popstate', render);
render();
