// The chat page: conversations kept in this browser (localStorage), the API key in this
// tab's sessionStorage, answers streamed from /v1/chat/completions with reasoning in a
// collapsible panel and tool calls as cards whose results are sent back. Every sampling
// knob, a JSON-schema mode, tools, and images when the server has a vision tower.

import { renderMarkdown } from "./render.js";
import { startEngineView, stopEngineView } from "./engine.js";
import { events } from "./sse.js";

const $ = (id) => document.getElementById(id);
const STORE = "tandem.conversations";
const SETTINGS = "tandem.settings";
const KEY = "tandem.key";

/** The sampling knobs: field, label, step; empty means the server's default. */
const KNOBS = [
  ["temperature", "Temperature", 0.05], ["top_k", "Top-k", 1], ["top_p", "Top-p", 0.01],
  ["min_p", "Min-p", 0.01], ["typical_p", "Typical-p", 0.01], ["repeat_penalty", "Repeat penalty", 0.01],
  ["repeat_last_n", "Repeat last n", 1], ["presence_penalty", "Presence penalty", 0.05],
  ["frequency_penalty", "Frequency penalty", 0.05], ["seed", "Seed", 1], ["max_tokens", "Max tokens", 1],
];

let conversations = JSON.parse(localStorage.getItem(STORE) || "[]");
let current = conversations[0]?.id ?? null;
let running = null;
let image = null;
/** The model asked for, on a router of several (else the server's only one). */
let model = localStorage.getItem("tandem.model") || "";

function save() {
  localStorage.setItem(STORE, JSON.stringify(conversations));
}

function conversation() {
  let c = conversations.find((c) => c.id === current);
  if (!c) {
    c = { id: String(Date.now()), title: "New chat", messages: [] };
    conversations.unshift(c);
    current = c.id;
  }
  return c;
}

export function authHeaders() {
  const key = sessionStorage.getItem(KEY);
  return key ? { Authorization: `Bearer ${key}` } : {};
}

/** Asks for the key (after a 401); resolves once it is saved. */
export function askKey() {
  const d = $("key-dialog");
  if (d.open) return Promise.resolve();
  $("key-input").value = sessionStorage.getItem(KEY) || "";
  d.showModal();
  return new Promise((done) => d.addEventListener("close", () => {
    sessionStorage.setItem(KEY, $("key-input").value.trim());
    done();
  }, { once: true }));
}

function showError(text) {
  $("error").textContent = text;
  $("error").hidden = !text;
}

// ---- settings

function buildKnobs() {
  const saved = JSON.parse(localStorage.getItem(SETTINGS) || "{}");
  for (const [name, label, step] of KNOBS) {
    const l = document.createElement("label");
    l.textContent = label;
    const i = document.createElement("input");
    i.type = "number";
    i.step = step;
    i.id = "knob-" + name;
    i.placeholder = "default";
    i.value = saved[name] ?? "";
    i.addEventListener("change", saveSettings);
    l.append(i);
    $("knobs").append(l);
  }
  const stop = document.createElement("label");
  stop.textContent = "Stop strings (one per line)";
  const s = document.createElement("textarea");
  s.id = "knob-stop";
  s.rows = 2;
  s.value = saved.stop ?? "";
  s.addEventListener("change", saveSettings);
  stop.append(s);
  $("knobs").append(stop);
  for (const id of ["system", "schema", "tools"]) {
    if (saved[id] !== undefined) $(id).value = saved[id];
    $(id).addEventListener("change", saveSettings);
  }
  for (const id of ["schema-on", "tools-on"]) {
    $(id).checked = !!saved[id];
    $(id).addEventListener("change", saveSettings);
  }
}

function saveSettings() {
  const s = {};
  for (const [name] of KNOBS) s[name] = $("knob-" + name).value;
  s.stop = $("knob-stop").value;
  for (const id of ["system", "schema", "tools"]) s[id] = $(id).value;
  for (const id of ["schema-on", "tools-on"]) s[id] = $(id).checked;
  localStorage.setItem(SETTINGS, JSON.stringify(s));
}

/** The request's fields beside messages, from the settings; throws on bad JSON. */
function requestFields() {
  const body = {};
  for (const [name] of KNOBS) {
    const v = $("knob-" + name).value.trim();
    if (v !== "") body[name] = Number(v);
  }
  const stops = $("knob-stop").value.split("\n").filter((s) => s !== "");
  if (stops.length) body.stop = stops;
  if ($("schema-on").checked) {
    body.response_format = { type: "json_schema", json_schema: { name: "answer", schema: JSON.parse($("schema").value) } };
  }
  if ($("tools-on").checked) body.tools = JSON.parse($("tools").value);
  return body;
}

// ---- rendering

function renderList() {
  const ul = $("conversations");
  ul.replaceChildren();
  for (const c of conversations) {
    const li = document.createElement("li");
    li.className = c.id === current ? "on" : "";
    const t = document.createElement("span");
    t.textContent = c.title;
    const del = document.createElement("button");
    del.textContent = "×";
    del.title = "Delete";
    del.addEventListener("click", (e) => {
      e.stopPropagation();
      conversations = conversations.filter((x) => x.id !== c.id);
      if (current === c.id) current = conversations[0]?.id ?? null;
      save();
      renderAll();
    });
    li.append(t, del);
    li.addEventListener("click", () => { current = c.id; renderAll(); });
    ul.append(li);
  }
}

function toolCard(call, result) {
  const card = document.createElement("div");
  card.className = "tool-card";
  const head = document.createElement("strong");
  head.textContent = `${call.function.name}(…)`;
  const args = document.createElement("pre");
  args.textContent = call.function.arguments;
  card.append(head, args);
  if (result !== undefined) {
    const r = document.createElement("pre");
    r.className = "result";
    r.textContent = "→ " + result;
    card.append(r);
  }
  return card;
}

/** The element of message `i` of `c`. */
function messageElement(c, i) {
  const m = c.messages[i];
  const div = document.createElement("div");
  div.className = "msg " + m.role;
  div.dataset.index = i;
  const who = document.createElement("div");
  who.className = "who";
  who.append(m.role === "tool" ? `tool result (${m.name || ""})` : m.role);
  if (m.role === "user" && !running) {
    const edit = document.createElement("button");
    edit.textContent = "Edit";
    edit.className = "edit";
    edit.addEventListener("click", () => {
      $("input").value = m.content;
      c.messages.splice(i);
      save();
      renderAll();
      $("input").focus();
    });
    who.append(edit);
  }
  div.append(who);
  if (m.image) {
    const img = document.createElement("img");
    img.src = m.image;
    img.alt = "attached image";
    div.append(img);
  }
  if (m.reasoning) {
    const d = document.createElement("details");
    d.className = "thinking";
    d.open = !!m.streaming;
    const s = document.createElement("summary");
    s.textContent = m.streaming && !m.content ? "Thinking…" : "Thought";
    const body = document.createElement("div");
    body.className = "reasoning";
    body.append(renderMarkdown(m.reasoning));
    d.append(s, body);
    div.append(d);
  }
  const content = document.createElement("div");
  content.className = "content";
  if (m.role === "tool") content.append(toolCard({ function: { name: m.name || "", arguments: "" } }, m.content));
  else content.append(renderMarkdown(m.content || ""));
  div.append(content);
  for (const call of m.tool_calls || []) {
    const answered = c.messages.find((x) => x.role === "tool" && x.tool_call_id === call.id);
    div.append(toolCard(call, answered?.content));
  }
  if (m.stats) {
    const st = document.createElement("div");
    st.className = "stats";
    st.textContent = m.stats;
    div.append(st);
  }
  return div;
}

function pendingCalls(c) {
  const last = c.messages[c.messages.length - 1];
  if (!last || last.role !== "assistant" || !last.tool_calls?.length) return [];
  return last.tool_calls;
}

function renderToolInputs(c) {
  const calls = pendingCalls(c);
  if (!calls.length || running) return;
  const box = document.createElement("div");
  box.className = "msg tool-inputs";
  const inputs = calls.map((call) => {
    const l = document.createElement("label");
    l.textContent = `Result of ${call.function.name}`;
    const i = document.createElement("input");
    i.type = "text";
    i.className = "tool-result";
    l.append(i);
    box.append(l);
    return [call, i];
  });
  const send = document.createElement("button");
  send.textContent = "Send results";
  send.className = "send-results";
  send.addEventListener("click", () => {
    for (const [call, i] of inputs) {
      c.messages.push({ role: "tool", tool_call_id: call.id, name: call.function.name, content: i.value });
    }
    save();
    complete(c);
  });
  box.append(send);
  $("messages").append(box);
}

function renderMessages() {
  const c = conversations.find((x) => x.id === current);
  const box = $("messages");
  box.replaceChildren();
  if (!c) return;
  c.messages.forEach((_, i) => box.append(messageElement(c, i)));
  renderToolInputs(c);
  box.scrollTop = box.scrollHeight;
}

function renderAll() {
  renderList();
  renderMessages();
  $("stop").hidden = !running;
  $("send").disabled = !!running;
  $("regenerate").disabled = !!running;
}

// ---- streaming

function apiMessages(c) {
  const out = [];
  const system = $("system").value.trim();
  if (system) out.push({ role: "system", content: system });
  for (const m of c.messages) {
    const msg = { role: m.role, content: m.content ?? "" };
    if (m.image) msg.content = [{ type: "text", text: m.content }, { type: "image_url", image_url: { url: m.image } }];
    if (m.tool_calls) msg.tool_calls = m.tool_calls;
    if (m.tool_call_id) msg.tool_call_id = m.tool_call_id;
    if (m.reasoning) msg.reasoning_content = m.reasoning;
    out.push(msg);
  }
  return out;
}

/** Streams the assistant's next message of `c`. */
async function complete(c) {
  let fields;
  try {
    fields = requestFields();
  } catch (e) {
    showError(`The JSON schema or tools are not valid JSON: ${e.message}`);
    return;
  }
  showError("");
  const m = { role: "assistant", content: "", reasoning: "", streaming: true };
  c.messages.push(m);
  running = new AbortController();
  renderAll();
  const body = { messages: apiMessages(c).slice(0, -1), stream: true, stream_options: { include_usage: true }, ...fields };
  if (model) body.model = model;
  const calls = [];
  let paint = null;
  const repaint = () => {
    paint ??= requestAnimationFrame(() => {
      paint = null;
      const el = $("messages").querySelector(`.msg[data-index="${c.messages.indexOf(m)}"]`);
      if (el) el.replaceWith(messageElement(c, c.messages.indexOf(m)));
      $("messages").scrollTop = $("messages").scrollHeight;
    });
  };
  try {
    for (;;) {
      const r = await fetch("/v1/chat/completions", {
        method: "POST", signal: running.signal,
        headers: { "Content-Type": "application/json", ...authHeaders() },
        body: JSON.stringify(body),
      });
      if (r.status === 401) {
        await askKey();
        continue;
      }
      if (!r.ok) throw new Error((await r.json()).error?.message ?? r.statusText);
      for await (const ev of events(r)) {
        if (ev.error) throw new Error(ev.error.message);
        if (ev.usage) {
          const speed = ev.timings?.predicted_per_second;
          m.stats = `${ev.model} · ${ev.usage.completion_tokens} tokens` + (speed ? ` · ${speed.toFixed(1)} tok/s` : "") +
            ` · prompt ${ev.usage.prompt_tokens} tokens`;
        }
        const d = ev.choices?.[0]?.delta;
        if (!d) continue;
        if (d.reasoning_content) m.reasoning += d.reasoning_content;
        if (d.content) m.content += d.content;
        for (const t of d.tool_calls || []) {
          const slot = (calls[t.index] ??= { id: t.id, type: "function", function: { name: "", arguments: "" } });
          if (t.id) slot.id = t.id;
          if (t.function?.name) slot.function.name += t.function.name;
          if (t.function?.arguments) slot.function.arguments += t.function.arguments;
        }
        if (calls.length) m.tool_calls = calls;
        repaint();
      }
      break;
    }
  } catch (e) {
    if (e.name !== "AbortError") showError(e.message);
  } finally {
    delete m.streaming;
    if (!m.reasoning) delete m.reasoning;
    running = null;
    if (c.title === "New chat") c.title = (c.messages.find((x) => x.role === "user")?.content || "Chat").slice(0, 40);
    save();
    renderAll();
  }
}

async function send(e) {
  e?.preventDefault();
  const text = $("input").value;
  if (running || (!text.trim() && !image)) return;
  const c = conversation();
  c.messages.push({ role: "user", content: text, ...(image ? { image } : {}) });
  $("input").value = "";
  image = null;
  $("attached").textContent = "";
  save();
  await complete(c);
}

function regenerate() {
  const c = conversations.find((x) => x.id === current);
  if (!c || running) return;
  while (c.messages.length && c.messages[c.messages.length - 1].role !== "user") c.messages.pop();
  if (c.messages.length) complete(c);
}

async function loadProps() {
  for (;;) {
    const r = await fetch("/props", { headers: authHeaders() });
    if (r.status === 401) {
      await askKey();
      continue;
    }
    if (!r.ok) return;
    const p = await r.json();
    if (p.role === "router") return loadModels();
    $("model").textContent = p.model_alias;
    $("attach").hidden = !p.modalities?.vision;
    return;
  }
}

/** A router's models, in the header's selector. */
async function loadModels() {
  const r = await fetch("/v1/models", { headers: authHeaders() });
  const list = (await r.json()).data.map((m) => m.id);
  if (!list.includes(model)) model = list[0] ?? "";
  const sel = $("model-select");
  sel.replaceChildren(...list.map((id) => {
    const o = document.createElement("option");
    o.value = o.textContent = id;
    return o;
  }));
  sel.value = model;
  sel.hidden = false;
}

function tab(engine) {
  $("chat-view").hidden = engine;
  $("engine-view").hidden = !engine;
  $("tab-chat").classList.toggle("on", !engine);
  $("tab-engine").classList.toggle("on", engine);
  if (engine) startEngineView(authHeaders, askKey, model);
  else stopEngineView();
}

buildKnobs();
$("composer").addEventListener("submit", send);
$("input").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey) send(e);
});
$("stop").addEventListener("click", () => running?.abort());
$("regenerate").addEventListener("click", regenerate);
$("new-chat").addEventListener("click", () => {
  current = null;
  conversation();
  save();
  renderAll();
});
$("key-button").addEventListener("click", askKey);
$("model-select").addEventListener("change", () => {
  model = $("model-select").value;
  localStorage.setItem("tandem.model", model);
});
$("tab-chat").addEventListener("click", () => tab(false));
$("tab-engine").addEventListener("click", () => tab(true));
$("image").addEventListener("change", () => {
  const f = $("image").files[0];
  if (!f) return;
  const r = new FileReader();
  r.onload = () => { image = r.result; $("attached").textContent = f.name; };
  r.readAsDataURL(f);
});
renderAll();
loadProps();
