/* sand view: the synthesis and evaluation browsers. Plain DOM, no framework, no network.
 *
 * Data arrive as scripts: data/index.js calls SAND.index(...) once; data/<key>.js calls SAND.chunk(key, ...)
 * when a trajectory, task or group of pairs is opened (file:// forbids fetch in Chromium, not <script src>).
 * Every string from a model or an environment goes into the page as text (textContent / text nodes):
 * nothing here ever assigns markup built from data.
 */
(function () {
  "use strict";
  var SAND = (window.SAND = {});
  var INDEX = null;
  var chunks = {};
  var waiting = {};
  var PAGE = 100;

  // -- loading -------------------------------------------------------------------------------------------
  SAND.chunk = function (key, data) {
    chunks[key] = data;
    (waiting[key] || []).forEach(function (w) { w.ok(data); });
    delete waiting[key];
  };
  function load(key) {
    return new Promise(function (ok, fail) {
      if (key in chunks) return ok(chunks[key]);
      if (waiting[key]) return waiting[key].push({ ok: ok, fail: fail });
      waiting[key] = [{ ok: ok, fail: fail }];
      var s = document.createElement("script");
      s.src = "data/" + key + ".js";
      s.onerror = function () {
        (waiting[key] || []).forEach(function (w) { w.fail(new Error("cannot load data/" + key + ".js")); });
        delete waiting[key];
      };
      document.body.appendChild(s);
    });
  }

  // -- DOM helpers (text only) -----------------------------------------------------------------------------
  function h(tag, attrs) {
    var el = document.createElement(tag);
    attrs = attrs || {};
    Object.keys(attrs).forEach(function (k) {
      var v = attrs[k];
      if (v === null || v === undefined || v === false) return;
      if (k === "class") el.className = v;
      else if (k === "text") el.textContent = String(v);
      else if (k.slice(0, 2) === "on") el.addEventListener(k.slice(2), v);
      else el.setAttribute(k, v === true ? "" : String(v));
    });
    for (var i = 2; i < arguments.length; i++) add(el, arguments[i]);
    return el;
  }
  function add(el, kid) {
    if (kid === null || kid === undefined || kid === false) return;
    if (Array.isArray(kid)) return kid.forEach(function (k) { add(el, k); });
    el.appendChild(kid instanceof Node ? kid : document.createTextNode(String(kid)));
  }
  function $(id) { return document.getElementById(id); }
  function clear(el) { while (el.firstChild) el.removeChild(el.firstChild); return el; }
  function badge(text, cls) { return h("span", { class: "badge " + (cls || ""), text: text }); }
  function num(v, d) { return v === null || v === undefined ? "–" : Number(v).toFixed(d === undefined ? 2 : d); }
  function outcome(s) { return s === 1 ? badge("success", "ok") : s === 0 ? badge("failure", "bad") : null; }
  function textBlock(label, text, cls) {
    return h("div", { class: "field " + (cls || "") }, h("div", { class: "label", text: label }),
      h("div", { class: "text", text: text === "" || text === null || text === undefined ? "(empty)" : text }));
  }

  // -- routing ---------------------------------------------------------------------------------------------
  var state = { tab: "overview", synthKey: null, evalKey: null, sel: { synth: 0, eval: 0 }, step: null };
  function route() {
    var parts = decodeURIComponent(location.hash.replace(/^#/, "")).split("/");
    var tab = parts[0] || "overview";
    if (["overview", "synth", "eval", "help"].indexOf(tab) < 0) tab = "overview";
    showTab(tab);
    if (tab === "synth") {
      if (parts.length >= 3) openSynth(parts[1], Number(parts[2]), parts.length >= 4 ? Number(parts[3]) : null);
      else showSynthList();
    } else if (tab === "eval") {
      if (parts.length >= 2 && parts[1] !== "") openEval(Number(parts[1]));
      else showEvalList();
    }
  }
  function showTab(tab) {
    state.tab = tab;
    ["overview", "synth", "eval", "help"].forEach(function (t) { $("tab-" + t).hidden = t !== tab; });
    Array.prototype.forEach.call(document.querySelectorAll("#tabs a"), function (a) {
      a.classList.toggle("active", a.getAttribute("data-tab") === tab);
    });
  }

  // -- synthesis list ----------------------------------------------------------------------------------------
  // item rows: [i, task, steps, deliberated, synthesis failed or fallback, success (1/0/-1), reward, shape]
  var synthPage = 0;
  function source(id) {
    return (INDEX.synth || []).filter(function (s) { return s.id === id; })[0] || null;
  }
  function currentSource() {
    var sel = $("s-source");
    return source(sel.value) || (INDEX.synth || [])[0] || null;
  }
  function synthFiltered() {
    var src = currentSource();
    if (!src) return [];
    var q = $("s-search").value.trim().toLowerCase();
    var d = $("s-delib").value, f = $("s-fallback").value, o = $("s-outcome").value;
    return src.items.filter(function (it) {
      if (q && String(it[1]).toLowerCase().indexOf(q) < 0) return false;
      if (d === "yes" && !(it[3] > 0)) return false;
      if (d === "no" && it[3] > 0) return false;
      if (f === "yes" && !(it[4] > 0)) return false;
      if (f === "no" && it[4] > 0) return false;
      if (o !== "" && String(it[5]) !== o) return false;
      return true;
    });
  }
  function showSynthList() {
    state.synthKey = null;
    $("synth-detail").hidden = true;
    $("synth-list").hidden = false;
    $("synth-filters").hidden = false;
    renderSynthList();
  }
  function renderSynthList() {
    var list = clear($("synth-list"));
    var src = currentSource();
    if (!src) {
      list.appendChild(h("p", { class: "note", text: "This folder has no synthesis (no iterK/synthesis.units.jsonl or iterK/pairs.jsonl)." }));
      $("s-count").textContent = "";
      return;
    }
    var items = synthFiltered();
    var pages = Math.max(1, Math.ceil(items.length / PAGE));
    synthPage = Math.min(synthPage, pages - 1);
    var shown = items.slice(synthPage * PAGE, (synthPage + 1) * PAGE);
    $("s-count").textContent = items.length + " of " + src.items.length + (src.kind === "pairs" ? " pairs" : " units");
    var head = src.kind === "pairs" ? ["#", "pair id", "chosen steps", "", "", "", "chosen reward"]
      : ["#", "task", "steps", "deliberated", "failed / fallback", "outcome", "reward"];
    var tbody = h("tbody");
    shown.forEach(function (it, n) {
      var href = "#synth/" + src.id + "/" + it[0];
      var tr = h("tr", { class: "row", "data-href": href, onclick: function () { location.hash = href; } },
        h("td", { class: "r muted", text: it[0] }),
        h("td", {}, h("a", { href: href, text: it[1] })),
        h("td", { class: "r", text: it[2] === null || it[2] === undefined ? "–" : it[2] }),
        h("td", { class: "r" }, src.kind === "pairs" ? "" : it[3] > 0 ? badge(it[3] + " deliberated", "delib") : "0"),
        h("td", { class: "r" }, src.kind === "pairs" ? "" : it[4] > 0 ? badge(it[4] + " failed / fallback", "warn") : "0"),
        h("td", {}, outcome(it[5])),
        h("td", { class: "r", text: num(it[6]) }));
      tbody.appendChild(tr);
    });
    list.appendChild(h("div", { class: "scroll" }, h("table", { class: "rows" },
      h("thead", {}, h("tr", {}, head.map(function (x, n) { return h("th", { class: n === 1 || n === 5 ? "" : "r", text: x }); }))), tbody)));
    list.appendChild(pager(synthPage, pages, items.length, function (p) { synthPage = p; state.sel.synth = 0; renderSynthList(); }));
    state.sel.synth = Math.min(state.sel.synth, Math.max(0, shown.length - 1));
    markSel("synth-list", state.sel.synth);
  }
  function pager(page, pages, total, go) {
    if (pages <= 1) return h("div", { class: "pager muted", text: total + " shown" });
    return h("div", { class: "pager" },
      h("button", { type: "button", disabled: page === 0, onclick: function () { go(page - 1); }, text: "← previous" }),
      h("span", { class: "muted", text: " rows " + (page * PAGE + 1) + "–" + Math.min(total, (page + 1) * PAGE) + " of " + total + " " }),
      h("button", { type: "button", disabled: page >= pages - 1, onclick: function () { go(page + 1); }, text: "next →" }));
  }
  function markSel(listId, i) {
    var rows = document.querySelectorAll("#" + listId + " tr.row");
    Array.prototype.forEach.call(rows, function (r, n) { r.classList.toggle("sel", n === i); });
    if (rows[i] && rows[i].scrollIntoView) rows[i].scrollIntoView({ block: "nearest" });
  }

  // -- synthesis detail --------------------------------------------------------------------------------------
  function openSynth(sid, i, step) {
    var src = source(sid);
    var box = $("synth-detail");
    $("synth-list").hidden = true;
    $("synth-filters").hidden = true;
    box.hidden = false;
    if (!src) { clear(box).appendChild(h("p", { class: "note", text: "No such synthesis source: " + sid })); return; }
    var key = sid + "/" + i;
    if (state.synthKey === key && box.getAttribute("data-loaded") === key) { selectStep(step, true); return; }
    state.synthKey = key;
    box.removeAttribute("data-loaded");
    clear(box).appendChild(h("p", { class: "muted", text: "loading…" }));
    var chunkKey = src.kind === "pairs" ? sid + "/" + Math.floor(i / src.per_chunk) : key;
    load(chunkKey).then(function (data) {
      if (state.synthKey !== key) return;
      clear(box);
      box.appendChild(backBar("#synth", "← " + src.run + " iteration " + src.iteration + " (" + src.method + ")", prevNextSynth(src, i)));
      if (src.kind === "pairs") renderPair(box, data[i % src.per_chunk], i);
      else if (data.shape === "sand") renderSandUnit(box, src, i, data);
      else renderGeneric(box, data);
      box.setAttribute("data-loaded", key);
      document.body.setAttribute("data-loaded", key);
      selectStep(step, true);
    }, function (err) { clear(box).appendChild(h("p", { class: "note", text: String(err.message || err) })); });
  }
  function prevNextSynth(src, i) {
    var items = synthFiltered().map(function (it) { return it[0]; });
    var at = items.indexOf(i);
    return { prev: at > 0 ? "#synth/" + src.id + "/" + items[at - 1] : null,
             next: at >= 0 && at < items.length - 1 ? "#synth/" + src.id + "/" + items[at + 1] : null };
  }
  function backBar(href, text, pn) {
    return h("div", { class: "backbar" }, h("a", { href: href, text: text, class: "back" }),
      h("span", { class: "spacer" }),
      pn.prev ? h("a", { href: pn.prev, text: "← previous", id: "prev-item" }) : null, " ",
      pn.next ? h("a", { href: pn.next, text: "next →", id: "next-item" }) : null);
  }
  function pills(obj) {
    return h("div", { class: "pills" }, Object.keys(obj || {}).map(function (k) {
      var v = obj[k];
      return typeof v === "object" && v !== null ? null : h("span", { class: "pill" }, h("span", { class: "muted", text: k + " " }), String(v));
    }));
  }
  function renderSandUnit(box, src, i, data) {
    var t = data.trajectory;
    box.appendChild(h("h2", {}, t.task_id, " ", outcome(t.success ? 1 : 0)));
    var nFailed = Object.keys(data.records).filter(function (k) { return data.records[k].failed; }).length;
    box.appendChild(h("p", { class: "muted", text: "unit " + data.unit + " · reward " + num(t.reward) + " · " + t.steps.length + " steps · " + (Object.keys(data.records).length - nFailed) + " deliberated" + (nFailed ? " · " + nFailed + " synthesis failed (expert thought kept)" : "") }));
    box.appendChild(pills(data.stats));
    box.appendChild(h("details", {}, h("summary", { text: "Instruction and task" }),
      textBlock("instruction", t.instruction), textBlock("task", t.task)));
    var steps = h("div", { class: "steps", id: "steps" });
    t.steps.forEach(function (st, n) { steps.appendChild(renderStep(src, i, data, st, n)); });
    box.appendChild(h("h3", { text: "Steps (the trajectory trained on)" }));
    box.appendChild(steps);
    box.appendChild(renderTarget(data.target));
    if (data.extra && Object.keys(data.extra).length) box.appendChild(h("details", {}, h("summary", { text: "Other fields of the unit" }), tree(data.extra, 0)));
  }
  function renderStep(src, i, data, st, n) {
    var rec = data.records[String(n)];
    var status = rec && rec.synthesis ? rec.synthesis.status : null;
    var href = "#synth/" + src.id + "/" + i + "/" + n;
    var head = h("a", { class: "stephead", href: href },
      h("span", { class: "stepno", text: "step " + n }), " ", h("code", { text: st.action || "(no action)" }), " ",
      rec && !rec.failed ? badge("deliberated", "delib") : badge("not deliberated", "plain"),
      status === "failed" ? badge("synthesis failed", "warn") : status === "fallback" ? badge("fallback", "warn") : status === "retried" ? badge("retried", "warn") : null);
    var card = h("div", { class: "step" + (rec ? " has-rec" : ""), id: "step-" + n, "data-step": n, tabindex: "-1" }, head);
    var body = h("div", { class: "stepbody" });
    var delib = rec && !rec.failed;
    body.appendChild(textBlock(delib ? "thought (synthesized deliberation, trained on)" : rec ? "thought (the expert's, kept: the synthesis failed)" : "thought", st.thought, delib ? "thought delib-thought" : "thought"));
    body.appendChild(textBlock("observation", st.observation, "obs"));
    if (rec) body.appendChild(renderRecord(rec, n, data.target));
    else body.appendChild(h("p", { class: "muted small", text: "Not deliberated: the detector said no, or the samples held fewer than two distinct valid actions. Detector scores are recorded for deliberated steps only." }));
    card.appendChild(body);
    return card;
  }
  function renderRecord(rec, n, target) {
    var wrap = h("div", { class: "record" });
    var s = rec.samples || {};
    wrap.appendChild(h("div", { class: "pills" },
      h("span", { class: "pill" }, h("span", { class: "muted", text: "samples N " }), s.n === null || s.n === undefined ? "?" : String(s.n)),
      h("span", { class: "pill" }, h("span", { class: "muted", text: "valid " }), String(s.valid)),
      h("span", { class: "pill" }, h("span", { class: "muted", text: "invalid " }), s.invalid === null || s.invalid === undefined ? "?" : String(s.invalid)),
      h("span", { class: "pill" }, h("span", { class: "muted", text: "detector score " }), num(rec.detector_score)),
      h("span", { class: "pill" }, h("span", { class: "muted", text: "decision " }), "deliberate")));
    var cands = rec.candidates || [];
    var tb = h("tbody");
    cands.forEach(function (c) {
      tb.appendChild(h("tr", { class: "candidate" }, h("td", {}, h("code", { text: c.action })),
        h("td", { class: "r", text: c.count }), h("td", {}, c.is_expert ? badge("expert", "expert") : ""),
        h("td", { class: "small", text: c.thought || "" })));
    });
    wrap.appendChild(h("h4", { text: "Candidates (" + cands.length + " distinct)" }));
    wrap.appendChild(h("div", { class: "scroll" }, h("table", { class: "cands" },
      h("thead", {}, h("tr", {}, h("th", { text: "action" }), h("th", { text: "of the samples" }), h("th", { text: "" }), h("th", { text: "the sample's thought" }))), tb)));
    var rollouts = rec.rollouts || [], critiques = rec.critiques || [];
    var grid = h("div", { class: "cgrid" });
    cands.forEach(function (c, k) {
      var ro = rollouts.filter(function (r) { return r.candidate === c.action; })[0] || rollouts[k];
      var cr = critiques.filter(function (r) { return r.candidate === c.action; })[0] || critiques[k];
      var col = h("div", { class: "cand-col" }, h("h5", {}, h("code", { text: c.action }), " ", c.is_expert ? badge("expert", "expert") : null));
      if (ro) {
        var rt = h("tbody");
        (ro.steps || []).forEach(function (rs, m) {
          rt.appendChild(h("tr", {}, h("td", { class: "r muted", text: m }), h("td", {}, h("code", { text: rs.action || "(none)" })),
            h("td", { class: "small", text: rs.thought || "" }), h("td", { class: "small obs", text: rs.observation || "" })));
        });
        col.appendChild(h("div", { class: "rollout" }, h("div", { class: "label" }, "rollout: ", outcome(ro.success ? 1 : 0), " reward " + num(ro.reward) + (ro.done ? " · episode over" : " · cut at the rollout cap") + (ro.error ? " · error: " : ""), ro.error ? h("span", { text: ro.error }) : null),
          h("div", { class: "scroll" }, h("table", { class: "rsteps" }, h("thead", {}, h("tr", {}, h("th", { text: "#" }), h("th", { text: "action" }), h("th", { text: "thought" }), h("th", { text: "observation" }))), rt))));
      } else col.appendChild(h("p", { class: "muted small", text: "no rollout (the critic needs none)" }));
      if (cr) col.appendChild(textBlock("critique (base model)" + (cr.rollout_reward !== null && cr.rollout_reward !== undefined ? " · rollout reward " + num(cr.rollout_reward) : ""), cr.text, "critique"));
      grid.appendChild(col);
    });
    wrap.appendChild(h("h4", { text: "Rollouts and critiques" }));
    wrap.appendChild(grid);
    var syn = rec.synthesis || {};
    wrap.appendChild(h("h4", {}, "Deliberation ", syn.status === "failed" ? badge("failed the check: not trained on", "warn") : syn.status === "fallback" ? badge("fallback (not model-written)", "warn") : badge(syn.status === "retried" ? "model-written, after a retry" : "model-written", "ok")));
    wrap.appendChild(h("p", { class: "muted small", text: "attempts " + (syn.attempts || 1) + " · " + (rec.synthesis_tokens === null || rec.synthesis_tokens === undefined ? (String(syn.thought || "").split(/\s+/).filter(Boolean).length + " words (no tokenizer)") : rec.synthesis_tokens + " tokens") }));
    wrap.appendChild(textBlock("synthesized thought", syn.thought, "deliberation"));
    wrap.appendChild(textBlock("the expert's original thought", rec.expert_thought, "muted-block"));
    if (target && target.spans) {
      var turn = target.first_step_turn + n;
      wrap.appendChild(h("p", { class: "small" }, h("a", { href: "#", onclick: function (e) { e.preventDefault(); var el = document.getElementById("tgt-turn-" + turn); if (el) { el.scrollIntoView({ block: "center" }); el.classList.add("flash"); } }, text: "show this step in the training target ↓" })));
    }
    return wrap;
  }
  function renderTarget(target) {
    var sec = h("div", { class: "target", id: "target" }, h("h3", { text: "Training target" }));
    if (!target) { sec.appendChild(h("p", { class: "muted", text: "No training target for this unit." })); return sec; }
    if (target.error) sec.appendChild(h("p", { class: "note", text: target.error }));
    if (target.spans) {
      sec.appendChild(h("p", { class: "muted small" }, "Rendered with the model's own chat template (", h("code", { text: target.template }),
        "): " + target.tokens + " tokens, " + target.trained + " trained. ", h("span", { class: "tok m1", text: "trained (loss)" }), " ",
        h("span", { class: "tok m0", text: "context (masked out)" }), " ", h("span", { class: "tok m2", text: "cut by max_length" })));
      var pre = h("pre", { class: "rendered" });
      var turn = -1, prevTrained = false;
      target.spans.forEach(function (sp) {
        var trained = sp[1] === 1 || sp[1] === 2;
        if (trained && !prevTrained) turn += 1;
        prevTrained = trained;
        pre.appendChild(h("span", { class: "tok m" + sp[1], id: trained && !document.getElementById("tgt-turn-" + turn) ? "tgt-turn-" + turn : null, text: sp[0] }));
      });
      sec.appendChild(pre);
    } else if (target.chat) {
      var list = h("div", { class: "chat" });
      target.chat.forEach(function (m) {
        list.appendChild(h("div", { class: "turn " + m.role }, h("div", { class: "label", text: m.role + (m.role === "assistant" ? " (trained)" : "") }), h("div", { class: "text", text: m.content })));
      });
      sec.appendChild(list);
    }
    return sec;
  }
  function selectStep(step, scroll) {
    state.step = step;
    var cards = document.querySelectorAll("#synth-detail .step");
    Array.prototype.forEach.call(cards, function (c) {
      var on = step !== null && Number(c.getAttribute("data-step")) === step;
      c.classList.toggle("sel", on);
      c.classList.toggle("open", on);
    });
    if (step !== null && scroll) {
      var el = document.getElementById("step-" + step);
      if (el) { el.scrollIntoView({ block: "start" }); el.focus({ preventScroll: true }); }
    }
  }
  function renderPair(box, pair, i) {
    if (!pair) { box.appendChild(h("p", { class: "note", text: "pair " + i + " not found" })); return; }
    box.appendChild(h("h2", { text: "pair " + (pair.id !== undefined ? pair.id : i) }));
    var known = { prompt: 1, chosen: 1, rejected: 1 };
    var rest = {};
    Object.keys(pair).forEach(function (k) { if (!known[k]) rest[k] = pair[k]; });
    box.appendChild(tree(rest, 0));
    function messages(ms) {
      if (!Array.isArray(ms)) return tree(ms, 0);
      return h("div", { class: "chat" }, ms.map(function (m) {
        return m && typeof m === "object" ? h("div", { class: "turn " + (m.role || "") }, h("div", { class: "label", text: m.role || "" }), h("div", { class: "text", text: m.content === undefined ? JSON.stringify(m) : m.content })) : h("div", { class: "text", text: String(m) });
      }));
    }
    var prompt = pair.prompt;
    box.appendChild(h("details", {}, h("summary", { text: "prompt (" + (Array.isArray(prompt) ? prompt.length + " messages" : typeof prompt) + ")" }), messages(prompt)));
    box.appendChild(h("div", { class: "cgrid" }, h("div", { class: "cand-col" }, h("h4", { text: "chosen" }), messages(pair.chosen)),
      h("div", { class: "cand-col" }, h("h4", { text: "rejected" }), messages(pair.rejected))));
  }
  function renderGeneric(box, data) {
    box.appendChild(h("h2", { text: String(data.task_id) }));
    box.appendChild(h("p", { class: "muted", text: "unit " + data.unit + " · this method's unit is shown as stored" }));
    if (data.data && data.data.stats) box.appendChild(pills(data.data.stats));
    box.appendChild(tree(data.data, 0));
  }
  function tree(v, depth) {
    if (v === null || typeof v !== "object") {
      return h("span", { class: "leaf " + (typeof v), text: v === null ? "null" : typeof v === "string" ? v : String(v) });
    }
    var keys = Array.isArray(v) ? v.map(function (_, i) { return i; }) : Object.keys(v);
    var box = h("div", { class: "tree" });
    keys.slice(0, 200).forEach(function (k) {
      var x = v[k];
      if (x !== null && typeof x === "object") {
        var size = Array.isArray(x) ? "[" + x.length + "]" : "{" + Object.keys(x).length + "}";
        box.appendChild(h("details", { open: depth < 3 }, h("summary", {}, h("span", { class: "key", text: String(k) }), " ", h("span", { class: "muted", text: size })), tree(x, depth + 1)));
      } else box.appendChild(h("div", { class: "kv" }, h("span", { class: "key", text: String(k) + ": " }), tree(x, depth + 1)));
    });
    if (keys.length > 200) box.appendChild(h("div", { class: "muted", text: "… " + (keys.length - 200) + " more" }));
    return box;
  }

  // -- evaluation --------------------------------------------------------------------------------------------
  // task rows: [i, split, task, band, [per series: [reward, success, steps, deliberated] or null]]
  var evalPage = 0;
  function evalFiltered() {
    var ev = INDEX.eval;
    var split = $("e-split").value, q = $("e-search").value.trim().toLowerCase();
    var o = $("e-outcome").value, d = $("e-delib").value, differ = $("e-differ").checked;
    return ev.tasks.filter(function (t) {
      if (split && t[1] !== split) return false;
      if (q && String(t[2]).toLowerCase().indexOf(q) < 0) return false;
      var got = t[4].filter(function (x) { return x; });
      var wins = got.filter(function (x) { return x[1] === 1; }).length;
      if (o === "all1" && wins !== got.length) return false;
      if (o === "some1" && wins === 0) return false;
      if (o === "all0" && wins !== 0) return false;
      var delib = got.some(function (x) { return x[3] > 0; });
      if (d === "yes" && !delib) return false;
      if (d === "no" && delib) return false;
      if (differ) {
        var same = got.every(function (x) { return x[1] === got[0][1] && x[0] === got[0][0]; });
        if (got.length < 2 || same) return false;
      }
      return true;
    });
  }
  function showEvalList() {
    state.evalKey = null;
    $("eval-detail").hidden = true;
    $("eval-list").hidden = false;
    $("eval-filters").hidden = false;
    renderEvalList();
  }
  function renderEvalList() {
    var ev = INDEX.eval, list = clear($("eval-list"));
    if (!ev.tasks.length) {
      list.appendChild(h("p", { class: "note", text: "Nothing evaluated here yet (no eval/<model>/<split>.units.jsonl)." }));
      $("e-count").textContent = "";
      return;
    }
    var items = evalFiltered();
    var pages = Math.max(1, Math.ceil(items.length / PAGE));
    evalPage = Math.min(evalPage, pages - 1);
    var shown = items.slice(evalPage * PAGE, (evalPage + 1) * PAGE);
    $("e-count").textContent = items.length + " of " + ev.tasks.length + " tasks";
    var head = h("tr", {}, h("th", { text: "split" }), h("th", { text: "task" }), h("th", { text: "band" }),
      ev.series.map(function (s) { return h("th", { text: s.label }); }));
    var tbody = h("tbody");
    shown.forEach(function (t) {
      var href = "#eval/" + t[0];
      tbody.appendChild(h("tr", { class: "row", "data-href": href, onclick: function () { location.hash = href; } },
        h("td", { text: t[1] }), h("td", {}, h("a", { href: href, text: t[2] })), h("td", { class: "muted", text: t[3] || "" }),
        t[4].map(function (x) {
          if (!x) return h("td", { class: "muted", text: "–" });
          return h("td", { class: "ep " + (x[1] ? "win" : "lose") }, x[1] ? "✓ " : "✗ ", num(x[0]), h("span", { class: "muted", text: " · " + x[2] + " steps" }), x[3] > 0 ? badge(x[3] + " delib", "delib") : null);
        })));
    });
    list.appendChild(h("div", { class: "scroll" }, h("table", { class: "rows" }, h("thead", {}, head), tbody)));
    list.appendChild(pager(evalPage, pages, items.length, function (p) { evalPage = p; state.sel.eval = 0; renderEvalList(); }));
    state.sel.eval = Math.min(state.sel.eval, Math.max(0, shown.length - 1));
    markSel("eval-list", state.sel.eval);
  }
  function openEval(i) {
    var box = $("eval-detail"), ev = INDEX.eval;
    $("eval-list").hidden = true;
    $("eval-filters").hidden = true;
    box.hidden = false;
    var key = "e/" + i;
    if (state.evalKey === key && box.getAttribute("data-loaded") === key) return;
    state.evalKey = key;
    box.removeAttribute("data-loaded");
    clear(box).appendChild(h("p", { class: "muted", text: "loading…" }));
    load(key).then(function (data) {
      if (state.evalKey !== key) return;
      clear(box);
      var ids = evalFiltered().map(function (t) { return t[0]; }), at = ids.indexOf(i);
      box.appendChild(backBar("#eval", "← all tasks", { prev: at > 0 ? "#eval/" + ids[at - 1] : null, next: at >= 0 && at < ids.length - 1 ? "#eval/" + ids[at + 1] : null }));
      box.appendChild(h("h2", {}, data.task_id, " ", h("span", { class: "muted", text: data.split + (data.band ? " · " + data.band : "") })));
      var first = ev.series.map(function (s) { return data.episodes[String(s.id)]; }).filter(Boolean)[0];
      if (first) box.appendChild(h("details", {}, h("summary", { text: "Task" }), textBlock("task", first.task)));
      var grid = h("div", { class: "episodes" });
      ev.series.forEach(function (s) {
        var ep = data.episodes[String(s.id)];
        var col = h("div", { class: "episode" }, h("h4", { text: s.label }));
        if (!ep) { col.appendChild(h("p", { class: "muted", text: "not evaluated on this task" })); grid.appendChild(col); return; }
        var nd = ep.steps.filter(function (x) { return x.deliberated; }).length;
        col.appendChild(h("p", { class: "small" }, outcome(ep.success ? 1 : 0), " reward " + num(ep.reward) + " · " + ep.steps.length + " steps · " + nd + " deliberating · " + ep.completion_tokens + " generated tokens"));
        ep.steps.forEach(function (st, n) {
          col.appendChild(h("div", { class: "estep" + (st.deliberated ? " delib" : "") },
            h("div", { class: "label" }, "step " + n + " ", h("code", { text: st.action || "(no action)" }), " ", st.deliberated ? badge("deliberated", "delib") : null),
            st.thought ? h("div", { class: "text small thought", text: st.thought }) : null,
            h("div", { class: "text small obs", text: st.observation })));
        });
        grid.appendChild(col);
      });
      box.appendChild(grid);
      box.setAttribute("data-loaded", key);
      document.body.setAttribute("data-loaded", key);
    }, function (err) { clear(box).appendChild(h("p", { class: "note", text: String(err.message || err) })); });
  }

  // -- keys --------------------------------------------------------------------------------------------------
  function onKey(e) {
    var tag = (e.target && e.target.tagName) || "";
    var typing = tag === "INPUT" || tag === "SELECT" || tag === "TEXTAREA";
    if (e.key === "Escape") {
      if (typing) { e.target.blur(); return; }
      if (state.tab === "synth" && state.synthKey) location.hash = "#synth";
      else if (state.tab === "eval" && state.evalKey) location.hash = "#eval";
      return;
    }
    if (typing || e.ctrlKey || e.metaKey || e.altKey) return;
    var k = e.key;
    if (k === "1") location.hash = "#overview";
    else if (k === "2") location.hash = "#synth";
    else if (k === "3") location.hash = "#eval";
    else if (k === "?") location.hash = "#help";
    else if (k === "/") {
      var s = state.tab === "eval" ? $("e-search") : $("s-search");
      if (state.tab !== "synth" && state.tab !== "eval") location.hash = "#synth";
      e.preventDefault();
      if (state.tab === "synth" && state.synthKey) location.hash = "#synth";
      if (state.tab === "eval" && state.evalKey) location.hash = "#eval";
      setTimeout(function () { s.focus(); }, 0);
    } else if (state.tab === "synth" && !state.synthKey || state.tab === "eval" && !state.evalKey) {
      var which = state.tab, listId = which + "-list";
      var rows = document.querySelectorAll("#" + listId + " tr.row");
      if (k === "j" || k === "ArrowDown") { state.sel[which] = Math.min(rows.length - 1, state.sel[which] + 1); markSel(listId, state.sel[which]); e.preventDefault(); }
      else if (k === "k" || k === "ArrowUp") { state.sel[which] = Math.max(0, state.sel[which] - 1); markSel(listId, state.sel[which]); e.preventDefault(); }
      else if (k === "Enter" && rows[state.sel[which]]) location.hash = rows[state.sel[which]].getAttribute("data-href");
    } else if (state.tab === "synth" && state.synthKey) {
      var cards = Array.prototype.slice.call(document.querySelectorAll("#synth-detail .step"));
      var cur = state.step === null ? -1 : state.step, base = "#synth/" + state.synthKey + "/";
      var pick = null;
      if (k === "j") pick = Math.min(cards.length - 1, cur + 1);
      else if (k === "k") pick = Math.max(0, cur - 1);
      else if (k === "n" || k === "p") {
        var delib = cards.filter(function (c) { return c.classList.contains("has-rec"); }).map(function (c) { return Number(c.getAttribute("data-step")); });
        var cand = k === "n" ? delib.filter(function (x) { return x > cur; })[0] : delib.filter(function (x) { return x < cur; }).pop();
        if (cand !== undefined) pick = cand;
        else { var a = document.getElementById(k === "n" ? "next-item" : "prev-item"); if (a) location.hash = a.getAttribute("href"); }
      }
      if (pick !== null && pick >= 0) location.hash = base + pick;
    } else if (state.tab === "eval" && state.evalKey) {
      var link = document.getElementById(k === "n" || k === "j" ? "next-item" : k === "p" || k === "k" ? "prev-item" : "");
      if (link) location.hash = link.getAttribute("href");
    }
  }

  // -- start -------------------------------------------------------------------------------------------------
  SAND.index = function (data) {
    INDEX = data;
    var sel = $("s-source");
    (data.synth || []).forEach(function (s) {
      sel.appendChild(h("option", { value: s.id, text: s.run + " · iteration " + s.iteration + " · " + s.method + " · " + s.items.length + (s.kind === "pairs" ? " pairs" : " units") }));
    });
    var split = $("e-split");
    split.appendChild(h("option", { value: "", text: "all" }));
    (data.eval.splits || []).forEach(function (s) { split.appendChild(h("option", { value: s, text: s })); });
    ["s-source", "s-delib", "s-fallback", "s-outcome"].forEach(function (id) { $(id).addEventListener("change", function () { synthPage = 0; state.sel.synth = 0; renderSynthList(); }); });
    $("s-search").addEventListener("input", function () { synthPage = 0; state.sel.synth = 0; renderSynthList(); });
    ["e-split", "e-outcome", "e-delib", "e-differ"].forEach(function (id) { $(id).addEventListener("change", function () { evalPage = 0; state.sel.eval = 0; renderEvalList(); }); });
    $("e-search").addEventListener("input", function () { evalPage = 0; state.sel.eval = 0; renderEvalList(); });
    ["s-search", "e-search"].forEach(function (id) {
      $(id).addEventListener("keydown", function (e) {
        if (e.key === "Enter") { e.preventDefault(); var which = id[0] === "s" ? "synth" : "eval"; var r = document.querySelectorAll("#" + which + "-list tr.row")[0]; e.target.blur(); if (r) location.hash = r.getAttribute("data-href"); }
      });
    });
    document.addEventListener("keydown", onKey);
    window.addEventListener("hashchange", route);
    route();
    document.body.setAttribute("data-ready", "1");
    window.SAND_READY_MS = performance.now();
  };
})();
