// End-to-end tests of tool calls and the openai package's own helpers against `kiln serve` on the
// demo model (its template teaches hermes <tool_call> blocks): zodFunction tools through
// client.chat.completions.parse (tool_choice required, arguments parsed and checked by zod),
// client.chat.completions.stream assembling streamed calls to a named function, parallel calls
// allowed and not, zodResponseFormat, the round trip of a call and its result through the
// template, and the 400s for what cannot be honoured. Forced calls are written under a grammar,
// so even this small model's calls must parse and fit their schemas. Run by CTest (label e2e).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import path from 'node:path';
import { startServer, stopServer, post, openaiModule, E2E_DIR } from './server_helpers.mjs';

let server;
let client;
let model;
let z;
let helpers;

before(async () => {
  server = await startServer(['--max-num-seqs', '8']);
  const { default: OpenAI } = openaiModule();
  client = new OpenAI({ baseURL: server.base + '/v1', apiKey: 'unused', maxRetries: 0, timeout: 300000 });
  model = (await client.models.list()).data[0].id;
  const require = createRequire(path.join(E2E_DIR, 'package.json'));
  ({ z } = require('zod'));
  helpers = require('openai/helpers/zod');
});

after(async () => {
  assert.equal(await stopServer(server), 0);
});

// Strings are bounded: a grammar makes a call valid, not short, and this small model, once inside
// a free string, writes prose until the token limit.
const Weather = () => z.object({ city: z.string().max(24), unit: z.enum(['celsius', 'fahrenheit']), days: z.number().int() });
const Time = () => z.object({ timezone: z.string().max(16) });
const tools = () => [
  helpers.zodFunction({ name: 'get_weather', parameters: Weather(), description: 'The forecast for a city' }),
  helpers.zodFunction({ name: 'get_time', parameters: Time() }),
];
const ask = [{ role: 'user', content: 'What is the weather in Oslo, and the time there?' }];
// The same tools as plain JSON (not strict): the stream helper then does not parse, or throw on
// a choice cut by max_completion_tokens.
const plainTools = () => tools().map((t) => ({ type: 'function', function: { name: t.function.name, parameters: t.function.parameters } }));

test('parse() with zodFunction tools: tool_choice required gives calls whose arguments zod accepts', async () => {
  for (const seed of [1, 2, 3, 4]) {
    const r = await client.chat.completions.parse({
      model, messages: ask, tools: tools(), tool_choice: 'required', parallel_tool_calls: false, seed, temperature: 1,
    });
    const choice = r.choices[0];
    assert.equal(choice.finish_reason, 'tool_calls', `seed ${seed}`);
    assert.equal(choice.message.content, null);
    assert.equal(choice.message.tool_calls.length, 1);
    for (const call of choice.message.tool_calls) {
      assert.match(call.id, /^call_[0-9a-f]{24}$/);
      assert.equal(call.type, 'function');
      assert.ok(['get_weather', 'get_time'].includes(call.function.name), call.function.name);
      const schema = call.function.name === 'get_weather' ? Weather() : Time();
      // parse() has already parsed the arguments with the tool's zod schema; check them again.
      assert.deepEqual(call.function.parsed_arguments, schema.parse(JSON.parse(call.function.arguments)));
    }
  }
});

test('parallel calls: required writes one or more, each valid; a choice cut by the limit says length', async () => {
  let several = 0;
  for (const seed of [1, 2, 3, 4, 5, 6]) {
    const r = await client.chat.completions.create({
      model, messages: ask, tools: plainTools(), tool_choice: 'required', seed, temperature: 1, max_completion_tokens: 120,
    });
    const choice = r.choices[0];
    const calls = choice.message.tool_calls ?? [];
    assert.ok(['tool_calls', 'length'].includes(choice.finish_reason), choice.finish_reason);
    if (choice.finish_reason === 'tool_calls') {
      assert.ok(calls.length >= 1);
      assert.equal(choice.message.content, null);
    } else {
      // Cut inside a call: the complete calls come back, the unfinished one as the text it was.
      const rest = (choice.message.content ?? '').trim();
      assert.ok(rest === '' || rest.startsWith('<tool_call>') || '<tool_call>'.startsWith(rest), choice.message.content);
    }
    for (const call of calls) (call.function.name === 'get_weather' ? Weather() : Time()).parse(JSON.parse(call.function.arguments));
    if (calls.length > 1) ++several;
  }
  console.log(`${several} of 6 choices made more than one call`);
});

test('stream() assembles a streamed call to a named function; parallel_tool_calls false gives one call', async () => {
  const events = [];
  const stream = client.chat.completions.stream({
    model, messages: ask, tools: tools(), seed: 7, temperature: 1,
    tool_choice: { type: 'function', function: { name: 'get_weather' } }, parallel_tool_calls: false,
  });
  stream.on('tool_calls.function.arguments.done', (e) => events.push(e));
  const chunks = [];
  stream.on('chunk', (c) => chunks.push(c));
  const final = await stream.finalChatCompletion();
  const choice = final.choices[0];
  assert.equal(choice.finish_reason, 'tool_calls');
  assert.equal(choice.message.tool_calls.length, 1);
  const call = choice.message.tool_calls[0];
  assert.equal(call.function.name, 'get_weather');
  const args = Weather().parse(JSON.parse(call.function.arguments));
  assert.deepEqual(call.function.parsed_arguments, args);
  assert.equal(events.length, 1);
  assert.equal(events[0].name, 'get_weather');
  assert.deepEqual(events[0].parsed_arguments, args);
  // The call came as OpenAI streams one: a piece with id, type and name, then its arguments.
  const pieces = chunks.flatMap((c) => c.choices[0]?.delta?.tool_calls ?? []);
  assert.ok(pieces.length >= 2);
  assert.equal(pieces[0].id, call.id);
  assert.equal(pieces[0].function.name, 'get_weather');
  assert.equal(pieces.map((p) => p.function.arguments ?? '').join(''), call.function.arguments);
  assert.equal(chunks[0].choices[0].delta.role, 'assistant');

  // Without streaming, several seeds: one call each, always to the named function.
  for (const seed of [11, 12, 13]) {
    const r = await client.chat.completions.create({
      model, messages: ask, tools: tools(), seed, temperature: 1, parallel_tool_calls: false,
      tool_choice: { type: 'function', function: { name: 'get_time' } },
    });
    assert.equal(r.choices[0].message.tool_calls.length, 1);
    assert.equal(r.choices[0].message.tool_calls[0].function.name, 'get_time');
    Time().parse(JSON.parse(r.choices[0].message.tool_calls[0].function.arguments));
  }
});

test('tool_choice auto answers with text or calls, each well formed; none hides the tools', async () => {
  for (const stream of [false, true]) {
    const params = { model, messages: ask, tools: plainTools(), tool_choice: 'auto', max_completion_tokens: 24, seed: 5 };
    const r = stream ? await client.chat.completions.stream(params).finalChatCompletion()
      : await client.chat.completions.create(params);
    const m = r.choices[0].message;
    if (m.tool_calls?.length) {
      assert.equal(r.choices[0].finish_reason, 'tool_calls');
      for (const c of m.tool_calls) JSON.parse(c.function.arguments);
    } else {
      assert.equal(typeof m.content, 'string');
      assert.ok(['stop', 'length'].includes(r.choices[0].finish_reason));
    }
  }
  const shown = await post(server.base, '/tokenize', { model, messages: ask, tools: tools() });
  const hidden = await post(server.base, '/tokenize', { model, messages: ask, tools: tools(), tool_choice: 'none' });
  assert.equal(shown.status, 200, shown.text);
  assert.equal(hidden.status, 200, hidden.text);
  assert.ok(shown.json.count > hidden.json.count + 20, `${shown.json.count} tokens with the tools, ${hidden.json.count} without`);
});

test('a call and its result round-trip through the chat template', async () => {
  const first = await client.chat.completions.create({
    model, messages: ask, tools: tools(), seed: 3, tool_choice: { type: 'function', function: { name: 'get_weather' } },
  });
  const call = first.choices[0].message.tool_calls[0];
  const messages = [...ask, first.choices[0].message,
    { role: 'tool', tool_call_id: call.id, content: JSON.stringify({ forecast: 'snow', high: -3 }) }];
  const second = await client.chat.completions.create({ model, messages, tools: tools(), max_completion_tokens: 8 });
  assert.equal(second.choices[0].message.role, 'assistant');
  assert.ok(second.usage.prompt_tokens > first.usage.prompt_tokens);
  // The rendered conversation holds the call as the model writes calls, and the tool's answer.
  const ids = (await post(server.base, '/tokenize', { model, messages, tools: tools() })).json.tokens;
  const text = (await post(server.base, '/detokenize', { model, tokens: ids })).json.prompt;
  assert.ok(text.includes(`<tool_call>\n{"name": "get_weather", "arguments": ${call.function.arguments}}\n</tool_call>`), text);
  assert.ok(text.includes('<tool_response>\n{"forecast":"snow","high":-3}\n</tool_response>'), text);
});

test('zodResponseFormat through parse(): the parsed message fits the schema', async () => {
  const Answer = z.object({ city: z.string(), warm: z.boolean(), temps: z.array(z.number()).max(3) });
  for (const seed of [1, 2]) {
    const r = await client.chat.completions.parse({
      model, messages: ask, response_format: helpers.zodResponseFormat(Answer, 'answer'), seed, temperature: 1,
    });
    assert.equal(r.choices[0].finish_reason, 'stop');
    assert.deepEqual(r.choices[0].message.parsed, Answer.parse(JSON.parse(r.choices[0].message.content)));
  }
});

test('what cannot be honoured is a 400 naming the field', async () => {
  const fn = (name, parameters) => ({ type: 'function', function: { name, parameters } });
  const cases = [
    [{ tools: [fn('a', { type: 'object' })], tool_choice: { type: 'function', function: { name: 'b' } } }, 'tool_choice', /'b', which is not in tools/],
    [{ tool_choice: 'required' }, 'tool_choice', /only allowed when tools are given/],
    [{ parallel_tool_calls: true }, 'parallel_tool_calls', /only allowed when tools are given/],
    [{ tools: [{ type: 'retrieval' }] }, 'tools[0].type', /must be "function"/],
    [{ tools: [fn('bad name', {})] }, 'tools[0].function.name', /letters, digits/],
    [{ tools: [{ type: 'function', function: { name: 'a', color: 'red' } }] }, 'tools[0].function.color', /./],
    [{ tools: [fn('a', {}), fn('a', {})] }, 'tools', /twice/],
    [{ tools: [], tool_choice: 'auto' }, 'tools', /non-empty/],
    [{ tools: [fn('a', { type: 'object', patternProperties: {} })], tool_choice: 'required' }, 'tools', /patternProperties/],
    [{ tools: [fn('a', { type: 'object' })], tool_choice: 'sometimes' }, 'tool_choice', /none, auto, required/],
    [{ tools: [fn('a', { type: 'object' })], tool_choice: 'required', response_format: { type: 'json_object' } }, 'tool_choice', /response_format/],
  ];
  for (const [extra, param, message] of cases) {
    const r = await post(server.base, '/v1/chat/completions', { model, messages: ask, ...extra });
    assert.equal(r.status, 400, `${JSON.stringify(extra)}: ${r.text}`);
    assert.equal(r.json.error.param, param, r.text);
    assert.match(r.json.error.message, message);
  }
});
