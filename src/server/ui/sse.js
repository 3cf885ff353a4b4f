// Server-sent events from a fetch() response body: yields the data of each event (its "data:"
// lines joined by newlines), and stops at the stream's end or at "[DONE]".

export async function* sseEvents(response) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  try {
    for (;;) {
      const { value, done } = await reader.read();
      buffer += decoder.decode(value || new Uint8Array(), { stream: !done });
      // Events end with a blank line; a stream may use \r\n or \n.
      buffer = buffer.replace(/\r\n?/g, '\n');
      let end;
      while ((end = buffer.indexOf('\n\n')) >= 0) {
        const data = eventData(buffer.slice(0, end));
        buffer = buffer.slice(end + 2);
        if (data === null) continue;
        if (data === '[DONE]') return;
        yield data;
      }
      if (done) {
        const data = eventData(buffer);
        if (data !== null && data !== '[DONE]') yield data;
        return;
      }
    }
  } finally {
    reader.releaseLock();
  }
}

// The data of one event's text, or null when it has none (a comment, a keep-alive).
function eventData(text) {
  const lines = [];
  for (const line of text.split('\n')) {
    if (line === 'data' || line.startsWith('data:')) {
      const v = line.slice(5);
      lines.push(v.startsWith(' ') ? v.slice(1) : v);
    }
  }
  return lines.length ? lines.join('\n') : null;
}
