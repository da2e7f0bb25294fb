// The dashboard's pages but the strategy's (strategy.js): each renders into `root` and returns
// a cleanup function (its timers) for when the user leaves it.

import { api, apiOrNull, seg } from './api.js';
import { h, fill, errorBox, notice, table, bar, field, card, stat, confirmDialog, num, pct, time, duration, splitList, short } from './ui.js';
import { eventsChart, TYPES } from './chart.js';

// Run `load` now and every `ms`, until the cleanup is called.
function every(ms, load) {
  let stopped = false;
  let timer = null;
  const tick = async () => {
    if (stopped) return;
    try {
      await load();
    } finally {
      if (!stopped) timer = setTimeout(tick, typeof ms === 'function' ? ms() : ms);
    }
  };
  tick();
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}

// A few of a record's attributes, as "name: value" lines.
export function attributes(hit, n = 3, prefer = []) {
  const skip = new Set(['objectID', '_score', '_rankingInfo', '_highlightResult', '_snippetResult']);
  const keys = [...prefer.filter((k) => k in hit), ...Object.keys(hit).filter((k) => !skip.has(k) && !prefer.includes(k))];
  return h('span', { class: 'attrs' }, keys.slice(0, n).map((k) => h('span', { class: 'attr' }, h('span', { class: 'muted' }, `${k}: `), short(hit[k]))));
}

// ---------------------------------------------------------------- Overview

export function overviewPage(root, ctx) {
  const hours = h(
    'select',
    { id: 'overview-hours' },
    [1, 6, 24].map((n) => h('option', { value: n, selected: n === 6 }, `last ${n} h`)),
  );
  const chartBox = h('div', { id: 'events-chart', 'aria-live': 'polite' }, notice('Loading…'));
  const stats = h('div', { class: 'stats', id: 'overview-stats' });
  const appBox = h('div', { id: 'overview-app' });
  const updated = h('p', { class: 'muted small', id: 'overview-updated' });
  root.append(
    h('div', { class: 'grid2' }, card('Catalog and profiles', stats), card('App', appBox)),
    card('Events per minute', h('div', { class: 'toolbar' }, field('Range', hours)), chartBox, updated),
  );

  const profileStat = stat('users with profiles', '…', { id: 'stat-profiles' });
  const catalogStat = stat('records in the catalog', '…', { id: 'stat-catalog' });
  const indexStat = stat('indexes', '…', { id: 'stat-indexes' });
  stats.append(profileStat, catalogStat, indexStat);
  const errors = h('div');
  stats.after(errors);

  async function loadCounts() {
    const out = [];
    const [profiles, indexes] = await Promise.allSettled([api('GET', '/1/stats/profiles'), api('GET', '/1/indexes')]);
    if (!ctx.alive()) return;
    if (profiles.status === 'fulfilled') {
      const p = profiles.value;
      profileStat.firstChild.textContent = `${p.exact ? '' : '≥ '}${num(p.count)}`;
      profileStat.dataset.count = String(p.count);
    } else {
      profileStat.firstChild.textContent = '—';
      out.push(errorBox(profiles.reason, 'Users with profiles'));
    }
    if (indexes.status === 'fulfilled') {
      const items = indexes.value.items || [];
      const entries = items.reduce((sum, i) => sum + (i.entries || 0), 0);
      catalogStat.firstChild.textContent = num(entries);
      catalogStat.dataset.count = String(entries);
      indexStat.firstChild.textContent = num(items.length);
      indexStat.dataset.count = String(items.length);
    } else {
      catalogStat.firstChild.textContent = '—';
      indexStat.firstChild.textContent = '—';
      out.push(errorBox(indexes.reason, 'Catalog size'));
    }
    fill(errors, out);
  }

  async function loadApp() {
    try {
      const app = await api('GET', `/1/apps/${seg(ctx.creds.appID)}`);
      if (!ctx.alive()) return;
      fill(
        appBox,
        h('div', { class: 'stats' },
          stat('retention', `${app.retentionDays} days`, { id: 'stat-retention', dataset: { days: app.retentionDays } }),
          stat('event layout', app.eventLayout, { id: 'stat-layout' }),
        ),
        h('p', { class: 'muted small' }, `${app.name ? app.name + ' · ' : ''}${app.appID}, created ${time((app.createdAt || 0) * (app.createdAt < 1e12 ? 1000 : 1))}`),
      );
    } catch (e) {
      if (ctx.alive()) fill(appBox, errorBox(e, 'The app'));
    }
  }

  async function loadChart() {
    try {
      const data = await api('GET', `/1/stats/events?hours=${hours.value}`);
      if (!ctx.alive()) return;
      fill(chartBox, eventsChart(data, chartBox.clientWidth));
      updated.textContent = `Updated ${time(Date.now())}; refreshed every 10 s.`;
    } catch (e) {
      if (ctx.alive()) fill(chartBox, errorBox(e, 'Events per minute'));
    }
  }

  hours.addEventListener('change', loadChart);
  loadApp();
  return every(10000, () => Promise.all([loadCounts(), loadChart()]));
}

// ---------------------------------------------------------------- Profiles

// What an event is about, as Insights sends it (objectIDs or filters) or as the engine stores it
// (target: {objectIds} or {filters: [[attribute, value]]}).
function eventTarget(e) {
  const t = e.target || {};
  const ids = e.objectIDs || t.objectIds || t.objectIDs;
  if (ids) return ids.join(', ');
  const filters = e.filters || t.filters || [];
  return filters.map((f) => (Array.isArray(f) ? `${f[0]}:${f[1]}` : f)).join(', ');
}

export function profilesPage(root, ctx) {
  const input = h('input', { id: 'profile-user', name: 'userToken', required: true, spellcheck: 'false', value: ctx.arg || '' });
  const form = h('form', { class: 'toolbar', id: 'profile-form' }, field('User token', input), h('button', { type: 'submit' }, 'Look up'));
  const out = h('div', { id: 'profile-result', 'aria-live': 'polite' });
  const status = h('div', { id: 'profile-status' });
  root.append(card(null, form, status), out);

  async function lookUp(user) {
    fill(out, notice('Loading…'));
    const [profile, events, seen] = await Promise.allSettled([
      apiOrNull('GET', `/1/profiles/personalization/${seg(user)}`),
      api('GET', `/1/profiles/personalization/${seg(user)}/events?limit=20`),
      apiOrNull('GET', `/1/seen/users/${seg(user)}`),
    ]);
    if (!ctx.alive() || input.value.trim() !== user) return;
    const sections = [];

    // The profile's scores.
    const profileCard = card('Profile');
    profileCard.id = 'profile-card';
    if (profile.status === 'rejected') {
      profileCard.append(errorBox(profile.reason));
    } else if (!profile.value) {
      profileCard.append(h('p', { id: 'profile-missing' }, `No profile for ${user}: no counted events.`));
    } else {
      const p = profile.value;
      profileCard.append(h('p', { id: 'profile-last-event' }, 'Last event: ', h('strong', null, time(p.lastEventAt))));
      const facets = Object.entries(p.scores || {});
      if (!facets.length) profileCard.append(notice('No facet scores under the current strategy.'));
      for (const [facet, values] of facets) {
        const rows = Object.entries(values).sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]));
        profileCard.append(
          h('div', { class: 'facet', dataset: { facet } },
            h('h3', null, facet),
            rows.map(([value, score]) =>
              h('div', { class: 'facet-row', dataset: { value, score } },
                h('span', { class: 'facet-value' }, value),
                bar(score / 20, `${value}: ${score} of 20`),
                h('span', { class: 'num' }, score),
              ),
            ),
          ),
        );
      }
    }
    sections.push(profileCard);

    // Recent events.
    const eventsCard = card('Recent events');
    eventsCard.id = 'recent-events';
    if (events.status === 'rejected') {
      eventsCard.append(errorBox(events.reason));
    } else if (!(events.value.events || []).length) {
      eventsCard.append(notice('No events.'));
    } else {
      eventsCard.append(
        table(
          [
            { label: 'Time', cell: (e) => time(e.timestamp) },
            { label: 'Type', cell: (e) => e.eventType + (e.eventSubtype ? ` (${e.eventSubtype})` : '') },
            { label: 'Name', cell: (e) => e.eventName },
            { label: 'Index', cell: (e) => e.index },
            { label: 'Object IDs / filters', cell: (e) => eventTarget(e) },
          ],
          events.value.events,
          { class: 'events-table' },
        ),
      );
    }
    sections.push(eventsCard);

    // The seen filter.
    const seenCard = card('Seen filter');
    seenCard.id = 'seen-card';
    if (seen.status === 'rejected') seenCard.append(errorBox(seen.reason));
    else if (!seen.value) seenCard.append(h('p', { id: 'seen-missing' }, 'No seen filter.'));
    else {
      const s = seen.value;
      seenCard.append(
        h('div', { class: 'stats' },
          stat('items (keys)', num(s.keys)),
          stat('fill', pct(s.fillRatio)),
          stat('estimated error rate', pct(s.estimatedErrorRate, 3)),
          stat('capacity', num(s.capacity)),
        ),
        bar(s.fillRatio, `fill ${pct(s.fillRatio)}`),
        h('p', { class: 'muted small' }, `${num(s.filterBits)} bits, ${s.probes} probes${s.rotated ? ', rotated once at least' : ''}.`),
      );
    }
    sections.push(seenCard);

    // Deletions.
    const delProfile = h('button', { type: 'button', class: 'danger', id: 'delete-profile' }, 'Delete profile');
    const delUser = h('button', { type: 'button', class: 'danger', id: 'delete-user' }, 'Delete user token');
    delProfile.addEventListener('click', async () => {
      if (!(await confirmDialog(`Delete the profile of ${user}? Their events up to now will no longer count.`, 'Delete profile'))) return;
      try {
        const r = await api('DELETE', `/1/profiles/${seg(user)}`);
        fill(status, h('p', { class: 'ok', id: 'profile-deleted' }, `Profile of ${user} deleted: events until ${time(r.deletedUntil)} no longer count.`));
        await lookUp(user);
      } catch (e) {
        fill(status, errorBox(e, 'Delete profile'));
      }
    });
    delUser.addEventListener('click', async () => {
      if (!(await confirmDialog(`Delete user token ${user}: every event, aggregate, seen filter, queue and profile of theirs?`, 'Delete user token'))) return;
      try {
        await api('DELETE', `/1/usertokens/${seg(user)}`);
        fill(status, h('p', { class: 'ok', id: 'user-deleted' }, `User token ${user} deleted.`));
        await lookUp(user);
      } catch (e) {
        fill(status, errorBox(e, 'Delete user token'));
      }
    });
    sections.push(card('Delete', h('div', { class: 'actions' }, delProfile, delUser)));
    fill(out, sections);
  }

  form.addEventListener('submit', (e) => {
    e.preventDefault();
    const user = input.value.trim();
    if (!user) return;
    fill(status);
    history.replaceState(null, '', `#/profiles/${encodeURIComponent(user)}`);
    lookUp(user);
  });
  if (ctx.arg) lookUp(ctx.arg);
  else input.focus();
}

// ---------------------------------------------------------------- Jobs

// How far a user string lies between two others (the ranges' bounds), roughly: keys compared
// as base-256 fractions of their first bytes.
function position(key, start, end) {
  const frac = (s) => {
    let x = 0;
    let scale = 1;
    for (let i = 0; i < 6; i++) {
      scale /= 256;
      x += (s && i < s.length ? s.charCodeAt(i) % 256 : 0) * scale;
    }
    return x;
  };
  const a = start ? frac(start) : 0;
  const b = end ? frac(end) : 1;
  if (!key || b <= a) return 0;
  return Math.max(0, Math.min(1, (frac(key) - a) / (b - a)));
}

export function stateBadge(state) {
  return h('span', { class: `badge state-${state}`, dataset: { state } }, state);
}

/** What a recompute's `events` counts. */
const ROWS_READ = 'Rows read: the per-day aggregates of the users’ events (one row per user and active day), so fewer than the events they sum.';

export function recomputeView(job) {
  const now = job.finishedAt || Date.now();
  const seconds = (now - job.startedAt) / 1000;
  // Rates over less than half a second say little.
  const rate = (n) => (seconds >= 0.5 ? num(Math.round(n / seconds)) : '—');
  const ranges = job.ranges || [];
  const fractions = ranges.map((r) => (r.done ? 1 : position(r.after, r.start, r.end)));
  const overall = ranges.length ? fractions.reduce((a, b) => a + b, 0) / ranges.length : job.state === 'done' ? 1 : 0;
  const eta = job.state === 'running' && overall > 0 ? (seconds * (1 - overall)) / overall : null;
  return [
    h('p', null, stateBadge(job.state), ` started ${time(job.startedAt)}`, job.finishedAt ? `, finished ${time(job.finishedAt)}` : ''),
    h('div', { class: 'stats' },
      stat('users', num(job.users), { dataset: { users: job.users } }),
      // The status's `events` counts the rows the job read: per-day aggregates (one per user
      // and active day), not events.
      stat('rows read', num(job.events), { class: 'stat rows-read', title: ROWS_READ }),
      stat('skipped', num(job.skipped)),
      stat('users / s', rate(job.users)),
      stat('rows / s', rate(job.events), { title: ROWS_READ }),
      stat('ranges done', `${job.rangesDone} / ${ranges.length}`),
      eta !== null ? stat('ETA', duration(eta)) : null,
    ),
    h('p', { class: 'small muted rows-read-note' }, ROWS_READ),
    job.error ? errorBox(job.error, 'The job failed') : null,
    ranges.length
      ? table(
          [
            { label: 'Range', cell: (r) => `${r.start ?? '(first)'} … ${r.end ?? '(last)'}` },
            { label: 'Progress', cell: (r, i) => bar(fractions[i], r.done ? 'done' : `after ${r.after ?? '(nothing yet)'}`, r.done ? 'done' : null) },
            { label: 'Last user', cell: (r) => r.after ?? '—' },
            { label: 'Users', cell: (r) => num(r.users), num: true },
            { label: 'Rows read', cell: (r) => num(r.events), num: true },
          ],
          ranges,
          { class: 'ranges-table' },
        )
      : null,
  ];
}

/** A job's progress, the same for every kind: its phase among the kind's phases, and the phase's
 * work against its total when that is known. */
export function progressView(job) {
  const p = job.progress;
  if (!p || !p.phase) return null;
  const total = p.total != null ? ` / ${num(p.total)}` : '';
  const label = `${p.phase} (${p.step}/${p.steps}): ${num(p.done)}${total} ${p.unit}`;
  const finished = job.state === 'done';
  const fraction = finished ? 1 : p.total ? p.done / p.total : (p.step - 1) / p.steps;
  return h('div', { class: 'job-progress', dataset: { phase: p.phase } },
    bar(Math.min(1, fraction), label, finished ? 'done' : null), ' ', h('span', { class: 'small muted' }, label));
}

/** A migration's checkpoint — the hex key of the last event row done, `app 0 · user 0 · time
 * (ms, u64 BE) · discriminator (u64 BE)` — as a person reads it: the user and the event's time;
 * a key of another shape as its printable runs. */
export function checkpoint(hex, appID) {
  const bytes = /^([0-9a-f]{2})*$/i.test(hex) ? Uint8Array.from(hex.match(/../g) || [], (b) => parseInt(b, 16)) : null;
  if (!bytes) return String(hex);
  const text = (from, to) => new TextDecoder().decode(bytes.subarray(from, to));
  const zero = bytes.indexOf(0);
  const userEnd = zero < 0 ? -1 : bytes.indexOf(0, zero + 1);
  if (zero >= 0 && userEnd > zero && text(0, zero) === appID) {
    const user = text(zero + 1, userEnd);
    const rest = bytes.subarray(userEnd + 1);
    if (rest.length === 16) {
      const ms = Number(new DataView(rest.buffer, rest.byteOffset, 8).getBigUint64(0));
      return `user ${user}, event of ${time(ms)}`;
    }
    return `user ${user}`;
  }
  // Printable ASCII runs, the rest elided.
  const runs = [];
  let run = '';
  for (const b of bytes) {
    if (b >= 0x20 && b < 0x7f) run += String.fromCharCode(b);
    else if (run) {
      runs.push(run);
      run = '';
    }
  }
  if (run) runs.push(run);
  return runs.length ? runs.join(' · ') : `${bytes.length} bytes`;
}

function kv(pairs) {
  return h('dl', { class: 'kv' }, pairs.filter(Boolean).map(([k, v]) => [h('dt', null, k), h('dd', null, v)]));
}

const TASK_NAMES = {
  training: 'ALS training',
  foldIn: 'ALS fold-in',
  build: 'Recommendation build',
  rank: 'Learned ranker',
};

/** What keeps the models fresh: each scheduled task's interval, last start and next run, and
 * when a user's queue is rebuilt after their events. */
export function schedulesView(s) {
  // An interval in whole minutes: "24 h", "1 h 30 min", "45 min".
  const span = (m) => [m >= 60 ? `${Math.floor(m / 60)} h` : '', m % 60 ? `${m % 60} min` : ''].filter(Boolean).join(' ');
  const every = (m) => (m ? `every ${span(m)}` : 'off');
  const next = (t) => (t.nextRunAt ? time(t.nextRunAt) : t.everyMinutes ? 'once the app has events' : 'never (off)');
  const stale = s.settings.queueStaleAfterMinutes;
  return [
    table(
      [
        { label: 'Task', cell: (t) => TASK_NAMES[t.task] || t.task },
        { label: 'Runs', cell: (t) => every(t.everyMinutes) },
        { label: 'Last started', cell: (t) => time(t.lastStartedAt) },
        { label: 'Next run', cell: (t) => next(t) },
      ],
      s.tasks,
      { class: 'schedules-table' },
    ),
    h('p', { class: 'small muted', id: 'queue-staleness' },
      stale
        ? `A user's recommended-for-you queue is rebuilt in the background when it is older than ${span(stale)} and than their last event.`
        : 'Queues are rebuilt only by the build.'),
  ];
}

/** The app's latest ranker job, and the ranker of its index when one is stored. */
async function rankerWithModel() {
  const job = await apiOrNull('GET', '/1/ranker/train');
  if (!job) return null;
  const model = job.config ? await apiOrNull('GET', `/1/rankers/${seg(job.config.indexName)}`) : null;
  return { job, model };
}

/** The learned ranker: its job (learn, then write the learned queues), and the stored model —
 * version, validation NDCG and what each feature weighs in it. */
export function rankerView({ job: r, model }) {
  const learned = model && model.learned;
  return [
    h('p', null, stateBadge(r.state), ` index ${r.config.indexName}, phase ${r.phase}, started ${time(r.startedAt)}`),
    progressView(r),
    kv([
      ['queues written', (r.queues || []).join(', ') || '—'],
      ['users', num(r.users)],
      ['finished', time(r.finishedAt)],
    ]),
    r.error ? errorBox(r.error, 'The ranker job failed') : null,
    learned
      ? [
          h('p', { class: 'small ranker-model' },
            `Version ${model.version}, trained ${time(model.trainedAt)} on ${num(model.events)} events: `
              + `${learned.trees} trees, validation NDCG ${learned.validationNdcg.toFixed(3)} `
              + `(${num(learned.trainQueries)} + ${num(learned.validationQueries)} queries, ${learned.trainSeconds.toFixed(1)} s).`),
          table(
            [
              { label: 'Feature', cell: (f) => f[0] },
              { label: 'Share of the gain', cell: (f) => `${(f[1] * 100).toFixed(1)} %`, num: true },
            ],
            learned.importance.filter((f) => f[1] > 0).slice(0, 10),
            { class: 'importance-table' },
          ),
        ]
      : h('p', { class: 'muted none-yet' }, 'No ranker stored for this index yet.'),
  ];
}

export function jobsPage(root, ctx) {
  const boxes = {
    recompute: h('div', { id: 'job-recompute' }),
    history: h('div', { id: 'job-history' }),
    als: h('div', { id: 'job-als' }),
    build: h('div', { id: 'job-build' }),
    ranker: h('div', { id: 'job-ranker' }),
    layout: h('div', { id: 'job-layout' }),
    placement: h('div', { id: 'job-placement' }),
    schedules: h('div', { id: 'job-schedules' }),
  };
  const updated = h('p', { class: 'muted small', id: 'jobs-updated' });
  root.append(
    card('Schedules', boxes.schedules),
    card('Profile recompute', boxes.recompute),
    card('Past recomputes', boxes.history),
    h('div', { class: 'grid2' }, card('ALS training', boxes.als), card('Recommendation build', boxes.build)),
    card('Learned ranker', boxes.ranker),
    h('div', { class: 'grid2' }, card('Event-layout migration', boxes.layout), card('Placement', boxes.placement)),
    updated,
  );
  let running = false;

  async function load() {
    const calls = await Promise.allSettled([
      apiOrNull('GET', '/1/strategies/personalization/job'),
      api('GET', '/1/strategies/personalization/jobs'),
      apiOrNull('GET', '/1/als/train'),
      apiOrNull('GET', '/1/recommend/build'),
      apiOrNull('GET', `/1/apps/${seg(ctx.creds.appID)}/layout`),
      apiOrNull('GET', `/1/apps/${seg(ctx.creds.appID)}/placement`),
      api('GET', '/1/schedules'),
      rankerWithModel(),
    ]);
    if (!ctx.alive()) return;
    const [job, history, als, build, layout, placement, schedules, ranker] = calls;
    const none = () => h('p', { class: 'muted none-yet' }, 'None yet.');
    const show = (box, result, render) =>
      fill(box, result.status === 'rejected' ? errorBox(result.reason) : result.value ? render(result.value) : none());
    show(boxes.schedules, schedules, schedulesView);
    show(boxes.recompute, job, recomputeView);
    show(boxes.history, history, (v) =>
      (v.jobs || []).length
        ? table(
            [
              { label: 'Started', cell: (j) => time(j.startedAt) },
              { label: 'State', cell: (j) => stateBadge(j.state) },
              { label: 'Took', cell: (j) => (j.finishedAt ? duration((j.finishedAt - j.startedAt) / 1000) : '—') },
              { label: 'Users', cell: (j) => num(j.users), num: true },
              { label: 'Rows read', cell: (j) => num(j.events), num: true },
              { label: 'Skipped', cell: (j) => num(j.skipped), num: true },
            ],
            v.jobs,
            { class: 'history-table' },
          )
        : none(),
    );
    show(boxes.als, als, (t) => [
      h('p', null, stateBadge(t.state), ` started ${time(t.startedAt)}`),
      progressView(t),
      kv([
        ['iteration', `${t.iteration}${t.config ? ' / ' + t.config.iterations : ''}`],
        ['space', t.config && t.config.space],
        ['factors', t.config && t.config.factors],
        ['users', num(t.users)],
        ['items', num(t.items)],
        ['interactions', num(t.interactions)],
        ['events read', num(t.events)],
        ['finished', time(t.finishedAt)],
      ]),
      t.error ? errorBox(t.error, 'The training failed') : null,
    ]);
    show(boxes.build, build, (b) => [
      h('p', null, stateBadge(b.state), ` phase ${b.phase}, started ${time(b.startedAt)}`),
      progressView(b),
      kv([
        ['queues', (b.queues || []).join(', ') || '—'],
        ['events', num(b.events)],
        ['lists', num(b.lists)],
        ['users', num(b.users)],
        ['last user', b.after ?? '—'],
        ['finished', time(b.finishedAt)],
      ]),
      b.error ? errorBox(b.error, 'The build failed') : null,
    ]);
    show(boxes.ranker, ranker, rankerView);
    show(boxes.layout, layout, (l) => {
      const m = l.migration;
      return [
        kv([
          ['layout read', l.eventLayout],
          ['also written', l.alsoWritten ?? '—'],
        ]),
        m
          ? [
              h('p', null, stateBadge(m.state), ` ${m.from} → ${m.to}, phase ${m.phase}, started ${time(m.startedAt)}`),
              progressView(m),
              kv([
                ['rows backfilled', num(m.backfilled)],
                ['rows dropped', num(m.dropped)],
                ['checkpoint', m.after ? h('span', { class: 'checkpoint', title: `row key ${m.after}` }, checkpoint(m.after, ctx.creds.appID)) : '—'],
                ['finished', time(m.finishedAt)],
              ]),
              m.error ? errorBox(m.error, 'The migration failed') : null,
            ]
          : h('p', { class: 'muted none-yet' }, 'No migration yet.'),
      ];
    });
    show(boxes.placement, placement, (p) => {
      const m = p.move;
      return [
        kv([
          ['target', p.target],
          ['also written', p.alsoWritten ?? '—'],
        ]),
        m
          ? [
              h('p', null, stateBadge(m.state), ` ${m.user ? 'user ' + m.user + ': ' : ''}${m.from} → ${m.to}, phase ${m.phase}, started ${time(m.startedAt)}`),
              progressView(m),
              kv([
                ['rows copied', num(m.copied)],
                ['differences fixed', num(m.differences)],
                ['verify passes', num(m.passes)],
                ['rows dropped', num(m.dropped)],
                ['finished', time(m.finishedAt)],
              ]),
              m.error ? errorBox(m.error, 'The move failed') : null,
            ]
          : h('p', { class: 'muted none-yet' }, 'No move yet.'),
      ];
    });
    const moving = (r, key) => r.status === 'fulfilled' && r.value && r.value[key] && r.value[key].state === 'running';
    running = [job, als, build].some((r) => r.status === 'fulfilled' && r.value && r.value.state === 'running') ||
      moving(layout, 'migration') || moving(placement, 'move');
    updated.textContent = `Updated ${time(Date.now())}; ${running ? 'a job is running: every second' : 'every 5 s'}.`;
  }
  return every(() => (running ? 1000 : 5000), load);
}

// ---------------------------------------------------------------- Sets and seen filters

export function setsPage(root, ctx) {
  const list = h('div', { id: 'sets-list' }, notice('Loading…'));
  const setSelect = h('select', { id: 'sets-test-set' });
  const keys = h('textarea', { id: 'sets-test-keys', rows: 3, placeholder: 'u1, u2\nu3' });
  const testOut = h('div', { id: 'sets-test-result', 'aria-live': 'polite' });
  const testForm = h('form', { class: 'stack' }, field('Set', setSelect), field('Keys (comma or newline separated)', keys), h('button', { type: 'submit' }, 'Test keys'), testOut);
  const settingsBox = h('div', { id: 'seen-settings' });
  const seenUser = h('input', { id: 'seen-user', required: true, spellcheck: 'false' });
  const seenItems = h('textarea', { id: 'seen-items', rows: 3 });
  const seenOut = h('div', { id: 'seen-result', 'aria-live': 'polite' });
  const seenForm = h('form', { class: 'stack' }, field('User token', seenUser), field('Object IDs (comma or newline separated)', seenItems), h('button', { type: 'submit' }, 'Check'), seenOut);
  root.append(
    card('Key sets', list),
    h('div', { class: 'grid2' }, card('Test keys against a set', testForm), card('Seen filter settings', settingsBox)),
    card("A user's seen filter", seenForm),
  );

  async function loadSets() {
    try {
      const { sets: described } = await api('GET', '/1/sets');
      // The list holds descriptions; each set's info (keys, fill, rate) reads its partitions.
      const infos = await Promise.allSettled(described.map((d) => api('GET', `/1/sets/${seg(d.name)}`)));
      if (!ctx.alive()) return;
      const sets = described.map((d, i) => (infos[i].status === 'fulfilled' ? infos[i].value : { ...d, error: infos[i].reason }));
      const selected = setSelect.value;
      fill(setSelect, sets.map((s) => h('option', { value: s.name, selected: s.name === selected }, s.name)));
      fill(
        list,
        sets.length
          ? table(
              [
                { label: 'Name', cell: (s) => s.name },
                { label: 'Keys', cell: (s) => (s.error ? errorBox(s.error) : num(s.keys)), num: true },
                { label: 'Capacity', cell: (s) => num(s.config && s.config.capacity), num: true },
                { label: 'Size', cell: (s) => (s.sizeBytes === undefined ? '—' : `${num(Math.round(s.sizeBytes / 1024))} KB`), num: true },
                { label: 'Fill', cell: (s) => pct(s.fillRatio), num: true },
                {
                  label: 'Estimated error rate (of the max)',
                  cell: (s) => {
                    if (s.estimatedErrorRate === undefined) return '—';
                    const max = (s.config && s.config.maxErrorRate) || 1;
                    const over = s.estimatedErrorRate > max;
                    return h('span', { class: 'rate', dataset: { over: String(over) } },
                      bar(s.estimatedErrorRate / max, `${pct(s.estimatedErrorRate, 3)} of at most ${pct(max)}`, over ? 'over' : null),
                      ` ${pct(s.estimatedErrorRate, 3)} / ${pct(max)}`);
                  },
                },
              ],
              sets,
              { class: 'sets-table' },
            )
          : notice('No sets yet (POST /1/sets reserves one).'),
      );
    } catch (e) {
      if (ctx.alive()) fill(list, errorBox(e));
    }
  }

  async function loadSettings() {
    try {
      const s = await api('GET', '/1/seen/settings');
      if (!ctx.alive()) return;
      fill(settingsBox, kv([
        ['bits per generation', num(s.filterBits)],
        ['rotates at error rate', pct(s.errorRate)],
        ['event types marking seen', (s.eventTypes || []).join(', ')],
      ]));
    } catch (e) {
      if (ctx.alive()) fill(settingsBox, errorBox(e));
    }
  }

  testForm.addEventListener('submit', async (e) => {
    e.preventDefault();
    const list = splitList(keys.value);
    if (!setSelect.value || !list.length) {
      fill(testOut, errorBox('Choose a set and type keys.'));
      return;
    }
    try {
      const r = await api('POST', `/1/sets/${seg(setSelect.value)}/mexists`, { keys: list });
      fill(testOut, h('ul', { class: 'checks' }, list.map((k, i) =>
        h('li', { dataset: { key: k, exists: String(r.exists[i]) } }, k, ': ', r.exists[i] ? h('strong', null, 'probably in the set') : 'certainly not'))));
    } catch (err) {
      fill(testOut, errorBox(err));
    }
  });

  seenForm.addEventListener('submit', async (e) => {
    e.preventDefault();
    const user = seenUser.value.trim();
    const items = splitList(seenItems.value);
    try {
      const [info, check] = await Promise.all([
        apiOrNull('GET', `/1/seen/users/${seg(user)}`),
        items.length ? api('POST', `/1/seen/users/${seg(user)}/mexists`, { objectIDs: items }) : null,
      ]);
      fill(
        seenOut,
        info
          ? h('p', null, `${num(info.keys)} items, fill ${pct(info.fillRatio)}, estimated error rate ${pct(info.estimatedErrorRate, 3)}.`)
          : h('p', { class: 'muted' }, `No seen filter for ${user}.`),
        check
          ? h('ul', { class: 'checks' }, items.map((k, i) =>
              h('li', { dataset: { key: k, exists: String(check.exists[i]) } }, k, ': ', check.exists[i] ? h('strong', null, 'seen') : 'not seen')))
          : null,
      );
    } catch (err) {
      fill(seenOut, errorBox(err));
    }
  });

  loadSettings();
  return every(10000, loadSets);
}

// ---------------------------------------------------------------- Recommendations

const MODELS = [
  { model: 'trending-items', needs: [] },
  { model: 'trending-facets', needs: ['facetName'] },
  { model: 'bought-together', needs: ['objectID'] },
  { model: 'related-products', needs: ['objectID'] },
  { model: 'looking-similar', needs: ['objectID'] },
  { model: 'recommended-for-you', needs: ['userToken'] },
];

function hitsTable(hits, cls) {
  return table(
    [
      { label: '#', cell: (_, i) => i + 1, num: true },
      { label: 'Object ID', cell: (x) => x.objectID ?? x.facetValue ?? '' },
      { label: 'Attributes', cell: (x) => attributes(x) },
      { label: 'Score', cell: (x) => (x._score === undefined ? '—' : Number(x._score).toFixed(2)), num: true },
    ],
    hits,
    { class: `hits-table ${cls}` },
  );
}

export function recommendationsPage(root, ctx) {
  const queues = h('div', { id: 'queues-list' }, notice('Loading…'));
  const queueSelect = h('select', { id: 'peek-queue' });
  const peekUser = h('input', { id: 'peek-user', required: true, spellcheck: 'false' });
  const peekOut = h('div', { id: 'peek-result', 'aria-live': 'polite' });
  const peekForm = h('form', { class: 'toolbar' }, field('Queue', queueSelect), field('User token', peekUser), h('button', { type: 'submit' }, 'Peek'));

  const index = h('input', { id: 'rec-index', required: true, spellcheck: 'false' });
  const objectID = h('input', { id: 'rec-object', spellcheck: 'false' });
  const userToken = h('input', { id: 'rec-user', spellcheck: 'false' });
  const facetName = h('input', { id: 'rec-facet-name', spellcheck: 'false' });
  const facetValue = h('input', { id: 'rec-facet-value', spellcheck: 'false' });
  const space = h('input', { id: 'rec-space', spellcheck: 'false', placeholder: 'als' });
  const models = h('fieldset', { class: 'models' }, h('legend', null, 'Models'),
    MODELS.map((m) => h('label', { class: 'check' }, h('input', { type: 'checkbox', value: m.model, checked: true }), m.model)));
  const recOut = h('div', { id: 'rec-results', class: 'grid3' });
  const recForm = h('form', { class: 'stack' },
    h('div', { class: 'toolbar' }, field('Index', index), field('Object ID', objectID, 'bought-together, related-products, looking-similar'), field('User token', userToken, 'recommended-for-you')),
    h('div', { class: 'toolbar' },
      field('Facet name', facetName, 'trending-facets; with a value, restricts trending-items'),
      field('Facet value', facetValue, 'trending-items'),
      field('Vector space', space, 'looking-similar, related-products (optional)')),
    models,
    h('button', { type: 'submit' }, 'Ask'),
  );
  root.append(
    card('Queues', queues),
    card("A user's queue", peekForm, peekOut),
    card('Recommend API', recForm),
    recOut,
  );

  async function loadQueues() {
    try {
      const r = await api('GET', '/1/queues');
      if (!ctx.alive()) return;
      const list = r.queues || r.items || (Array.isArray(r) ? r : []);
      fill(queueSelect, list.map((q) => h('option', { value: q.name }, q.name)));
      fill(
        queues,
        list.length
          ? table(
              [
                { label: 'Name', cell: (q) => q.name },
                { label: 'Index', cell: (q) => q.indexName },
                { label: 'Size', cell: (q) => num(q.size), num: true },
                { label: 'Sources', cell: (q) => (q.sources || []).map((s) => `${s.source} ×${s.weight ?? 1}`).join(', ') },
              ],
              list,
              { class: 'queues-table' },
            )
          : notice('No queues yet (PUT /1/queues/{name} defines one).'),
      );
      if (!index.value && list[0]) index.value = list[0].indexName;
    } catch (e) {
      if (ctx.alive()) fill(queues, errorBox(e));
    }
  }

  peekForm.addEventListener('submit', async (e) => {
    e.preventDefault();
    if (!queueSelect.value) {
      fill(peekOut, errorBox('No queue to peek at.'));
      return;
    }
    try {
      const r = await api('GET', `/1/queues/${seg(queueSelect.value)}/users/${seg(peekUser.value.trim())}?n=20`);
      fill(peekOut, r.hits.length ? hitsTable(r.hits, 'peek-table') : notice('Nothing queued for this user.'));
    } catch (err) {
      fill(peekOut, errorBox(err));
    }
  });

  recForm.addEventListener('submit', (e) => {
    e.preventDefault();
    const chosen = [...models.querySelectorAll('input:checked')].map((i) => i.value);
    const values = { objectID: objectID.value.trim(), userToken: userToken.value.trim(), facetName: facetName.value.trim() };
    fill(recOut);
    for (const { model, needs } of MODELS.filter((m) => chosen.includes(m.model))) {
      const box = h('div', { class: 'rec-model', dataset: { model } }, notice('Asking…'));
      recOut.append(card(model, box));
      const missing = needs.filter((n) => !values[n]);
      if (missing.length) {
        fill(box, notice(`Needs ${missing.join(' and ')}.`));
        continue;
      }
      const request = { indexName: index.value.trim(), model, threshold: 0, maxRecommendations: 10 };
      if (needs.includes('objectID')) request.objectID = values.objectID;
      if (model === 'trending-facets') request.facetName = values.facetName;
      if (model === 'trending-items' && facetName.value.trim() && facetValue.value.trim()) {
        request.facetName = facetName.value.trim();
        request.facetValue = facetValue.value.trim();
      }
      if (model === 'recommended-for-you') request.queryParameters = { userToken: values.userToken };
      if ((model === 'looking-similar' || model === 'related-products') && space.value.trim()) request.space = space.value.trim();
      api('POST', '/1/indexes/*/recommendations', { requests: [request] })
        .then((r) => {
          const res = r.results[0];
          fill(box,
            h('p', { class: 'muted small' }, `answered by ${res.answeredBy}, source ${res.source}, ${res.nbHits} hits`),
            res.hits.length ? hitsTable(res.hits, 'rec-table') : notice('No hits.'));
        })
        .catch((err) => fill(box, errorBox(err)));
    }
  });

  return every(10000, loadQueues);
}

export { TYPES };
