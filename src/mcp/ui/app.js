// The memory browser. It is an MCP client of the server that serves it: every view is a tool
// call (or tasks/*, resources/read) to /mcp in the 2026-07-28 stateless era, with the token the
// person pasted, so it sees and may do what that token's tools may. Memory content is
// untrusted: it is only ever set as text (textContent), never parsed as markup.
'use strict';

(() => {
  const PROTOCOL = '2026-07-28';
  const TASKS = 'io.modelcontextprotocol/tasks';
  const TOKEN_KEY = 'mnemograph.token';
  const $ = (id) => document.getElementById(id);
  let nextId = 1;

  // ---- elements (text only) ----

  /** An element with attributes, properties and children (strings become text nodes). */
  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'class') e.className = v;
      else if (k === 'text') e.textContent = v;
      else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
      else if (k === 'dataset') Object.assign(e.dataset, v);
      else e.setAttribute(k, v === true ? '' : String(v));
    }
    for (const c of children.flat(Infinity)) {
      if (c === undefined || c === null || c === false) continue;
      e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return e;
  }

  function setStatus(text, error) {
    const s = $('status');
    s.textContent = text || '';
    s.classList.toggle('error', !!error);
  }

  const fail = (e) => setStatus(e && e.message ? e.message : String(e), true);
  const fmtTime = (t) => (t ? t.replace('T', ' ').replace(/\.\d+Z$/, 'Z') : '');
  const fmtNum = (x, d = 3) => (typeof x === 'number' ? x.toFixed(d) : '');
  const list = (text) => (text || '').split(',').map((s) => s.trim()).filter(Boolean);

  // ---- MCP over HTTP ----

  class McpError extends Error {
    constructor(message, code) {
      super(message);
      this.code = code;
    }
  }

  const token = () => sessionStorage.getItem(TOKEN_KEY) || '';

  /** One JSON-RPC request to /mcp; its result, or an McpError saying what went wrong. */
  async function rpc(method, params, name) {
    const meta = {
      'io.modelcontextprotocol/protocolVersion': PROTOCOL,
      'io.modelcontextprotocol/clientCapabilities': { extensions: { [TASKS]: {} } },
      'io.modelcontextprotocol/clientInfo': { name: 'mnemograph-browser', version: '1' },
    };
    const headers = {
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
      'mcp-protocol-version': PROTOCOL,
      'mcp-method': method,
    };
    if (name !== undefined) headers['mcp-name'] = name;
    const t = token();
    if (t) headers.authorization = 'Bearer ' + t;
    const body = {
      jsonrpc: '2.0',
      id: nextId++,
      method,
      params: Object.assign({}, params, { _meta: meta }),
    };
    let res;
    try {
      res = await fetch('/mcp', {
        method: 'POST',
        headers,
        body: JSON.stringify(body),
        credentials: 'omit',
        cache: 'no-store',
      });
    } catch (e) {
      throw new McpError('the server cannot be reached (' + e.message + ')');
    }
    const text = await res.text();
    if (res.status === 401) {
      openTokenPanel();
      throw new McpError(t ? 'the server refused this token: paste another under Token'
        : 'this server needs a token: paste one under Token', 401);
    }
    let msg;
    try {
      msg = JSON.parse(text);
    } catch (_) {
      throw new McpError('HTTP ' + res.status + ': ' + text.slice(0, 300).trim());
    }
    if (msg.error) throw new McpError(msg.error.message || 'error ' + msg.error.code, msg.error.code);
    return msg.result;
  }

  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

  /**
   * Calls a tool. A task answer is polled at the interval the server advises, `onTask` told of
   * the handle and each status (progress from `_meta["mnemograph/progress"]`), until it ends.
   * Lists a result cut for its size are completed from their `resource_link` pages.
   */
  async function call(name, args, onTask) {
    let r = await rpc('tools/call', { name, arguments: args || {} }, name);
    if (r.resultType === 'task') r = await follow(r, onTask);
    if (r.isError) {
      const text = (r.content || []).filter((c) => c.type === 'text').map((c) => c.text).join(' ');
      throw new McpError(text || name + ' failed');
    }
    const out = r.structuredContent || parseText(r);
    return complete(out);
  }

  function parseText(r) {
    const text = (r.content || []).find((c) => c.type === 'text');
    try {
      return text ? JSON.parse(text.text) : {};
    } catch (_) {
      return { text: text.text };
    }
  }

  async function follow(task, onTask) {
    let t = task;
    if (onTask) onTask({ taskId: t.taskId, status: t.status, message: t.statusMessage });
    for (;;) {
      const wait = Math.min(Math.max(t.pollIntervalMs || 500, 100), 2000);
      await sleep(wait);
      t = await rpc('tasks/get', { taskId: task.taskId }, task.taskId);
      const progress = (t._meta && t._meta['mnemograph/progress']) || {};
      if (onTask) onTask({ taskId: task.taskId, status: t.status, message: t.statusMessage, progress });
      if (t.status === 'completed') return t.result;
      if (t.status === 'failed') throw new McpError((t.error && t.error.message) || 'the task failed');
      if (t.status === 'cancelled') throw new McpError('cancelled');
    }
  }

  /** Reads every page behind the `cut` links of a result into the lists and texts they cut. */
  async function complete(out) {
    if (!out || !Array.isArray(out.cut)) return out;
    for (const cut of out.cut) {
      let uri = cut.rest;
      const parts = cut.field.split('/');
      let parent = out;
      for (const p of parts.slice(0, -1)) parent = parent[p];
      const key = parts[parts.length - 1];
      // Each page starts where the one before ended (a text's offsets count bytes, not the
      // characters JavaScript counts, so pages are appended, never sliced in); a clipped text
      // ends with the ellipsis the budget added.
      let whole = parent[key];
      if (typeof whole === 'string' && whole.endsWith('…')) whole = whole.slice(0, -1);
      let guard = 0;
      while (uri && guard++ < 10000) {
        const r = await rpc('resources/read', { uri }, uri);
        const page = JSON.parse(r.contents[0].text);
        if (Array.isArray(page.items)) whole = whole.concat(page.items);
        else if (typeof page.text === 'string') whole += page.text;
        uri = page.next;
      }
      parent[key] = whole;
    }
    delete out.cut;
    return out;
  }

  // ---- token ----

  function openTokenPanel() {
    $('token-panel').hidden = false;
    $('token-input').focus();
  }

  $('token-button').addEventListener('click', () => {
    $('token-panel').hidden = !$('token-panel').hidden;
  });
  $('token-panel').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const v = $('token-input').value.trim();
    if (v) sessionStorage.setItem(TOKEN_KEY, v);
    $('token-input').value = '';
    $('token-panel').hidden = true;
    setStatus('token set for this tab');
    start();
  });
  $('token-forget').addEventListener('click', () => {
    sessionStorage.removeItem(TOKEN_KEY);
    setStatus('token forgotten');
  });

  // ---- views ----

  let view = 'search';
  function show(name) {
    view = name;
    for (const b of document.querySelectorAll('#tabs button')) b.classList.toggle('active', b.dataset.view === name);
    for (const s of document.querySelectorAll('.view')) s.hidden = s.id !== 'view-' + name;
    if (name === 'tasks') loadTasks().catch(fail);
    if (name === 'runs') loadRuns().catch(fail);
    if (name === 'health') loadHealth().catch(fail);
    if (name === 'graph' && graph) graph.width($('graph').clientWidth).height($('graph').clientHeight);
  }
  for (const b of document.querySelectorAll('#tabs button')) b.addEventListener('click', () => show(b.dataset.view));

  // Names of memories seen, for relations and paths.
  const names = new Map();
  const label = (id) => names.get(id) || id;

  // ---- search ----

  let searchSeq = 0;
  let searchTimer = 0;
  function scheduleSearch() {
    clearTimeout(searchTimer);
    searchTimer = setTimeout(() => search().catch(fail), 200);
  }

  async function search() {
    const query = $('q').value.trim();
    const seq = ++searchSeq;
    if (!query) {
      $('hits').replaceChildren();
      $('hits-note').textContent = '';
      return;
    }
    const args = { query, limit: 20, explain: true, mode: $('f-mode').value };
    const ns = $('f-namespace').value;
    if (ns) args.namespace = ns;
    const kinds = list($('f-kinds').value);
    if (kinds.length) args.kinds = kinds;
    if ($('f-archived').checked) args.include_archived = true;
    const started = performance.now();
    const out = await call('recall', args);
    if (seq !== searchSeq) return; // a newer query was typed meanwhile
    const hits = out.hits || [];
    for (const h of hits) if (h.name) names.set(h.id, h.name);
    $('hits').replaceChildren(...hits.map((h) => hitItem(h, hits)));
    const warn = (out.warnings || []).join(' ');
    $('hits-note').textContent = hits.length + ' hits in ' + Math.round(performance.now() - started) + ' ms' + (warn ? ' — ' + warn : '');
    setStatus('');
  }

  /** Why a hit is on the page: its rank by words and by meaning, and the link it came by. */
  function why(h, hits) {
    const x = h.explain || {};
    const parts = [];
    if (x.text_rank) parts.push('words #' + x.text_rank);
    if (x.vector_rank) parts.push('meaning #' + x.vector_rank);
    if (h.via) {
      const from = hits.find((o) => o.id === h.via.from);
      const fromName = from ? from.name || (from.snippet || '').slice(0, 24) : label(h.via.from);
      parts.push('via ' + h.via.relation + (h.via.hops > 1 ? ' (' + h.via.hops + ' hops)' : '') + ' of ' + fromName);
    }
    return parts.join(', ');
  }

  function hitItem(h, hits) {
    return el('li', { class: 'hit', tabindex: 0, dataset: { id: h.id }, onclick: () => openMemory(h.id).catch(fail),
      onkeydown: (e) => { if (e.key === 'Enter') openMemory(h.id).catch(fail); } },
    el('div', { class: 'head' },
      h.name ? el('span', { class: 'name', text: h.name }) : null,
      el('span', { class: 'tag', text: h.namespace }),
      el('span', { class: 'tag', text: h.kind }),
      el('span', { class: 'why', text: why(h, hits) }),
      el('span', { class: 'score', text: fmtNum(h.score) })),
    el('div', { class: 'snippet', text: h.snippet || h.content || '' }));
  }

  $('search-form').addEventListener('submit', (e) => { e.preventDefault(); search().catch(fail); });
  $('q').addEventListener('input', scheduleSearch);
  for (const id of ['f-mode', 'f-namespace', 'f-archived']) $(id).addEventListener('change', scheduleSearch);
  $('f-kinds').addEventListener('input', scheduleSearch);

  // ---- a memory ----

  let current = null;

  async function openMemory(id) {
    const out = await call('get', { ids: [id], history: true });
    const m = (out.memories || [])[0];
    if (!m) throw new McpError('no memory ' + id + ' (forgotten, or outside what this token may read)');
    current = m;
    if (m.name) names.set(m.id, m.name);
    const ends = [...new Set((m.relations || []).map((r) => (r.from === m.id ? r.to : r.from)))].filter((x) => !names.has(x));
    if (ends.length) {
      try {
        const others = await call('get', { ids: ends.slice(0, 100) });
        for (const o of others.memories || []) names.set(o.id, o.name || (o.content || '').slice(0, 40));
      } catch (_) { /* other ends outside the token's namespaces stay ids */ }
    }
    renderMemory(m);
    $('memory').hidden = false;
    setStatus('');
  }

  const memLink = (id) => el('button', { type: 'button', class: 'link mem', dataset: { id }, text: label(id),
    onclick: () => openMemory(id).catch(fail) });

  function renderMemory(m) {
    const fields = [
      ['id', m.id], ['name', m.name], ['kind', m.kind], ['namespace', m.namespace], ['version', m.version],
      ['importance', m.importance], ['salience', m.salience], ['valid from', m.valid_from], ['valid until', m.valid_until],
      ['tags', (m.tags || []).join(', ')], ['created', fmtTime(m.created_at)], ['updated', fmtTime(m.updated_at)],
      ['accessed', m.access_count], ['archived', m.archived ? 'yes' : null],
    ].filter(([, v]) => v !== undefined && v !== null && v !== '');
    const out = (m.relations || []).filter((r) => r.from === m.id);
    const inn = (m.relations || []).filter((r) => r.from !== m.id);
    const relRow = (r, other, arrow) => el('tr', { class: 'relation', dataset: { id: r.id } },
      el('td', { text: arrow }), el('td', { text: r.kind }), el('td', {}, memLink(other)),
      el('td', { text: fmtNum(r.weight, 2) }), el('td', { text: fmtNum(r.strength, 2) }),
      el('td', { text: r.valid_from || r.valid_until ? fmtTime(r.valid_from || '…') + ' – ' + fmtTime(r.valid_until || '…') : '' }));
    const body = [
      el('h2', { text: m.name || m.id }),
      el('div', { class: 'content', id: 'memory-content', text: m.content }),
      el('dl', { class: 'fields' }, fields.map(([k, v]) => [el('dt', { text: k }), el('dd', { text: String(v) })])),
    ];
    if (m.metadata && Object.keys(m.metadata).length) {
      body.push(el('h3', { text: 'metadata' }), el('pre', { class: 'json', text: JSON.stringify(m.metadata, null, 2) }));
    }
    body.push(el('h3', { text: 'relations (' + (m.relations || []).length + ')' }));
    body.push(el('table', { id: 'memory-relations' },
      el('thead', {}, el('tr', {}, el('th', { text: '' }), el('th', { text: 'kind' }), el('th', { text: 'other end' }),
        el('th', { text: 'weight' }), el('th', { text: 'strength' }), el('th', { text: 'valid' }))),
      el('tbody', {}, out.map((r) => relRow(r, r.to, '→')), inn.map((r) => relRow(r, r.from, '←')))));
    const merged = (m.metadata && m.metadata.merged_from) || [];
    if (merged.length) {
      const undo = el('span', { class: 'lineage-run' });
      body.push(el('h3', { text: 'lineage' }), el('p', { id: 'memory-lineage' }, 'merged from ',
        merged.map((id, i) => [i ? ', ' : '', memLink(id)]), ' ', undo));
      lineageRun(m, undo).catch(() => {});
    }
    body.push(el('h3', { text: 'history (' + (m.history || []).length + ')' }));
    body.push(el('div', { id: 'memory-history' }, historyItems(m)));
    $('memory-body').replaceChildren(...body);
  }

  /** The consolidation run whose merge wrote this memory, with an undo. */
  async function lineageRun(m, into) {
    const merge = (m.history || []).find((h) => h.op === 'merge');
    if (!merge) return;
    const out = await call('consolidate', { runs: true });
    const run = (out.runs || []).find((r) => r.started_at <= merge.at && (!r.ended_at || merge.at <= r.ended_at));
    if (!run) return;
    into.replaceChildren('by run ' + run.run_id + ' ', el('button', { type: 'button', class: 'link', text: 'undo the run',
      onclick: () => undoRun(run.run_id) }));
  }

  /** Versions newest first, each with what changed from the one before it. */
  function historyItems(m) {
    const hist = (m.history || []).slice();
    // history[i].previous is the version before the change at history[i].at.
    const items = [];
    let after = m;
    for (const h of hist) {
      const before = h.previous || {};
      items.push(el('div', { class: 'version' },
        el('div', { class: 'hint', text: 'v' + (before.version || '?') + ' → v' + (after.version || '?') + ' · ' + h.op + ' by ' + (h.actor || 'unknown') + ' · ' + fmtTime(h.at) }),
        el('div', { class: 'diff' }, diff(before.content || '', after.content || '')),
        changedFields(before, after)));
      after = before;
    }
    return items;
  }

  function changedFields(a, b) {
    const keys = ['name', 'kind', 'namespace', 'importance', 'valid_from', 'valid_until'];
    const changed = keys.filter((k) => JSON.stringify(a[k]) !== JSON.stringify(b[k]) && (a[k] !== undefined || b[k] !== undefined));
    if (!changed.length) return null;
    return el('div', { class: 'hint', text: changed.map((k) => k + ': ' + (a[k] ?? '—') + ' → ' + (b[k] ?? '—')).join('; ') });
  }

  /** A word diff of two texts (longest common subsequence); both texts whole when too long. */
  function diff(a, b) {
    if (a === b) return [el('span', { class: 'hint', text: '(content unchanged)' })];
    const x = a.split(/(\s+)/);
    const y = b.split(/(\s+)/);
    if (x.length * y.length > 4e6) return [el('del', { text: a }), el('ins', { text: b })];
    const n = x.length;
    const m = y.length;
    const dp = Array.from({ length: n + 1 }, () => new Uint32Array(m + 1));
    for (let i = n - 1; i >= 0; i--) {
      for (let j = m - 1; j >= 0; j--) dp[i][j] = x[i] === y[j] ? dp[i + 1][j + 1] + 1 : Math.max(dp[i + 1][j], dp[i][j + 1]);
    }
    const out = [];
    const push = (tag, s) => {
      const last = out[out.length - 1];
      if (last && last.tag === tag) last.s += s;
      else out.push({ tag, s });
    };
    let i = 0;
    let j = 0;
    while (i < n && j < m) {
      if (x[i] === y[j]) { push('span', x[i]); i++; j++; } else if (dp[i + 1][j] >= dp[i][j + 1]) { push('del', x[i]); i++; } else { push('ins', y[j]); j++; }
    }
    while (i < n) push('del', x[i++]);
    while (j < m) push('ins', y[j++]);
    return out.map((p) => el(p.tag, { text: p.s }));
  }

  $('memory-expand').addEventListener('click', () => {
    if (!current) return;
    show('graph');
    expand(current.id).catch(fail);
  });
  $('memory-close').addEventListener('click', () => { $('memory').hidden = true; current = null; });
  $('memory-graph').addEventListener('click', () => {
    if (!current) return;
    $('g-seed').value = current.id;
    show('graph');
    showGraph().catch(fail);
  });

  // ---- the graph ----

  const PALETTE = ['#2f6fba', '#d9822b', '#3c9a5f', '#b8455b', '#7a5bb5', '#2a9ca3', '#a7862b', '#5b6b7a', '#c35ea8', '#6b9b2c'];
  const colours = { namespace: new Map(), kind: new Map() };
  function colour(kind, key) {
    const m = colours[kind];
    if (!m.has(key)) m.set(key, PALETTE[(m.size + (kind === 'kind' ? 3 : 0)) % PALETTE.length]);
    return m.get(key);
  }

  let graph = null;
  const data = { nodes: [], links: [] };
  const byId = new Map();
  const highlighted = { nodes: new Set(), links: new Set() };
  let drawn = 0;
  let runningTask = null;
  let walkSeq = 0;
  let laidOutFrom = 0;

  function ensureGraph() {
    if (graph) return graph;
    if (typeof window.ForceGraph !== 'function') throw new McpError('the graph library did not load');
    const box = $('graph');
    graph = window.ForceGraph()(box)
      .width(box.clientWidth)
      .height(box.clientHeight)
      .nodeId('id')
      .nodeLabel(() => '')
      .nodeRelSize(4)
      .linkDirectionalArrowLength(3)
      .linkDirectionalArrowRelPos(1)
      .linkColor((l) => (highlighted.links.has(l) ? '#d62d20' : 'rgba(90,100,110,0.35)'))
      .linkWidth((l) => (highlighted.links.has(l) ? 2.5 : 1))
      .nodeCanvasObject((n, ctx, scale) => {
        drawn++;
        const r = 3 + 3 * (n.strength || 0);
        ctx.beginPath();
        ctx.arc(n.x, n.y, r, 0, 2 * Math.PI);
        ctx.fillStyle = colour('namespace', n.namespace);
        ctx.fill();
        ctx.lineWidth = highlighted.nodes.has(n.id) ? 2.5 : 1.2;
        ctx.strokeStyle = highlighted.nodes.has(n.id) ? '#d62d20' : colour('kind', n.kind);
        ctx.stroke();
        if (scale > 1.6 || n.depth === 0) {
          ctx.font = 10 / Math.max(scale, 1) + 'px sans-serif';
          ctx.fillStyle = '#1d1f21';
          ctx.fillText(n.name || (n.snippet || '').slice(0, 20), n.x + r + 1, n.y + 3);
        }
      })
      .nodePointerAreaPaint((n, c, ctx) => {
        ctx.fillStyle = c;
        ctx.beginPath();
        ctx.arc(n.x, n.y, 6, 0, 2 * Math.PI);
        ctx.fill();
      })
      .onRenderFramePre(() => { drawn = 0; })
      .onRenderFramePost(() => {
        box.dataset.drawn = String(drawn);
        if (laidOutFrom && !box.dataset.firstFrameMs && drawn) box.dataset.firstFrameMs = String(Math.round(performance.now() - laidOutFrom));
      })
      .onEngineStop(() => {
        if (!laidOutFrom) return;
        // How long from the data to a still layout (what the figures quote), then fit it in view.
        box.dataset.settledMs = String(Math.round(performance.now() - laidOutFrom));
        laidOutFrom = 0;
        graph.zoomToFit(300, 30);
      })
      .onNodeClick((n) => openMemory(n.id).catch(fail))
      .onNodeRightClick((n) => expand(n.id).catch(fail))
      .onNodeHover((n) => tip(n))
      // A large graph is laid out mostly before its first frame (ticks run without drawing),
      // and settles faster than the library's default (alpha decay 0.0228 and 15 s of ticks
      // drawn one a frame): alpha falls to 0.01 in ~75 ticks, at most 40 of them drawn.
      .d3AlphaDecay(0.06)
      .d3AlphaMin(0.01)
      .cooldownTicks(40);
    return graph;
  }

  function tip(n) {
    const t = $('graph-tip');
    if (!n) { t.hidden = true; return; }
    t.textContent = (n.name ? n.name + ' — ' : '') + (n.snippet || '') + '\n' + n.namespace + ' · ' + n.kind;
    const p = graph.graph2ScreenCoords(n.x, n.y);
    t.style.left = Math.round(p.x + 12) + 'px';
    t.style.top = Math.round(p.y + 12) + 'px';
    t.hidden = false;
  }

  function legend() {
    const rows = [];
    for (const [ns, c] of colours.namespace) {
      const s = el('span', { class: 'swatch' });
      s.style.background = c;
      rows.push(el('div', {}, s, 'namespace ' + ns));
    }
    for (const [k, c] of colours.kind) {
      const s = el('span', { class: 'swatch ring' });
      s.style.borderColor = c;
      rows.push(el('div', {}, s, 'kind ' + k));
    }
    $('legend').replaceChildren(...rows);
  }

  /** Adds walked nodes and the relations among them (or, without those, the links they were reached by). */
  function merge(nodes, edges) {
    for (const n of nodes) {
      if (n.name) names.set(n.id, n.name);
      if (!byId.has(n.id)) {
        const node = { id: n.id, name: n.name, namespace: n.namespace, kind: n.kind, snippet: n.snippet, strength: n.strength, depth: n.depth };
        byId.set(n.id, node);
        data.nodes.push(node);
        colour('namespace', n.namespace);
        colour('kind', n.kind);
      }
    }
    const seen = new Set(data.links.map((l) => l.key));
    const add = (from, to, kind, weight) => {
      const key = from + ' ' + to + ' ' + kind;
      if (seen.has(key) || !byId.has(from) || !byId.has(to)) return;
      seen.add(key);
      data.links.push({ key, source: from, target: to, kind, weight });
    };
    if (edges) {
      for (const e of edges) add(e.from, e.to, e.kind, e.weight);
    } else {
      for (const n of nodes) {
        if (n.via) add(n.via.forward ? n.via.from : n.id, n.via.forward ? n.id : n.via.from, n.via.kind, n.via.weight);
      }
    }
  }

  function redraw() {
    const g = ensureGraph();
    g.warmupTicks(data.nodes.length > 300 ? 60 : 0);
    laidOutFrom = performance.now();
    delete $('graph').dataset.firstFrameMs;
    delete $('graph').dataset.settledMs;
    g.graphData({ nodes: data.nodes, links: data.links });
    $('graph').dataset.nodes = String(data.nodes.length);
    $('graph').dataset.links = String(data.links.length);
    legend();
  }

  /** A seed as a walk names it: an id, or a name. */
  const seedRef = (seed) => (/^m_[a-z0-9]+$/.test(seed) ? { ids: [seed] } : { names: [seed] });

  /** The graph form's seed and hops. */
  function formSeed() {
    const seed = $('g-seed').value.trim();
    if (!seed) throw new McpError('give a memory id or name to start from');
    return { seed, depth: parseInt($('g-depth').value, 10) || 2 };
  }

  function walkArgs(seed, depth, limit) {
    const args = Object.assign({ depth, limit, max_nodes: 1000000, return: 'subgraph' }, seedRef(seed));
    const focus = $('g-focus').value.trim();
    if (focus) args.focus = focus;
    const ns = $('g-namespace').value.trim();
    if (ns && args.names) args.namespace = ns;
    const kinds = list($('g-kinds').value);
    if (kinds.length) args.kinds = kinds;
    const min = parseFloat($('g-min').value);
    if (min > 0) args.min_weight = min;
    return args;
  }

  /** A walk as the server runs it: inline, or a task with a progress bar and a cancel. */
  async function walk(args) {
    const bar = $('g-bar');
    const text = $('g-progress-text');
    const box = $('g-progress');
    box.dataset.values = '';
    const onTask = (t) => {
      runningTask = t.taskId;
      box.hidden = false;
      const p = t.progress || {};
      if (p.progressTotal) { bar.max = p.progressTotal; bar.value = p.progress || 0; } else bar.removeAttribute('value');
      // The fractions shown, in order (what the tests read to see the bar move).
      box.dataset.values = (box.dataset.values + ' ' + (p.progressTotal ? (p.progress || 0) / p.progressTotal : 0).toFixed(3)).trim();
      text.textContent = t.message || t.status;
    };
    try {
      const out = await call('traverse', args, onTask);
      box.dataset.ended = 'completed';
      return out;
    } catch (e) {
      box.dataset.ended = e.message === 'cancelled' ? 'cancelled' : 'failed';
      throw e;
    } finally {
      runningTask = null;
      box.hidden = true;
    }
  }

  async function showGraph() {
    const { seed, depth } = formSeed();
    const limit = Math.max(1, Math.min(5000, parseInt($('g-limit').value, 10) || 2000));
    setStatus('walking…');
    const started = performance.now();
    const seq = ++walkSeq;
    const out = await walk(walkArgs(seed, depth, limit));
    if (seq !== walkSeq) return; // a newer walk was asked for meanwhile
    data.nodes = [];
    data.links = [];
    byId.clear();
    highlighted.nodes.clear();
    highlighted.links.clear();
    merge(out.nodes || [], out.edges || []);
    redraw();
    $('graph').dataset.ms = String(Math.round(performance.now() - started));
    setStatus((out.nodes || []).length + ' memories' + (out.truncated ? ' (the walk stopped at its node budget)' : '') + ' in ' + Math.round(performance.now() - started) + ' ms');
  }

  async function expand(id) {
    const out = await walk(Object.assign(walkArgs(id, 1, 500), { focus: undefined }));
    const before = data.nodes.length;
    merge(out.nodes || [], out.edges || []);
    redraw();
    setStatus('expanded: ' + (data.nodes.length - before) + ' new');
  }

  async function findPath() {
    const from = $('g-seed').value.trim();
    const to = $('g-to').value.trim();
    if (!from || !to) throw new McpError('give both ends: the seed and "path to"');
    const args = { from, to, k: 0 };
    const ns = $('g-namespace').value.trim();
    if (ns) args.namespace = ns;
    const out = await call('find_paths', args);
    const path = (out.paths || [])[0];
    if (!path) { setStatus('no path within the hops allowed'); return; }
    const ids = path.ids || [];
    const missing = ids.filter((id) => !byId.has(id));
    if (missing.length) {
      const got = await call('get', { ids: missing });
      merge((got.memories || []).map((m) => ({ id: m.id, name: m.name, namespace: m.namespace, kind: m.kind,
        snippet: (m.content || '').slice(0, 120), strength: 0.5, depth: 1 })), []);
    }
    highlighted.nodes = new Set(ids);
    highlighted.links = new Set();
    for (let i = 0; i + 1 < ids.length; i++) {
      let l = data.links.find((x) => (idOf(x.source) === ids[i] && idOf(x.target) === ids[i + 1]) || (idOf(x.source) === ids[i + 1] && idOf(x.target) === ids[i]));
      if (!l) {
        l = { key: ids[i] + ' ' + ids[i + 1] + ' path', source: ids[i], target: ids[i + 1], kind: (path.kinds || [])[i] || 'path' };
        data.links.push(l);
      }
      highlighted.links.add(l);
    }
    redraw();
    $('graph').dataset.path = ids.join(' ');
    setStatus('path of ' + (ids.length - 1) + ' hops');
  }
  const idOf = (end) => (typeof end === 'object' ? end.id : end);

  $('graph-form').addEventListener('submit', (e) => {
    e.preventDefault();
    showGraph().catch((err) => (err.message === 'cancelled' ? setStatus('the walk was cancelled') : fail(err)));
  });
  /** The neighbourhood as one self-contained HTML file (the `export` tool's html format). */
  async function save() {
    const { seed, depth } = formSeed();
    const subgraph = Object.assign(seedRef(seed), { depth });
    const args = { format: 'html', subgraph };
    const ns = $('g-namespace').value.trim();
    if (ns && subgraph.names) args.namespaces = [ns];
    setStatus('exporting…');
    const out = await call('export', args, (t) => setStatus('exporting: ' + (t.message || t.status)));
    const url = URL.createObjectURL(new Blob([out.data], { type: 'text/html' }));
    const a = el('a', { href: url, download: 'mnemograph-' + seed.replace(/[^\w.-]+/g, '_') + '.html' });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 60000);
    setStatus('saved ' + out.memories + ' memories and ' + out.relations + ' relations as one HTML file');
  }

  $('g-path').addEventListener('click', () => findPath().catch(fail));
  $('g-save').addEventListener('click', () => save().catch(fail));
  $('g-cancel').addEventListener('click', () => {
    if (runningTask) rpc('tasks/cancel', { taskId: runningTask }, runningTask).then(() => setStatus('cancelling…')).catch(fail);
  });

  // ---- tasks ----

  async function loadTasks() {
    const out = await call('tasks', { limit: 50 });
    const rows = [];
    for (const t of out.tasks || []) {
      const bar = el('progress', { max: 1 });
      if (t.status === 'working') {
        rpc('tasks/get', { taskId: t.taskId }, t.taskId).then((g) => {
          const p = (g._meta && g._meta['mnemograph/progress']) || {};
          if (p.progressTotal) { bar.max = p.progressTotal; bar.value = p.progress || 0; }
        }).catch(() => {});
      } else {
        // An ended task's bar stands where its last status left it.
        const pct = /(\d+)%/.exec(t.statusMessage || '');
        bar.value = t.status === 'completed' ? 1 : pct ? Number(pct[1]) / 100 : 0;
      }
      rows.push(el('tr', { dataset: { task: t.taskId } },
        el('td', { text: t.tool }), el('td', { text: t.status + (t.owner ? ' (' + t.owner + ')' : '') }),
        el('td', {}, bar, ' ', t.statusMessage || ''), el('td', { text: fmtTime(t.createdAt) }),
        el('td', {}, t.status === 'working' ? el('button', { type: 'button', text: 'Cancel',
          onclick: () => rpc('tasks/cancel', { taskId: t.taskId }, t.taskId).then(loadTasks).catch(fail) }) : null)));
    }
    $('tasks').tBodies[0].replaceChildren(...rows);
    if (view === 'tasks' && (out.tasks || []).some((t) => t.status === 'working')) setTimeout(() => { if (view === 'tasks') loadTasks().catch(fail); }, 1000);
  }
  $('tasks-refresh').addEventListener('click', () => loadTasks().catch(fail));

  // ---- consolidation ----

  function runArgs(extra) {
    const ns = list($('r-namespaces').value);
    return Object.assign(ns.length ? { namespaces: ns } : {}, extra);
  }

  async function loadRuns() {
    const out = await call('consolidate', { runs: true });
    $('runs').replaceChildren(...(out.runs || []).map((r) => el('li', { dataset: { run: r.run_id } },
      el('strong', { text: r.run_id }), ' · ' + r.state + ' · ' + fmtTime(r.started_at) + ' by ' + (r.started_by || '?') + ' ',
      r.state === 'completed' ? el('button', { type: 'button', text: 'Undo', onclick: () => undoRun(r.run_id) }) : null,
      el('div', { class: 'counts', text: counts(r.counts) }))));
  }

  const counts = (c) => Object.entries(c || {}).filter(([, v]) => v).map(([k, v]) => k.replace(/_/g, ' ') + ' ' + v).join(' · ');

  async function preview() {
    setStatus('previewing…');
    const out = await call('consolidate', runArgs({ dry_run: true }));
    const by = {};
    for (const ex of out.examples || []) (by[ex.step] = by[ex.step] || []).push(ex);
    const section = (step, title) => el('section', { dataset: { step } }, el('h3', { text: title + ' (' + (by[step] || []).length + ')' }),
      el('ul', {}, (by[step] || []).map((ex) => el('li', {},
        ex.into ? ['into ', memLink(ex.into), ' from ', (ex.ids || []).map((id, i) => [i ? ', ' : '', memLink(id)])] : (ex.ids || []).map((id, i) => [i ? ', ' : '', memLink(id)]),
        ex.text ? el('div', { class: 'hint', text: ex.text }) : null))));
    const known = new Set(['merge', 'archive', 'contradictions']);
    const others = Object.keys(by).filter((s) => !known.has(s));
    $('preview').replaceChildren(
      el('p', { class: 'counts', text: 'dry run: nothing written · ' + counts(out.counts) }),
      el('div', { class: 'preview-grid' }, section('merge', 'merged'), section('archive', 'archived'), section('contradictions', 'invalidated'),
        others.map((s) => section(s, s))));
    setStatus('');
  }

  async function apply() {
    if (!window.confirm('Consolidate now? Every run can be undone.')) return;
    setStatus('consolidating…');
    const out = await call('consolidate', runArgs({}), (t) => setStatus('consolidating: ' + (t.message || t.status)));
    setStatus('run ' + (out.run_id || '') + ': ' + counts(out.counts));
    await loadRuns();
  }

  async function undoRun(id) {
    if (!window.confirm('Undo run ' + id + '?')) return;
    try {
      const out = await call('consolidate', { undo: id });
      setStatus('undone: ' + id + (out.hint ? ' — ' + out.hint : ''));
      if (view === 'runs') await loadRuns();
    } catch (e) {
      fail(e);
    }
  }

  $('r-preview').addEventListener('click', () => preview().catch(fail));
  $('r-apply').addEventListener('click', () => apply().catch(fail));

  // ---- health ----

  async function loadHealth() {
    const [stats, ready, runs] = await Promise.all([
      call('stats', {}),
      fetch('/readyz', { cache: 'no-store' }).then((r) => r.json()).catch(() => ({})),
      call('consolidate', { runs: true }).catch(() => ({ runs: [] })),
    ]);
    const last = (runs.runs || [])[0];
    const rows = [
      ['ready', ready.ready === undefined ? '?' : ready.ready ? 'yes' : 'no' + (ready.error ? ' — ' + ready.error : '')],
      ['memories', stats.memories], ['relations', stats.relations], ['vectors', stats.vectors],
      ['forgotten', stats.forgotten_memories],
      ['text index lag', stats.text_index_lag], ['vector index lag', stats.vector_index_lag],
      ['database size', stats.database_bytes !== undefined ? (stats.database_bytes / 1048576).toFixed(1) + ' MiB' : undefined],
      ['embedding model', stats.embedding_model],
      ['namespaces', (stats.by_namespace || []).map((n) => n.name + ' ' + n.count).join(', ')],
      ['kinds', (stats.by_kind || []).map((n) => n.name + ' ' + n.count).join(', ')],
      ['last consolidation', last ? last.run_id + ' · ' + last.state + ' · ' + fmtTime(last.ended_at || last.started_at) : 'none'],
    ].filter(([, v]) => v !== undefined);
    $('health').replaceChildren(...rows.map(([k, v]) => [el('dt', { text: k }), el('dd', { dataset: { field: k }, text: String(v) })]).flat());
  }
  $('health-refresh').addEventListener('click', () => loadHealth().catch(fail));

  // ---- start ----

  async function start() {
    try {
      const stats = await call('stats', {});
      const select = $('f-namespace');
      const chosen = select.value;
      select.replaceChildren(el('option', { value: '', text: 'all namespaces' }),
        ...(stats.by_namespace || []).map((n) => el('option', { value: n.name, text: n.name + ' (' + n.count + ')' })));
      select.value = chosen;
      document.body.dataset.ready = '1';
      document.body.dataset.readyMs = String(Math.round(performance.now()));
      setStatus(stats.memories + ' memories, ' + stats.relations + ' relations');
    } catch (e) {
      document.body.dataset.ready = 'error';
      fail(e);
    }
  }

  // Test hooks: what the browser tests read (counts, not content).
  window.mnemograph = { call, rpc, graphData: () => data, show };
  start();
})();
