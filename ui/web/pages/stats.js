// Stats page: tokens per second for one model or all of them.
import { TokensPanel, WINDOWS, segmented } from '../tokens_panel.js';
import { el } from '../format.js';

export function mountStats(root, _params, ctx) {
  document.title = 'Tokens per second · LM Warden';
  const params = new URLSearchParams(location.search);
  const startWindow = WINDOWS.find((w) => String(w.s) === params.get('window'))?.s ?? 3600;
  const startModel = params.get('model') || '';

  const select = el('select', { id: 'stats-model', 'data-testid': 'model-select' },
    el('option', { value: '', text: 'All models' }));
  if (startModel) select.append(el('option', { value: startModel, text: startModel }));
  select.value = startModel;
  const body = el('div', { class: 'card-body' });
  let panel = null;

  // The URL keeps the choice, so a view can be shared or reloaded.
  const remember = () => {
    const q = new URLSearchParams();
    if (panel.model) q.set('model', panel.model);
    if (panel.windowS !== 3600) q.set('window', String(panel.windowS));
    const url = `/stats${q.toString() ? `?${q}` : ''}`;
    if (url !== location.pathname + location.search) history.replaceState({}, '', url);
  };
  select.addEventListener('change', () => { panel.setModel(select.value); remember(); });
  const picker = segmented('Time window', WINDOWS, startWindow, (s) => { panel.setWindow(s); remember(); });

  root.append(
    el('div', { class: 'page-head' },
      el('div', {}, el('h1', { text: 'Tokens per second' }),
        el('div', { class: 'subtitle', text: 'Prompt tokens the engines served from their prefix cache against tokens they had to compute, and completion tokens, as relayed by the warden.' })),
      el('div', { class: 'controls' }, el('label', { for: 'stats-model' }, 'Model', select), picker)),
    el('section', { class: 'card', 'aria-label': 'Tokens per second' }, body));

  panel = new TokensPanel(body, {
    model: startModel || null,
    windowS: startWindow,
    // Taller charts on taller screens, so a wide monitor is not half empty.
    heights: {
      promptHeight: Math.round(Math.min(440, Math.max(260, window.innerHeight * 0.36))),
      completionHeight: Math.round(Math.min(240, Math.max(140, window.innerHeight * 0.18))),
    },
    // A model not served here (a stale link) is said in the panel; the
    // warden itself answered, so the top bar stays calm. The select says it
    // too, so that the name does not read as one of the models.
    onError: (err) => {
      if (err.status !== 404) { ctx.fail(err); return; }
      ctx.ok();
      const asked = select.selectedOptions[0];
      if (err.message.startsWith('unknown model') && asked?.value) asked.textContent = `${asked.value} (not served)`;
    },
    onStats: (s) => {
      ctx.ok();
      // Keep the model list in step with the warden's configuration.
      const names = s.models ?? [];
      const asked = select.value;
      // By text: a name marked "not served" is listed afresh once it is.
      const have = [...select.options].slice(1).map((o) => o.textContent);
      if (names.join('\n') !== have.join('\n')) {
        select.replaceChildren(el('option', { value: '', text: 'All models' }),
          ...names.map((n) => el('option', { value: n, text: n })));
      }
      // An alias (from the URL) is answered with its model's name: that one
      // is shown. A name the select lists stands as chosen.
      if (asked === '' || names.includes(asked)) select.value = asked;
      else select.value = names.includes(s.model) ? s.model : '';
    },
  });
  return () => panel.destroy();
}
