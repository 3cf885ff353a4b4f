// The playground's entry: the API key field, the model list, the two views (chat and dashboard).
// `window.kilnPlayground` holds the chat and the dashboard, so that what the page shows can be read
// from a script (the end-to-end test does).

import { apiFetch, apiKey, setApiKey, errorMessage } from './api.js';
import { Chat } from './chat.js';
import { Dashboard } from './dashboard.js';

const $ = (id) => document.getElementById(id);

async function loadModels() {
  const status = $('server-status');
  try {
    const r = await apiFetch('/v1/models', { signal: AbortSignal.timeout(10000) });
    if (!r.ok) {
      status.dataset.state = r.status === 401 ? 'unauthorized' : 'error';
      status.textContent = r.status === 401 ? `this server needs an API key (${await errorMessage(r)})`
                                            : `/v1/models: ${await errorMessage(r)}`;
      return;
    }
    const list = await r.json();
    const select = $('model');
    const chosen = select.value;
    select.replaceChildren(...list.data.map((m) => new Option(m.id, m.id)));
    if (chosen && list.data.some((m) => m.id === chosen)) select.value = chosen;
    const first = list.data[0];
    status.dataset.state = 'ok';
    status.textContent = first?.max_model_len ? `context ${first.max_model_len} tokens` : 'connected';
  } catch (e) {
    status.dataset.state = 'error';
    status.textContent = `the server does not answer: ${e.message}`;
  }
}

function showView(name) {
  for (const view of ['chat', 'dashboard']) {
    $(`tab-${view}`).setAttribute('aria-selected', String(view === name));
    $(`view-${view}`).hidden = view !== name;
  }
  // A canvas that was hidden has no size until it is shown.
  if (name === 'dashboard') playground.dashboard.render();
}

const playground = {};
window.kilnPlayground = playground;

function start() {
  const key = $('api-key');
  key.value = apiKey();
  key.addEventListener('change', () => { setApiKey(key.value.trim()); loadModels(); });
  $('tab-chat').addEventListener('click', () => showView('chat'));
  $('tab-dashboard').addEventListener('click', () => showView('dashboard'));
  playground.chat = new Chat($('model'));
  playground.dashboard = new Dashboard();
  playground.dashboard.start();
  playground.models = loadModels();
  if (location.hash === '#dashboard') showView('dashboard');
}

start();
