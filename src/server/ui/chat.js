// The chat: the conversation, the request each send makes (system prompt, sampling fields,
// structured output) and the streamed answer as it arrives. A refused request shows the server's
// own message in the conversation; nothing is retried or hidden.

import { apiFetch, errorMessage } from './api.js';
import { sseEvents } from './sse.js';

const NUMBER_FIELDS = [
  ['temperature', Number], ['top_p', Number], ['top_k', Math.trunc], ['min_p', Number],
  ['repetition_penalty', Number], ['presence_penalty', Number], ['frequency_penalty', Number],
  ['max_tokens', Math.trunc], ['seed', Math.trunc],
];

export class Chat {
  constructor(modelSelect) {
    this.model = modelSelect;
    this.history = [];  // [{role, content}] of the turns that completed
    this.requests = 0;
    this.el = (id) => document.getElementById(id);
    this.messages = this.el('messages');
    this.prompt = this.el('prompt');
    this.el('composer').addEventListener('submit', (e) => { e.preventDefault(); this.send(); });
    this.prompt.addEventListener('keydown', (e) => {
      if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) { e.preventDefault(); this.send(); }
    });
    this.el('stop').addEventListener('click', () => this.controller?.abort());
    this.el('clear').addEventListener('click', () => {
      this.history = [];
      this.messages.replaceChildren();
    });
  }

  // The request body for `messages`, or throws an Error naming what the page cannot send.
  body(messages) {
    const body = { model: this.model.value || undefined, messages, stream: true,
                   stream_options: { include_usage: true } };
    for (const [name, convert] of NUMBER_FIELDS) {
      const raw = this.el(name).value.trim();
      if (raw === '') continue;
      const v = convert(Number(raw));
      if (!Number.isFinite(v)) throw new Error(`${name} must be a number; got '${raw}'`);
      body[name] = v;
    }
    const stop = this.el('stop-strings').value.split(',').map((s) => s.trim()).filter((s) => s);
    if (stop.length) body.stop = stop;
    const schemaText = this.el('schema').value.trim();
    if (schemaText) {
      let schema;
      try {
        schema = JSON.parse(schemaText);
      } catch (e) {
        throw new Error(`the JSON schema is not valid JSON: ${e.message}`);
      }
      const name = this.el('schema-name').value.trim() || 'answer';
      body.response_format = { type: 'json_schema', json_schema: { name, schema, strict: true } };
    }
    return body;
  }

  async send() {
    const text = this.prompt.value;
    if (!text.trim() || this.controller) return;
    const messages = [];
    const system = this.el('system').value.trim();
    if (system) messages.push({ role: 'system', content: system });
    messages.push(...this.history, { role: 'user', content: text });
    this.messages.querySelector('.hint')?.remove();
    this.addMessage('user', text);
    this.prompt.value = '';
    const reply = this.addMessage('assistant', '');
    let body;
    try {
      body = this.body(messages);
    } catch (e) {
      return this.fail(reply, e.message);
    }
    this.controller = new AbortController();
    this.el('send').disabled = true;
    this.el('stop').disabled = false;
    this.requests++;
    const started = performance.now();
    let content = '', finish = null, usage = null, firstToken = null;
    try {
      const r = await apiFetch('/v1/chat/completions', { method: 'POST', body, signal: this.controller.signal });
      if (!r.ok) return this.fail(reply, await errorMessage(r));
      for await (const data of sseEvents(r)) {
        const chunk = JSON.parse(data);
        if (chunk.error) return this.fail(reply, chunk.error.message || JSON.stringify(chunk.error), content);
        if (chunk.usage) usage = chunk.usage;
        for (const c of chunk.choices || []) {
          if (c.delta?.content) {
            if (firstToken === null) firstToken = performance.now();
            content += c.delta.content;
            reply.content.textContent = content;
            reply.root.dataset.chunks = String(Number(reply.root.dataset.chunks) + 1);
            this.messages.scrollTop = this.messages.scrollHeight;
          }
          if (c.finish_reason) finish = c.finish_reason;
        }
      }
    } catch (e) {
      return this.fail(reply, e.name === 'AbortError' ? 'stopped' : `the request failed: ${e.message}`, content);
    } finally {
      this.controller = null;
      this.el('send').disabled = false;
      this.el('stop').disabled = true;
    }
    this.history.push({ role: 'user', content: text }, { role: 'assistant', content });
    const seconds = (performance.now() - started) / 1000;
    const parts = [finish ? `finish: ${finish}` : 'no finish reason'];
    if (usage) parts.push(`${usage.completion_tokens} tokens`, `${(usage.completion_tokens / seconds).toFixed(1)} tokens/s`);
    if (firstToken !== null) parts.push(`first token ${((firstToken - started)).toFixed(0)} ms`);
    parts.push(`${seconds.toFixed(2)} s`);
    reply.meta.textContent = parts.join(' · ');
    reply.root.dataset.finishReason = finish || '';
    if (usage) reply.root.dataset.completionTokens = String(usage.completion_tokens);
    reply.root.dataset.state = 'done';
  }

  addMessage(role, text) {
    const root = document.createElement('div');
    root.className = `msg ${role}`;
    root.dataset.state = role === 'assistant' ? 'streaming' : 'done';
    root.dataset.chunks = '0';
    const who = document.createElement('div');
    who.className = 'who';
    who.textContent = role;
    const content = document.createElement('div');
    content.className = 'content';
    content.textContent = text;
    const meta = document.createElement('div');
    meta.className = 'meta';
    root.append(who, content, meta);
    this.messages.append(root);
    this.messages.scrollTop = this.messages.scrollHeight;
    return { root, content, meta };
  }

  // Shows `message` as the answer's error; text that arrived before it stays visible.
  fail(reply, message, partial = '') {
    reply.root.classList.add('error');
    reply.root.dataset.state = 'error';
    reply.content.textContent = partial;
    const e = document.createElement('div');
    e.className = 'error-text';
    e.textContent = message;
    reply.root.insertBefore(e, reply.meta);
  }
}
