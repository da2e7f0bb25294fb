// The dashboard's entry: runtime error recording, sign-in, the nav and hash routing.

import { api, ApiError, credentials, saveCredentials, clearCredentials, seg } from './api.js';
import { h, fill, errorBox, field } from './ui.js';
import { overviewPage, profilesPage, jobsPage, setsPage, recommendationsPage } from './pages.js';
import { strategyPage } from './strategy.js';
import { abtestsPage } from './abtests.js';

// Runtime errors are kept (the browser tests assert none happened) and shown.
window.__dashboardErrors = window.__dashboardErrors || [];
function recordError(text) {
  window.__dashboardErrors.push(text);
  const box = document.getElementById('runtime-errors');
  if (box) {
    box.hidden = false;
    box.append(h('p', null, `Dashboard error: ${text}`));
  }
}
window.addEventListener('error', (e) => recordError(`${e.message} (${e.filename}:${e.lineno})`));
window.addEventListener('unhandledrejection', (e) => {
  const r = e.reason;
  recordError(r instanceof Error ? `${r.name}: ${r.message}` : String(r));
});

const PAGES = {
  overview: { title: 'Overview', render: overviewPage },
  strategy: { title: 'Strategy', render: strategyPage },
  profiles: { title: 'Profiles', render: profilesPage },
  jobs: { title: 'Jobs', render: jobsPage },
  sets: { title: 'Sets & seen filters', render: setsPage },
  recommendations: { title: 'Recommendations', render: recommendationsPage },
  abtests: { title: 'A/B tests', render: abtestsPage },
};

const view = document.getElementById('view');
let cleanup = null;
let generation = 0;

function route() {
  const hash = location.hash.replace(/^#\/?/, '');
  const [name, ...rest] = hash.split('/');
  return { name: PAGES[name] ? name : 'overview', arg: rest.length ? decodeURIComponent(rest.join('/')) : '' };
}

function leave() {
  generation++;
  if (cleanup) {
    try {
      cleanup();
    } catch (e) {
      recordError(String(e));
    }
  }
  cleanup = null;
}

function render() {
  leave();
  const creds = credentials();
  document.getElementById('nav').hidden = !creds;
  document.getElementById('session').hidden = !creds;
  if (!creds) {
    document.title = 'Sign in — Penchant dashboard';
    signIn();
    return;
  }
  document.getElementById('session-app').textContent = `App ${creds.appID}`;
  const { name, arg } = route();
  for (const link of document.querySelectorAll('#nav a')) {
    if (link.dataset.page === name) link.setAttribute('aria-current', 'page');
    else link.removeAttribute('aria-current');
  }
  const page = PAGES[name];
  document.title = `${page.title} — Penchant dashboard`;
  const mine = generation;
  const ctx = {
    creds,
    arg,
    // False once the user left the page: late answers are dropped.
    alive: () => mine === generation,
  };
  fill(view, h('h1', null, page.title));
  const body = h('div', { class: 'page', id: `page-${name}` });
  view.append(body);
  try {
    const result = page.render(body, ctx);
    if (typeof result === 'function') cleanup = result;
  } catch (e) {
    body.append(errorBox(e));
    recordError(String(e));
  }
}

function signIn() {
  const appInput = h('input', { id: 'signin-app', name: 'appID', autocomplete: 'username', required: true, spellcheck: 'false' });
  const keyInput = h('input', { id: 'signin-key', name: 'apiKey', type: 'password', autocomplete: 'current-password', required: true });
  const status = h('div', { id: 'signin-status', 'aria-live': 'polite' });
  const button = h('button', { type: 'submit', id: 'signin-submit' }, 'Sign in');
  const form = h(
    'form',
    { class: 'signin card', id: 'signin-form' },
    h('h1', null, 'Sign in'),
    h('p', { class: 'muted' }, 'An App ID and one of its API keys (kept for this tab only).'),
    field('App ID', appInput),
    field('API key', keyInput),
    button,
    status,
  );
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const creds = { appID: appInput.value.trim(), apiKey: keyInput.value.trim() };
    button.disabled = true;
    fill(status, h('p', { class: 'muted' }, 'Checking…'));
    try {
      // A key without `settings` (403) is still a valid key of the app: signed in.
      await api('GET', `/1/apps/${seg(creds.appID)}`, undefined, creds).catch((err) => {
        if (err instanceof ApiError && err.status === 403) return null;
        throw err;
      });
      saveCredentials(creds.appID, creds.apiKey);
      if (!location.hash || location.hash === '#/' || location.hash === '#') location.hash = '#/overview';
      render();
    } catch (err) {
      fill(status, errorBox(err, 'Sign-in failed'));
      button.disabled = false;
    }
  });
  fill(view, form);
  appInput.focus();
}

document.getElementById('sign-out').addEventListener('click', () => {
  clearCredentials();
  render();
});
window.addEventListener('hashchange', render);
render();
