// Events per minute as an SVG line chart, one line per event type, drawn by hand (no library):
// the data is at most 48 × 60 points per type, bucketed down to at most 360 points.
//
// The chart is drawn at its box's width, one SVG unit to a CSS pixel, and drawn again when that
// width changes: its labels keep their 11 px at a phone's width (a fixed viewBox scaled down to
// fit a phone would shrink them to 5 px).

const SVG = 'http://www.w3.org/2000/svg';
/** The width drawn before the box is measured, and the narrowest drawn. */
const DEFAULT_WIDTH = 800;
const MIN_WIDTH = 240;
const PAD = { left: 44, right: 12, top: 12, bottom: 26 };
export const TYPES = ['click', 'conversion', 'view'];

function s(tag, attrs, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, String(v));
  for (const c of children) if (c !== null && c !== undefined) el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return el;
}

// Round a maximum up to 1, 2 or 5 × 10^n.
function niceMax(max) {
  if (max <= 4) return 4;
  const p = 10 ** Math.floor(Math.log10(max));
  for (const m of [1, 2, 5, 10]) if (m * p >= max) return m * p;
  return 10 * p;
}

function clock(ms) {
  const d = new Date(ms);
  return `${String(d.getHours()).padStart(2, '0')}:${String(d.getMinutes()).padStart(2, '0')}`;
}

// `stats`: {start, step, counts: {click: [...], ...}} as GET /1/stats/events answers.
// `width`: the box's (CSS px), when known.
export function eventsChart(stats, width) {
  const n = Math.max(...TYPES.map((t) => (stats.counts[t] || []).length), 0);
  const bucket = Math.max(1, Math.ceil(n / 360));
  const points = Math.ceil(n / bucket);
  const series = TYPES.map((type) => {
    const raw = stats.counts[type] || [];
    const values = [];
    for (let i = 0; i < points; i++) {
      let sum = 0;
      for (let j = i * bucket; j < Math.min(n, (i + 1) * bucket); j++) sum += raw[j] || 0;
      values.push(sum / bucket); // per minute
    }
    return { type, values, total: raw.reduce((a, b) => a + b, 0) };
  });
  const max = niceMax(Math.max(0, ...series.flatMap((x) => x.values)));
  const label = `Events per minute: ${series.map((x) => `${x.type} ${x.total}`).join(', ')}`;

  // The SVG at `width` CSS pixels.
  const draw = (width) => {
    const W = Math.max(MIN_WIDTH, Math.round(width));
    // Taller as it widens: 200 px on a phone, 320 on a wide screen.
    const H = Math.round(Math.min(320, Math.max(200, W * 0.3)));
    const plotW = W - PAD.left - PAD.right;
    const plotH = H - PAD.top - PAD.bottom;
    const x = (i) => PAD.left + (points <= 1 ? plotW : (i / (points - 1)) * plotW);
    const y = (v) => PAD.top + plotH - (v / max) * plotH;
    const svg = s('svg', { viewBox: `0 0 ${W} ${H}`, class: 'chart', role: 'img', 'aria-label': label });
    // Grid and y labels.
    for (let k = 0; k <= 4; k++) {
      const v = (max / 4) * k;
      svg.append(s('line', { x1: PAD.left, x2: W - PAD.right, y1: y(v), y2: y(v), class: 'grid' }));
      svg.append(s('text', { x: PAD.left - 6, y: y(v) + 4, 'text-anchor': 'end', class: 'axis' }, Number.isInteger(v) ? v : v.toFixed(1)));
    }
    // Time labels: about one per 110 px, 2 to 6 intervals.
    const ticks = Math.max(2, Math.min(6, Math.floor(plotW / 110)));
    for (let k = 0; k <= ticks; k++) {
      const i = Math.round(((points - 1) * k) / ticks);
      const t = stats.start + i * bucket * stats.step;
      svg.append(s('text', { x: x(i), y: H - 6, 'text-anchor': k === 0 ? 'start' : k === ticks ? 'end' : 'middle', class: 'axis' }, clock(t)));
    }
    for (const line of series) {
      const d = line.values.map((v, i) => `${i ? 'L' : 'M'}${x(i).toFixed(1)},${y(v).toFixed(1)}`).join('');
      svg.append(s('path', { d, class: `line series-${line.type}` }, s('title', null, `${line.type}: ${line.total}`)));
    }
    svg.dataset.width = String(W);
    return svg;
  };
  let svg = draw(width || DEFAULT_WIDTH);

  const legend = document.createElement('ul');
  legend.className = 'legend';
  for (const line of series) {
    const li = document.createElement('li');
    li.className = `legend-${line.type}`;
    li.dataset.type = line.type;
    li.dataset.total = String(line.total);
    const swatch = document.createElement('span');
    swatch.className = `swatch series-${line.type}`;
    li.append(swatch, `${line.type}: `);
    const b = document.createElement('strong');
    b.textContent = String(line.total);
    li.append(b);
    legend.append(li);
  }
  const note = document.createElement('p');
  note.className = 'muted small';
  note.textContent = bucket > 1 ? `Mean per minute over ${bucket}-minute buckets; totals over the whole range.` : 'Per minute; totals over the whole range.';
  const wrap = document.createElement('div');
  wrap.className = 'chart-wrap';
  wrap.append(svg, legend, note);
  // Drawn again at the box's width when it changes (a frame later: a change of size inside the
  // observer's callback would be reported as a ResizeObserver loop error).
  let frame = 0;
  const resized = new ResizeObserver(() => {
    if (!wrap.isConnected) {
      resized.disconnect();
      return;
    }
    cancelAnimationFrame(frame);
    frame = requestAnimationFrame(() => {
      const now = Math.max(MIN_WIDTH, Math.round(wrap.clientWidth));
      if (!wrap.isConnected || !wrap.clientWidth || String(now) === svg.dataset.width) return;
      const next = draw(now);
      svg.replaceWith(next);
      svg = next;
    });
  });
  resized.observe(wrap);
  return wrap;
}
