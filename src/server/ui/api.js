// Calls to this server (same origin): the API key the page holds, sent as a bearer token, and
// the error message a refused request carries, whatever its shape.

const KEY_STORAGE = 'kiln.apiKey';

export function apiKey() {
  return sessionStorage.getItem(KEY_STORAGE) || '';
}

export function setApiKey(key) {
  if (key) sessionStorage.setItem(KEY_STORAGE, key);
  else sessionStorage.removeItem(KEY_STORAGE);
}

// fetch() with the key and, for a body, the JSON content type the server asks for.
export function apiFetch(path, { method = 'GET', body, signal } = {}) {
  const headers = {};
  const key = apiKey();
  if (key) headers.authorization = `Bearer ${key}`;
  if (body !== undefined) headers['content-type'] = 'application/json';
  return fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), signal });
}

// The message of an error response: OpenAI's {"error": {"message", "param"}}, KServe's
// {"error": "..."}, or the body as text.
export async function errorMessage(response) {
  const text = await response.text();
  let message = text.trim();
  try {
    const j = JSON.parse(text);
    if (j && typeof j.error === 'string') message = j.error;
    else if (j && j.error && typeof j.error.message === 'string') message = j.error.message;
  } catch {
    // not JSON: the text itself
  }
  return `${response.status} ${response.statusText || ''}`.trim() + (message ? `: ${message}` : '');
}
