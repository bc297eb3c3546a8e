// The timeline: one row per recent signal, a dot when it was sent, a bar to when it was
// delivered (with the latency written beside it), dashed to now while it waits. Drawn as SVG
// with createElementNS; labels are text nodes.
'use strict';
(function () {
  const NS = 'http://www.w3.org/2000/svg';
  const ROW = 22;
  const TOP = 26;
  const ROWS = 30;

  function node(tag, attrs, text) {
    const e = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function duration(ms) {
    if (ms < 1000) return Math.max(0, Math.round(ms)) + ' ms';
    if (ms < 60000) return (ms / 1000).toFixed(1) + ' s';
    if (ms < 3600000) return (ms / 60000).toFixed(1) + ' min';
    return (ms / 3600000).toFixed(1) + ' h';
  }
  function clock(ms) {
    const d = new Date(ms);
    return d.toLocaleTimeString([], {
      hour: '2-digit', minute: '2-digit', second: '2-digit', hour12: false,
    });
  }

  function draw(svg, items, now) {
    const rows = items.filter((t) => t.sent_ms !== null).slice(-ROWS);
    const width = Math.max(280, svg.parentNode.clientWidth || 600);
    const label = width < 520 ? 96 : 170;
    const right = width < 520 ? 56 : 80;
    const height = TOP + Math.max(1, rows.length) * ROW + 8;
    svg.setAttribute('viewBox', '0 0 ' + width + ' ' + height);
    svg.setAttribute('width', width);
    svg.setAttribute('height', height);
    svg.replaceChildren();
    if (rows.length === 0) {
      svg.append(node('text', { x: 8, y: TOP, class: 'tl-empty' }, 'no signal yet'));
      return;
    }
    let t0 = Math.min(...rows.map((t) => t.sent_ms));
    const t1 = Math.max(now, ...rows.map((t) => t.delivered_ms || 0));
    if (t1 - t0 < 10000) t0 = t1 - 10000;
    const x = (ms) => label + (ms - t0) / (t1 - t0) * (width - label - right);
    // Axis: ticks and their clock times, fewer on a narrow screen.
    const ticks = width < 520 ? 2 : 4;
    for (let i = 0; i <= ticks; i++) {
      const ms = t0 + (t1 - t0) * i / ticks;
      const xi = x(ms);
      svg.append(node('line', { x1: xi, y1: TOP - 8, x2: xi, y2: height - 4, class: 'tl-grid' }));
      svg.append(node('text', {
        x: xi, y: 12, class: 'tl-axis',
        'text-anchor': i === 0 ? 'start' : (i === ticks ? 'end' : 'middle'),
      }, i === ticks && Math.abs(ms - now) < 1500 ? 'now' : clock(ms)));
    }
    rows.forEach((t, i) => {
      const y = TOP + i * ROW + ROW / 2;
      const kind = 't-' + String(t.type).toLowerCase().replace(/[^a-z]/g, '');
      const g = node('g', { class: 'tl-row ' + kind, 'data-id': t.id });
      g.append(node('title', {}, t.type + ' → ' + (t.target ?? '(no target)') + '\n' + t.id +
        (t.message ? '\n' + t.message : '')));
      g.append(node('text', { x: 4, y: y + 4, class: 'tl-label' },
        t.type + ' → ' + (t.target ?? '—')));
      const xs = x(t.sent_ms);
      if (t.delivered_ms !== null) {
        const xd = Math.max(xs + 2, x(t.delivered_ms));
        g.append(node('line', { x1: xs, y1: y, x2: xd, y2: y, class: 'tl-bar' }));
        g.append(node('circle', { cx: xd, cy: y, r: 4, class: 'tl-done' }));
        g.append(node('text', { x: xd + 8, y: y + 4, class: 'tl-lat' },
          t.latency_ms !== null ? duration(t.latency_ms) : ''));
      } else {
        g.append(node('line', { x1: xs, y1: y, x2: x(now), y2: y, class: 'tl-wait' }));
        g.append(node('text', { x: x(now) + 6, y: y + 4, class: 'tl-lat' }, 'waiting'));
      }
      g.append(node('circle', { cx: xs, cy: y, r: 5, class: 'tl-sent' }));
      svg.append(g);
    });
  }

  window.sigboxTimeline = { draw: draw, duration: duration };
})();
