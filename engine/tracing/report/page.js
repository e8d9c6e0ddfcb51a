// vkattn's trace explorer: draws the JSON object in #vkattn-data (engine/tracing/report.cpp
// writes it). A report has sections; a section has one pass, or a pass against another, and its
// steps. A step with values holds a sample of its tensor as base64 float32: every plane, every
// row_step-th row from row0 and every col_step-th column from col0 (all of it when small).
"use strict";

const data = JSON.parse(document.getElementById("vkattn-data").textContent);
const state = { section: 0, step: 0, plane: [] };

// Colours of the engine's SVG heatmaps (engine/io/heatmap.cpp): white at the range's low end to
// dark blue at its high end; blocked cells (-inf, NaN, True in a mask) dark grey. Differences run
// from white (none) to dark red (the largest).
const WHITE = [255, 255, 255], BLUE = [8, 48, 107], RED = [165, 15, 21], GREY = [85, 85, 85];
const mix = (from, to, t) => from.map((f, k) => Math.round(f + (to[k] - f) * t));
const css = (rgb) => `rgb(${rgb[0]}, ${rgb[1]}, ${rgb[2]})`;

function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attributes)) {
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value);
  }
  for (const child of children) node.append(child);
  return node;
}

function number(v) {
  if (Number.isNaN(v)) return "NaN";
  if (!Number.isFinite(v)) return v > 0 ? "+inf" : "-inf";
  return String(Number(v.toPrecision(7)));
}

const shapeText = (shape) => "(" + shape.join(", ") + (shape.length === 1 ? ",)" : ")");
const dimName = (step, k) => step.dims[k] || "d" + k;

function microseconds(us) {
  if (us === null || us === undefined) return "";
  return us >= 1000 ? (us / 1000).toFixed(2) + " ms" : us.toFixed(1) + " µs";
}

const decoded = new Map();  // base64 text -> Float32Array
function values(text) {
  if (!decoded.has(text)) {
    const bytes = Uint8Array.from(atob(text), (c) => c.charCodeAt(0));
    decoded.set(text, new Float32Array(bytes.buffer));
  }
  return decoded.get(text);
}

const section = () => data.sections[state.section];
const currentStep = () => section().steps[state.step];
const paired = () => section().passes.length === 2;

// The multi-index of flat element `flat` of `shape`, as "(b=0, h=1, i=2, j=3)".
function indexText(step, flat) {
  const parts = [];
  for (let k = step.shape.length - 1; k >= 0; --k) {
    parts.unshift(dimName(step, k) + "=" + (flat % step.shape[k]));
    flat = Math.floor(flat / step.shape[k]);
  }
  return "(" + parts.join(", ") + ")";
}

function showHeader() {
  document.getElementById("title").textContent = data.title;
  document.title = data.title + " — vkattn";
  const passes = document.getElementById("passes");
  passes.replaceChildren();
  for (const pass of section().passes) {
    const line = el("div", {}, el("b", {}, pass.label), `: ${pass.backend} on ${pass.device}`);
    if (pass.path) line.append(`, ${pass.path} attention`);
    if (pass.clock) line.append(`, times from the ${pass.clock} clock`);
    if (pass.error) line.append(el("span", { class: "badge diverges" }, "stopped: " + pass.error));
    passes.append(line);
  }
  const verdict = document.getElementById("verdict");
  verdict.className = "";
  verdict.textContent = "";
  if (paired()) {
    const s = section(), [a, b] = s.passes.map((p) => p.label);
    if (s.first_divergent !== null) {
      const step = s.steps[s.first_divergent];
      verdict.className = "diverges";
      verdict.textContent = `first divergent step: ${step.index} ${step.name} (${step.op})` +
                            (step.diff ? `, max |${a} - ${b}| ${step.diff.max_abs_error.toExponential(2)}` : "");
    } else {
      verdict.className = "agrees";
      verdict.textContent = `all ${s.compared} compared steps agree within atol ${data.atol} + rtol ${data.rtol} * |${b}|`;
    }
  }
}

function showSections() {
  const box = document.getElementById("sections");
  box.replaceChildren();
  if (data.sections.length < 2) return;
  const select = el("select", { id: "section-select", onchange: (e) => openSection(Number(e.target.value)) });
  data.sections.forEach((s, k) => {
    const mark = s.first_divergent !== null ? " — diverges" : "";
    select.append(el("option", { value: k }, `${k + 1}. ${s.title}${mark}`));
  });
  select.value = state.section;
  box.append(el("label", {}, "part: ", select));
}

function statusBadge(step) {
  if (!step.status) return null;
  const kind = step.status === "agrees" ? "agrees" : step.status === "diverges" ? "diverges" : "other";
  const text = step.status !== "agrees" ? step.status
             : step.diff.max_abs_error === 0 ? "✓ equal" : "✓ " + step.diff.max_abs_error.toExponential(1);
  return el("span", { class: "badge " + kind }, text);
}

function showSteps() {
  const list = document.querySelector("#steps ol");
  list.replaceChildren();
  section().steps.forEach((step, k) => {
    const inputs = step.inputs.map(([name, shape]) => `${name} ${shape}`).join(", ");
    const dims = step.dims.length ? " [" + step.dims.join(", ") + "]" : "";
    const times = step.times.filter((t) => t).map((t) => microseconds(t[1])).join(" / ");
    const item = el("li", { "data-step": step.index, "data-name": step.name, onclick: () => openStep(k) },
                    el("span", { class: "time" }, times),
                    el("span", { class: "name" }, `${step.index} ${step.name}`), " ",
                    el("span", { class: "op" }, step.op));
    const badge = statusBadge(step);
    if (badge) item.append(badge);
    item.append(el("div", { class: "shapes" }, `${inputs} → ${shapeText(step.shape)}${dims}`));
    if (step.status) item.classList.add(step.status.replace(/ /g, "-"));
    list.append(item);
  });
}

// The plane the selectors name, as a flat index over the leading axes.
function planeIndex(step) {
  let flat = 0;
  for (let k = 0; k < step.shape.length - 2; ++k) flat = flat * step.shape[k] + (state.plane[k] || 0);
  return flat;
}

function showAxes(step) {
  const box = document.getElementById("axes");
  box.replaceChildren();
  for (let k = 0; k < step.shape.length - 2; ++k) {
    const select = el("select", { class: "axis", "data-axis": dimName(step, k),
                                  onchange: (e) => { state.plane[k] = Number(e.target.value); showMaps(); } });
    for (let v = 0; v < step.shape[k]; ++v) select.append(el("option", { value: v }, String(v)));
    select.value = state.plane[k] || 0;
    box.append(el("label", {}, dimName(step, k) + " ", select));
  }
}

// The focused element (the first divergent one) as {plane, row, col} of the full tensor.
function focusOf(step) {
  if (!step.diff || step.diff.first === undefined) return null;
  const s = step.sample, flat = step.diff.first;
  return { plane: Math.floor(flat / (s.rows * s.cols)), row: Math.floor(flat / s.cols) % s.rows, col: flat % s.cols };
}

function drawMap(step, which, plane) {
  const s = step.sample, w = s.shown_cols, h = s.shown_rows;
  const canvas = el("canvas", { class: "heatmap", "data-which": which, width: w, height: h });
  const cell = Math.max(1, Math.min(32, Math.floor(720 / Math.max(w, h))));
  canvas.style.width = w * cell + "px";
  canvas.style.height = Math.max(h * cell, 16) + "px";
  const context = canvas.getContext("2d", { willReadFrequently: true });  // read back by the tests
  const image = context.createImageData(w, h);
  const offset = plane * w * h;
  const mask = step.dtype === "bool";
  const [lo, hi] = step.range || [0, 1];
  const maxDiff = step.diff ? step.diff.max_abs_error : 0;
  for (let k = 0; k < w * h; ++k) {
    let rgb;
    if (which === "diff") {
      const d = difference(step, offset + k);
      rgb = Number.isNaN(d) ? GREY : !Number.isFinite(d) ? RED : mix(WHITE, RED, maxDiff > 0 ? Math.min(1, d / maxDiff) : 0);
    } else {
      const v = values(step.values[which === "a" ? 0 : 1])[offset + k];
      if (mask) rgb = v !== 0 ? GREY : WHITE;
      else if (!Number.isFinite(v)) rgb = GREY;
      else rgb = mix(WHITE, BLUE, hi > lo ? (v - lo) / (hi - lo) : 0);
    }
    image.data.set([rgb[0], rgb[1], rgb[2], 255], 4 * k);
  }
  context.putImageData(image, 0, 0);
  const box = el("div", { class: "map" }, canvas);
  canvas.addEventListener("mousemove", (e) => {
    const j = Math.min(w - 1, Math.floor(e.offsetX / canvas.clientWidth * w));
    const i = Math.min(h - 1, Math.floor(e.offsetY / canvas.clientHeight * h));
    showReadout(step, plane, i, j);
  });
  const focus = focusOf(step);
  if (focus && focus.plane === plane) {
    const i = (focus.row - s.row0) / s.row_step, j = (focus.col - s.col0) / s.col_step;
    const cw = canvas.style.width.slice(0, -2) / w, ch = canvas.style.height.slice(0, -2) / h;
    const mark = el("div", { class: "focus" });
    Object.assign(mark.style, { left: j * cw - 2 + "px", top: i * ch - 2 + "px",
                                width: Math.max(cw, 4) + 4 + "px", height: Math.max(ch, 4) + 4 + "px" });
    box.append(mark);
  }
  return box;
}

// |a - b| at sample cell k: 0 where both are the same infinity or both NaN, +inf where only one
// is finite, NaN where only one is NaN.
function difference(step, k) {
  const a = values(step.values[0])[k], b = values(step.values[1])[k];
  if (a === b || (Number.isNaN(a) && Number.isNaN(b))) return 0;
  if (Number.isNaN(a) || Number.isNaN(b)) return NaN;
  return Math.abs(a - b);
}

function showReadout(step, plane, i, j) {
  const s = step.sample;
  const row = s.row0 + i * s.row_step, col = s.col0 + j * s.col_step;
  const flat = (plane * s.rows + row) * s.cols + col;
  const k = (plane * s.shown_rows + i) * s.shown_cols + j;
  const lines = [`${step.name}${indexText(step, flat)}   flat index ${flat}`];
  const passes = section().passes;
  const parts = [];
  step.values.forEach((text, p) => { if (text) parts.push(`${passes[p].label} = ${number(values(text)[k])}`); });
  if (paired() && step.values[0] && step.values[1]) {
    parts.push(`|${passes[0].label} - ${passes[1].label}| = ${number(difference(step, k))}`);
  }
  lines.push(parts.join(",  "));
  const readout = document.getElementById("readout");
  readout.textContent = lines.join("\n");
  readout.style.whiteSpace = "pre";
  readout.dataset.flat = flat;
}

function showScale(step) {
  const box = document.getElementById("scale");
  box.replaceChildren();
  if (step.dtype === "bool") {
    box.append(el("span", { class: "swatch", style: "background: #fff; border: 1px solid #ccc" }), "attends (False)",
               el("span", { class: "swatch", style: "background:" + css(GREY) }), "blocked (True)");
    return;
  }
  if (step.range) {
    box.append(number(step.range[0]),
               el("span", { class: "bar", style: `background: linear-gradient(to right, ${css(WHITE)}, ${css(BLUE)})` }),
               number(step.range[1]));
  } else {
    box.append("every value is blocked");
  }
  if (step.blocked) box.append(el("span", { class: "swatch", style: "background:" + css(GREY) }), "-inf / NaN (blocked)");
  if (step.diff && step.values[0] && step.values[1]) {
    box.append(el("span", { class: "swatch", style: "background: none" }), "|difference| 0",
               el("span", { class: "bar", style: `background: linear-gradient(to right, ${css(WHITE)}, ${css(RED)})` }),
               number(step.diff.max_abs_error));
  }
}

function showMaps() {
  const step = currentStep(), maps = document.getElementById("maps");
  maps.replaceChildren();
  document.getElementById("readout").textContent = "Point at a cell to read its value and index.";
  if (!step.sample) {
    maps.append(el("p", {}, "This step was traced without values: only its shape and time are known. " +
                            "Record values (vkattn run --trace DIR --trace-values) to see its tensor."));
    return;
  }
  const s = step.sample, plane = planeIndex(step);
  if (plane >= s.shown_planes) {
    maps.append(el("p", {}, `Plane ${plane} is beyond the ${s.shown_planes} planes this page embeds.`));
    return;
  }
  const passes = section().passes;
  const where = step.shape.length > 2 ? " at " + step.shape.slice(0, -2).map((_, k) => `${dimName(step, k)}=${state.plane[k] || 0}`).join(", ") : "";
  step.values.forEach((text, p) => {
    if (!text) return;
    const who = passes[p].label === passes[p].backend ? passes[p].label : `${passes[p].label} (${passes[p].backend})`;
    maps.append(el("figure", {}, el("figcaption", {}, who + where),
                   drawMap(step, p === 0 ? "a" : "b", plane)));
  });
  if (paired() && step.values[0] && step.values[1]) {
    maps.append(el("figure", {}, el("figcaption", {}, `|${passes[0].label} - ${passes[1].label}|${where}`),
                   drawMap(step, "diff", plane)));
  }
  const focus = focusOf(step);
  if (focus && focus.plane === plane) {
    showReadout(step, plane, (focus.row - s.row0) / s.row_step, (focus.col - s.col0) / s.col_step);
  }
}

function openStep(k) {
  state.step = k;
  const step = currentStep();
  const focus = focusOf(step);
  state.plane = [];
  if (focus) {  // the selectors at the first divergent element's plane
    let p = focus.plane;
    for (let d = step.shape.length - 3; d >= 0; --d) {
      state.plane[d] = p % step.shape[d];
      p = Math.floor(p / step.shape[d]);
    }
  }
  document.querySelectorAll("#steps li").forEach((li, i) => li.classList.toggle("selected", i === k));
  document.querySelectorAll("#timeline rect.step").forEach((r) => r.classList.toggle("selected", Number(r.dataset.k) === k));
  const selected = document.querySelector("#steps li.selected");
  if (selected) selected.scrollIntoView({ block: "nearest" });
  document.getElementById("step-title").textContent = `step ${step.index}: ${step.name} (${step.op})`;
  const inputs = step.inputs.map(([name, shape]) => `${name} ${shape}`).join(", ") || "nothing traced";
  const dims = step.dims.length ? " with axes " + step.dims.join(", ") : "";
  const times = step.times.map((t, p) => t ? `${section().passes[p].label} ${microseconds(t[1])}` : null).filter((t) => t);
  document.getElementById("step-shapes").textContent =
    `${inputs} → ${step.dtype} ${shapeText(step.shape)}${dims}` + (times.length ? "; took " + times.join(", ") : "") +
    (step.folded ? "; " + step.folded : "");
  const diff = document.getElementById("step-diff");
  diff.hidden = !(step.diff && step.diff.report);
  diff.textContent = diff.hidden ? "" : step.diff.report;
  const note = document.getElementById("sample-note");
  const s = step.sample;
  note.hidden = !s || (s.row_step === 1 && s.col_step === 1 && s.shown_planes === s.planes);
  if (!note.hidden) {
    let text = `showing ${s.shown_rows} × ${s.shown_cols} of ${s.rows} × ${s.cols}`;
    const ordinal = (n) => n + (n % 100 >= 11 && n % 100 <= 13 ? "th" : ["th", "st", "nd", "rd"][n % 10] || "th");
    const every = [];
    if (s.row_step === s.col_step && s.row_step > 1) every.push(`every ${ordinal(s.row_step)} row and column`);
    else {
      if (s.row_step > 1) every.push(`every ${ordinal(s.row_step)} row`);
      if (s.col_step > 1) every.push(`every ${ordinal(s.col_step)} column`);
    }
    if (every.length) text += ", " + every.join(" and ");
    if (s.row0 || s.col0) text += ` from (${s.row0}, ${s.col0}), through the first divergent element`;
    if (s.shown_planes < s.planes) text += `; the first ${s.shown_planes} of ${s.planes} planes`;
    note.textContent = text + ". The range and the max |difference| are those of all the values.";
  }
  showAxes(step);
  showScale(step);
  showMaps();
}

function showTimeline() {
  const box = document.getElementById("timeline");
  box.replaceChildren();
  const passes = section().passes, steps = section().steps;
  const timed = passes.map((_, p) => steps.some((s) => s.times[p]));
  if (!timed.some((t) => t)) {
    box.append(el("p", {}, "No step times were recorded for this pass."));
    return;
  }
  const NS = "http://www.w3.org/2000/svg", left = 110, width = 1000, rowHeight = 26;
  const rows = passes.filter((_, p) => timed[p]).length;
  const end = Math.max(...steps.flatMap((s) => s.times.filter((t) => t).map((t) => t[0] + t[1])), 1);
  const svg = document.createElementNS(NS, "svg");
  svg.setAttribute("width", left + width + 60);
  svg.setAttribute("height", rows * rowHeight + 24);
  const text = (x, y, content, anchor = "start") => {
    const t = document.createElementNS(NS, "text");
    Object.entries({ x, y, "font-size": 11, fill: "#5b6470", "text-anchor": anchor }).forEach(([k, v]) => t.setAttribute(k, v));
    t.textContent = content;
    svg.append(t);
  };
  const palette = ["#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#b279a2", "#eeca3b", "#9d755d"];
  const ops = [...new Set(steps.map((s) => s.op))];
  let row = 0;
  passes.forEach((pass, p) => {
    if (!timed[p]) return;
    const y = row++ * rowHeight;
    text(0, y + 16, `${pass.label} (${pass.backend})`);
    steps.forEach((step, k) => {
      const t = step.times[p];
      if (!t) return;
      const r = document.createElementNS(NS, "rect");
      const attributes = { class: "step", x: left + t[0] / end * width, y: y + 3, width: Math.max(1, t[1] / end * width),
                           height: rowHeight - 8, fill: palette[ops.indexOf(step.op) % palette.length], "data-k": k };
      Object.entries(attributes).forEach(([key, v]) => r.setAttribute(key, v));
      const title = document.createElementNS(NS, "title");
      title.textContent = `${step.index} ${step.name} (${step.op}): ${microseconds(t[1])} from ${microseconds(t[0])}`;
      r.append(title);
      r.addEventListener("click", () => openStep(k));
      svg.append(r);
    });
  });
  for (let tick = 0; tick <= 4; ++tick) {
    text(left + tick / 4 * width, rows * rowHeight + 16, microseconds(tick / 4 * end), tick === 0 ? "start" : "middle");
  }
  box.append(svg);
}

function openSection(k) {
  state.section = k;
  showHeader();
  showSections();
  showSteps();
  showTimeline();
  const s = section();
  const first = s.first_divergent !== null ? s.first_divergent : Math.max(0, s.steps.findIndex((step) => step.sample));
  if (s.steps.length) openStep(first);
}

document.getElementById("footer").textContent =
  `${data.generator}: a self-contained page; it makes no network request and needs no file beside it.`;
const divergent = data.sections.findIndex((s) => s.first_divergent !== null);
openSection(Math.max(0, divergent));
