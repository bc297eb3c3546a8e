// The console's page: reads /api/state, listens to /api/events, sends with /api/send,
// answers requests with /api/asks/<id>/answer.
// Every text that comes from the mailbox is put in the page as text (textContent, text
// nodes), never as HTML.
'use strict';
(function () {
  const $ = (id) => document.getElementById(id);
  let state = null;
  let rootIndex = 0;
  let timer = null;

  // An element with attributes and children; strings become text nodes.
  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === 'class') e.className = v;
      else if (k === 'text') e.textContent = v;
      else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
      else e.setAttribute(k, v === true ? '' : String(v));
    }
    for (const c of children) {
      if (c === null || c === undefined) continue;
      e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return e;
  }
  function fill(node, children) {
    node.replaceChildren(...children);
  }
  function age(ms) {
    const s = Math.max(0, (Date.now() - ms) / 1000);
    if (s < 60) return Math.floor(s) + 's';
    if (s < 3600) return Math.floor(s / 60) + 'm';
    if (s < 86400) return Math.floor(s / 3600) + 'h';
    return Math.floor(s / 86400) + 'd';
  }
  function typeBadge(t) {
    return el('span', { class: 'type t-' + String(t).toLowerCase().replace(/[^a-z]/g, '') }, t);
  }
  function empty(text) {
    return el('li', { class: 'empty' }, text);
  }
  function showError(text) {
    const f = $('error');
    f.textContent = text || '';
    f.hidden = !text;
  }

  async function refresh() {
    timer = null;
    try {
      const r = await fetch('/api/state', { cache: 'no-store', credentials: 'same-origin' });
      if (!r.ok) {
        showError('state: ' + r.status + ' ' + (await r.text()));
        return;
      }
      state = await r.json();
      showError('');
      render();
    } catch (e) {
      showError('state: ' + e);
    }
  }
  function schedule() {
    if (timer === null) timer = setTimeout(refresh, 100);
  }

  function render() {
    if (!state) return;
    if (rootIndex >= state.roots.length) rootIndex = 0;
    fill($('roots'), state.roots.length > 1 ? state.roots.map((r, i) =>
      el('button', {
        class: i === rootIndex ? 'root on' : 'root', type: 'button',
        onclick: () => { rootIndex = i; render(); },
      }, r.root, ' ', el('span', { class: 'count' }, String(r.pending_total ?? '!')))) : [
      el('span', { class: 'root-one' }, state.roots[0].root)]);
    const r = state.roots[rootIndex];
    if (r.error) {
      showError(r.root + ': ' + r.error);
      return;
    }
    renderAsks(r);
    renderAgents(r);
    renderPending(r);
    renderBroadcasts(r);
    renderRecent(r);
    renderProblems(r);
    renderQuarantine(r);
    renderBridge(r);
    window.sigboxTimeline.draw($('timeline'), r.timeline, Date.now());
  }

  // An open request's item is kept from one state to the next (a request never changes):
  // what a person types in its message box, and the focus, survive every refresh.
  const askItems = new Map();

  function duration(ms) {
    const s = Math.max(0, Math.floor(ms / 1000));
    if (s < 60) return s + 's';
    if (s < 3600) return Math.floor(s / 60) + 'm ' + (s % 60) + 's';
    if (s < 86400) return Math.floor(s / 3600) + 'h ' + Math.floor((s % 3600) / 60) + 'm';
    return Math.floor(s / 86400) + 'd ' + Math.floor((s % 86400) / 3600) + 'h';
  }

  function countdown(node) {
    const d = node.dataset.deadlineMs;
    if (!d) {
      node.textContent = 'no deadline';
      return;
    }
    const left = Number(d) - Date.now();
    node.className = 'deadline' + (left <= 0 ? ' passed' : left < 60000 ? ' soon' : '');
    node.textContent = left <= 0 ? 'deadline passed' : 'deadline in ' + duration(left);
    if (left <= 0 && !node.dataset.refreshed) {
      node.dataset.refreshed = '1';
      schedule();
    }
  }

  function askItem(a) {
    const box = el('textarea', {
      class: 'ask-message', rows: 1, placeholder: 'message with the answer (optional)',
      'aria-label': 'message with the answer',
    });
    const result = el('output', { class: 'ask-result', 'aria-live': 'polite' });
    const deadline = el('span', { class: 'deadline', 'data-deadline-ms': a.deadline_ms });
    countdown(deadline);
    const buttons = a.choices.map((c) => el('button', {
      type: 'button', class: 'choice c-' + c.toLowerCase(), 'data-choice': c,
      onclick: () => answer(a.id, c, box, result, buttons),
    }, c));
    return el('li', { class: 'ask', 'data-ask': a.id },
      el('div', { class: 'line' },
        el('span', { class: 'from-to' }, a.from + ' → ' + (a.to ?? 'anyone')),
        el('span', { class: 'age', 'data-asked-ms': a.asked_ms }, 'asked ' + age(a.asked_ms) + ' ago'),
        deadline),
      el('div', { class: 'message' }, a.message),
      a.context !== null ? el('pre', { class: 'context' }, a.context) : null,
      box,
      el('div', { class: 'actions' }, ...buttons, result),
      el('div', { class: 'id' }, a.id));
  }

  function closedItem(a) {
    const answered = a.status === 'answered';
    return el('li', { class: 'ask closed', 'data-ask': a.id },
      el('div', { class: 'line' },
        el('span', { class: 'tag st-' + a.status }, a.status),
        answered ? el('strong', {}, a.choice) : null,
        answered ? el('span', { class: 'from' }, 'by ' + a.answered_by + ' after ' +
          window.sigboxTimeline.duration(a.took_ms)) : null,
        el('span', { class: 'age' }, a.from + ' → ' + (a.to ?? 'anyone'))),
      el('div', { class: 'message' }, a.message),
      answered && a.answer_message ? el('div', { class: 'said' }, a.answer_message) : null,
      el('div', { class: 'id' }, a.id + ' · ' + (answered ? a.answered_at : 'expired ' +
        (a.expired_at ?? ''))));
  }

  function renderAsks(r) {
    const asks = r.asks || { open: [], open_total: 0, closed: [], invalid: [] };
    $('asks-count').textContent = '(' + asks.open_total + ' open)';
    const list = $('asks');
    const want = asks.open.map((a) => {
      const key = rootIndex + ':' + a.id;
      let li = askItems.get(key);
      if (!li) {
        li = askItem(a);
        askItems.set(key, li);
      }
      return li;
    });
    const keep = new Set(want);
    for (const [key, li] of askItems) {
      if (!keep.has(li)) {
        li.remove();
        askItems.delete(key);
      }
    }
    for (const c of [...list.children]) {
      if (!keep.has(c)) c.remove();
    }
    want.forEach((li, i) => {
      if (list.children[i] !== li) list.insertBefore(li, list.children[i] || null);
    });
    if (asks.error) {
      list.append(el('li', { class: 'problem' },
        el('div', { class: 'line' }, el('span', { class: 'tag' }, 'cannot read the requests')),
        el('div', { class: 'reason' }, asks.error)));
    } else if (!want.length) {
      list.append(empty('no request waits'));
    }
    fill($('asks-closed'), asks.closed.length ? asks.closed.map(closedItem) :
      [empty('none yet')]);
    const bad = $('asks-invalid');
    bad.hidden = !asks.invalid.length;
    fill(bad, asks.invalid.map((x) => el('li', { class: 'problem' },
      el('div', { class: 'line' }, el('span', { class: 'tag' }, 'not a valid request')),
      el('div', { class: 'reason' }, x.reason),
      el('div', { class: 'id' }, x.path))));
  }

  async function answer(id, choice, box, out, buttons) {
    const body = { choice: choice, root: rootIndex };
    if (box.value !== '') body.message = box.value;
    const as = $('answer-as').value.trim();
    if (as !== '') body.from = as;
    out.className = 'ask-result';
    out.textContent = 'answering…';
    buttons.forEach((b) => { b.disabled = true; });
    try {
      const r = await fetch('/api/asks/' + encodeURIComponent(id) + '/answer', {
        method: 'POST', credentials: 'same-origin',
        headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body),
      });
      const v = await r.json().catch(() => ({ error: 'HTTP ' + r.status }));
      if (r.status === 202) {
        out.className = 'ask-result ok';
        out.textContent = 'proposed ' + v.proposed + ' as ' + v.answered_by + ' to host ' + v.home +
          ', where it was asked and which decides: the outcome shows here when it comes back';
      } else if (r.ok) {
        out.className = 'ask-result ok';
        out.textContent = 'answered ' + v.choice + ' as ' + v.answered_by;
      } else {
        out.className = 'ask-result bad';
        out.textContent = 'refused: ' + v.error;
      }
    } catch (e) {
      out.className = 'ask-result bad';
      out.textContent = 'cannot answer: ' + e;
    }
    buttons.forEach((b) => { b.disabled = false; });
    schedule();
  }

  function renderAgents(r) {
    fill($('agent-names'), [el('option', { value: 'ALL' })].concat(
      r.agents.map((a) => el('option', { value: a.name }))));
    fill($('agents'), r.agents.map((a) => {
      const counts = [['pending', a.pending], ['buffered', a.buffered],
        ['broadcasts', a.broadcasts], ['in flight', a.in_flight],
        ['to redeliver', a.redelivery]];
      return el('div', {
        class: 'agent' + (a.present ? ' present' : '') + (a.paused ? ' paused' : ''),
        'data-agent': a.name,
      },
      el('div', { class: 'agent-head' },
        el('span', { class: 'dot', title: a.present ? 'present' : 'absent' }),
        el('strong', {}, a.name),
        a.orchestrator ? el('span', { class: 'tag' }, 'orchestrator') : null,
        a.paused ? el('span', { class: 'tag paused-tag' }, 'PAUSED') : null),
      el('div', { class: 'presence' }, a.present ? 'present' : 'absent'),
      el('div', { class: 'counts' }, ...counts.map(([k, n]) =>
        el('span', { class: n > 0 ? 'n some' : 'n' }, el('b', {}, String(n)), ' ' + k))),
      el('div', { class: 'actions' },
        el('button', {
          type: 'button', class: 'pause', 'data-action': 'PAUSE',
          onclick: () => send({ type: 'PAUSE', target: a.name }),
        }, 'Pause'),
        el('button', {
          type: 'button', class: 'resume', 'data-action': 'RESUME',
          onclick: () => send({ type: 'RESUME', target: a.name }),
        }, 'Resume'),
        el('button', {
          type: 'button', class: 'steer', onclick: () => {
            $('target').value = a.name;
            $('message').focus();
          },
        }, 'Steer…')));
    }));
  }

  function signalItem(s, extra) {
    return el('li', { class: 'signal', 'data-id': s.id },
      el('div', { class: 'line' }, typeBadge(s.type),
        el('span', { class: 'target' }, '→ ' + (s.target ?? '(no target)')),
        s.from ? el('span', { class: 'from' }, 'from ' + s.from) : null,
        el('span', { class: 'age' }, extra || '')),
      s.message ? el('div', { class: 'message' }, s.message) : null,
      el('div', { class: 'id' }, s.id));
  }

  function renderPending(r) {
    $('pending-count').textContent = '(' + r.pending_total + ')';
    const items = r.pending.slice().reverse().map((p) => signalItem(p,
      (p.buffered_for ? 'buffered for ' + p.buffered_for + ' · ' : '') +
      (p.known_type ? '' : 'unknown type · ') + age(p.instant_ms) + ' ago'));
    fill($('pending'), items.length ? items : [empty('nothing waits')]);
  }

  function renderBroadcasts(r) {
    const items = r.broadcasts.map((b) => el('li', { class: 'signal' },
      el('div', { class: 'line' }, typeBadge(b.type), el('span', { class: 'target' }, '→ ALL'),
        b.from ? el('span', { class: 'from' }, 'from ' + b.from) : null),
      b.message ? el('div', { class: 'message' }, b.message) : null,
      el('div', { class: 'acks' },
        ...b.acked_by.map((a) => el('span', { class: 'ack yes' }, '✓ ' + a)),
        ...b.waiting_for.map((a) => el('span', { class: 'ack no' }, '… ' + a))),
      el('div', { class: 'id' }, b.id)));
    fill($('broadcasts'), items.length ? items : [empty('no broadcast pending')]);
  }

  function renderRecent(r) {
    const done = r.timeline.filter((t) => t.status !== 'pending').slice(-30).reverse();
    const items = done.map((t) => signalItem(t,
      (t.handled_by ? t.action + ' by ' + t.handled_by : t.status) +
      (t.latency_ms !== null ? ' · ' + window.sigboxTimeline.duration(t.latency_ms) : '') +
      (t.redelivery > 0 ? ' · redelivered ×' + t.redelivery : '')));
    fill($('recent'), items.length ? items : [empty('nothing delivered yet')]);
  }

  function renderProblems(r) {
    const items = r.problems.map((p) => el('li', { class: 'problem k-' + p.kind },
      el('div', { class: 'line' }, el('span', { class: 'tag' }, p.kind.replace('_', ' ')),
        p.agent ? el('span', {}, p.agent + ' · ' + p.count) : null),
      el('div', { class: 'reason' }, p.reason),
      el('div', { class: 'id' }, p.path)));
    fill($('problems'), items.length ? items : [empty('everything is deliverable')]);
  }

  function renderQuarantine(r) {
    const q = r.quarantine;
    const items = q.items.map((x) => el('li', { class: 'problem' },
      el('div', { class: 'line' }, el('strong', {}, x.name)),
      el('div', { class: 'reason' }, x.reason),
      el('div', { class: 'cmd-line' }, 'remove: ', el('code', {}, x.clear))));
    fill($('quarantine'), items.length ? items : [empty('nothing quarantined')]);
    $('quarantine-clear').textContent = q.clear_all;
  }

  function renderBridge(r) {
    const b = r.bridge;
    if (!b) {
      fill($('bridge'), [el('p', { class: 'empty' }, 'no bridge on this root')]);
      return;
    }
    const s = b.state || {};
    const rows = [['running', b.running ? 'yes' : 'no'], ['host', s.host],
      ['server', s.nats], ['connected', s.connected ? 'yes' : 'no'],
      ['agents here', (s.here || []).join(', ') || '—'],
      ['outbox', s.outbox], ['exported', s.exported], ['last error', s.last_error || '—'],
      ['updated', s.updated_at]];
    const claimed = Object.entries(s.claimed || {});
    fill($('bridge'), [el('dl', { class: 'kv' }, ...rows.flatMap(([k, v]) =>
      [el('dt', {}, k), el('dd', {}, v === undefined || v === null ? '—' : String(v))])),
    claimed.length ? el('p', { class: 'small' }, 'agents last seen on hosts: ' +
      claimed.map(([a, t]) => a + ' (' + t + ')').join(', ')) : null].filter(Boolean));
  }

  async function send(body) {
    const out = $('send-result');
    out.className = '';
    out.textContent = 'sending…';
    body.root = rootIndex;
    try {
      const r = await fetch('/api/send', {
        method: 'POST', credentials: 'same-origin',
        headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body),
      });
      const v = await r.json().catch(() => ({ error: 'HTTP ' + r.status }));
      if (r.ok) {
        out.className = 'ok';
        out.textContent = 'sent ' + body.type + ' → ' + (body.target ?? '(no target)') + ': ' + v.id;
      } else {
        out.className = 'bad';
        out.textContent = 'refused: ' + v.error;
      }
    } catch (e) {
      out.className = 'bad';
      out.textContent = 'cannot send: ' + e;
    }
    schedule();
  }

  $('send-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const type = document.querySelector('input[name="type"]:checked').value;
    const body = { type: type, target: $('target').value };
    const m = $('message').value;
    if (m !== '') body.message = m;
    send(body).then(() => {
      if ($('send-result').className === 'ok') $('message').value = '';
    });
  });

  function listen() {
    const live = $('live');
    const es = new EventSource('/api/events');
    es.addEventListener('hello', () => {
      live.className = 'live on';
      live.textContent = 'live';
      schedule();
    });
    es.addEventListener('change', schedule);
    es.onerror = () => {
      live.className = 'live off';
      live.textContent = 'reconnecting…';
    };
  }

  // The timeline's right edge is now: redrawn every second, and to the page's width.
  function redrawTimeline() {
    if (state && state.roots[rootIndex] && !state.roots[rootIndex].error) {
      window.sigboxTimeline.draw($('timeline'), state.roots[rootIndex].timeline, Date.now());
    }
  }
  window.addEventListener('resize', redrawTimeline);
  setInterval(() => {
    redrawTimeline();
    document.querySelectorAll('#asks .deadline').forEach(countdown);
    document.querySelectorAll('#asks .age[data-asked-ms]').forEach((n) => {
      n.textContent = 'asked ' + age(Number(n.dataset.askedMs)) + ' ago';
    });
  }, 1000);
  listen();
  refresh();
})();
