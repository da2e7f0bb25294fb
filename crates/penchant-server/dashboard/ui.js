// Small DOM helpers: elements, tables, bars, errors, the confirmation dialog, formats.

import { ApiError } from './api.js';

// An element: h('p', {class: 'x', onclick: f}, 'text', child, [more children]).
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith('on') && typeof value === 'function') {
      el.addEventListener(key.slice(2), value);
    } else if (key === 'class') {
      el.className = value;
    } else if (key === 'dataset') {
      Object.assign(el.dataset, value);
    } else if (key === 'value') {
      el.value = value;
    } else if (value === true) {
      el.setAttribute(key, '');
    } else {
      el.setAttribute(key, String(value));
    }
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children) {
    if (child === undefined || child === null || child === false) continue;
    if (Array.isArray(child)) append(el, child);
    else el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

// Replace an element's children.
export function fill(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

// An error as the page shows it: the API's status and message.
export function errorBox(error, context) {
  const text =
    error instanceof ApiError
      ? `${error.status ? error.status + ': ' : ''}${error.message}`
      : String(error && error.message ? error.message : error);
  return h('p', { class: 'error', role: 'alert' }, context ? `${context} — ${text}` : text);
}

export function notice(text) {
  return h('p', { class: 'muted' }, text);
}

// A table in a horizontally scrolling wrapper. `columns`: [{label, cell(row) → node|text, num?}].
export function table(columns, rows, attrs = {}) {
  const head = h('tr', null, columns.map((c) => h('th', { scope: 'col', class: c.num ? 'num' : null }, c.label)));
  const body = rows.map((row, i) =>
    h('tr', null, columns.map((c) => h('td', { class: c.num ? 'num' : null }, c.cell(row, i)))),
  );
  return h('div', { class: 'table-wrap' }, h('table', attrs, h('thead', null, head), h('tbody', null, body)));
}

// A horizontal bar: fraction 0..1 of the track, optional class (`over` for red).
export function bar(fraction, label, cls) {
  const inner = h('span', { class: 'bar-fill' + (cls ? ' ' + cls : '') });
  inner.style.width = `${Math.max(0, Math.min(1, fraction || 0)) * 100}%`;
  return h('span', { class: 'bar', role: 'img', 'aria-label': label || `${Math.round((fraction || 0) * 100)}%` }, inner);
}

// A labelled field: label wrapping text and an input.
export function field(label, input, hint) {
  return h('label', { class: 'field' }, h('span', { class: 'field-label' }, label), input, hint ? h('small', { class: 'muted' }, hint) : null);
}

export function card(title, ...children) {
  return h('section', { class: 'card' }, title ? h('h2', null, title) : null, ...children);
}

export function stat(label, value, attrs = {}) {
  return h('div', { class: 'stat', ...attrs }, h('div', { class: 'stat-value' }, value), h('div', { class: 'stat-label' }, label));
}

// The in-page confirmation dialog (`<dialog id="confirm-dialog">` in index.html): resolves to
// true when the user confirms.
export function confirmDialog(message, confirmLabel = 'Delete') {
  const dialog = document.getElementById('confirm-dialog');
  document.getElementById('confirm-message').textContent = message;
  const ok = document.getElementById('confirm-ok');
  ok.textContent = confirmLabel;
  return new Promise((resolve) => {
    const done = () => {
      dialog.removeEventListener('close', done);
      resolve(dialog.returnValue === 'confirm');
    };
    dialog.returnValue = '';
    dialog.addEventListener('close', done);
    dialog.showModal();
  });
}

export function debounce(fn, ms) {
  let timer = null;
  const wrapped = (...args) => {
    clearTimeout(timer);
    timer = setTimeout(() => fn(...args), ms);
  };
  wrapped.cancel = () => clearTimeout(timer);
  return wrapped;
}

const numberFormat = new Intl.NumberFormat('en-US');
export function num(n) {
  return n === undefined || n === null ? '—' : numberFormat.format(n);
}

export function pct(x, digits = 2) {
  return x === undefined || x === null ? '—' : `${(x * 100).toFixed(digits)}%`;
}

// A time (Unix ms, or an ISO string) as local date and time.
export function time(t) {
  if (t === undefined || t === null || t === '') return '—';
  const d = new Date(t);
  if (Number.isNaN(d.getTime())) return String(t);
  return d.toLocaleString('en-GB', { hour12: false });
}

export function duration(seconds) {
  if (!Number.isFinite(seconds) || seconds < 0) return '—';
  if (seconds < 1) return `${Math.round(seconds * 1000)} ms`;
  if (seconds < 60) return `${Math.round(seconds)} s`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)} min ${Math.round(seconds % 60)} s`;
  return `${Math.floor(seconds / 3600)} h ${Math.round((seconds % 3600) / 60)} min`;
}

// A list of IDs typed by a person: split on commas and newlines, trimmed, blanks dropped.
export function splitList(text) {
  return String(text || '')
    .split(/[\n,]/)
    .map((s) => s.trim())
    .filter(Boolean);
}

// A record's attribute as short text (nested objects and arrays as JSON).
export function short(value) {
  if (value === undefined) return '';
  const text = typeof value === 'string' ? value : JSON.stringify(value);
  return text.length > 60 ? text.slice(0, 57) + '…' : text;
}
