// gpumem serve's page: a form over POST /v1/estimate, /v1/plan, /v1/oom
// and /v1/leak. Every figure shown comes from the service's reply; the
// page formats bytes as gpumem does (Bytes.Human) and draws SVG.
"use strict";

const $ = (id) => document.getElementById(id);
const SVGNS = "http://www.w3.org/2000/svg";

// The components of a peak, by level, as budget.Breakdown sums them:
// Allocated, then Reserved adds fragmentation, Device adds the CUDA
// context and paged optimizer state.
const LEVELS = [
  ["allocated", ["weights", "gradients", "optimizer", "master_weights", "activations", "attention", "transient", "logits",
    "kv_cache", "buffers", "extra_models", "workspace"]],
  ["reserved", ["fragmentation"]],
  ["device", ["context", "paged_optimizer"]],
];

// Request fields the form sets, with the estimate flags' defaults: a
// field at its default is left out of the request, the link and the
// command line.
const DEFAULTS = { batch: 1, seq: 2048, generate: 0, grad_accum: 1, optimizer: "adamw", attention: "sdpa",
  checkpointing: "none", gpus: 1 };
const INT_FIELDS = ["batch", "seq", "generate", "grad_accum", "lora_rank", "gpus", "zero", "tp", "pp", "target_batch"];
const BOOL_FIELDS = ["qlora", "train", "infer"];

// human formats bytes as gpumem's Bytes.Human: binary units, two decimals.
function human(b) {
  const units = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
  let v = Math.abs(b);
  if (v < 1024) return String(b) + " B";
  let i = -1;
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  if (Math.round(v * 100) / 100 >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  if (b < 0) v = -v;
  return v.toFixed(2) + " " + units[i];
}

function el(tag, attrs, text) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

function svg(tag, attrs, text) {
  const e = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

function bytesSpan(b, id) {
  const s = el("span", { "data-bytes": String(b) }, human(b));
  if (id) s.id = id;
  return s;
}

// api posts body to path and returns {ok, status, data}; signal cancels.
// A busy service (503 with Retry-After: no compute slot in time) is asked
// again after the time it gives, twice at most.
async function api(path, body, signal) {
  let r;
  for (let attempt = 0; ; attempt++) {
    r = await fetch(path, { method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body), signal });
    const after = Number(r.headers.get("Retry-After"));
    if (r.status !== 503 || !after || attempt >= 2) break;
    await new Promise((resolve, reject) => {
      const id = setTimeout(resolve, after * 1000);
      if (signal) signal.addEventListener("abort", () => { clearTimeout(id); reject(new DOMException("aborted", "AbortError")); }, { once: true });
    });
  }
  let data;
  try { data = await r.json(); } catch (e) { data = { error: "the service replied " + r.status + " without JSON" }; }
  return { ok: r.ok, status: r.status, data };
}

// showError shows a reply's error and marks the form control of its
// field, if the page has one.
function showError(box, data) {
  document.querySelectorAll("[aria-invalid=true]").forEach((e) => e.removeAttribute("aria-invalid"));
  if (!data) { box.hidden = true; box.textContent = ""; return; }
  let msg = data.error || String(data);
  if (data.field) {
    msg = data.field + ": " + msg;
    const base = data.field.startsWith("config") ? "config" : /^(safetensors|gguf)/.test(data.field) ? "ckpt-file" : data.field;
    const control = $(base) || (base === "qlora" || base === "lora_rank" ? $("finetune") : null) ||
      (["zero", "fsdp", "tp", "pp"].includes(base) ? $("layout") : null);
    if (control) { control.setAttribute("aria-invalid", "true"); control.setAttribute("aria-describedby", box.id); }
  }
  box.textContent = msg;
  box.hidden = false;
}

// ---- the job ----

function source() { return document.querySelector("input[name=source]:checked").value; }

// jobRequest reads the form into an estimate request; it throws
// {field, error} for input the page can tell is wrong before asking.
function jobRequest() {
  const req = {};
  if (source() === "checkpoint") {
    if (!ckpt) throw { field: "safetensors", error: "choose a .safetensors or .gguf file, or a catalog model" };
    req[ckpt.kind] = ckpt.b64;
    req[ckpt.kind + "_size"] = ckpt.size;
  } else if (source() === "config") {
    const text = $("config").value.trim();
    if (!text) throw { field: "config", error: "paste a config.json, or choose a catalog model" };
    try { req.config = JSON.parse(text); } catch (e) { throw { field: "config", error: "not JSON: " + e.message }; }
  } else {
    req.model = $("model").value;
  }
  const mode = $("mode").value;
  req.mode = mode;
  const runtime = $("runtime").value;
  if (runtime) req.runtime = runtime;
  if ($("precision").value) req.precision = $("precision").value;
  const num = (id) => {
    const raw = $(id).value.trim();
    const v = Number(raw);
    if (raw === "" || !Number.isInteger(v)) throw { field: id, error: JSON.stringify(raw) + " is not a whole number" };
    return v;
  };
  if (mode !== "load") {
    for (const f of ["batch", "seq"]) { const v = num(f); if (v !== DEFAULTS[f]) req[f] = v; }
    if ($("attention").value !== DEFAULTS.attention) req.attention = $("attention").value;
  }
  if (mode === "infer") { const g = num("generate"); if (g !== 0) req.generate = g; }
  if (mode === "train") {
    if ($("optimizer").value !== DEFAULTS.optimizer) req.optimizer = $("optimizer").value;
    if ($("checkpointing").value !== DEFAULTS.checkpointing) req.checkpointing = $("checkpointing").value;
    const a = num("grad_accum"); if (a !== 1) req.grad_accum = a;
    const ft = $("finetune").value;
    if (ft === "lora" || ft === "qlora") req.lora_rank = num("lora_rank");
    if (ft === "qlora") req.qlora = true;
  }
  if ($("gpu").value) req.gpu = $("gpu").value;
  const mem = $("memory").value.trim();
  if (mem) req.memory = mem;
  const gpus = num("gpus");
  if (gpus !== 1) req.gpus = gpus;
  switch ($("layout").value) {
    case "zero1": req.zero = 1; break;
    case "zero2": req.zero = 2; break;
    case "zero3": req.zero = 3; break;
    case "fsdp": req.fsdp = "full_shard"; break;
    case "tp": req.tp = gpus; break;
    case "pp": req.pp = gpus; break;
  }
  return req;
}

// setForm fills the form from a request (a shared link's).
function setForm(req) {
  if (req.file !== undefined) {
    // The link's job reads a checkpoint, which the link does not carry.
    document.querySelector("input[name=source][value=checkpoint]").checked = true;
    if (!ckpt || ckpt.name !== req.file) {
      ckpt = null;
      $("ckpt-status").textContent = "This link's job reads the checkpoint " + req.file + ": choose that file to see its figures.";
    }
  } else if (req.config !== undefined) {
    document.querySelector("input[name=source][value=config]").checked = true;
    $("config").value = typeof req.config === "string" ? req.config : JSON.stringify(req.config, null, 2);
  } else if (req.model) {
    document.querySelector("input[name=source][value=catalog]").checked = true;
    if (![...$("model").options].some((o) => o.value === req.model)) $("model").append(el("option", { value: req.model }, req.model));
    $("model").value = req.model;
  }
  $("mode").value = req.mode || (req.infer ? "infer" : "train");
  $("runtime").value = req.runtime || "";
  $("precision").value = req.precision || "";
  for (const f of ["batch", "seq", "generate", "grad_accum", "optimizer", "attention", "checkpointing", "gpus"]) {
    $(f).value = req[f] !== undefined ? req[f] : DEFAULTS[f];
  }
  $("finetune").value = req.qlora ? "qlora" : req.lora_rank ? "lora" : "full";
  if (req.lora_rank) $("lora_rank").value = req.lora_rank;
  if (req.gpu && ![...$("gpu").options].some((o) => o.value === req.gpu)) $("gpu").append(el("option", { value: req.gpu }, req.gpu));
  $("gpu").value = req.gpu || "";
  $("memory").value = req.memory || "";
  $("layout").value = req.zero ? "zero" + req.zero : req.fsdp ? "fsdp" : req.tp > 1 ? "tp" : req.pp > 1 ? "pp" : "";
  syncForm();
}

// syncForm shows the fields that apply to the mode and source.
function syncForm() {
  const mode = $("mode").value;
  document.querySelectorAll(".train-only").forEach((e) => { e.hidden = mode !== "train"; });
  document.querySelectorAll(".infer-only").forEach((e) => { e.hidden = mode !== "infer"; });
  const src = source();
  $("catalog-field").hidden = src !== "catalog";
  $("config-field").hidden = src !== "config";
  $("ckpt-field").hidden = src !== "checkpoint";
  $("lora_rank").disabled = $("finetune").value === "full";
}

// ---- the link and the command line ----

function toHash(req) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(req)) {
    // A checkpoint's header stays out of the link, which names the file.
    if (k === "safetensors" || k === "gguf") { q.set("file", ckpt ? ckpt.name : k); continue; }
    if (k === "safetensors_size" || k === "gguf_size") continue;
    q.set(k, typeof v === "object" ? JSON.stringify(v) : String(v));
  }
  return "#" + q.toString();
}

function fromHash(hash) {
  const q = new URLSearchParams(hash.replace(/^#/, ""));
  const req = {};
  for (const [k, v] of q) {
    if (k === "config") req.config = v;
    else if (INT_FIELDS.includes(k)) req[k] = Number(v);
    else if (BOOL_FIELDS.includes(k)) req[k] = v === "true";
    else req[k] = v;
  }
  return req;
}

// quote quotes a word for a POSIX shell when it needs it.
function quote(s) {
  s = String(s);
  return /^[A-Za-z0-9_.,:\/=@+%-]+$/.test(s) ? s : "'" + s.replace(/'/g, "'\\''") + "'";
}

// cli is the command line that asks what req asks: each request field
// is the flag of its name, "_" written "-" (the service's own mapping);
// mode is --train, --infer or --load; an inline config is --config
// config.json (the pasted text saved as that file).
function cli(command, req) {
  const words = ["gpumem", command];
  for (const [k, v] of Object.entries(req)) {
    if (k === "mode") { words.push("--" + v); continue; }
    if (k === "configs" || k === "series") continue;
    const flag = "--" + k.replace(/_/g, "-");
    if (k === "config") { words.push(flag, "config.json"); continue; }
    if (k === "safetensors" || k === "gguf") { words.push(flag, quote(ckpt ? ckpt.name : "model." + k)); continue; }
    if (k === "safetensors_size" || k === "gguf_size") continue;
    if (v === true) { words.push(flag); continue; }
    if (v === false) continue;
    words.push(flag, quote(v));
  }
  return words.join(" ");
}

let copiedTimer = 0;
async function copyText(text, what) {
  try {
    await navigator.clipboard.writeText(text);
    $("copied").textContent = "Copied " + what + ".";
  } catch (e) {
    // No clipboard (plain http on another host): select the text instead.
    $("copied").textContent = "Select and copy the " + what + " by hand.";
  }
  clearTimeout(copiedTimer);
  copiedTimer = setTimeout(() => { $("copied").textContent = ""; }, 4000);
}

// ---- estimate ----

let estimateCtl = null;
let lastEstimate = null;

async function runEstimate(opts) {
  let req;
  try { req = jobRequest(); } catch (e) { showError($("est-error"), e); return; }
  history.replaceState(null, "", toHash(req));
  if (estimateCtl) estimateCtl.abort();
  estimateCtl = new AbortController();
  const ctl = estimateCtl;
  $("run").disabled = true;
  try {
    const r = await api("/v1/estimate", req, ctl.signal);
    if (ctl.signal.aborted) return;
    if (!r.ok) { showError($("est-error"), r.data); $("est-result").hidden = true; return; }
    showError($("est-error"), null);
    lastEstimate = { req, data: r.data };
    drawEstimate(req, r.data);
    if (!opts || !opts.fromSlider) setSliders(req);
    scheduleLargest();
  } catch (e) {
    if (e.name !== "AbortError") showError($("est-error"), { error: "the service did not answer: " + e.message });
  } finally {
    if (ctl === estimateCtl) $("run").disabled = false;
  }
}

// levelParts splits the components into the three levels' stacks.
function levelParts(c) {
  const known = new Set(LEVELS.flatMap(([, names]) => names));
  const parts = [];
  let sum = 0;
  for (const [level, names] of LEVELS) {
    for (const n of names) if (c[n] > 0) parts.push({ name: n, bytes: c[n], level });
    if (level === "device") {
      for (const [n, b] of Object.entries(c)) if (!known.has(n) && b > 0) parts.push({ name: n, bytes: b, level });
    }
  }
  parts.forEach((p) => { sum += p.bytes; });
  return { parts, sum };
}

function drawEstimate(req, d) {
  $("est-result").hidden = false;
  const sum = $("est-summary");
  sum.textContent = "";
  sum.append("Peak ", bytesSpan(d.device_peak, "est-device"), " on the device (reserved ",
    bytesSpan(d.reserved_peak, "est-reserved"), ", allocated ", bytesSpan(d.allocated_peak, "est-allocated"),
    "), set by the ", el("span", { id: "est-phase" }, d.phase), ". ");
  if (d.device) {
    const usable = d.free - d.min_headroom;
    if (d.fits) {
      sum.append(el("span", { id: "est-fit", class: "yes" }, "Fits"), " on " + d.device + ": ",
        bytesSpan(usable - (d.required_peak || d.device_peak), "est-left"), " left of ", bytesSpan(usable), " usable (",
        bytesSpan(d.free), " free less ", bytesSpan(d.min_headroom), " headroom).");
    } else {
      sum.append(el("span", { id: "est-fit", class: "no" }, "Does not fit"), " on " + d.device + ": ",
        bytesSpan(d.shortfall, "est-shortfall"), " short of the ", bytesSpan(usable), " usable (",
        bytesSpan(d.free), " free less ", bytesSpan(d.min_headroom), " headroom).");
    }
  } else {
    sum.append("Choose a GPU or give the free memory to check the fit.");
  }
  if (d.host) sum.append(" Host memory: ", bytesSpan(d.host, "est-host"), ".");
  drawBars(d);
  const tb = $("est-table").tBodies[0];
  tb.textContent = "";
  for (const p of levelParts(d.components).parts) {
    const tr = el("tr", { "data-component": p.name });
    const th = el("th", { scope: "row" });
    th.append(el("span", { class: "swatch sw-" + swatchName(p.name), "aria-hidden": "true" }), p.name.replace(/_/g, " "));
    const td = el("td", { class: "num" });
    td.append(bytesSpan(p.bytes));
    tr.append(th, td, el("td", {}, p.level));
    tb.append(tr);
  }
  for (const extra of ["llamacpp", "vllm"]) {
    if (!d[extra]) continue;
    for (const [k, v] of Object.entries(d[extra])) {
      const tr = el("tr", {});
      tr.append(el("th", { scope: "row" }, extra + " " + k.replace(/_/g, " ")));
      const isBytes = /weights|kv$|host_kv|compute|context|requested|activations|non_torch|memory|page_bytes/.test(k) && typeof v === "number";
      const td = el("td", { class: "num" });
      if (isBytes) td.append(bytesSpan(v)); else td.textContent = String(v);
      tr.append(td, el("td", {}, extra));
      tb.append(tr);
    }
  }
  $("est-cli").textContent = cli("estimate", req);
}

function swatchName(n) {
  return LEVELS.some(([, names]) => names.includes(n)) ? n : "other";
}

function drawBars(d) {
  const box = $("est-bars");
  const W = Math.max(320, Math.round(box.getBoundingClientRect().width) || 720);
  const small = W < 500;
  const left = small ? 8 : 92, right = 12, barH = small ? 26 : 30, gap = small ? 44 : 26, top = 10;
  const levels = [["allocated", d.allocated_peak], ["reserved", d.reserved_peak], ["device", d.device_peak]];
  const H = top + levels.length * (barH + gap) + (small ? 8 : 0) + 38;
  box.setAttribute("viewBox", "0 0 " + W + " " + H);
  [...box.childNodes].forEach((n) => { if (n.nodeName !== "title" && n.nodeName !== "desc") n.remove(); });
  const usable = d.device ? d.free - d.min_headroom : 0;
  const max = Math.max(d.device_peak, usable, 1) * 1.04;
  const x = (b) => left + (W - left - right) * b / max;
  const { parts } = levelParts(d.components);
  const desc = [];
  levels.forEach(([level, total], i) => {
    const y = top + i * (barH + gap) + (small ? 18 : 0);
    const inLevel = parts.filter((p) => LEVELS.findIndex(([l]) => l === p.level) <= i);
    let at = 0;
    const g = svg("g", { "data-level": level });
    for (const p of inLevel) {
      const r = svg("rect", { x: x(at), y, width: Math.max(0, x(at + p.bytes) - x(at)), height: barH,
        class: "sw-" + swatchName(p.name), "data-component": p.name, "data-bytes": String(p.bytes) });
      r.append(svg("title", {}, p.name.replace(/_/g, " ") + " " + human(p.bytes)));
      g.append(r);
      at += p.bytes;
    }
    box.append(g);
    const label = level + " " + human(total);
    if (small) box.append(svg("text", { x: left, y: y - 5 }, label));
    else {
      box.append(svg("text", { x: left - 6, y: y + barH / 2 - 2, "text-anchor": "end" }, level));
      box.append(svg("text", { x: left - 6, y: y + barH / 2 + 12, "text-anchor": "end" }, human(total)));
    }
    desc.push(label);
  });
  const base = top + levels.length * (barH + gap) + (small ? 8 : 0);
  box.append(svg("line", { x1: left, x2: W - right, y1: base, y2: base, class: "axis" }));
  const step = niceStep(max / 1073741824) * 1073741824;
  for (let t = 0; t <= max; t += step) {
    box.append(svg("line", { x1: x(t), x2: x(t), y1: base, y2: base + 5, class: "axis" }));
    box.append(svg("text", { x: x(t), y: base + 18, "text-anchor": "middle" }, String(Math.round(t / 1073741824))));
  }
  box.append(svg("text", { x: W - right, y: base + 32, "text-anchor": "end" }, "GiB"));
  if (usable > 0) {
    box.append(svg("line", { x1: x(usable), x2: x(usable), y1: 2, y2: base, class: "limit" }));
    box.append(svg("text", { x: Math.min(x(usable) + 4, W - 120), y: base - 4, class: "limit-label" }, "usable " + human(usable)));
    desc.push("usable on " + d.device + " " + human(usable));
  }
  $("est-bars-desc").textContent = desc.join("; ");
}

function niceStep(range) {
  const raw = range / 6;
  const p = Math.pow(10, Math.floor(Math.log10(Math.max(raw, 1e-9))));
  for (const m of [1, 2, 5, 10]) if (m * p >= raw) return m * p;
  return 10 * p;
}

// ---- what-if ----

const SLIDERS = {
  batch: { toValue: (v) => Math.max(1, Math.round(Math.pow(2, v))), min: 0, max: 10 },
  seq: { toValue: (v) => Math.max(16, Math.round(Math.pow(2, v) / 16) * 16), min: 7, max: 17 },
};

function setSliders(req) {
  for (const f of ["batch", "seq"]) {
    const v = req[f] !== undefined ? req[f] : DEFAULTS[f];
    const s = $(f + "-slider");
    s.value = String(Math.min(SLIDERS[f].max, Math.max(SLIDERS[f].min, Math.log2(v))));
    $(f + "-out").textContent = String(v);
    s.setAttribute("aria-valuetext", f + " " + v);
  }
}

let sliderTimer = 0;
function onSlider(field) {
  const v = SLIDERS[field].toValue(Number($(field + "-slider").value));
  $(field).value = String(v);
  $(field + "-out").textContent = String(v);
  $(field + "-slider").setAttribute("aria-valuetext", field + " " + v);
  clearTimeout(sliderTimer);
  sliderTimer = setTimeout(() => runEstimate({ fromSlider: true }), 180);
}

let largestCtl = null, largestTimer = 0;
function scheduleLargest() {
  clearTimeout(largestTimer);
  largestTimer = setTimeout(findLargest, 120);
}

// findLargest asks the planner for the largest batch at the sequence
// set, and the longest sequence at the batch set, changing nothing else
// (allow none), and marks them on the sliders.
async function findLargest() {
  let req;
  try { req = jobRequest(); } catch (e) { return; }
  for (const f of ["batch", "seq"]) {
    $(f + "-mark").hidden = true; $(f + "-largest").textContent = ""; $(f + "-cli-box").hidden = true;
  }
  if (!req.gpu && !req.memory) {
    $("batch-largest").textContent = "Choose a GPU (or the free memory) to mark the largest values that fit.";
    return;
  }
  // The planner searches a PyTorch job: not llama.cpp's (a GGUF
  // inference job's by default) or vLLM's.
  const servingRuntime = (req.runtime && req.runtime !== "pytorch") || (!req.runtime && req.gguf && req.mode === "infer");
  if (req.mode === "load" || servingRuntime) {
    $("batch-largest").textContent = "The largest values are searched for a PyTorch training or inference job.";
    return;
  }
  if (largestCtl) largestCtl.abort();
  largestCtl = new AbortController();
  const ctl = largestCtl;
  const batch = req.batch || DEFAULTS.batch, seq = req.seq || DEFAULTS.seq;
  const asks = [
    ["batch", Object.assign({}, req, { allow: "none", maximize: "batch" }), "batch", "at " + seq + " tokens"],
    ["seq", Object.assign({}, req, { allow: "none", maximize: "seq", max_seq: SLIDERS.seq.toValue(SLIDERS.seq.max),
      min_batch: batch, max_batch: batch }), "seq_len", "at batch " + batch],
  ];
  delete asks[0][1].batch;
  await Promise.all(asks.map(async ([field, body, key, at]) => {
    try {
      const r = await api("/v1/plan", body, ctl.signal);
      if (ctl.signal.aborted) return;
      const out = $(field + "-largest"), mark = $(field + "-mark");
      $(field + "-cli").textContent = cli("plan", body);
      $(field + "-cli-box").hidden = false;
      const name = field === "batch" ? "batch" : "sequence length";
      if (!r.ok) { out.textContent = "Largest " + name + ": " + (r.data.error || r.status); return; }
      const s = SLIDERS[field];
      mark.hidden = false;
      if (!r.data.fits) {
        mark.classList.add("none");
        placeMark(mark, s.min, s);
        out.textContent = "No " + name + " fits " + at + ".";
        out.dataset.value = "0";
        return;
      }
      mark.classList.remove("none");
      const v = r.data[key];
      placeMark(mark, Math.log2(v), s);
      out.dataset.value = String(v);
      const beyond = Math.log2(v) > s.max ? " (beyond the slider)" : "";
      out.textContent = "Largest " + name + " that fits " + at + ": " + v + beyond + ".";
    } catch (e) {
      if (e.name !== "AbortError") $(field + "-largest").textContent = "The service did not answer: " + e.message;
    }
  }));
}

function placeMark(mark, v, s) {
  const f = Math.min(1, Math.max(0, (v - s.min) / (s.max - s.min)));
  // The range thumb is about 16 px wide: its centre runs from 8 px to
  // the width less 8 px.
  mark.style.left = "calc(" + (f * 100).toFixed(3) + "% + " + ((0.5 - f) * 16).toFixed(2) + "px)";
}

// ---- plan ----

async function runPlan() {
  let req;
  try { req = jobRequest(); } catch (e) { showError($("plan-error"), e); return; }
  const allow = $("allow").value.trim();
  if (allow) req.allow = allow;
  const tb = Number($("target_batch").value || 0);
  if (tb > 0) req.target_batch = tb;
  $("plan-run").disabled = true;
  try {
    const r = await api("/v1/plan", Object.assign({ configs: true }, req));
    if (!r.ok) { showError($("plan-error"), r.data); $("plan-result").hidden = true; return; }
    showError($("plan-error"), null);
    drawPlan(req, r.data);
  } catch (e) {
    showError($("plan-error"), { error: "the service did not answer: " + e.message });
  } finally {
    $("plan-run").disabled = false;
  }
}

function drawPlan(req, d) {
  $("plan-result").hidden = false;
  const sum = $("plan-summary");
  sum.textContent = "";
  if (d.fits) {
    const what = ["batch " + d.batch + " × " + d.seq_len + " tokens"];
    if (d.grad_accum > 1) what.push("gradient accumulation " + d.grad_accum + " (global batch " + d.global_batch + ")");
    what.push("attention " + d.attention, "checkpointing " + d.checkpointing);
    if (d.optimizer) what.push(d.optimizer);
    what.push(d.precision);
    if (d.model) what.push(d.model);
    if (d.offload && d.offload !== "none") what.push("offload " + d.offload);
    sum.append(el("span", { id: "plan-fit", class: "yes" }, "Fits"), ": " + what.join(", ") + ". Needs ",
      bytesSpan(d.device_peak, "plan-device"), " of ", bytesSpan(d.free), " free; " + d.reason +
      (d.limiting ? " (" + d.limiting + ")" : "") + ".");
  } else {
    sum.append(el("span", { id: "plan-fit", class: "no" }, "Does not fit"), ": " + d.error);
  }
  const tb = $("plan-ladder").tBodies[0];
  tb.textContent = "";
  // The column of what a maximizing objective searched on each rung.
  const ladder = d.ladder || [];
  const column = ladder.some((g) => g.max_seq_len > 0) ? "longest seq" : ladder.some((g) => g.max_batch > 0) ? "largest batch" : "";
  const headRow = $("plan-ladder").tHead.rows[0];
  if (headRow.cells.length > 6) headRow.deleteCell(5);
  if (column) headRow.insertBefore(el("th", { scope: "col" }, column), headRow.cells[5]);
  for (const g of ladder) {
    const tr = el("tr", {});
    // As plan prints it: a saving lowers the peak (−), a rung that
    // costs memory raises it (+).
    const sav = g.saving > 0 ? "−" + human(g.saving) : "—";
    tr.append(el("td", {}, g.applied ? "*" : ""), el("td", {}, g.change));
    const peak = el("td", { class: "num" }); peak.append(bytesSpan(g.device_peak));
    tr.append(peak, el("td", { class: "num" }, sav),
      el("td", { class: g.fits ? "yes" : "no" }, g.fits ? "yes" : "no"));
    if (column) {
      const m = g.max_seq_len || g.max_batch;
      tr.append(el("td", { class: "num" }, m > 0 ? m.toLocaleString("en-US") : "—"));
    }
    tr.append(el("td", {}, (g.cost && g.cost.text) || ""));
    tb.append(tr);
  }
  const box = $("plan-configs");
  box.textContent = "";
  const words = [];
  const titles = { deepspeed: "DeepSpeed config (ds_config.json)", accelerate: "Accelerate FSDP config (YAML)",
    training_arguments: "Hugging Face TrainingArguments", megatron: "Megatron-LM arguments" };
  for (const name of ["deepspeed", "accelerate", "training_arguments", "megatron"]) {
    const c = d.configs && d.configs[name];
    if (!c) continue;
    const h = el("h3", {}, titles[name]);
    box.append(h);
    if (c.error) { box.append(el("p", { class: "hint", id: "cfg-" + name }, "Not for this plan: " + c.error)); continue; }
    words.push(c.flag);
    const pre = el("pre", { id: "cfg-" + name, tabindex: "0", "aria-label": titles[name] }, c.text);
    const b = el("button", { type: "button", class: "copy", "data-copy": "cfg-" + name }, "Copy " + titles[name]);
    box.append(pre, b);
  }
  $("plan-cli").textContent = cli("plan", req) + (words.length ? " " + words.join(" ") : "");
}

// ---- diagnose ----

async function runDiagnose() {
  const text = $("log").value;
  if (!text.trim()) { showError($("diag-error"), { field: "log", error: "paste an out-of-memory message or a memory log" }); return; }
  $("diag-run").disabled = true;
  const leakReq = { log: text, series: true };
  if ($("log-gpu").value) leakReq.gpu = $("log-gpu").value;
  try {
    const [o, l] = await Promise.all([api("/v1/oom", { message: text }), api("/v1/leak", leakReq)]);
    // A lone OOM message may carry one memory figure: a series needs two.
    const series = l.ok && (l.data.series || []).length >= 2;
    $("oom-result").hidden = !o.ok;
    $("leak-result").hidden = !(series || (l.ok && !o.ok));
    if (o.ok) drawOOM(o.data);
    if (!$("leak-result").hidden) drawLeak(leakReq, l.data);
    if (!o.ok && !l.ok) {
      showError($("diag-error"), { error: "Neither an out-of-memory message (" + o.data.error + ") nor a memory log (" + l.data.error + ")." });
    } else showError($("diag-error"), null);
  } catch (e) {
    showError($("diag-error"), { error: "the service did not answer: " + e.message });
  } finally {
    $("diag-run").disabled = false;
  }
}

function drawOOM(d) {
  const dl = $("oom-facts");
  dl.textContent = "";
  const add = (k, v) => { if (v === null || v === undefined) return; dl.append(el("dt", {}, k)); const dd = el("dd", {}); dd.append(v); dl.append(dd); };
  add("diagnosis", el("span", { id: "oom-reason" }, d.reason));
  add("cause", el("span", { id: "oom-cause" }, d.cause));
  for (const k of ["requested", "free", "capacity", "allocated", "reserved", "reserved_unallocated", "shortfall"]) {
    if (typeof d[k] === "number") add(k.replace(/_/g, " "), bytesSpan(d[k], "oom-" + k));
  }
  if (typeof d.fragmentation === "number") add("fragmentation", (d.fragmentation * 100).toFixed(2) + "%");
  if (d.framework) add("framework", d.framework + (d.era ? " (" + d.era + ")" : ""));
  const ul = $("oom-advice");
  ul.textContent = "";
  for (const a of d.advice || []) ul.append(el("li", { "data-action": a.action }, a.text));
  $("oom-cli").textContent = "gpumem oom message.txt";
}

function drawLeak(req, d) {
  const s = $("leak-summary");
  s.textContent = "";
  s.append(el("span", { id: "leak-shape", class: d.leak ? "no" : "yes" }, d.shape), ": " + d.reason);
  const box = $("leak-chart");
  [...box.childNodes].forEach((n) => { if (n.nodeName !== "title" && n.nodeName !== "desc") n.remove(); });
  const pts = d.series || [];
  const W = Math.max(320, Math.round(box.getBoundingClientRect().width) || 720);
  const H = W < 500 ? 260 : 300;
  box.setAttribute("viewBox", "0 0 " + W + " " + H);
  const L = W < 500 ? 44 : 64, R = 16, T = 14, B = 40;
  const xs = pts.map((p) => p.x).concat((d.trend || []).map((p) => p.x));
  const ys = pts.map((p) => p.bytes).concat((d.trend || []).map((p) => p.bytes));
  if (d.capacity) ys.push(d.capacity);
  if (!pts.length) { $("leak-chart-desc").textContent = "no samples"; return; }
  const x0 = Math.min(...xs), x1 = Math.max(...xs, x0 + 1);
  const y0 = 0, y1 = Math.max(...ys, 1) * 1.05;
  const X = (v) => L + (W - L - R) * (v - x0) / (x1 - x0);
  const Y = (v) => H - B - (H - B - T) * (v - y0) / (y1 - y0);
  const GiB = 1073741824;
  const ystep = niceStep(y1 / GiB) * GiB;
  for (let t = 0; t <= y1; t += ystep) {
    box.append(svg("line", { x1: L, x2: W - R, y1: Y(t), y2: Y(t), class: "grid-line" }));
    box.append(svg("text", { x: L - 6, y: Y(t) + 4, "text-anchor": "end" }, String(+(t / GiB).toFixed(1))));
  }
  const xstep = niceStep(x1 - x0);
  for (let t = Math.ceil(x0 / xstep) * xstep; t <= x1; t += xstep) {
    box.append(svg("line", { x1: X(t), x2: X(t), y1: H - B, y2: H - B + 5, class: "axis" }));
    box.append(svg("text", { x: X(t), y: H - B + 18, "text-anchor": "middle" }, String(+t.toFixed(2))));
  }
  box.append(svg("line", { x1: L, x2: W - R, y1: H - B, y2: H - B, class: "axis" }));
  box.append(svg("line", { x1: L, x2: L, y1: T, y2: H - B, class: "axis" }));
  box.append(svg("text", { x: W - R, y: H - 4, "text-anchor": "end" }, d.axis_unit || d.axis || "sample"));
  box.append(svg("text", { x: 4, y: T + 2 }, "GiB"));
  if (d.capacity) {
    box.append(svg("line", { x1: L, x2: W - R, y1: Y(d.capacity), y2: Y(d.capacity), class: "limit" }));
    box.append(svg("text", { x: L + 4, y: Y(d.capacity) - 4, class: "limit-label" }, "capacity " + human(d.capacity)));
  }
  box.append(svg("polyline", { class: "series", points: pts.map((p) => X(p.x).toFixed(1) + "," + Y(p.bytes).toFixed(1)).join(" ") }));
  const g = svg("g", { "data-series": "samples" });
  for (const p of pts) {
    const c = svg("circle", { cx: X(p.x), cy: Y(p.bytes), r: 3, class: "dot", "data-x": String(p.x), "data-bytes": String(p.bytes) });
    c.append(svg("title", {}, (d.axis_unit || "x") + " " + p.x + ": " + human(p.bytes)));
    g.append(c);
  }
  box.append(g);
  if (d.trend && d.trend.length === 2) {
    const [a, b] = d.trend;
    box.append(svg("line", { x1: X(a.x), y1: Y(a.bytes), x2: X(b.x), y2: Y(b.bytes), class: "trend", "data-trend": "" }));
  }
  if (typeof d.oom_step === "number") {
    box.append(svg("line", { x1: X(d.oom_step), x2: X(d.oom_step), y1: T, y2: H - B, class: "oom", "data-oom": String(d.oom_step) }));
    box.append(svg("text", { x: Math.max(L, X(d.oom_step) - 4), y: T + 12, "text-anchor": "end", class: "limit-label" },
      "OOM at " + (d.axis_unit || "") + " " + d.oom_step));
  }
  $("leak-chart-desc").textContent = pts.length + " samples; " + d.reason;
  $("leak-cli").textContent = "gpumem leak" + (req.gpu ? " --gpu " + quote(req.gpu) : "") + " log.txt";
}

// ---- start ----

async function loadCatalogs() {
  const [m, dv] = await Promise.all([fetch("/v1/models").then((r) => r.json()), fetch("/v1/devices").then((r) => r.json())]);
  const sel = $("model");
  for (const x of m.models) {
    const p = x.params >= 1e9 ? (x.params / 1e9).toFixed(1) + "B" : (x.params / 1e6).toFixed(0) + "M";
    sel.append(el("option", { value: x.name }, x.name + " (" + p + ")"));
  }
  const def = m.models.find((x) => x.name === "llama-3.1-8b") || m.models[0];
  if (def) sel.value = def.name;
  for (const id of ["gpu", "log-gpu"]) {
    for (const x of dv.devices) $(id).append(el("option", { value: x.name }, x.name + " (" + x.capacity_human + ")"));
  }
}

// ckpt is the header of the checkpoint chosen: {kind: "safetensors" or
// "gguf", name, b64, size}. Only the header is read from the file.
let ckpt = null;

// base64 encodes bytes.
function base64(bytes) {
  let bin = "";
  for (let i = 0; i < bytes.length; i += 0x8000) bin += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
  return btoa(bin);
}

// ggufHeaderEnd returns where the header of a GGUF v2 or v3 file (its
// metadata and tensor infos, as gguf.md lays them out) ends in buf, or -1
// when buf ends before it. It reads the lengths only.
function ggufHeaderEnd(buf) {
  const dv = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
  let p = 0;
  const need = (n) => { if (p + n > buf.length) throw new RangeError("short"); };
  const u32 = () => { need(4); const v = dv.getUint32(p, true); p += 4; return v; };
  const u64 = () => {
    need(8); const v = dv.getBigUint64(p, true); p += 8;
    if (v > 0x1fffffffffffffn) throw new Error("a length of " + v + " bytes");
    return Number(v);
  };
  const skip = (n) => { need(n); p += n; };
  const str = () => skip(u64());
  // Bytes of each fixed-size GGUF type: uint8, int8, uint16, int16,
  // uint32, int32, float32, bool; 8 string, 9 array; uint64, int64, float64.
  const width = { 0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8 };
  const value = (t, depth) => {
    if (t === 8) return str();
    if (t === 9) {
      if (depth > 8) throw new Error("arrays nested too deep");
      const et = u32(), n = u64();
      if (et === 8 || et === 9) { for (let i = 0; i < n; i++) value(et, depth + 1); return; }
      if (!(et in width)) throw new Error("unknown metadata type " + et);
      return skip(n * width[et]);
    }
    if (!(t in width)) throw new Error("unknown metadata type " + t);
    skip(width[t]);
  };
  try {
    if (u32() !== 0x46554747) throw new Error("not a GGUF file (no GGUF magic)");
    const version = u32();
    if (version !== 2 && version !== 3) throw new Error("GGUF version " + version + ": want 2 or 3");
    const tensors = u64(), kvs = u64();
    for (let i = 0; i < kvs; i++) { str(); value(u32(), 0); }
    for (let i = 0; i < tensors; i++) { str(); skip(8 * u32()); u32(); u64(); }
    return p;
  } catch (e) {
    if (e instanceof RangeError) return -1;
    throw e;
  }
}

async function readCheckpoint(file) {
  ckpt = null;
  $("ckpt-status").textContent = "";
  const kind = /\.gguf$/i.test(file.name) ? "gguf" : "safetensors";
  const fail = (msg) => showError($("est-error"), { field: kind, error: file.name + ": " + msg });
  let head;
  try {
    if (kind === "safetensors") {
      if (file.size < 8) return fail("shorter than the 8-byte header length");
      const len = new DataView(await file.slice(0, 8).arrayBuffer()).getBigUint64(0, true);
      if (len > 100000000n || Number(len) > file.size - 8) return fail("header length " + len + " is not that of a safetensors file");
      head = new Uint8Array(await file.slice(0, 8 + Number(len)).arrayBuffer());
    } else {
      // Read more of the file until the header ends in what was read
      // (tokenizer vocabularies make it megabytes long).
      for (let n = Math.min(file.size, 1 << 20); ; n = Math.min(file.size, n * 4)) {
        const buf = new Uint8Array(await file.slice(0, n).arrayBuffer());
        const end = ggufHeaderEnd(buf);
        if (end >= 0) { head = buf.subarray(0, end); break; }
        if (n >= file.size || n >= 1 << 28) return fail("the header does not end within the file's first " + human(n));
      }
    }
  } catch (e) {
    return fail(e.message);
  }
  ckpt = { kind, name: file.name, b64: base64(head), size: file.size };
  document.querySelector("input[name=source][value=checkpoint]").checked = true;
  syncForm();
  showError($("est-error"), null);
  $("ckpt-status").textContent = file.name + ": read the " + head.length.toLocaleString("en-US") + "-byte header of a " +
    human(file.size) + " file.";
}

function readDropped(file) {
  if (/\.(safetensors|gguf)$/i.test(file.name)) { readCheckpoint(file); return; }
  if (!/\.json$/i.test(file.name) && file.type !== "application/json") {
    showError($("est-error"), { field: "config", error: file.name + ": the page reads a config.json, or the header of a .safetensors or .gguf file" });
    return;
  }
  if (file.size > 1 << 20) { showError($("est-error"), { field: "config", error: file.name + ": larger than a config.json (1 MiB)" }); return; }
  file.text().then((t) => { $("config").value = t; showError($("est-error"), null); });
}

function init() {
  $("job").addEventListener("submit", (e) => { e.preventDefault(); runEstimate(); });
  $("job").addEventListener("change", syncForm);
  $("runtime").addEventListener("change", () => {
    if ($("runtime").value && $("runtime").value !== "pytorch") { $("mode").value = "infer"; syncForm(); }
  });
  $("share").addEventListener("click", () => {
    try { history.replaceState(null, "", toHash(jobRequest())); } catch (e) { showError($("est-error"), e); return; }
    copyText(location.href, "link");
  });
  $("batch-slider").addEventListener("input", () => onSlider("batch"));
  $("seq-slider").addEventListener("input", () => onSlider("seq"));
  $("plan-run").addEventListener("click", runPlan);
  $("diag-run").addEventListener("click", runDiagnose);
  document.addEventListener("click", (e) => {
    const b = e.target.closest("button.copy");
    if (b) copyText($(b.dataset.copy).textContent, b.textContent.replace(/^Copy /, ""));
  });
  $("file").addEventListener("change", () => { if ($("file").files[0]) readDropped($("file").files[0]); });
  $("ckpt-file").addEventListener("change", () => { if ($("ckpt-file").files[0]) readCheckpoint($("ckpt-file").files[0]); });
  const cfg = $("config");
  cfg.addEventListener("dragover", (e) => { e.preventDefault(); cfg.classList.add("drop"); });
  cfg.addEventListener("dragleave", () => cfg.classList.remove("drop"));
  cfg.addEventListener("drop", (e) => {
    e.preventDefault(); cfg.classList.remove("drop");
    if (e.dataTransfer.files[0]) readDropped(e.dataTransfer.files[0]);
  });
  let resizeTimer = 0;
  window.addEventListener("resize", () => {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(() => { if (lastEstimate) drawBars(lastEstimate.data); }, 150);
  });
  window.addEventListener("hashchange", () => { setForm(fromHash(location.hash)); runEstimate(); });
  syncForm();
  loadCatalogs().then(() => {
    if (location.hash.length > 1) { setForm(fromHash(location.hash)); runEstimate(); }
    document.body.dataset.ready = "true";
  }).catch((e) => showError($("est-error"), { error: "could not read the catalogs: " + e.message }));
}

init();
