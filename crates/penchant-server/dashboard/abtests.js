// The A/B tests page (`/2/abtests`): the app's tests, newest first, a form that starts one
// (two variants of the same index, each with its own search parameters), and one test's
// results: its variants side by side and each significance as a plain verdict.

import { api, seg } from './api.js';
import { h, fill, errorBox, notice, table, field, card, confirmDialog, num, pct, time } from './ui.js';

/** The Recommend models a variant may ask for. */
const MODELS = ['trending-items', 'trending-facets', 'bought-together', 'related-products', 'looking-similar', 'recommended-for-you'];

/** How often an active test's results are read again. */
const REFRESH_MS = 3000;

/** At or above this, a difference is significant (5 %). */
const SIGNIFICANT = 0.95;

const LETTERS = ['A', 'B'];

/** The presets' names: a preset renames a test named after another preset. */
const PRESET_NAMES = ['Personalization off vs impact 50', 'Queue A vs queue B'];

export function abtestBadge(status) {
  return h('span', { class: `badge state-${status}`, dataset: { state: status } }, status);
}

// A significance as shown: rounded down to two decimals, so that 0.949 never reads 0.95.
export function significance(s) {
  return (Math.floor(s * 100) / 100).toFixed(2);
}

// An amount of money: two decimals, the currency's code first.
function money(amount, currency) {
  const text = new Intl.NumberFormat('en-US', { minimumFractionDigits: 2, maximumFractionDigits: 2 }).format(amount || 0);
  return `${currency} ${text}`;
}

// A variant's search parameters as the API names them.
function parameters(p) {
  if (!p || !Object.keys(p).length) return 'no parameters: the index as it is';
  return Object.entries(p)
    .map(([k, v]) => `${k}: ${typeof v === 'string' ? v : JSON.stringify(v)}`)
    .join(', ');
}

function split(test) {
  return (test.variants || []).map((v) => `${v.trafficPercentage}`).join(' / ');
}

// The test's end as the page says it: when it was stopped, else when it ends (or ended).
function ends(test) {
  return test.stoppedAt ? `stopped ${time(test.stoppedAt)}` : time(test.endAt);
}

export function abtestsPage(root, ctx) {
  return ctx.arg ? resultsView(root, ctx, ctx.arg) : listView(root, ctx);
}

// ---------------------------------------------------------------- The list and the form

function listView(root, ctx) {
  const list = h('div', { id: 'abtests-list', 'aria-live': 'polite' }, notice('Loading…'));
  const updated = h('p', { class: 'muted small', id: 'abtests-updated' });
  root.append(card('Tests', list, updated), newTestForm(ctx));

  let timer = null;
  let stopped = false;
  async function load() {
    try {
      const r = await api('GET', '/2/abtests?offset=0&limit=100');
      if (!ctx.alive()) return;
      const tests = (r.abtests || []).slice().sort((a, b) => b.abTestID - a.abTestID);
      fill(
        list,
        tests.length
          ? table(
              [
                { label: 'ID', cell: (t) => t.abTestID, num: true },
                { label: 'Name', cell: (t) => h('a', { href: `#/abtests/${t.abTestID}`, class: 'abtest-link' }, t.name || `test ${t.abTestID}`) },
                { label: 'Status', cell: (t) => abtestBadge(t.status) },
                { label: 'Index', cell: (t) => (t.variants[0] || {}).index },
                { label: 'Split A / B', cell: (t) => split(t), num: true },
                { label: 'Started', cell: (t) => time(t.createdAt) },
                { label: 'Ends', cell: (t) => ends(t) },
                { label: 'Users A / B', cell: (t) => t.variants.map((v) => num(v.userCount)).join(' / '), num: true },
                { label: 'Conversion rate A / B', cell: (t) => t.variants.map((v) => pct(v.conversionRate)).join(' / '), num: true },
                {
                  label: 'Conversion significance',
                  cell: (t) =>
                    t.conversionSignificance === null || t.conversionSignificance === undefined
                      ? '—'
                      : h('span', { class: t.conversionSignificance >= SIGNIFICANT ? 'up' : null }, significance(t.conversionSignificance)),
                  num: true,
                },
              ],
              tests,
              { class: 'abtests-table' },
            )
          : notice('No A/B tests yet: start one below.'),
      );
      // Each row says which test it is.
      list.querySelectorAll('tbody tr').forEach((tr, i) => {
        tr.dataset.id = String(tests[i].abTestID);
        tr.dataset.status = tests[i].status;
      });
      updated.textContent = `Updated ${time(Date.now())}; refreshed every 10 s.`;
    } catch (e) {
      if (ctx.alive()) fill(list, errorBox(e, 'A/B tests'));
    }
  }
  const tick = async () => {
    await load();
    if (!stopped) timer = setTimeout(tick, 10000);
  };
  tick();
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}

// A `<select>` of `values` with a first option meaning "not set".
function choice(id, values, none) {
  return h('select', { id }, h('option', { value: '' }, none), values.map((v) => h('option', { value: v }, v)));
}

// Set a select's choices, keeping its value when it is still one.
function setChoices(select, values, none) {
  const kept = select.value;
  fill(select, h('option', { value: '' }, none), values.map((v) => h('option', { value: v }, v)));
  if (values.includes(kept)) select.value = kept;
}

// One variant's controls: its description and search parameters.
function variantControls(letter) {
  const id = (name) => `abtest-${letter.toLowerCase()}-${name}`;
  const c = {
    description: h('input', { id: id('description'), spellcheck: 'false' }),
    personalization: h(
      'select',
      { id: id('personalization') },
      h('option', { value: '' }, 'as the index is'),
      h('option', { value: 'on' }, 'on'),
      h('option', { value: 'off' }, 'off'),
    ),
    impact: h('input', { id: id('impact'), type: 'number', min: 0, max: 100, step: 1, placeholder: 'as saved', class: 'narrow' }),
    strategy: choice(id('strategy'), [], 'the saved one'),
    queue: choice(id('queue'), [], 'none'),
    model: choice(id('model'), MODELS, 'as asked'),
  };
  c.fieldset = h(
    'fieldset',
    { class: 'variant-form', id: id('fieldset') },
    h('legend', null, `Variant ${letter}`),
    field('Description', c.description),
    field('Personalization', c.personalization),
    field('Impact (0–100)', c.impact),
    field('Named strategy', c.strategy),
    field('Recommend queue', c.queue, 'what recommended-for-you reads'),
    field('Recommend model', c.model),
  );
  // The variant's customSearchParameters: only what is set.
  c.parameters = () => {
    const p = {};
    if (c.personalization.value) p.enablePersonalization = c.personalization.value === 'on';
    const impact = c.impact.value.trim();
    if (impact !== '') p.personalizationImpact = /^-?\d+(\.\d+)?$/.test(impact) ? Number(impact) : impact;
    if (c.strategy.value) p.personalizationStrategy = c.strategy.value;
    if (c.queue.value) p.queue = c.queue.value;
    if (c.model.value) p.model = c.model.value;
    return p;
  };
  c.set = ({ description = '', personalization = '', impact = '', strategy = '', queue = '', model = '' }) => {
    c.description.value = description;
    c.personalization.value = personalization;
    c.impact.value = impact === '' ? '' : String(impact);
    c.strategy.value = strategy;
    c.queue.value = queue;
    c.model.value = model;
  };
  return c;
}

// A date `days` from now, as an `<input type=date>` holds it (local time).
function dateIn(days) {
  const d = new Date(Date.now() + days * 86400000);
  const pad = (n) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}`;
}

// The end of a day typed as YYYY-MM-DD (local time), in RFC 3339 (UTC, whole seconds).
function endOfDay(date) {
  const m = /^(\d{4})-(\d{2})-(\d{2})$/.exec(date);
  if (!m) return date;
  const d = new Date(Number(m[1]), Number(m[2]) - 1, Number(m[3]), 23, 59, 59);
  return d.toISOString().replace(/\.\d{3}Z$/, 'Z');
}

function newTestForm(ctx) {
  const name = h('input', { id: 'abtest-name', required: true, spellcheck: 'false', class: 'wide' });
  let index = h('select', { id: 'abtest-index', required: true });
  const indexField = field('Index', index);
  const end = h('input', { id: 'abtest-end', type: 'date', required: true, value: dateIn(14) });
  const share = h('input', { id: 'abtest-split', type: 'number', min: 1, max: 99, step: 1, value: 50, required: true, class: 'narrow' });
  const shareOut = h('output', { for: 'abtest-split', id: 'abtest-split-b' });
  const a = variantControls('A');
  const b = variantControls('B');
  const status = h('div', { id: 'abtest-form-status', 'aria-live': 'polite' });
  const preview = h('pre', { id: 'abtest-request', class: 'request' });
  const submit = h('button', { type: 'submit', id: 'abtest-submit' }, 'Start the test');
  const presetPerso = h('button', { type: 'button', class: 'secondary', id: 'preset-perso' }, 'Personalization off vs impact 50');
  const presetQueues = h('button', { type: 'button', class: 'secondary', id: 'preset-queues' }, 'Queue A vs queue B');
  let queues = [];

  const form = h(
    'form',
    { id: 'abtest-form', class: 'stack' },
    h('div', { class: 'toolbar' }, h('span', { class: 'field-label' }, 'Presets'), presetPerso, presetQueues),
    h('div', { class: 'toolbar' },
      field('Name', name),
      indexField,
      field('Ends on', end, '14 days by default'),
      h('div', { class: 'split' }, field('Users in A (%)', share), h('span', { class: 'muted' }, 'B: ', shareOut))),
    h('div', { class: 'grid2 variants-form' }, a.fieldset, b.fieldset),
    h('details', null, h('summary', null, 'Request'), preview),
    h('div', { class: 'actions' }, submit),
    status,
  );

  const body = () => {
    const shareA = Number(share.value);
    const variant = (c, traffic) => {
      const v = { index: index.value.trim(), trafficPercentage: traffic };
      if (c.description.value.trim()) v.description = c.description.value.trim();
      const p = c.parameters();
      if (Object.keys(p).length) v.customSearchParameters = p;
      return v;
    };
    return {
      name: name.value.trim(),
      variants: [variant(a, shareA), variant(b, Number.isFinite(shareA) ? 100 - shareA : shareA)],
      endAt: endOfDay(end.value),
    };
  };
  const refresh = () => {
    const p = Number(share.value);
    shareOut.textContent = Number.isFinite(p) && share.value !== '' ? `${100 - p}%` : '—';
    preview.textContent = JSON.stringify(body(), null, 2);
  };
  form.addEventListener('input', refresh);
  form.addEventListener('change', refresh);

  presetPerso.addEventListener('click', () => {
    if (!name.value.trim() || PRESET_NAMES.includes(name.value.trim())) name.value = PRESET_NAMES[0];
    a.set({ description: 'personalization off', personalization: 'off' });
    b.set({ description: 'personalization on, impact 50', personalization: 'on', impact: 50 });
    fill(status);
    refresh();
  });
  presetQueues.addEventListener('click', () => {
    const [qa, qb] = queues;
    if (!name.value.trim() || PRESET_NAMES.includes(name.value.trim())) name.value = PRESET_NAMES[1];
    a.set({ description: qa ? `queue ${qa}` : 'queue A', queue: qa || '' });
    b.set({ description: qb ? `queue ${qb}` : 'queue B', queue: qb || '' });
    fill(status, queues.length < 2 ? notice(`The app has ${queues.length} queue${queues.length === 1 ? '' : 's'}: choose two (PUT /1/queues/{name} defines one).`) : null);
    refresh();
  });

  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    submit.disabled = true;
    fill(status, notice('Starting…'));
    try {
      const r = await api('POST', '/2/abtests', body());
      if (!ctx.alive()) return;
      location.hash = `#/abtests/${r.abTestID}`;
    } catch (err) {
      if (ctx.alive()) fill(status, errorBox(err, 'The test was not started'));
    } finally {
      submit.disabled = false;
    }
  });

  // The choices: the app's indexes, named strategies and queues.
  (async () => {
    const [indexes, strategies, queueList] = await Promise.allSettled([
      api('GET', '/1/indexes'),
      api('GET', '/1/strategies/personalization/named'),
      api('GET', '/1/queues'),
    ]);
    if (!ctx.alive()) return;
    const names = indexes.status === 'fulfilled' ? (indexes.value.items || []).map((i) => i.name).sort() : [];
    if (names.length) {
      fill(index, names.map((n) => h('option', { value: n }, n)));
    } else {
      // No index to choose (or no listIndexes ACL): typed.
      const input = h('input', { id: 'abtest-index', required: true, spellcheck: 'false' });
      index.replaceWith(input);
      index = input;
      if (indexes.status === 'rejected') indexField.append(errorBox(indexes.reason, 'The indexes'));
    }
    const named = strategies.status === 'fulfilled' ? (strategies.value.strategies || []).map((s) => s.name) : [];
    queues = queueList.status === 'fulfilled' ? (queueList.value.queues || []).map((q) => q.name) : [];
    for (const c of [a, b]) {
      setChoices(c.strategy, named, 'the saved one');
      setChoices(c.queue, queues, 'none');
    }
    form.dataset.ready = 'true';
    refresh();
  })();
  refresh();
  return card('New A/B test', form);
}

// ---------------------------------------------------------------- One test's results

/** The rows of the side-by-side table: a label, the value of a variant, how it reads. */
const METRICS = [
  { key: 'userCount', label: 'Users', format: num },
  { key: 'trackedUserCount', label: 'Tracked users', format: num },
  { key: 'searchCount', label: 'Searches', format: num },
  { key: 'trackedSearchCount', label: 'Tracked searches', format: num },
  { key: 'clickCount', label: 'Clicks', format: num },
  { key: 'clickThroughRate', label: 'Click-through rate', format: (x) => pct(x) },
  { key: 'averageClickPosition', label: 'Average click position', format: (x) => (x === null || x === undefined ? '—' : Number(x).toFixed(1)) },
  { key: 'conversionCount', label: 'Conversions', format: num },
  { key: 'conversionRate', label: 'Conversion rate', format: (x) => pct(x) },
  { key: 'addToCartCount', label: 'Add-to-cart', format: num },
  { key: 'addToCartRate', label: 'Add-to-cart rate', format: (x) => pct(x) },
  { key: 'purchaseCount', label: 'Purchases', format: num },
  { key: 'purchaseRate', label: 'Purchase rate', format: (x) => pct(x) },
  { key: 'clickedUserCount', label: 'Users who clicked', format: num },
  { key: 'convertedUserCount', label: 'Users who converted', format: num },
  { key: 'userConversionRate', label: 'User conversion rate', format: (x) => pct(x) },
  { key: 'estimatedSampleSize', label: 'Estimated sample size (users per variant)', format: num },
];

/** The significances: the test's field, the variant's rate compared, what "better" means. */
const SIGNIFICANCES = [
  { key: 'clickSignificance', label: 'Clicks', rate: (v) => ratio(v.clickedUserCount, v.userCount) ?? v.clickThroughRate, better: 'gets more clicks' },
  { key: 'conversionSignificance', label: 'Conversions', rate: (v) => v.userConversionRate ?? v.conversionRate, better: 'converts better', needed: true },
  { key: 'addToCartSignificance', label: 'Add-to-cart', rate: (v) => v.addToCartRate, better: 'adds to cart more' },
  { key: 'purchaseSignificance', label: 'Purchases', rate: (v) => v.purchaseRate, better: 'sells more' },
];

function ratio(n, d) {
  return d ? (n || 0) / d : null;
}

// A significance as a sentence: which variant is better, or why none is yet.
export function verdict(s, rateA, rateB, better, stillNeeded) {
  if (s === null || s === undefined) return { significant: false, text: 'no data yet: both variants need users' };
  const sig = significance(s);
  if (s >= SIGNIFICANT && rateA !== rateB && rateA !== null && rateB !== null) {
    return { significant: true, text: `${rateB > rateA ? 'B' : 'A'} ${better}, significance ${sig}` };
  }
  if (rateA === rateB || rateA === null || rateB === null) return { significant: false, text: `no difference yet, significance ${sig}` };
  const more = stillNeeded ? ` — about ${num(stillNeeded)} more users needed` : '';
  return { significant: false, text: `not significant yet (${sig})${more}` };
}

function resultsView(root, ctx, id) {
  const head = h('div', { id: 'abtest-head' }, notice('Loading…'));
  const metrics = h('div', { id: 'abtest-metrics' });
  const verdicts = h('div', { id: 'abtest-verdicts' });
  const status = h('div', { id: 'abtest-status', 'aria-live': 'polite' });
  const updated = h('p', { class: 'muted small', id: 'abtest-updated' });
  const stop = h('button', { type: 'button', class: 'danger', id: 'abtest-stop', hidden: true }, 'Stop');
  const del = h('button', { type: 'button', class: 'danger', id: 'abtest-delete' }, 'Delete');
  root.append(
    h('p', null, h('a', { href: '#/abtests', id: 'abtests-back' }, '← All A/B tests')),
    card(null, head, h('div', { class: 'actions' }, stop, del), status),
    card('Variants', metrics),
    card('Significance', verdicts, updated),
  );

  let timer = null;
  let stopped = false;
  let current = null;

  function show(t) {
    current = t;
    root.dataset.status = t.status;
    const [va, vb] = t.variants;
    fill(
      head,
      h('h2', { id: 'abtest-name' }, t.name || `Test ${t.abTestID}`, ' ', abtestBadge(t.status)),
      h('dl', { class: 'kv' },
        h('dt', null, 'index'), h('dd', { id: 'abtest-index' }, va.index),
        h('dt', null, 'split A / B'), h('dd', null, `${va.trafficPercentage}% / ${vb.trafficPercentage}%`),
        h('dt', null, 'started'), h('dd', null, time(t.createdAt)),
        h('dt', null, t.stoppedAt ? 'stopped' : t.status === 'expired' ? 'ended' : 'ends'), h('dd', null, time(t.stoppedAt || t.endAt)),
        h('dt', null, 'test ID'), h('dd', null, t.abTestID)),
    );
    stop.hidden = t.status !== 'active';

    // Revenue: one row per currency either variant has.
    const currencies = [...new Set(t.variants.flatMap((v) => Object.keys(v.currencies || {})))].sort();
    const rows = [
      ...METRICS,
      ...currencies.map((c) => ({
        key: `revenue.${c}`,
        label: `Revenue (${c})`,
        value: (v) => (v.currencies && v.currencies[c] ? v.currencies[c].revenue : 0),
        format: (x) => money(x, c),
      })),
    ];
    const value = (m, v) => (m.value ? m.value(v) : v[m.key]);
    fill(
      metrics,
      h('div', { class: 'table-wrap' },
        h('table', { class: 'abtest-metrics' },
          h('thead', null,
            h('tr', null,
              h('th', { scope: 'col' }, 'Metric'),
              t.variants.map((v, i) =>
                h('th', { scope: 'col', class: 'num variant-head', dataset: { variant: i + 1 } },
                  h('div', null, `${LETTERS[i]} · ${v.trafficPercentage}%`),
                  v.description ? h('div', { class: 'variant-description' }, v.description) : null,
                  h('code', { class: 'muted small variant-parameters' }, parameters(v.customSearchParameters)))))),
          h('tbody', null,
            rows.map((m) =>
              h('tr', { dataset: { metric: m.key } },
                h('th', { scope: 'row' }, m.label),
                t.variants.map((v, i) => {
                  const x = value(m, v);
                  return h('td', { class: 'num', dataset: { variant: i + 1, value: x === null || x === undefined ? '' : String(x) } }, m.format(x));
                })))))),
    );

    const lines = SIGNIFICANCES.map((s) => {
      const v = verdict(t[s.key], s.rate(va), s.rate(vb), s.better, s.needed ? t.usersStillNeeded : null);
      return { key: s.key, label: s.label, value: t[s.key], ...v };
    });
    for (const c of Object.keys(t.revenueSignificance || {}).sort()) {
      const mean = (v) => (v.currencies && v.currencies[c] ? v.currencies[c].mean : 0);
      const v = verdict(t.revenueSignificance[c], mean(va), mean(vb), `earns more (${c})`, null);
      lines.push({ key: `revenueSignificance.${c}`, label: `Revenue (${c})`, value: t.revenueSignificance[c], ...v });
    }
    fill(
      verdicts,
      h('ul', { class: 'verdicts' },
        lines.map((l) =>
          h('li', { dataset: { significance: l.key, value: l.value === null || l.value === undefined ? '' : String(l.value), significant: String(l.significant) } },
            h('span', { class: 'verdict-label' }, `${l.label}: `),
            h('span', { class: `verdict${l.significant ? ' up' : ''}` }, l.text)))),
      h('p', { class: 'muted small' },
        `Significance: 1 − p of a two-sided test on users (${SIGNIFICANT} or more is significant at 5 %).`,
        t.usersStillNeeded ? ` About ${num(t.usersStillNeeded)} more users (both variants) are needed to tell the current conversion difference.` : ''),
    );
    updated.textContent = `Updated ${time(Date.now())}; ${t.status === 'active' ? `refreshed every ${REFRESH_MS / 1000} s while the test runs` : 'the test has ended'}.`;
  }

  async function load() {
    try {
      const t = await api('GET', `/2/abtests/${seg(id)}`);
      if (!ctx.alive()) return null;
      document.title = `${t.name || 'A/B test'} — Penchant dashboard`;
      show(t);
      return t;
    } catch (e) {
      if (ctx.alive()) fill(head, errorBox(e, `A/B test ${id}`));
      return null;
    }
  }

  const tick = async () => {
    const t = await load();
    if (!stopped && t && t.status === 'active') timer = setTimeout(tick, REFRESH_MS);
  };

  stop.addEventListener('click', async () => {
    if (!(await confirmDialog(`Stop the A/B test “${current ? current.name : id}”? Every user is served as the index is, and its results stop counting.`, 'Stop the test'))) return;
    try {
      await api('POST', `/2/abtests/${seg(id)}/stop`);
      if (!ctx.alive()) return;
      fill(status, h('p', { class: 'ok', id: 'abtest-stopped' }, 'The test is stopped.'));
      clearTimeout(timer);
      await load();
    } catch (e) {
      if (ctx.alive()) fill(status, errorBox(e, 'Stop'));
    }
  });
  del.addEventListener('click', async () => {
    if (!(await confirmDialog(`Delete the A/B test “${current ? current.name : id}” and its results?`, 'Delete the test'))) return;
    try {
      await api('DELETE', `/2/abtests/${seg(id)}`);
      if (ctx.alive()) location.hash = '#/abtests';
    } catch (e) {
      if (ctx.alive()) fill(status, errorBox(e, 'Delete'));
    }
  });

  tick();
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}
