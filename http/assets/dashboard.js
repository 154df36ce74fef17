// Tessera dashboard: polls /api/workers, /api/graphs and /api/tasks once a
// second and redraws; no reload, no network beyond the scheduler
// (Chart.js is served from /static/chart.js). JSON shapes: docs/dashboard.md.
'use strict';

const PALETTE = ['#3b82c4', '#d9822b', '#4caf50', '#c0392b', '#8e44ad', '#16a085', '#f1c40f', '#7f8c8d',
                 '#e91e63', '#2c3e50', '#9c640c', '#1abc9c'];
const opColors = new Map();
function opColor(op) {
  if (!opColors.has(op)) opColors.set(op, PALETTE[opColors.size % PALETTE.length]);
  return opColors.get(op);
}

function bytes(n) {
  if (n === null || n === undefined) return '–';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : n) + ' ' + units[i];
}

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return e;
}

function bar(used, limit) {
  const frac = limit > 0 ? Math.min(1, used / limit) : 0;
  const b = el('span', {class: 'bar' + (frac > 0.8 ? ' warn' : '')}, el('span', {style: `width:${(frac * 100).toFixed(1)}%`}));
  return el('span', {}, b, bytes(used) + (limit > 0 ? ' / ' + bytes(limit) : ''));
}

function renderWorkers(data) {
  const body = document.querySelector('#workers tbody');
  body.replaceChildren();
  for (const w of data.workers) {
    const gpu = w.gpu_name !== '';
    const row = el('tr', {class: 'worker-row', 'data-worker': w.name},
      el('td', {}, w.name), el('td', {}, gpu ? `${w.device} (${w.gpu_name})` : 'CPU'), el('td', {}, w.threads),
      el('td', {class: 'running'}, w.tasks_running), el('td', {class: 'done'}, w.tasks_done),
      el('td', {}, bar(w.memory_used, w.memory_limit)), el('td', {}, bytes(w.disk_bytes)),
      el('td', {}, gpu ? bar(w.device_memory_used, w.device_memory_limit) : '–'),
      el('td', {}, bytes(w.bytes_spilled)), el('td', {}, bytes(w.bytes_dropped)), el('td', {}, bytes(w.bytes_recomputed)),
      el('td', {}, w.gpu_util === null ? '–' : w.gpu_util + ' %'),
      el('td', {}, w.gpu_memory_total === null ? '–' : bar(w.gpu_memory_used, w.gpu_memory_total)),
      el('td', {}, w.gpu_power_watts === null ? '–' : w.gpu_power_watts.toFixed(0) + ' W'));
    body.append(row);
  }
  memoryChart.data.labels = data.workers.map(w => w.name);
  memoryChart.data.datasets[0].data = data.workers.map(w => w.memory_used);
  memoryChart.data.datasets[1].data = data.workers.map(w => w.disk_bytes);
  memoryChart.data.datasets[2].data = data.workers.map(w => w.device_memory_used);
  memoryChart.update('none');
}

function groupTable(groups) {
  const t = el('table', {class: 'groups'}, el('tr', {}, ...['task group (op)', 'done', 'processing', 'queued',
    'ready', 'waiting', 'in memory', 'erred', 'total'].map(h => el('th', {}, h))));
  for (const g of groups)
    t.append(el('tr', {}, el('td', {}, g.op), el('td', {}, g.done), el('td', {}, g.processing), el('td', {}, g.queued),
      el('td', {}, g.ready), el('td', {}, g.waiting + g.recomputing), el('td', {}, g.memory), el('td', {}, g.erred),
      el('td', {}, g.total)));
  return t;
}

function renderGraphs(data) {
  const box = document.getElementById('graphs');
  box.replaceChildren();
  if (data.graphs.length === 0) box.append(el('p', {class: 'empty'}, 'no graphs'));
  for (const g of data.graphs) {
    const p = el('progress', {class: 'graph-progress', max: '1', value: String(g.progress),
                              'data-graph': `${g.client}/${g.graph}`});
    box.append(el('div', {class: 'graph'},
      el('div', {}, el('b', {}, `graph ${g.graph}`), ` of ${g.client} `, p,
        el('span', {class: 'progress-text'}, ` ${g.tasks_done} / ${g.tasks_total} tasks (${(g.progress * 100).toFixed(1)} %)`),
        `, ${g.tasks_erred} erred; ${g.fused_tasks} fused tasks of ${g.fused_parts} parts; ${bytes(g.bytes)} in memory`),
      groupTable(g.groups)));
  }
  document.getElementById('summary').textContent =
    `${data.tasks_total} tasks: ` + Object.entries(data.tasks_by_state).filter(([, n]) => n > 0)
      .map(([s, n]) => `${n} ${s}`).join(', ');
  const groups = data.graphs.flatMap(g => g.groups.map(x => ({...x, label: `${x.op} (graph ${g.graph})`})));
  groupsChart.data.labels = groups.map(g => g.label);
  const fields = ['done', 'processing', 'queued', 'waiting'];
  fields.forEach((f, i) => { groupsChart.data.datasets[i].data = groups.map(g => g[f] + (f === 'waiting' ? g.ready + g.recomputing : 0)); });
  groupsChart.update('none');
}

function renderStream(data) {
  const canvas = document.getElementById('stream');
  const width = canvas.clientWidth || 1200;
  canvas.width = width;
  const lanes = new Map();
  for (const t of data.tasks) {
    const key = `${t[0]}:${t[1]}`;
    if (!lanes.has(key)) lanes.set(key, lanes.size);
  }
  const rowH = Math.max(6, Math.min(24, Math.floor(150 / Math.max(1, lanes.size))));
  canvas.height = Math.max(160, rowH * lanes.size + 10);
  const ctx = canvas.getContext('2d');
  ctx.clearRect(0, 0, canvas.width, canvas.height);
  const span = data.seconds * 1000;
  for (const t of data.tasks) {
    const op = data.ops[t[2]];
    const x = t[3] / span * width, w = Math.max(1, t[4] / span * width);
    ctx.fillStyle = opColor(op);
    ctx.fillRect(x, 5 + lanes.get(`${t[0]}:${t[1]}`) * rowH, w, rowH - 1);
  }
  const legend = document.getElementById('stream-legend');
  legend.replaceChildren(...data.ops.map(op => el('span', {}, el('i', {style: `background:${opColor(op)}`}), op)));
  document.getElementById('stream-seconds').textContent = data.seconds;
}

const memoryChart = new Chart(document.getElementById('memory-chart'), {
  type: 'bar',
  data: {labels: [], datasets: [
    {label: 'host', data: [], backgroundColor: '#3b82c4'},
    {label: 'disk', data: [], backgroundColor: '#7f8c8d'},
    {label: 'device', data: [], backgroundColor: '#4caf50'}]},
  options: {animation: false, maintainAspectRatio: false, scales: {x: {stacked: true},
    y: {stacked: true, ticks: {callback: v => bytes(v)}}}}
});
const groupsChart = new Chart(document.getElementById('groups-chart'), {
  type: 'bar',
  data: {labels: [], datasets: [
    {label: 'done', data: [], backgroundColor: '#4caf50'},
    {label: 'processing', data: [], backgroundColor: '#3b82c4'},
    {label: 'queued', data: [], backgroundColor: '#d9822b'},
    {label: 'waiting', data: [], backgroundColor: '#bdc3c7'}]},
  options: {indexAxis: 'y', animation: false, maintainAspectRatio: false,
            scales: {x: {stacked: true}, y: {stacked: true}}}
});

async function poll() {
  const status = document.getElementById('status');
  try {
    const [workers, graphs, tasks] = await Promise.all(
      ['/api/workers', '/api/graphs', '/api/tasks'].map(p => fetch(p, {cache: 'no-store'}).then(r => {
        if (!r.ok) throw new Error(`${p}: HTTP ${r.status}`);
        return r.json();
      })));
    renderWorkers(workers);
    renderGraphs(graphs);
    renderStream(tasks);
    status.textContent = `live, ${workers.workers.length} workers, ${new Date().toLocaleTimeString()}`;
    status.className = 'status ok';
  } catch (e) {
    status.textContent = 'scheduler unreachable: ' + e.message;
    status.className = 'status err';
  }
}

poll();
setInterval(poll, 1000);
