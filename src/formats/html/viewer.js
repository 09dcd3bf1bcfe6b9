// The viewer of a mnemograph HTML export: a filterable list and a force-laid graph of the
// memories in this file. Content is only ever set as text.
'use strict';
(() => {
  const $ = (id) => document.getElementById(id);
  const memories = [];
  const relations = [];
  for (const line of $('records').textContent.split('\n')) {
    if (!line.trim()) continue;
    const r = JSON.parse(line);
    (r.t === 'm' ? memories : relations).push(r);
  }
  const byId = new Map(memories.map((m) => [m.id, m]));
  const palette = ['#2f6fba', '#d9822b', '#3c9a5f', '#b8455b', '#7a5bb5', '#2a9ca3', '#a7862b', '#5b6b7a'];
  const colours = new Map();
  const colour = (ns) => {
    if (!colours.has(ns)) colours.set(ns, palette[colours.size % palette.length]);
    return colours.get(ns);
  };
  const label = (m) => m.name || (m.content || '').slice(0, 40);
  const el = (tag, text, cls) => {
    const e = document.createElement(tag);
    if (text !== undefined) e.textContent = text;
    if (cls) e.className = cls;
    return e;
  };

  function show(m) {
    const d = $('detail');
    d.replaceChildren(el('h2', label(m)), el('div', m.content, 'content'));
    const fields = el('dl');
    for (const [k, v] of [['id', m.id], ['namespace', m.namespace], ['kind', m.kind], ['importance', m.importance],
      ['tags', (m.tags || []).join(', ')], ['created', m.created_at]]) {
      if (v === undefined || v === null || v === '') continue;
      fields.append(el('dt', k), el('dd', String(v)));
    }
    d.append(fields, el('h3', 'relations'));
    const rels = el('ul');
    for (const r of relations) {
      if (r.from !== m.id && r.to !== m.id) continue;
      const other = byId.get(r.from === m.id ? r.to : r.from);
      const li = el('li', (r.from === m.id ? '→ ' : '← ') + r.kind + ' ');
      const a = el('button', other ? label(other) : (r.from === m.id ? r.to : r.from), 'link');
      if (other) a.addEventListener('click', () => show(other));
      li.append(a);
      rels.append(li);
    }
    d.append(rels);
    d.hidden = false;
  }

  function list(filter) {
    const f = filter.toLowerCase();
    const items = memories.filter((m) => !f || (m.content || '').toLowerCase().includes(f) || (m.name || '').toLowerCase().includes(f));
    $('list').replaceChildren(...items.slice(0, 500).map((m) => {
      const li = el('li');
      li.append(el('strong', m.name || ''), el('span', ' ' + m.namespace + ' · ' + m.kind, 'muted'), el('div', m.content));
      li.addEventListener('click', () => show(m));
      return li;
    }));
    $('counts').textContent = items.length + ' of ' + memories.length + ' memories · ' + relations.length + ' relations';
  }
  $('filter').addEventListener('input', (e) => list(e.target.value));
  list('');

  if (typeof window.ForceGraph === 'function') {
    const box = $('graph');
    const links = relations.filter((r) => byId.has(r.from) && byId.has(r.to)).map((r) => ({ source: r.from, target: r.to, kind: r.kind }));
    const nodes = memories.map((m) => ({ id: m.id, m }));
    window.ForceGraph()(box)
      .width(box.clientWidth).height(box.clientHeight)
      .graphData({ nodes, links })
      .nodeLabel(() => '')
      .nodeColor((n) => colour(n.m.namespace))
      .linkDirectionalArrowLength(3).linkDirectionalArrowRelPos(1)
      .linkColor(() => 'rgba(90,100,110,0.35)')
      .warmupTicks(nodes.length > 300 ? 60 : 0).d3AlphaDecay(0.06).d3AlphaMin(0.01).cooldownTicks(40)
      .onNodeClick((n) => show(n.m));
    box.dataset.nodes = String(nodes.length);
  }
})();
