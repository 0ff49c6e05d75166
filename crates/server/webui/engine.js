// The live engine view: reads /engine/events (a fetch stream, so that the API key goes
// in a header) and shows each slot's state, context use and speculation, the KV pool,
// where the step time went, and tokens per second over the last minutes. Rates and the
// time split are differences between two events' totals.

import { events } from "./sse.js";

const $ = (id) => document.getElementById(id);
const HISTORY = 240;

let reading = null;
let previous = null;
let rates = [];

function cell(text) {
  const td = document.createElement("td");
  td.textContent = text;
  return td;
}

function pct(x) {
  return `${(100 * x).toFixed(1)}%`;
}

function bar(id, parts) {
  const spans = $(id).querySelectorAll("span");
  parts.forEach((p, i) => { spans[i].style.width = pct(Math.max(0, Math.min(1, p))); });
}

function slots(s) {
  const body = $("slots").querySelector("tbody");
  body.replaceChildren();
  for (const sl of s.slots) {
    const tr = document.createElement("tr");
    tr.dataset.state = sl.state;
    tr.className = "slot";
    const acc = sl.draft_n ? pct(sl.draft_accepted / sl.draft_n) : "–";
    tr.append(cell(sl.id), cell(sl.state), cell(`${sl.n_past} / ${s.n_ctx}`), cell(sl.n_prompt),
      cell(sl.n_cached), cell(sl.n_decoded), cell(sl.draft_depth), cell(acc));
    body.append(tr);
  }
  $("queued").textContent = s.sleeping ? "(asleep: weights released)" : s.queued ? `(${s.queued} queued)` : "";
}

function kv(s) {
  const k = s.kv;
  const used = k.blocks_total - k.blocks_free - k.blocks_cached;
  bar("kv-bar", [used / k.blocks_total, k.blocks_cached / k.blocks_total]);
  $("kv-text").textContent = `${used} blocks in use, ${k.blocks_cached} holding cached prefixes, ` +
    `${k.blocks_free} free, of ${k.blocks_total} (${k.block_tokens} tokens each)`;
}

function steps(s) {
  if (!previous) return;
  const d = (k) => s.totals[k] - previous.totals[k];
  const parts = [d("prefill_s"), d("decode_s"), d("draft_s"), d("verify_s")];
  const busy = parts.reduce((a, b) => a + b, 0);
  const dt = s.t - previous.t;
  if (busy > 0) bar("step-bar", parts.map((p) => p / busy));
  const names = ["prefill", "decode", "draft", "verify"];
  $("step-text").textContent = busy > 0
    ? names.map((n, i) => `${n} ${(1000 * parts[i]).toFixed(0)} ms`).join(" · ") + ` in the last ${dt.toFixed(1)} s`
    : "idle";
  const drafted = d("spec_draft_tokens");
  rates.push([d("prompt_tokens") / dt, d("predicted_tokens") / dt]);
  if (rates.length > HISTORY) rates.shift();
  const acc = drafted > 0 ? ` · drafts accepted ${pct(d("spec_accepted_tokens") / drafted)}` : "";
  const [p, g] = rates[rates.length - 1];
  $("rate-text").textContent = `prompt ${p.toFixed(1)} tok/s · generated ${g.toFixed(1)} tok/s${acc}`;
  chart();
}

function chart() {
  const svg = $("rate-chart");
  const top = Math.max(1, ...rates.flat());
  const line = (k, cls) => {
    const pl = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
    pl.setAttribute("class", cls);
    pl.setAttribute("points", rates.map((r, i) => `${(600 * i) / (HISTORY - 1)},${118 - (116 * r[k]) / top}`).join(" "));
    return pl;
  };
  svg.replaceChildren(line(0, "prompt"), line(1, "gen"));
}

function show(s) {
  slots(s);
  kv(s);
  steps(s);
  previous = s;
}

/** Starts reading the engine's events (of `model` on a router); `headers()` gives the key,
 * `askKey` asks for it. */
export async function startEngineView(headers, askKey, model) {
  stopEngineView();
  const ctl = new AbortController();
  reading = ctl;
  previous = null;
  try {
    for (;;) {
      const which = model ? `&model=${encodeURIComponent(model)}` : "";
      const r = await fetch(`/engine/events?interval_ms=500${which}`, { headers: headers(), signal: ctl.signal });
      if (r.status === 401) {
        await askKey();
        continue;
      }
      for await (const ev of events(r)) show(ev);
      return;
    }
  } catch (e) {
    if (e.name !== "AbortError") $("queued").textContent = `(engine view stopped: ${e.message})`;
  }
}

export function stopEngineView() {
  reading?.abort();
  reading = null;
}
