// The strategy page: the editable strategy, validated live by the API (the simulate route
// answers a bad strategy with the message saving it would), saved with its recompute job shown
// until it ends; and the simulator: a user's ranking of some items under the saved strategy
// and under the edited one, side by side. Below, the app's named strategies (what A/B test
// variants may use): the edited strategy saved under a name, each loaded back or deleted.

import { api, apiOrNull, ApiError, seg } from './api.js';
import { h, fill, errorBox, notice, table, field, card, debounce, splitList, confirmDialog } from './ui.js';
import { attributes, recomputeView } from './pages.js';

const EVENT_TYPES = ['click', 'conversion', 'view'];

// A score as typed: a number when it reads as one, else the text (the API says what is wrong).
function score(text) {
  const t = String(text).trim();
  return /^-?\d+(\.\d+)?$/.test(t) ? Number(t) : t;
}

export function strategyPage(root, ctx) {
  let saved = null; // the saved strategy, or null
  let validationSeq = 0;
  let valid = false;
  let simulated = false; // the simulator ran once: edits run it again
  let timers = [];

  const eventsBody = h('tbody', { id: 'events-rows' });
  const facetsBody = h('tbody', { id: 'facets-rows' });
  const impact = h('input', { type: 'range', min: 0, max: 100, step: 1, value: 50, id: 'strategy-impact' });
  const impactOut = h('output', { for: 'strategy-impact', id: 'strategy-impact-value' }, '50');
  const validation = h('div', { id: 'strategy-validation', 'aria-live': 'polite' });
  const saveButton = h('button', { type: 'submit', id: 'strategy-save', disabled: true }, 'Save');
  const saveStatus = h('div', { id: 'strategy-save-status', 'aria-live': 'polite' });
  const jobBox = h('div', { id: 'strategy-job' });
  const loadStatus = h('div', { id: 'strategy-load' }, notice('Loading…'));

  const form = h(
    'form',
    { id: 'strategy-form', class: 'stack' },
    h('h3', null, 'Events'),
    h('div', { class: 'table-wrap' },
      h('table', { class: 'edit-table' },
        h('thead', null, h('tr', null, h('th', null, 'Type'), h('th', null, 'Event name'), h('th', null, 'Score (1–100)'), h('th', null, h('span', { class: 'sr-only' }, 'Remove')))),
        eventsBody)),
    h('button', { type: 'button', class: 'secondary', id: 'add-event' }, '+ Event'),
    h('h3', null, 'Facets'),
    h('div', { class: 'table-wrap' },
      h('table', { class: 'edit-table' },
        h('thead', null, h('tr', null, h('th', null, 'Facet name'), h('th', null, 'Score (1–100)'), h('th', null, h('span', { class: 'sr-only' }, 'Remove')))),
        facetsBody)),
    h('button', { type: 'button', class: 'secondary', id: 'add-facet' }, '+ Facet'),
    h('h3', null, 'Personalization impact'),
    h('div', { class: 'impact' }, field('Impact (0–100)', impact), impactOut),
    validation,
    h('div', { class: 'actions' }, saveButton),
    saveStatus,
    jobBox,
  );

  // The simulator.
  const simUser = h('input', { id: 'sim-user', spellcheck: 'false' });
  const simIndex = h('input', { id: 'sim-index', spellcheck: 'false' });
  const modeList = h('input', { type: 'radio', name: 'sim-mode', value: 'list', id: 'sim-mode-list', checked: true });
  const modeFacet = h('input', { type: 'radio', name: 'sim-mode', value: 'facet', id: 'sim-mode-facet' });
  const simItems = h('textarea', { id: 'sim-items', rows: 3, placeholder: 'iphone, galaxy, pixel' });
  const simFacet = h('input', { id: 'sim-facet', placeholder: 'brand:Apple', spellcheck: 'false' });
  const simOut = h('div', { id: 'sim-results', 'aria-live': 'polite' });
  const itemsField = field('Object IDs (comma or newline separated)', simItems);
  const facetField = field('Facet value (facet:value)', simFacet, 'its first 20 records (browse), in objectID order');
  const showMode = () => {
    itemsField.hidden = modeFacet.checked;
    facetField.hidden = !modeFacet.checked;
  };
  showMode();
  modeList.addEventListener('change', showMode);
  modeFacet.addEventListener('change', showMode);
  const simForm = h(
    'form',
    { id: 'sim-form', class: 'stack' },
    h('div', { class: 'toolbar' }, field('User token', simUser), field('Index', simIndex)),
    h('fieldset', { class: 'models' }, h('legend', null, 'Items'),
      h('label', { class: 'check' }, modeList, 'these objectIDs'),
      h('label', { class: 'check' }, modeFacet, 'the top 20 items of a facet value')),
    itemsField,
    facetField,
    h('button', { type: 'submit', id: 'sim-run' }, 'Simulate'),
    simOut,
  );

  // Named strategies: the edited one saved under a name; each loaded into the editor or deleted.
  const namedName = h('input', { id: 'named-name', spellcheck: 'false', placeholder: 'purchases-only', maxlength: 64 });
  const namedSave = h('button', { type: 'submit', id: 'named-save', disabled: true }, 'Save the edited strategy as');
  const namedStatus = h('div', { id: 'named-status', 'aria-live': 'polite' });
  const namedList = h('div', { id: 'named-list' }, notice('Loading…'));
  const namedForm = h('form', { id: 'named-form', class: 'toolbar' }, field('Name', namedName), namedSave);

  root.append(
    loadStatus,
    h('div', { class: 'grid-strategy' }, card('Strategy', form), card('Simulator', h('p', { class: 'muted small' }, 'How the user’s hits would rank under the saved strategy and under the edited one.'), simForm)),
    card('Named strategies',
      h('p', { class: 'muted small' }, 'Strategies an A/B test’s variant may use (personalizationStrategy): a user’s profile is computed with their weights when answered; the strategy above stays the app’s.'),
      namedForm, namedStatus, namedList),
  );

  async function loadNamed() {
    try {
      const r = await api('GET', '/1/strategies/personalization/named');
      if (!ctx.alive()) return;
      const rows = r.strategies || [];
      if (!rows.length) {
        fill(namedList, h('p', { class: 'muted', id: 'named-none' }, 'No named strategy yet.'));
        return;
      }
      fill(namedList, table([
        { label: 'Name', cell: (n) => h('code', null, n.name) },
        { label: 'Events', num: true, cell: (n) => String(n.strategy.eventsScoring.length) },
        { label: 'Facets', num: true, cell: (n) => String(n.strategy.facetsScoring.length) },
        { label: 'Impact', num: true, cell: (n) => String(n.strategy.personalizationImpact) },
        { label: 'Actions', cell: (n) => h('span', { class: 'actions' },
          h('button', { type: 'button', class: 'secondary', dataset: { load: n.name }, onclick: () => { show(n.strategy); changed(); namedName.value = n.name; } }, 'Edit'),
          h('button', { type: 'button', class: 'danger', dataset: { delete: n.name }, onclick: () => deleteNamed(n.name) }, 'Delete')) },
      ], rows, { id: 'named-table' }));
    } catch (e) {
      if (ctx.alive()) fill(namedList, errorBox(e, 'Named strategies'));
    }
  }

  async function deleteNamed(name) {
    if (!(await confirmDialog(`Delete the named strategy “${name}”?`, 'Delete'))) return;
    try {
      await api('DELETE', `/1/strategies/personalization/named/${seg(name)}`);
      fill(namedStatus, h('p', { class: 'ok' }, `Deleted “${name}”.`));
    } catch (e) {
      fill(namedStatus, errorBox(e, 'Delete failed'));
    }
    loadNamed();
  }

  namedForm.addEventListener('submit', async (e) => {
    e.preventDefault();
    const name = namedName.value.trim();
    if (!valid || !name) return;
    namedSave.disabled = true;
    try {
      await api('PUT', `/1/strategies/personalization/named/${seg(name)}`, edited());
      fill(namedStatus, h('p', { class: 'ok', id: 'named-saved' }, `Saved as “${name}”.`));
      loadNamed();
    } catch (err) {
      fill(namedStatus, errorBox(err, 'Save failed'));
    } finally {
      namedSave.disabled = !valid;
    }
  });

  function eventRow(e = { eventType: 'click', eventName: '', score: '' }) {
    const type = h('select', { class: 'event-type', 'aria-label': 'Event type' }, EVENT_TYPES.map((t) => h('option', { value: t, selected: t === e.eventType }, t)));
    const name = h('input', { class: 'event-name', 'aria-label': 'Event name', value: e.eventName ?? '' });
    const sc = h('input', { class: 'event-score', 'aria-label': 'Event score', type: 'number', inputmode: 'numeric', value: e.score ?? '' });
    const remove = h('button', { type: 'button', class: 'secondary remove', 'aria-label': 'Remove this event' }, '×');
    const row = h('tr', { class: 'event-row' }, h('td', null, type), h('td', null, name), h('td', null, sc), h('td', null, remove));
    remove.addEventListener('click', () => {
      row.remove();
      changed();
    });
    return row;
  }

  function facetRow(f = { facetName: '', score: '' }) {
    const name = h('input', { class: 'facet-name', 'aria-label': 'Facet name', value: f.facetName ?? '' });
    const sc = h('input', { class: 'facet-score', 'aria-label': 'Facet score', type: 'number', inputmode: 'numeric', value: f.score ?? '' });
    const remove = h('button', { type: 'button', class: 'secondary remove', 'aria-label': 'Remove this facet' }, '×');
    const row = h('tr', { class: 'facet-edit-row' }, h('td', null, name), h('td', null, sc), h('td', null, remove));
    remove.addEventListener('click', () => {
      row.remove();
      changed();
    });
    return row;
  }

  function edited() {
    return {
      eventsScoring: [...eventsBody.querySelectorAll('tr')].map((r) => ({
        eventName: r.querySelector('.event-name').value,
        eventType: r.querySelector('.event-type').value,
        score: score(r.querySelector('.event-score').value),
      })),
      facetsScoring: [...facetsBody.querySelectorAll('tr')].map((r) => ({
        facetName: r.querySelector('.facet-name').value,
        score: score(r.querySelector('.facet-score').value),
      })),
      personalizationImpact: Number(impact.value),
    };
  }

  function show(strategy) {
    fill(eventsBody, (strategy ? strategy.eventsScoring : []).map(eventRow));
    fill(facetsBody, (strategy ? strategy.facetsScoring : []).map(facetRow));
    impact.value = strategy ? strategy.personalizationImpact : 50;
    impactOut.textContent = impact.value;
  }

  // Validate the edited strategy (and run the simulator again once it ran).
  const validate = debounce(async () => {
    const seq = ++validationSeq;
    const strategy = edited();
    try {
      await api('POST', '/1/strategies/personalization/simulate', { strategy });
      if (seq !== validationSeq || !ctx.alive()) return;
      valid = true;
      fill(validation, h('p', { class: 'ok', id: 'strategy-valid' }, 'Valid strategy.'));
      if (simulated) simulate();
    } catch (e) {
      if (seq !== validationSeq || !ctx.alive()) return;
      valid = false;
      fill(validation, errorBox(e, e instanceof ApiError && e.status === 400 ? 'Invalid strategy' : 'Validation failed'));
    }
    saveButton.disabled = !valid;
    namedSave.disabled = !valid;
  }, 300);

  function changed() {
    valid = false;
    saveButton.disabled = true;
    namedSave.disabled = true;
    fill(validation, h('p', { class: 'muted' }, 'Checking…'));
    validate();
  }

  form.addEventListener('input', (e) => {
    if (e.target === impact) impactOut.textContent = impact.value;
    changed();
  });
  form.addEventListener('change', (e) => {
    if (e.target.tagName === 'SELECT') changed();
  });
  form.querySelector('#add-event').addEventListener('click', () => {
    eventsBody.append(eventRow());
    eventsBody.lastChild.querySelector('.event-name').focus();
    changed();
  });
  form.querySelector('#add-facet').addEventListener('click', () => {
    facetsBody.append(facetRow());
    facetsBody.lastChild.querySelector('.facet-name').focus();
    changed();
  });

  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    if (!valid) return;
    const strategy = edited();
    saveButton.disabled = true;
    fill(saveStatus, notice('Saving…'));
    try {
      const r = await api('POST', '/1/strategies/personalization', strategy);
      saved = strategy;
      fill(saveStatus, h('p', { class: 'ok', id: 'strategy-saved' }, r.message || 'Saved.'));
      followJob();
      if (simulated) simulate();
    } catch (err) {
      fill(saveStatus, errorBox(err, 'Save failed'));
    } finally {
      saveButton.disabled = !valid;
    }
  });

  // The recompute the save started, until it ends.
  function followJob() {
    timers.forEach(clearTimeout);
    timers = [];
    const poll = async () => {
      try {
        const job = await apiOrNull('GET', '/1/strategies/personalization/job');
        if (!ctx.alive()) return;
        if (!job) {
          fill(jobBox, notice('No recompute job yet.'));
        } else {
          fill(jobBox, h('h3', null, 'Recompute'), recomputeView(job));
          if (job.state === 'running') timers.push(setTimeout(poll, 500));
        }
      } catch (e) {
        if (ctx.alive()) fill(jobBox, errorBox(e, 'The recompute job'));
      }
    };
    poll();
  }

  async function items() {
    if (modeFacet.checked) {
      const text = simFacet.value.trim();
      const i = text.indexOf(':');
      if (i <= 0) throw new Error('Type the facet value as facet:value (brand:Apple).');
      const facet = text.slice(0, i).trim();
      const value = text.slice(i + 1).trim();
      const filters = `${facet}:"${value.replace(/"/g, '\\"')}"`;
      const r = await api('POST', `/1/indexes/${seg(simIndex.value.trim())}/browse`, { filters, hitsPerPage: 20 });
      return r.hits.map((x) => x.objectID);
    }
    return splitList(simItems.value);
  }

  let simSeq = 0;
  async function simulate() {
    const seq = ++simSeq;
    const user = simUser.value.trim();
    const index = simIndex.value.trim();
    if (!user || !index) {
      fill(simOut, errorBox('Type a user token and an index.'));
      return;
    }
    fill(simOut, notice('Simulating…'));
    try {
      const ids = await items();
      if (!ids.length) throw new Error('No items to rank.');
      const strategy = edited();
      const [result, records] = await Promise.all([
        api('POST', '/1/strategies/personalization/simulate', { strategy, userToken: user, index, hits: ids.map((objectID) => ({ objectID })) }),
        api('POST', '/1/indexes/*/objects', { requests: ids.map((objectID) => ({ indexName: index, objectID })) }),
      ]);
      if (seq !== simSeq || !ctx.alive()) return;
      simulated = true;
      // The multi-get answers null for an objectID the index has no record of: ranked all
      // the same (the simulator scores what it is given), but marked.
      const byID = new Map();
      const missing = new Set();
      ids.forEach((id, i) => {
        const record = records.results[i];
        if (!record) missing.add(id);
        byID.set(id, record || { objectID: id });
      });
      const prefer = strategy.facetsScoring.map((f) => f.facetName);
      const inputPos = new Map(ids.map((id, i) => [id, i]));
      const savedPos = result.saved ? new Map(result.saved.hits.map((x, i) => [x.objectID, i])) : null;
      const column = (title, side, basis, id) =>
        h('div', { class: 'sim-col', id },
          h('h3', null, title),
          side
            ? [
                h('p', { class: 'muted small' }, `impact ${side.personalizationImpact}; the user’s scores: ${Object.entries(side.scores || {}).map(([f, v]) => `${f} {${Object.entries(v).map(([k, s]) => `${k}: ${s}`).join(', ')}}`).join('; ') || 'none'}`),
                table(
                  [
                    { label: '#', cell: (_, i) => i + 1, num: true },
                    { label: 'Move', cell: (x, i) => move(basis.get(x.objectID), i) },
                    {
                      label: 'Object ID',
                      cell: (x) =>
                        missing.has(x.objectID)
                          ? [x.objectID, h('span', { class: 'not-in-catalog', title: `${index} has no record ${x.objectID}` }, 'not in the catalog')]
                          : x.objectID,
                    },
                    { label: 'Attributes', cell: (x) => attributes(byID.get(x.objectID) || {}, 2, prefer) },
                    { label: 'Score', cell: (x) => score3(x), num: true },
                  ],
                  side.hits,
                  { class: 'sim-table' },
                ),
              ]
            : h('p', { class: 'muted', id: `${id}-none` }, 'No saved strategy.'),
        );
      fill(
        simOut,
        h('div', { class: 'sim-grid' },
          column('Saved strategy', result.saved, inputPos, 'sim-saved'),
          column('Edited strategy', result.edited, savedPos || inputPos, 'sim-edited')),
        h('p', { class: 'muted small' }, `Moves: against ${savedPos ? 'the saved strategy’s order' : 'the given order'} for the edited column, the given order for the saved one.`),
        missing.size
          ? h('p', { class: 'small not-in-catalog-note', id: 'sim-missing' },
              `Not in the catalog of ${index}: ${[...missing].join(', ')} — no record, so no facet value to score; a search of ${index} never returns them.`)
          : null,
      );
    } catch (e) {
      if (seq === simSeq && ctx.alive()) fill(simOut, errorBox(e, 'Simulation'));
    }
  }

  function move(before, now) {
    if (before === undefined) return h('span', { class: 'muted' }, 'new');
    const d = before - now;
    if (d > 0) return h('span', { class: 'up', 'aria-label': `up ${d}` }, `▲${d}`);
    if (d < 0) return h('span', { class: 'down', 'aria-label': `down ${-d}` }, `▼${-d}`);
    return h('span', { class: 'muted', 'aria-label': 'same place' }, '=');
  }

  function score3(hit) {
    const p = hit._rankingInfo && hit._rankingInfo.personalization;
    return p ? h('span', { title: `filtersScore ${p.filtersScore}, rankingScore ${p.rankingScore}` }, String(p.score)) : '—';
  }

  simForm.addEventListener('submit', (e) => {
    e.preventDefault();
    simulate();
  });

  (async () => {
    try {
      saved = await apiOrNull('GET', '/1/strategies/personalization');
      if (!ctx.alive()) return;
      show(saved);
      fill(loadStatus, saved ? null : h('p', { class: 'muted', id: 'strategy-none' }, 'No strategy saved yet: start one below.'));
      changed();
      followJob();
    } catch (e) {
      if (ctx.alive()) fill(loadStatus, errorBox(e, 'Loading the strategy'));
    }
  })();
  loadNamed();

  return () => {
    validate.cancel();
    timers.forEach(clearTimeout);
  };
}
