// bertkit explorer: plain JS over the server's JSON API (no build step, no network beyond it).
"use strict";

const $ = (id) => document.getElementById(id);
let MODELS = [];

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v;
    else if (k === "style") node.style.cssText = v;
    else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
}

function currentModel() { return MODELS.find((m) => m.name === $("model").value); }

async function api(path, body) {
  $("error").hidden = true;
  const res = await fetch(path, body === undefined ? {} : {
    method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ model: $("model").value, ...body }),
  });
  const data = await res.json().catch(() => ({ detail: res.statusText }));
  if (!res.ok) throw new Error(`${res.status}: ${data.detail}`);
  return data;
}

function showError(err) {
  $("error").textContent = err.message;
  $("error").hidden = false;
}

// The texts an answer says were cut to what the model reads: a warning above the result.
function truncationNote(cut) {
  if (!cut || !cut.length) return [];
  const items = cut.map((c) => `#${c.index + 1}: ${c.kept} of ${c.tokens} tokens`).join(", ");
  return [el("p", { class: "warning truncation" },
    `Cut to the ${cut[0].kept} tokens this model reads (the rest did not count): ${items}`)];
}

// Empty a view's result: its fixed slots (class "slot") stay, emptied.
function clearOut(out) {
  const slots = out.querySelectorAll(":scope > .slot");
  if (slots.length) slots.forEach((s) => s.replaceChildren());
  else out.replaceChildren();
}

function wire(view, run) {
  const button = $(`run-${view}`);
  if (!button) return;
  button.addEventListener("click", async () => {
    button.disabled = true;
    const out = $(`out-${view}`);
    out.dataset.state = "running";
    try { await run(out); out.dataset.state = "done"; }
    catch (err) { clearOut(out); showError(err); out.dataset.state = "error"; }
    finally { button.disabled = false; }
  });
}

// ---- colours ------------------------------------------------------------------------------
const PALETTE = ["#ffd8a8", "#b2f2bb", "#a5d8ff", "#eebefa", "#ffec99", "#c3fae8", "#ffc9c9",
                 "#d0bfff", "#99e9f2", "#e9fac8"];
function heat(v) {  // 0..1 -> white..deep blue
  const t = Math.max(0, Math.min(1, v));
  return `rgb(${Math.round(255 - 208 * t)},${Math.round(255 - 144 * t)},${Math.round(255 - 32 * t)})`;
}

function bars(rows) {  // rows: [label, value 0..1, text]
  const best = Math.max(...rows.map((r) => r[1]));
  return el("div", { class: "bars" }, ...rows.map(([label, v, text]) => el("div", { class: "bar-row" },
    el("span", { class: "bar-label" }, label),
    el("div", { class: "bar" + (v === best ? " best" : ""), style: `width:${(100 * v).toFixed(1)}%` }),
    el("span", {}, text))));
}

// ---- (1) tokenization ----------------------------------------------------------------------
wire("tokens", async (out) => {
  const pair = $("tok-pair").value.trim();
  const r = await api("/tokenize", { text: $("tok-text").value, pair: pair || null });
  const pieces = r.tokens.map((t, i) => {
    const w = r.word_ids[i];
    const cls = ["piece"];
    if (r.special[i]) cls.push("special");
    if (r.unk[i]) cls.push("unk");
    if (r.type_ids[i] === 1) cls.push("segB");
    const colour = w === null ? "#eee" : PALETTE[(w + 3 * r.type_ids[i]) % PALETTE.length];
    return el("span", { class: cls.join(" "), style: `background:${colour}`, title: `word ${w}` },
      el("span", { class: "t" }, t), el("span", { class: "id" }, r.ids[i]),
      el("span", { class: "seg" }, r.type_ids[i] ? "B" : "A"));
  });
  const nUnk = r.unk.filter(Boolean).length;
  const words = new Set(r.word_ids.map((w, i) => w === null ? null : `${r.type_ids[i]}:${w}`));
  words.delete(null);
  out.replaceChildren(el("div", { class: "pieces" }, ...pieces),
    el("div", { class: "stats", id: "tok-stats" },
      `${r.tokens.length} tokens for ${words.size} words · ${nUnk} [UNK]`));
});

// ---- (2) fill-mask -------------------------------------------------------------------------
wire("fill", async (out) => {
  const r = await api("/fill-mask", { text: $("fill-text").value, top_k: Number($("fill-k").value) });
  out.replaceChildren(...r.masks.map((m, j) => el("div", { class: "mask-block" },
    el("h4", {}, `[MASK] #${j + 1} (token ${m.position})`),
    bars(m.predictions.map((p) => [p.token, p.probability, `${(100 * p.probability).toFixed(1)}%`])))));
});

// ---- (3) attention -------------------------------------------------------------------------
function drawMap(canvas, map, size) {
  const T = map.length;
  canvas.width = canvas.height = size;
  const ctx = canvas.getContext("2d");
  const cell = size / T;
  for (let i = 0; i < T; i++) {
    for (let j = 0; j < T; j++) {
      ctx.fillStyle = heat(map[i][j]);
      ctx.fillRect(j * cell, i * cell, Math.ceil(cell), Math.ceil(cell));
    }
  }
}

function largeMap(r, layer, head) {
  const map = r.attentions[layer][head];
  const T = r.tokens.length;
  const table = el("table", { class: "matrix", id: "att-table" });
  table.append(el("tr", {}, el("th", {}, ""), ...r.tokens.map((t) => el("th", {}, t))));
  for (let i = 0; i < T; i++) {
    table.append(el("tr", {}, el("th", {}, r.tokens[i]), ...map[i].map((v) => el("td", {
      style: `background:${heat(v)};color:${v > 0.55 ? "#fff" : "#223"}`, title: v.toFixed(3),
    }, v.toFixed(2)))));
  }
  return [el("h4", {}, `layer ${layer + 1}, head ${head + 1}: row token attends to column token`), table];
}

wire("attention", async () => {
  const pair = $("att-pair").value.trim();
  const r = await api("/attention", { text: $("att-text").value, pair: pair || null });
  const grid = $("att-grid");
  grid.style.gridTemplateColumns = `60px repeat(${r.heads}, 64px)`;
  const cells = [el("span", {}), ...Array.from({ length: r.heads },
    (_, h) => el("span", { class: "grid-label" }, `head ${h + 1}`))];
  r.attentions.forEach((heads, l) => {
    cells.push(el("span", { class: "grid-label" }, `layer ${l + 1}`));
    heads.forEach((map, h) => {
      const c = el("canvas", { "data-layer": l, "data-head": h, title: `layer ${l + 1} head ${h + 1}` });
      drawMap(c, map, 60);
      c.addEventListener("click", () => {
        grid.querySelectorAll("canvas.selected").forEach((x) => x.classList.remove("selected"));
        c.classList.add("selected");
        $("att-large").replaceChildren(...largeMap(r, l, h));
      });
      cells.push(c);
    });
  });
  grid.replaceChildren(...cells);
  $("att-large").replaceChildren(...largeMap(r, r.layers - 1, 0));
});

// ---- (4) one word across layers -----------------------------------------------------------
function lineChart(xs, ys, xlabel, ylabel) {
  const W = 560, H = 260, P = 44;
  const lo = Math.min(0, ...ys), hi = 1;
  const x = (v) => P + (W - 2 * P) * (v - xs[0]) / Math.max(1, xs[xs.length - 1] - xs[0]);
  const y = (v) => H - P - (H - 2 * P) * (v - lo) / (hi - lo);
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("width", W); svg.setAttribute("height", H); svg.id = "drift-chart";
  const add = (tag, attrs, text) => {
    const n = document.createElementNS(ns, tag);
    for (const [k, v] of Object.entries(attrs)) n.setAttribute(k, v);
    if (text !== undefined) n.textContent = text;
    svg.append(n);
    return n;
  };
  add("line", { x1: P, y1: H - P, x2: W - P, y2: H - P, stroke: "#888" });
  add("line", { x1: P, y1: P, x2: P, y2: H - P, stroke: "#888" });
  for (const t of [lo, (lo + hi) / 2, hi]) add("text", { x: 4, y: y(t) + 4 }, t.toFixed(2));
  xs.forEach((v) => add("text", { x: x(v) - 4, y: H - P + 16 }, v));
  add("text", { x: W / 2 - 30, y: H - 6 }, xlabel);
  add("text", { x: P, y: P - 10 }, ylabel);
  add("polyline", { points: xs.map((v, i) => `${x(v)},${y(ys[i])}`).join(" "), fill: "none",
                    stroke: "#2f6fdf", "stroke-width": 2.5 });
  xs.forEach((v, i) => add("circle", { cx: x(v), cy: y(ys[i]), r: 4, fill: "#2f6fdf", class: "pt" }));
  return svg;
}

wire("drift", async (out) => {
  const word = $("drift-word").value;
  const r = await api("/layers", { texts: [$("drift-a").value, $("drift-b").value], word });
  out.replaceChildren(lineChart(r.layers, r.cosine, "layer (0 = embeddings)", `cosine of "${word}"`),
    el("div", { class: "stats", id: "drift-stats" },
      `pieces: ${r.pieces.map((p) => p.join(" ")).join(" | ")} · cosine after the last layer: `
      + r.cosine[r.cosine.length - 1].toFixed(3)));
});

// ---- (5) sentence similarity --------------------------------------------------------------
wire("similarity", async (out) => {
  const texts = $("sim-texts").value.split("\n").map((t) => t.trim()).filter(Boolean);
  const r = await api("/similarity", { texts });
  const table = el("table", { class: "matrix", id: "sim-table" });
  table.append(el("tr", {}, el("th", {}, ""), ...texts.map((_, j) => el("th", {}, `#${j + 1}`))));
  r.matrix.forEach((row, i) => table.append(el("tr", {}, el("th", {}, `#${i + 1} ${texts[i]}`),
    ...row.map((v) => el("td", { style: `background:${heat(v)};color:${v > 0.6 ? "#fff" : "#223"}` },
      v.toFixed(3))))));
  out.replaceChildren(...truncationNote(r.truncated), table);
});

// ---- (6) fine-tuned prediction ------------------------------------------------------------
const PREDICT_FIELDS = {
  BertForSequenceClassification: [["text", "a text", "A gripping, beautifully acted film."],
                                  ["pair", "optional second text (pair tasks)", ""]],
  BertForTokenClassification: [["text", "a sentence", "John Smith flew from Paris to Berlin with Lufthansa."]],
  BertForQuestionAnswering: [["question", "question", "Where did John fly to?"],
                             ["context", "passage", "John Smith flew from Paris to Berlin on Monday."]],
  BertForMultipleChoice: [["context", "context", "She opened the umbrella"],
                          ["endings", "four endings, one per line",
                           "because it was raining.\nand ate it.\nto fly to the moon.\nthen sang loudly."]],
};

function setupPredict() {
  const m = currentModel();
  const fields = $("predict-fields");
  if (!m || !m.head) {
    $("predict-help").textContent = "Pick a fine-tuned model (bertkit finetune) to see its predictions.";
    fields.replaceChildren();
    $("run-predict").disabled = true;
    return;
  }
  $("run-predict").disabled = false;
  $("predict-help").textContent = `${m.name}: fine-tuned for ${m.task}` +
    (m.labels ? ` (labels: ${m.labels.map((l) => labelName(m, l)).join(", ")})` : "");
  const used = PREDICT_FIELDS[m.head].filter(([name]) => name !== "pair" || m.pairs !== false);
  fields.replaceChildren(...used.map(([name, placeholder, value]) =>
    name === "endings" || name === "context"
      ? el("textarea", { id: `predict-${name}`, rows: name === "endings" ? 4 : 3, placeholder })
      : el("input", { id: `predict-${name}`, placeholder })));
  used.forEach(([name, , value]) => { $(`predict-${name}`).value = value; });
}

// A label as people read it: "positive (1)" where the task names its labels, else as it is.
function labelName(m, label) {
  const name = m.label_names && m.label_names[label];
  return name ? `${name} (${label})` : label;
}

function highlight(text, spans, cls, label) {  // spans: [{start, end, type?}]
  const node = el("p", { class: "passage" });
  let pos = 0;
  for (const s of [...spans].sort((a, b) => a.start - b.start)) {
    node.append(text.slice(pos, s.start));
    const mark = el("span", { class: cls }, text.slice(s.start, s.end));
    if (label && s.type) mark.append(el("sub", {}, s.type));
    node.append(mark);
    pos = s.end;
  }
  node.append(text.slice(pos));
  return node;
}

function renderPrediction(m, record, p) {
  if (m.head === "BertForSequenceClassification") {
    if (p.scores === undefined) return el("div", { id: "pred-score" }, `score: ${p.score.toFixed(3)}`);
    return el("div", {}, el("h4", { id: "pred-label" }, `label: ${labelName(m, p.label)}`),
      bars(Object.entries(p.scores).map(([k, v]) => [labelName(m, k), v, `${(100 * v).toFixed(1)}%`])));
  }
  if (m.head === "BertForTokenClassification") {
    const spans = p.entities.filter((e) => e.start !== undefined);
    return el("div", {}, highlight(record.text, spans, "ent", true),
      el("div", { class: "stats", id: "pred-entities" }, `${p.entities.length} entities: `
        + p.entities.map((e) => `${e.text} (${e.type})`).join(", ")));
  }
  if (m.head === "BertForQuestionAnswering") {
    return el("div", {}, el("h4", { id: "pred-answer" }, `answer: ${p.answer || "(no answer)"}`),
      highlight(record.context, p.span ? [p.span] : [], "answer", false),
      el("div", { class: "stats" }, `null odds: ${p.null_odds.toFixed(3)} (below 0: an answer is likelier)`));
  }
  return el("div", {}, el("h4", { id: "pred-choice" }, `ending ${p.choice}: ${p.ending}`),
    bars(p.probabilities.map((v, i) => [`${i}: ${record.endings[i]}`, v, `${(100 * v).toFixed(1)}%`])));
}

wire("predict", async (out) => {
  const m = currentModel();
  const record = {};
  for (const [name] of PREDICT_FIELDS[m.head]) {
    if (!$(`predict-${name}`)) continue;  // a field this task does not read
    const v = $(`predict-${name}`).value;
    if (name === "endings") record.endings = v.split("\n").map((t) => t.trim()).filter(Boolean);
    else if (v.trim()) record[name] = v;
  }
  const r = await api("/predict", { inputs: [record] });
  const cut = r.predictions[0].truncated;
  out.replaceChildren(...truncationNote(cut && [{ index: 0, ...cut }]),
    renderPrediction(m, record, r.predictions[0]));
});

// ---- (7) architecture ---------------------------------------------------------------------
const fmt = (n) => n.toLocaleString("en-US");

function renderArch() {
  const m = currentModel();
  if (!m) return;
  const c = m.config, p = m.parameters;
  const H = c.hidden_size, N = c.num_attention_heads, L = c.num_hidden_layers;
  const D = H / N, I = c.intermediate_size;
  const block = (cls, title, ...lines) => el("div", { class: `block ${cls}` }, el("h3", {}, title),
    ...lines.map((l) => (l instanceof Node ? l : el("div", { class: "shape" }, l))));
  const heads = el("div", { class: "heads" },
    ...Array.from({ length: N }, (_, i) => el("span", { class: "head", title: `head ${i + 1}: D = ${D}` }, i + 1)));
  const parts = [
    block("", `Embeddings · ${fmt(p.embeddings)} parameters`,
      `word ${c.vocab_size} × ${H} + position ${c.max_position_embeddings} × ${H} + segment ${c.type_vocab_size} × ${H}`,
      `→ LayerNorm → (B, T, ${H})`),
    el("div", { class: "arrow" }, "↓"),
    block("layer", `${L} × encoder layer · ${fmt(p.layers)} parameters (${fmt(p.layers / L)} each)`,
      `self-attention: Q, K, V ${H} → 3 × ${H}; ${N} heads × D = ${D}; softmax(QKᵀ/√${D})V → (B, ${N}, T, ${D}) · ${fmt(p.per_layer.attention)}`,
      heads,
      `out ${H} → ${H}, + residual, LayerNorm`,
      `feed-forward: ${H} → ${I} (${c.hidden_act}) → ${H}, + residual, LayerNorm · ${fmt(p.per_layer.feed_forward)}`,
      `→ (B, T, ${H})`),
    el("div", { class: "arrow" }, "↓"),
  ];
  if (p.pooler) parts.push(block("", `Pooler · ${fmt(p.pooler)} parameters`, `tanh(dense(h[CLS])) → (B, ${H})`));
  const headNames = m.head ? [m.head] : m.heads;
  parts.push(block("", `Heads · ${fmt(p.heads)} parameters`,
    headNames.length ? headNames.join(", ") + (m.labels ? ` → labels: ${m.labels.join(", ")}` : "")
      : "none (an encoder: embeddings, attention, similarity)"));
  parts.push(el("div", { class: "stats", id: "arch-total" }, `total: ${fmt(p.total)} parameters`));
  $("out-arch").replaceChildren(el("div", { class: "arch" }, ...parts));
  $("out-arch").dataset.state = "done";
}

// ---- page -----------------------------------------------------------------------------------
function showView(view) {
  $("error").hidden = true;  // an error belongs to the view that made it
  document.querySelectorAll("#tabs button").forEach((b) => b.classList.toggle("active", b.dataset.view === view));
  document.querySelectorAll(".view").forEach((s) => { s.hidden = s.id !== `view-${view}`; });
  if (view === "arch") renderArch();
}

function onModelChange() {
  const m = currentModel();
  $("model-summary").textContent = m ? `${m.kind}${m.task ? " · " + m.task : ""} · ${m.config.num_hidden_layers} layers × `
    + `${m.config.num_attention_heads} heads · ${fmt(m.parameters.total)} parameters` : "";
  setupPredict();
  // results of the previous model would read as this one's: clear them
  document.querySelectorAll("[id^='out-']").forEach((out) => { if (out.id !== "out-arch") clearOut(out); });
  $("error").hidden = true;
  const fill = $("run-fill");
  if (fill && m) {
    const can = (m.heads || []).includes("mlm");
    fill.disabled = !can;
    fill.title = can ? "" : `${m.name} has no trained masked-LM head (a bertkit pretrain model has one)`;
  }
  if (!$("view-arch").hidden) renderArch();
}

async function init() {
  document.querySelectorAll("#tabs button").forEach((b) => b.addEventListener("click", () => showView(b.dataset.view)));
  $("model").addEventListener("change", onModelChange);
  document.addEventListener("keydown", (e) => {  // Enter in a field (Ctrl+Enter in a text box) runs its view
    const tag = e.target.tagName;
    if (e.key !== "Enter" || !(tag === "INPUT" || (tag === "TEXTAREA" && (e.ctrlKey || e.metaKey)))) return;
    const run = e.target.closest(".view")?.querySelector("button[id^='run-']");
    if (run && !run.disabled) { e.preventDefault(); run.click(); }
  });
  try {
    MODELS = (await api("/models")).models;
  } catch (err) { showError(err); return; }
  $("model").replaceChildren(...MODELS.map((m) => el("option", { value: m.name }, `${m.name}${m.task ? " (" + m.task + ")" : ""}`)));
  onModelChange();
  document.body.dataset.ready = "1";
}

init();
