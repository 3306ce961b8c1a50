/* KV Cache Paging Lab, exported static site: draws what allocator/viz/export/site.py precomputed.
 *
 * Nothing is fetched: the data arrive as <script> files (window.KV_SITE, window.KV_LESSONS), so the
 * folder works from file:// and from any static host. Strings are written with textContent; only
 * fields named *_html, escaped in Python (allocator.viz.export.site.markdown_html), go in as HTML.
 * The decoders mirror allocator/viz/export/sitecodec.py (decode_runs, decode_frames, resolve_refs).
 */
(function () {
  'use strict';
  var SITE = window.KV_SITE, LESSONS = window.KV_LESSONS;

  // ---- decoders (allocator/viz/export/sitecodec.py) -------------------------------------------------
  function resolve(node, pool) {
    if (Array.isArray(node)) return node.map(function (v) { return resolve(v, pool); });
    if (node !== null && typeof node === 'object') {
      var keys = Object.keys(node);
      if (keys.length === 1 && keys[0] === '$ref') return resolve(pool[node.$ref], pool);
      var out = {};
      for (var i = 0; i < keys.length; i++) out[keys[i]] = resolve(node[keys[i]], pool);
      return out;
    }
    return node;
  }
  function decodeRuns(runs, cols) {
    var z = [], owner = [], zr = [], orow = [];
    for (var i = 0; i < runs.length; i += 3) {
      var code = runs[i] === -1 ? null : runs[i], who = runs[i + 1], n = runs[i + 2];
      for (var k = 0; k < n; k++) {
        zr.push(code); orow.push(who);
        if (zr.length === cols) { z.push(zr); owner.push(orow); zr = []; orow = []; }
      }
    }
    if (zr.length) { z.push(zr); owner.push(orow); }
    return [z, owner];
  }
  function decodeFrames(enc, template) {
    var frames = [];
    for (var i = 0; i < enc.names.length; i++) {
      var layout = JSON.parse(JSON.stringify(template));
      (layout.annotations || []).forEach(function (a, j) { a.text = enc.texts[i][j]; });
      (layout.shapes || []).forEach(function (s) { s.x0 = s.x1 = enc.x[i]; });
      var data = enc.maps[i].map(function (runs) {
        var d = decodeRuns(runs, enc.cols);
        return {type: 'heatmap', z: d[0], customdata: d[1]};
      });
      frames.push({name: enc.names[i], traces: enc.traces.slice(), data: data, layout: layout});
    }
    return frames;
  }
  window.KV_DECODE = {resolve: resolve, decodeRuns: decodeRuns, decodeFrames: decodeFrames};

  function deref(node, pool) {
    while (node !== null && typeof node === 'object' && !Array.isArray(node) &&
           Object.keys(node).length === 1 && '$ref' in node) node = pool[node.$ref];
    return node;
  }
  function get(obj, path) {           // resolve only the part of the data a view needs
    var node = deref(obj.root, obj.pool);
    for (var i = 0; i < path.length; i++) node = deref(node[path[i]], obj.pool);
    return resolve(node, obj.pool);
  }

  // ---- helpers -----------------------------------------------------------------------------
  function el(tag, attrs, text) {
    var e = document.createElement(tag);
    if (attrs) Object.keys(attrs).forEach(function (k) { e.setAttribute(k, attrs[k]); });
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function $(id) { return document.getElementById(id); }
  // plotly rejects an animation's promise, with no reason, when a newer animation or a redraw
  // interrupts it: that is the user pressing Pause or moving a slider, not an error
  function quiet(reason) { if (reason !== undefined) throw reason; }
  window.addEventListener('unhandledrejection', function (ev) {    // the same, from plotly's own buttons
    if (ev.reason === undefined) ev.preventDefault();
  });
  // the app's toolbar (allocator.viz.modebar.MODEBAR_CONFIG): no selection or step-zoom buttons
  var CONFIG = {displaylogo: false, responsive: true,
                modeBarButtonsToRemove: ['select2d', 'lasso2d', 'zoomIn2d', 'zoomOut2d', 'autoScale2d']};

  var meta = get(SITE, ['meta']);
  var sizes = meta.block_sizes, costs = meta.costs;
  var state = {bs: meta.block_size, variant: 'main', cost: meta.cost_index, present: false,
               lesson: null, reveal: {}, guess: {}, page: 'explainer'};
  var figCache = {};

  function figure(variant, bs, present) {
    var key = variant + '|' + bs + '|' + (present ? 'p' : 'n');
    if (!figCache[key]) {
      var f = get(SITE, ['fig', variant, String(bs)]);
      var src = present ? f.present : f;
      figCache[key] = {data: src.data, layout: src.layout,
                       frames: decodeFrames(f.frames, present ? f.present.template : f.frames.template),
                       lines: {data: f.lines.data, layout: present ? f.lines.present_layout : f.lines.layout}};
    }
    var c = figCache[key];     // plotly keeps and mutates what it is given: hand it a copy
    return {data: JSON.parse(JSON.stringify(c.data)), layout: JSON.parse(JSON.stringify(c.layout)),
            frames: c.frames, lines: JSON.parse(JSON.stringify(c.lines))};
  }

  // ---- the explainer -------------------------------------------------------------------------
  var frameNames = [], current = 0, playing = false;
  function drawMaps() {
    var fig = figure(state.variant, state.bs, state.present);
    frameNames = fig.frames.map(function (f) { return f.name; });
    current = 0; playing = false;
    var gd = $('maps');
    // the div is exactly as tall as the figure (620 px, more when presenting): a fixed CSS height left a
    // blank band of about 280 px between the maps and the line charts
    gd.style.height = fig.layout.height + 'px';
    var first = !gd.data;
    if (!first) pause();
    // the lines under the maps are a still figure of their own: every animation frame redraws the whole
    // animated figure, and with the lines in it Play fell under 10 frames/s on a 2-core laptop
    Plotly.react($('maps-lines'), {data: fig.lines.data, layout: fig.lines.layout, config: CONFIG});
    return Plotly.react(gd, {data: fig.data, layout: fig.layout, frames: fig.frames, config: CONFIG})
      .then(function () {
        if (!first) return;           // the listeners stay with the div across redraws
        gd.on('plotly_animatingframe', function (ev) {
          var i = frameNames.indexOf(ev.name); if (i >= 0) current = i;
        });
        gd.on('plotly_animated', function () { if (current >= frameNames.length - 1) playing = false; });
        gd.on('plotly_buttonclicked', function (ev) {
          playing = ev && ev.button && ev.button.label && ev.button.label.indexOf('Play') >= 0;
        });
      });
  }
  function showFrame(i) {
    i = Math.max(0, Math.min(frameNames.length - 1, i));
    current = i; playing = false;
    return Plotly.animate($('maps'), [frameNames[i]], {frame: {duration: 0, redraw: true}, mode: 'immediate',
                                                        transition: {duration: 0}}).catch(quiet);
  }
  function play() {
    playing = true;
    return Plotly.animate($('maps'), null, {frame: {duration: 140, redraw: true}, fromcurrent: true,
                                            transition: {duration: 0}}).catch(quiet);
  }
  function pause() {
    playing = false;
    return Plotly.animate($('maps'), [null], {frame: {duration: 0, redraw: false}, mode: 'immediate',
                                              transition: {duration: 0}}).catch(quiet);
  }
  window.KV_PLAYER = {play: play, pause: pause, showFrame: showFrame,
                      current: function () { return current; }, frames: function () { return frameNames.slice(); }};

  function drawCards() {
    var panels = get(SITE, ['cards', state.variant, String(state.bs)]);
    var box = $('cards'); box.textContent = '';
    ['reserve_max', 'paged'].forEach(function (key) {
      var p = panels[key], panel = el('div', {'class': 'panel', 'data-side': key});
      panel.appendChild(el('h3', null, p.title));
      var row = el('div', {'class': 'cardrow'});
      p.cards.forEach(function (c, i) {
        var card = el('div', {'class': 'card', 'data-testid': 'card-' + key + '-' + i, title: c.help});
        card.appendChild(el('div', {'class': 'label'}, c.label));
        card.appendChild(el('div', {'class': 'value'}, c.value));
        if (c.delta) {
          var neg = c.delta.charAt(0) === '-' || c.delta.charAt(0) === '−';
          var good = c.delta_color === 'inverse' ? neg : !neg;
          card.appendChild(el('div', {'class': 'delta ' + (good ? 'good' : 'bad')}, (neg ? '▼ ' : '▲ ') + c.delta));
        }
        row.appendChild(card);
      });
      panel.appendChild(row);
      panel.appendChild(el('div', {'class': 'line'}, p.line));
      box.appendChild(panel);
    });
  }
  function drawDetails() {
    var split = get(SITE, ['details', state.variant, String(state.bs)]), rows = split.base.slice();
    Object.keys(split.vary).forEach(function (i) { rows[+i] = split.vary[i][state.cost]; });   // site.join_rows
    var t = $('details'); t.textContent = '';
    if (!rows.length) return;
    var cols = Object.keys(rows[0]), head = el('tr');
    cols.forEach(function (c) { head.appendChild(el('th', null, c)); });
    t.appendChild(head);
    rows.forEach(function (r) {
      var tr = el('tr');
      cols.forEach(function (c, i) { tr.appendChild(el('td', (i === 1 || i === 2) ? {'class': 'num'} : null, r[c])); });
      t.appendChild(tr);
    });
  }
  function drawSweep() {
    var v = state.variant, fig = get(SITE, ['sweep', v, 'curves', state.cost]);
    var marker = get(SITE, ['sweep', v, 'marker', String(state.bs)]);
    // the slider's block size lives in the layout: its labelled line and the x range (site.py's with_marker)
    fig.layout.shapes = marker.shapes;
    fig.layout.annotations = marker.annotations;
    fig.layout.xaxis = Object.assign({}, fig.layout.xaxis, {range: marker.xrange});
    if (state.present) fig.layout.font = Object.assign({}, fig.layout.font || {}, {size: 17});
    $('sweep-text').innerHTML = get(SITE, ['sweep', v, 'text_html', String(state.bs), state.cost]);
    return Plotly.react($('sweep'), fig.data, fig.layout, CONFIG);
  }

  function hidden() {
    if (!state.lesson && state.lesson !== 0) return [];
    var steps = LESSON_STEPS();
    if (state.lesson >= steps.length || state.reveal[state.lesson]) return [];
    return steps[state.lesson].hides;
  }
  function applyHidden() {
    var h = hidden();
    [['maps', 'maps-wrap', 'maps-hidden'], ['cards', 'cards', 'cards-hidden'], ['cards', 'details-box', null],
     ['sweep', 'sweep-wrap', 'sweep-hidden']].forEach(function (x) {
      var hide = h.indexOf(x[0]) >= 0;
      $(x[1]).style.display = hide ? 'none' : '';
      if (x[2]) $(x[2]).hidden = !hide;
    });
  }

  function update() {               // a control moved: redraw everything that depends on it
    var t0 = performance.now();
    $('bs').value = sizes.indexOf(state.bs);
    $('bs').setAttribute('aria-valuetext', state.bs + ' slots per block');
    $('bs-out').textContent = state.bs + ' slots';
    $('cost').value = state.cost;
    $('c-out').textContent = String(costs[state.cost]);
    if ($('variant')) $('variant').checked = state.variant !== 'main';
    drawCards(); drawDetails();
    var done = Promise.all([drawMaps(), drawSweep()]).then(function () {
      window.KV_LAST_SWITCH_MS = performance.now() - t0;
      document.body.setAttribute('data-ready', String(state.bs) + '|' + state.variant + '|' + state.cost +
                                 '|' + (state.present ? 'p' : 'n'));
    });
    drawLesson(); applyHidden();
    return done;
  }
  window.KV_UPDATE = update;

  // ---- the guided lesson ---------------------------------------------------------------------
  function LESSON_STEPS() { return meta.lesson_steps || []; }
  var lesson = get(SITE, ['lesson']);
  meta.lesson_steps = lesson ? lesson.steps : [];
  function goStep(i) {
    state.lesson = i;
    var steps = LESSON_STEPS();
    if (i < steps.length) { state.bs = steps[i].view.block_size; state.variant = steps[i].view.variant; }
    return update();
  }
  function drawLesson() {
    var box = $('lesson');
    if (state.lesson === null) { box.hidden = true; $('lesson-start').hidden = !lesson; return; }
    $('lesson-start').hidden = true; box.hidden = false; box.textContent = '';
    var steps = LESSON_STEPS(), n = steps.length + 1, i = state.lesson;
    if (i < steps.length) {
      var s = steps[i];
      box.appendChild(el('h3', null, s.title));
      var txt = el('div'); txt.innerHTML = s.text_html; box.appendChild(txt);
      box.appendChild(el('div', {'class': 'question'}, 'Predict: ' + s.question));
      var ch = el('div', {'class': 'choices'});
      s.choices.forEach(function (c, j) {
        var lab = el('label'), r = el('input', {type: 'radio', name: 'guess' + i, value: c});
        if (state.guess[i] === c) r.checked = true;
        r.addEventListener('change', function () { state.guess[i] = c; });
        lab.appendChild(r); lab.appendChild(document.createTextNode(' ' + c)); ch.appendChild(lab);
      });
      box.appendChild(ch);
      var rb = el('button', {id: 'lesson-reveal'}, state.reveal[i] ? 'Hide the answer' : 'Reveal');
      rb.addEventListener('click', function () { state.reveal[i] = !state.reveal[i]; drawLesson(); applyHidden();
                                                 if (state.reveal[i]) { drawMaps(); drawSweep(); } });
      box.appendChild(rb);
      if (state.reveal[i]) {
        var rv = el('div', {'class': 'reveal', 'data-testid': 'reveal'});
        rv.innerHTML = s.reveal_html[state.variant][String(state.bs)];
        if (state.guess[i]) rv.appendChild(el('p', null, 'The class predicted: ' + state.guess[i] + '.'));
        box.appendChild(rv);
      }
    } else {
      box.appendChild(el('h3', null, n + ' · Challenges to take away'));
      lesson.challenges.forEach(function (c, j) {
        var q = el('div'); q.innerHTML = '<b>' + (j + 1) + '.</b> ' + c.q_html; box.appendChild(q);
        var d = el('details'); d.appendChild(el('summary', null, 'Show an answer'));
        var a = el('div'); a.innerHTML = c.a_html; d.appendChild(a); box.appendChild(d);
      });
    }
    var nav = el('div', {'class': 'nav'});
    var prev = el('button', {id: 'lesson-prev'}, '◀ Previous'); prev.disabled = i === 0;
    var next = el('button', {id: 'lesson-next'}, 'Next ▶'); next.disabled = i >= n - 1;
    var end = el('button', {id: 'lesson-end'}, 'End the lesson');
    prev.addEventListener('click', function () { goStep(i - 1); });
    next.addEventListener('click', function () { goStep(i + 1); });
    end.addEventListener('click', function () { state.lesson = null; state.reveal = {}; update(); });
    nav.appendChild(prev); nav.appendChild(next); nav.appendChild(el('span', {'class': 'muted'}, 'Step ' + (i + 1) + ' of ' + n));
    nav.appendChild(end);
    box.appendChild(nav);
  }

  // ---- the other pages (allocator/viz/export/site_lessons.py) -----------------------------------------
  var drawn = {};
  function drawPage(name) {
    if (drawn[name] || !LESSONS || !deref(LESSONS.root, LESSONS.pool)[name]) return;
    drawn[name] = true;
    var page = get(LESSONS, [name]), box = $('page-' + name);
    box.appendChild(el('h2', null, page.title));
    var intro = el('div'); intro.innerHTML = page.intro_html; box.appendChild(intro);
    page.sections.forEach(function (sec, k) {
      box.appendChild(el('h3', null, sec.title));
      if (sec.text_html) { var t = el('div'); t.innerHTML = sec.text_html; box.appendChild(t); }
      if (sec.figure) {
        var div = el('div', {'class': 'fig', id: name + '-fig-' + k}); box.appendChild(div);
        div.style.height = (sec.figure.layout.height || 380) + 'px';
        Plotly.newPlot(div, sec.figure.data, sec.figure.layout, CONFIG);
      }
      if (sec.table) box.appendChild(table(sec.table));
      if (sec.states) box.appendChild(walkthrough(name + '-walk-' + k, sec.states));
    });
  }
  function table(rows) {
    var t = el('table'), cols = Object.keys(rows[0] || {}), head = el('tr');
    cols.forEach(function (c) { head.appendChild(el('th', null, c)); }); t.appendChild(head);
    rows.forEach(function (r) {
      var tr = el('tr');
      cols.forEach(function (c) { tr.appendChild(el('td', typeof r[c] === 'number' ? {'class': 'num'} : null,
                                                    typeof r[c] === 'number' ? r[c].toLocaleString('en') : r[c])); });
      t.appendChild(tr);
    });
    return t;
  }
  function walkthrough(id, states) {
    var wrap = el('div'), bar = el('div', {'class': 'nav'}), i = 0;
    var prev = el('button', null, '◀ Previous'), next = el('button', null, 'Next ▶'), where = el('span', {'class': 'muted'});
    bar.appendChild(prev); bar.appendChild(next); bar.appendChild(where); wrap.appendChild(bar);
    var grid = el('div', {'class': 'walk'}), fig = el('div', {'class': 'fig', id: id}), side = el('div');
    grid.appendChild(fig); grid.appendChild(side); wrap.appendChild(grid);
    function show() {
      var s = states[i];
      where.textContent = 'State ' + (i + 1) + ' of ' + states.length + ': ' + s.action;
      prev.disabled = i === 0; next.disabled = i === states.length - 1;
      side.textContent = '';
      var t = el('div'); t.innerHTML = s.text_html; side.appendChild(t);
      if (s.table && s.table.length) side.appendChild(table(s.table));
      fig.style.height = (s.figure.layout.height || 380) + 'px';
      Plotly.react(fig, s.figure.data, s.figure.layout, CONFIG);
    }
    prev.addEventListener('click', function () { i--; show(); });
    next.addEventListener('click', function () { i++; show(); });
    setTimeout(show, 0);
    return wrap;
  }
  function showPage(name) {
    state.page = name;
    document.querySelectorAll('.page').forEach(function (p) { p.hidden = p.id !== 'page-' + name; });
    document.querySelectorAll('#tabs button[data-page]').forEach(function (b) {
      b.classList.toggle('on', b.getAttribute('data-page') === name);
    });
    drawPage(name);
    $('foot').hidden = name === 'about';       // the Sources page says it in full already
    if (name === 'explainer') window.dispatchEvent(new Event('resize'));
  }

  // ---- presentation mode and keys ------------------------------------------------------------
  function setPresent(on) {
    state.present = on;
    document.body.classList.toggle('present', on);
    // as on the app's page: the headline numbers above the maps, or on a projector the maps first
    var page = $('page-explainer'), first = on ? ['maps-hidden', 'maps-wrap'] : ['cards-hidden', 'cards'];
    first.slice().reverse().forEach(function (id) { page.insertBefore($(id), $('lesson').nextSibling); });
    $('present').classList.toggle('on', on);
    $('present').textContent = on ? 'Leave presentation (Esc)' : 'Present';
    return update();
  }
  document.addEventListener('keydown', function (ev) {
    if (ev.target && /INPUT|TEXTAREA|SELECT/.test(ev.target.tagName) && ev.target.type !== 'radio') return;
    if (state.page !== 'explainer') { if (ev.key === 'Escape' && state.present) setPresent(false); return; }
    if (ev.key === 'ArrowRight') { showFrame(current + 1); ev.preventDefault(); }
    else if (ev.key === 'ArrowLeft') { showFrame(current - 1); ev.preventDefault(); }
    else if (ev.key === ' ') { (playing ? pause : play)(); ev.preventDefault(); }
    else if (ev.key === 'Escape' && state.present) setPresent(false);
  });

  // ---- start ---------------------------------------------------------------------------------
  function init() {
    var bs = $('bs'), ticks = $('bs-labels');
    bs.max = sizes.length - 1;
    // each label (with its tick) stands where the thumb's centre is at that value: site.css places
    // it at thumb/2 + (track width - thumb) * --at, the way the browser moves the thumb
    sizes.forEach(function (b, i) {
      var s = el('span', null, b);
      s.style.setProperty('--at', String(sizes.length > 1 ? i / (sizes.length - 1) : 0));
      ticks.appendChild(s);
    });
    bs.addEventListener('input', function () { state.bs = sizes[+bs.value]; update(); });
    var cost = $('cost'); cost.max = costs.length - 1;
    cost.addEventListener('input', function () {
      state.cost = +cost.value; $('c-out').textContent = String(costs[state.cost]); drawDetails(); drawSweep();
    });
    if (meta.variants.length > 1) {
      $('variant-ctl').hidden = false;
      $('variant-label').textContent = meta.variants[1].label;
      $('variant').addEventListener('change', function () {
        state.variant = $('variant').checked ? meta.variants[1].key : 'main'; update();
      });
    }
    $('lesson-start').addEventListener('click', function () { state.reveal = {}; state.guess = {}; goStep(0); });
    $('present').addEventListener('click', function () { setPresent(!state.present); });
    document.querySelectorAll('#tabs button[data-page]').forEach(function (b) {
      b.addEventListener('click', function () { showPage(b.getAttribute('data-page')); });
    });
    $('attribution').innerHTML = meta.attribution_html;
    $('foot').innerHTML = meta.attribution_html;             // escaped in Python (site.attribution_html)
    $('generated').textContent = 'Exported ' + meta.generated + ' by python -m allocator export-site. Scenario: ' +
                                 meta.summary + '.';
    if (!LESSONS) document.querySelectorAll('#tabs button[data-page]').forEach(function (b) {
      if (['accounting', 'capacity', 'blocks'].indexOf(b.getAttribute('data-page')) >= 0) b.hidden = true;
    });
    var params = new URLSearchParams(window.location.search);
    if (params.get('present') === 'true') { state.present = true; document.body.classList.add('present'); }
    setPresent(state.present);
  }
  init();
})();
