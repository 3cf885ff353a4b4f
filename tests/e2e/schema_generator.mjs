// A seeded generator of JSON Schemas in the subset structured outputs supports: objects (required
// and optional properties, closed or open), arrays with bounds, enums, const, anyOf, $ref into
// $defs (recursive too), strings with patterns, formats and lengths, integers and numbers with
// inclusive and exclusive bounds, booleans and null. Bounded so that a small model's outputs fit
// in a few hundred tokens. Used by tests/e2e/structured_outputs_test.mjs and
// bench/structured_fidelity.mjs.

// mulberry32: a small seeded generator, [0, 1).
export function seededRandom(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const NAMES = ['name', 'id', 'title', 'count', 'price', 'tags', 'when', 'kind', 'email', 'items', 'owner', 'score',
  'active', 'note', 'code', 'level'];
const PATTERNS = ['[a-z]{2,6}', '[A-Z][a-z]{1,6}', '\\d{3}-\\d{4}', '(foo|bar|baz)[0-9]?', '[A-F0-9]{4}', 'x+y?z{1,2}'];
const FORMATS = ['date', 'time', 'date-time', 'email', 'uuid', 'ipv4'];

export function generateSchema(seed) {
  const rnd = seededRandom(seed);
  const pick = (list) => list[Math.floor(rnd() * list.length)];
  const int = (lo, hi) => lo + Math.floor(rnd() * (hi - lo + 1));
  const defs = {};
  let defCount = 0;

  const scalar = () => {
    switch (int(0, 9)) {
      case 0: return { type: 'string', pattern: pick(PATTERNS) };
      case 1: return { type: 'string', format: pick(FORMATS) };
      case 2: { const min = int(0, 3); return { type: 'string', minLength: min, maxLength: min + int(0, 8) }; }
      case 3: {
        const s = { type: 'integer' };
        if (rnd() < 0.7) s[rnd() < 0.5 ? 'minimum' : 'exclusiveMinimum'] = int(-50, 50);
        if (rnd() < 0.7) s[rnd() < 0.5 ? 'maximum' : 'exclusiveMaximum'] = (s.minimum ?? s.exclusiveMinimum ?? -60) + int(2, 500);
        return s;
      }
      case 4: {
        const s = { type: 'number' };
        if (rnd() < 0.7) s[rnd() < 0.5 ? 'minimum' : 'exclusiveMinimum'] = int(-20, 20) + (rnd() < 0.3 ? 0.5 : 0);
        if (rnd() < 0.7) s[rnd() < 0.5 ? 'maximum' : 'exclusiveMaximum'] = (s.minimum ?? s.exclusiveMinimum ?? -30) + int(2, 100);
        return s;
      }
      case 5: return { enum: ['red', 'green', 'blue', 7, null].slice(0, int(2, 5)) };
      case 6: return { type: 'boolean', description: 'a flag' };
      case 7: return { type: ['string', 'null'], maxLength: int(1, 10) };
      case 8: return { const: pick(['v1', 42, true]) };
      default: return { type: 'integer', title: 'plain' };
    }
  };

  const schema = (depth) => {
    if (depth >= 2) return scalar();
    switch (int(0, 7)) {
      case 0: case 1: return object(depth);
      case 2: return { type: 'array', items: schema(depth + 1), minItems: int(0, 1), maxItems: int(1, 3) };
      case 3: return { anyOf: [schema(depth + 1), scalar()] };
      case 4: {
        const name = `Def${defCount++}`;
        defs[name] = schema(depth + 1);
        return { $ref: `#/$defs/${name}`, description: 'a reference' };
      }
      case 5: {
        // A recursive list: each node may hold the next one.
        const name = `Node${defCount++}`;
        defs[name] = {
          type: 'object',
          properties: { value: scalar(), next: { anyOf: [{ $ref: `#/$defs/${name}` }, { type: 'null' }] } },
          required: ['value', 'next'], additionalProperties: false,
        };
        return { $ref: `#/$defs/${name}` };
      }
      default: return scalar();
    }
  };

  const object = (depth) => {
    const properties = {};
    const count = int(1, 3);
    const names = [...NAMES].sort(() => rnd() - 0.5).slice(0, count);
    for (const n of names) properties[n] = schema(depth + 1);
    const required = names.filter(() => rnd() < 0.7);
    const s = { type: 'object', properties, required };
    if (rnd() < 0.9) s.additionalProperties = false;
    return s;
  };

  const root = object(0);
  if (defCount) root.$defs = defs;
  return root;
}
