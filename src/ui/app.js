// sluice chat page: streams answers from /v1/chat/completions, keeps conversations in
// localStorage, renders assistant Markdown safely. No dependencies, no build step.

import { renderMarkdown } from "./markdown.js";

/** Shows model output as Markdown; should rendering ever fail, as plain text. */
function showMarkdown(node, text) {
  try {
    node.innerHTML = renderMarkdown(text);
  } catch {
    node.textContent = text;
  }
}

const STORE = {
  conversations: "sluice.conversations",
  current: "sluice.current",
  settings: "sluice.settings",
  apiKey: "sluice.apiKey",
};

const $ = (id) => document.getElementById(id);
const el = {
  sidebar: $("sidebar"),
  sidebarToggle: $("sidebar-toggle"),
  backdrop: $("backdrop"),
  newChat: $("new-chat"),
  list: $("conversations"),
  modelId: $("model-id"),
  modelPicker: $("model-picker"),
  tps: $("tps"),
  settingsToggle: $("settings-toggle"),
  settings: $("settings"),
  messages: $("messages"),
  composer: $("composer"),
  prompt: $("prompt"),
  send: $("send"),
  stop: $("stop"),
  keyDialog: $("api-key-dialog"),
  keyForm: $("api-key-form"),
  keyMessage: $("api-key-message"),
  keyInput: $("api-key-input"),
  keyCancel: $("api-key-cancel"),
};

// Settings fields: key in sluice.settings -> input id.
const FIELDS = {
  systemPrompt: "system-prompt",
  temperature: "temperature",
  topP: "top-p",
  maxTokens: "max-tokens",
  seed: "seed",
  thinkingBudget: "thinking-budget",
};

// ---------------------------------------------------------------- storage

function loadJson(key, fallback) {
  try {
    return JSON.parse(localStorage.getItem(key)) ?? fallback;
  } catch {
    return fallback;
  }
}

function saveJson(key, value) {
  try {
    localStorage.setItem(key, JSON.stringify(value));
  } catch (e) {
    console.warn(`could not save ${key}:`, e);
  }
}

/** Conversations from storage, dropping anything malformed. */
function loadConversations() {
  const list = loadJson(STORE.conversations, []);
  if (!Array.isArray(list)) return [];
  return list
    .filter((c) => c && typeof c.id === "string" && Array.isArray(c.messages))
    .map((c) => ({
      id: c.id,
      title: String(c.title ?? ""),
      created: Number(c.created) || 0,
      messages: c.messages
        .filter((m) => m && ["user", "assistant"].includes(m.role) && typeof m.content === "string")
        .map((m) => ({
          role: m.role,
          content: m.content,
          ...(typeof m.reasoning === "string" && m.reasoning ? { reasoning: m.reasoning } : {}),
        })),
    }));
}

let conversations = loadConversations();
let currentId = localStorage.getItem(STORE.current);
if (!conversations.some((c) => c.id === currentId)) currentId = conversations[0]?.id ?? null;
let settings = loadJson(STORE.settings, {});
let streaming = null; // {controller} while an answer streams

const current = () => conversations.find((c) => c.id === currentId) ?? null;

function persist() {
  saveJson(STORE.conversations, conversations);
  if (currentId) localStorage.setItem(STORE.current, currentId);
  else localStorage.removeItem(STORE.current);
}

const newId = () => Date.now().toString(36) + Math.random().toString(36).slice(2, 8);

function titleOf(text) {
  const t = text.trim().replace(/\s+/g, " ");
  return t.length > 40 ? t.slice(0, 40) + "\u2026" : t;
}

// ---------------------------------------------------------------- API

/** Message of an error response ({"error": {"message"}}), or its status line. */
async function errorMessage(res) {
  try {
    const body = await res.json();
    if (body?.error?.message) return body.error.message;
  } catch {
    // not JSON
  }
  return `HTTP ${res.status} ${res.statusText}`.trim();
}

/** fetch with the stored API key; on 401 asks for a key and retries. */
async function api(path, init = {}) {
  for (;;) {
    const headers = { ...init.headers };
    const key = localStorage.getItem(STORE.apiKey);
    if (key) headers.Authorization = `Bearer ${key}`;
    const res = await fetch(path, { ...init, headers });
    if (res.status !== 401) return res;
    const message = await errorMessage(res);
    if (!(await askForKey(message))) throw new Error(message);
  }
}

let keyWaiters = []; // resolvers of askForKey() calls waiting for the dialog

/** Shows the key dialog; resolves true once a key is saved, false if cancelled. */
function askForKey(message) {
  return new Promise((resolve) => {
    keyWaiters.push(resolve);
    if (el.keyDialog.open) return;
    el.keyMessage.textContent = message || "This server needs an API key.";
    el.keyInput.value = "";
    el.keyDialog.returnValue = "";
    el.keyDialog.showModal();
    el.keyInput.focus();
  });
}

el.keyForm.addEventListener("submit", (e) => {
  e.preventDefault();
  const key = el.keyInput.value.trim();
  if (!key) return el.keyInput.focus();
  localStorage.setItem(STORE.apiKey, key);
  el.keyDialog.close("saved");
});
el.keyCancel.addEventListener("click", () => el.keyDialog.close("cancelled"));
el.keyDialog.addEventListener("close", () => {
  // Chromium hands focus back to the prompt without a caret: typing would go nowhere.
  el.prompt.blur();
  el.prompt.focus();
  const saved = el.keyDialog.returnValue === "saved";
  const waiters = keyWaiters;
  keyWaiters = [];
  for (const resolve of waiters) resolve(saved);
});

async function loadModel() {
  try {
    const res = await api("/v1/models");
    if (!res.ok) throw new Error(await errorMessage(res));
    const body = await res.json();
    const models = body?.data ?? [];
    if (models.length > 1) {
      // Several models: a picker (unloaded ones load on their first message).
      el.modelId.textContent = "";
      el.modelPicker.replaceChildren(
        ...models.map((m) => {
          const option = document.createElement("option");
          option.value = m.id;
          option.textContent = m.status === "loaded" ? m.id : `${m.id} (${m.status})`;
          return option;
        }),
      );
      const saved = models.some((m) => m.id === settings.model);
      el.modelPicker.value = saved ? settings.model : models[0].id;
      el.modelPicker.hidden = false;
    } else {
      el.modelPicker.hidden = true;
      el.modelId.textContent = models[0]?.id ?? "";
      el.modelId.title = "Model";
    }
  } catch (e) {
    el.modelId.textContent = "model unavailable";
    el.modelId.title = e.message;
  }
}

/** Number from a settings string, or undefined when empty or not a number. */
function num(value, integer) {
  if (value === undefined || value === null || String(value).trim() === "") return undefined;
  const n = Number(value);
  if (!Number.isFinite(n)) return undefined;
  return integer ? Math.trunc(n) : n;
}

function requestBody(messages) {
  const all = [];
  if (settings.systemPrompt?.trim()) all.push({ role: "system", content: settings.systemPrompt });
  for (const { role, content } of messages) all.push({ role, content });
  const body = { messages: all, stream: true, stream_options: { include_usage: true } };
  if (!el.modelPicker.hidden) body.model = el.modelPicker.value;
  const optional = {
    temperature: num(settings.temperature),
    top_p: num(settings.topP),
    max_tokens: num(settings.maxTokens, true),
    seed: num(settings.seed, true),
    thinking_token_budget: num(settings.thinkingBudget, true),
  };
  for (const [k, v] of Object.entries(optional)) if (v !== undefined) body[k] = v;
  return body;
}

/** The data of each server-sent event of a response body. */
async function* sseData(stream) {
  const reader = stream.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  let data = [];
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let nl;
      while ((nl = buffer.indexOf("\n")) >= 0) {
        const line = buffer.slice(0, nl).replace(/\r$/, "");
        buffer = buffer.slice(nl + 1);
        if (line === "") {
          if (data.length) yield data.join("\n");
          data = [];
        } else if (line.startsWith("data:")) {
          data.push(line.slice(5).replace(/^ /, ""));
        } // comments (":") and other fields are ignored
      }
    }
    if (data.length) yield data.join("\n");
  } finally {
    reader.cancel().catch(() => {});
  }
}

// ---------------------------------------------------------------- chat

async function send() {
  const text = el.prompt.value;
  if (streaming || !text.trim()) return;
  el.prompt.value = "";
  let conv = current();
  if (!conv) {
    conv = { id: newId(), title: titleOf(text), messages: [], created: Date.now() };
    conversations.unshift(conv);
    currentId = conv.id;
  }
  conv.messages.push({ role: "user", content: text });
  persist();
  renderSidebar();
  appendMessage("user", text);
  const node = appendMessage("assistant", "");
  await answer(conv, node);
}

/** Streams the answer to conv into node (a .msg.assistant element). */
async function answer(conv, node) {
  const controller = new AbortController();
  streaming = { controller };
  setBusy(true);
  node.classList.add("streaming");
  const body = node.querySelector(".body");
  let content = "";
  let reasoning = "";
  let thinking = null; // the folded thinking element, once the model thinks
  let deltas = 0;
  let first = 0;
  let usage = null;
  let finished = false;
  let error = null;
  try {
    const res = await api("/v1/chat/completions", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(requestBody(conv.messages)),
      signal: controller.signal,
    });
    if (!res.ok) throw new Error(await errorMessage(res));
    for await (const data of sseData(res.body)) {
      if (data === "[DONE]") {
        finished = true;
        break;
      }
      let chunk;
      try {
        chunk = JSON.parse(data);
      } catch {
        continue;
      }
      if (chunk.error) throw new Error(chunk.error.message || "the server reported an error");
      if (chunk.usage) usage = chunk.usage;
      const thought = chunk.choices?.[0]?.delta?.reasoning_content;
      if (thought) {
        if (!first) first = performance.now();
        reasoning += thought;
        deltas += 1;
        thinking ??= addThinking(node, true);
        thinking.querySelector(".thought").textContent = reasoning;
      }
      const piece = chunk.choices?.[0]?.delta?.content;
      if (piece) {
        if (thinking) thinking.classList.remove("active");
        if (!first) first = performance.now();
        content += piece;
        deltas += 1;
        const stick = nearBottom();
        showMarkdown(body, content);
        if (stick) scrollToBottom();
      }
    }
    if (!finished) throw new Error("The connection closed before the answer was complete.");
  } catch (e) {
    if (e.name !== "AbortError") error = e.message || String(e);
  }
  const end = performance.now();
  const stopped = controller.signal.aborted;
  streaming = null;

  thinking?.classList.remove("active");
  if (content || reasoning) {
    conv.messages.push({ role: "assistant", content, ...(reasoning ? { reasoning } : {}) });
    persist();
  }
  showMarkdown(body, content);
  node.classList.remove("streaming");
  if (error) {
    node.classList.add("error");
    addNote(node, error, "error-text");
  } else if (stopped) {
    addNote(node, "Stopped.", "note");
  }
  const tokens = usage?.completion_tokens ?? deltas;
  const seconds = (end - first) / 1000;
  if (first && tokens && seconds > 0) el.tps.textContent = `${(tokens / seconds).toFixed(1)} tok/s`;
  setBusy(false);
  if (node.isConnected) scrollToBottom();
}

function stop() {
  streaming?.controller.abort();
}

function setBusy(busy) {
  el.send.hidden = busy;
  el.send.disabled = busy;
  el.stop.hidden = !busy;
  if (!busy) el.prompt.focus();
}

// ---------------------------------------------------------------- rendering

function addNote(node, text, cls) {
  const note = document.createElement("div");
  note.className = cls;
  note.textContent = text;
  node.append(note);
}

/**
 * Adds a reasoning model's thinking to an assistant message, folded (before its body);
 * `active` while the thinking streams.
 */
function addThinking(node, active) {
  const details = document.createElement("details");
  details.className = active ? "thinking active" : "thinking";
  const summary = document.createElement("summary");
  summary.textContent = "Thinking";
  const thought = document.createElement("div");
  thought.className = "thought";
  details.append(summary, thought);
  node.prepend(details);
  return details;
}

/**
 * Adds a message; user text is plain text, assistant text is rendered Markdown, with its
 * thinking (if any) folded above it.
 */
function appendMessage(role, content, reasoning) {
  el.messages.querySelector(".empty")?.remove();
  const div = document.createElement("div");
  div.className = `msg ${role}`;
  if (role === "user") {
    div.textContent = content;
  } else {
    const body = document.createElement("div");
    body.className = "body";
    showMarkdown(body, content);
    div.append(body);
    if (reasoning) addThinking(div, false).querySelector(".thought").textContent = reasoning;
  }
  el.messages.append(div);
  scrollToBottom();
  return div;
}

function renderMessages() {
  el.messages.replaceChildren();
  const conv = current();
  if (!conv || conv.messages.length === 0) {
    const empty = document.createElement("p");
    empty.className = "empty";
    empty.textContent = "Ask anything. Enter sends, Shift+Enter starts a new line.";
    el.messages.append(empty);
    return;
  }
  for (const m of conv.messages) appendMessage(m.role, m.content, m.reasoning);
}

function renderSidebar() {
  const items = conversations.map((c) => {
    const li = document.createElement("li");
    li.dataset.id = c.id;
    li.title = c.title;
    if (c.id === currentId) li.classList.add("active");
    const title = document.createElement("span");
    title.className = "title";
    title.textContent = c.title || "New chat";
    const del = document.createElement("button");
    del.type = "button";
    del.className = "delete";
    del.textContent = "\u00d7";
    del.setAttribute("aria-label", "Delete conversation");
    del.title = "Delete";
    li.append(title, del);
    return li;
  });
  el.list.replaceChildren(...items);
}

const nearBottom = () =>
  el.messages.scrollHeight - el.messages.scrollTop - el.messages.clientHeight < 80;
const scrollToBottom = () => {
  el.messages.scrollTop = el.messages.scrollHeight;
};

function show(id) {
  if (id !== null && id === currentId) {
    setSidebar(false);
    return;
  }
  stop();
  currentId = id;
  persist();
  renderSidebar();
  renderMessages();
  setSidebar(false);
  el.prompt.focus();
}

function remove(id) {
  if (id === currentId) stop();
  conversations = conversations.filter((c) => c.id !== id);
  if (id === currentId) currentId = null;
  persist();
  renderSidebar();
  renderMessages();
}

function setSidebar(open) {
  document.body.classList.toggle("sidebar-open", open);
  el.sidebarToggle.setAttribute("aria-expanded", String(open));
}

// ---------------------------------------------------------------- events

el.composer.addEventListener("submit", (e) => {
  e.preventDefault();
  send();
});
el.prompt.addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
    e.preventDefault();
    send();
  }
});
el.stop.addEventListener("click", stop);
el.newChat.addEventListener("click", () => show(null));
el.list.addEventListener("click", (e) => {
  const li = e.target.closest("li[data-id]");
  if (!li) return;
  if (e.target.closest(".delete")) remove(li.dataset.id);
  else show(li.dataset.id);
});
el.sidebarToggle.addEventListener("click", () =>
  setSidebar(!document.body.classList.contains("sidebar-open")),
);
el.backdrop.addEventListener("click", () => setSidebar(false));
el.settingsToggle.addEventListener("click", () => {
  el.settings.hidden = !el.settings.hidden;
  el.settingsToggle.setAttribute("aria-expanded", String(!el.settings.hidden));
});
el.settings.addEventListener("submit", (e) => e.preventDefault());
el.modelPicker.addEventListener("change", () => {
  settings = { ...settings, model: el.modelPicker.value };
  saveJson(STORE.settings, settings);
});
for (const [key, id] of Object.entries(FIELDS)) {
  const input = $(id);
  input.value = settings[key] ?? "";
  input.addEventListener("input", () => {
    settings = { ...settings, [key]: input.value };
    saveJson(STORE.settings, settings);
  });
}

renderSidebar();
renderMessages();
el.prompt.focus();
loadModel();
