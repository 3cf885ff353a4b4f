// The Prometheus text exposition format (what /metrics answers), read into samples, and the
// quantile of a histogram from its cumulative buckets, as PromQL's histogram_quantile does.

// [{name, labels: {k: v}, value}] of every sample line; comments and blank lines skipped.
export function parseMetrics(text) {
  const samples = [];
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const m = line.match(/^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)/);
    if (!m) continue;
    const labels = {};
    for (const kv of (m[2] || '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) {
      labels[kv[1]] = kv[2].replace(/\\(.)/g, (_, c) => (c === 'n' ? '\n' : c));
    }
    samples.push({ name: m[1], labels, value: parseValue(m[3]) });
  }
  return samples;
}

function parseValue(s) {
  if (s === '+Inf') return Infinity;
  if (s === '-Inf') return -Infinity;
  return Number(s);
}

// The sum of every sample of `name` (over all label sets), or null when there is none.
export function total(samples, name) {
  let sum = null;
  for (const s of samples) {
    if (s.name === name) sum = (sum ?? 0) + s.value;
  }
  return sum;
}

// A histogram's cumulative buckets, summed over label sets: [{le, count}] sorted by le.
export function buckets(samples, name) {
  const byLe = new Map();
  for (const s of samples) {
    if (s.name !== `${name}_bucket` || s.labels.le === undefined) continue;
    const le = parseValue(s.labels.le);
    byLe.set(le, (byLe.get(le) ?? 0) + s.value);
  }
  return [...byLe.entries()].map(([le, count]) => ({ le, count })).sort((a, b) => a.le - b.le);
}

// The buckets observed between two scrapes (later minus earlier; a counter reset keeps `later`).
export function bucketDelta(later, earlier) {
  if (!earlier || earlier.length !== later.length) return later;
  const d = later.map((b, i) => ({ le: b.le, count: b.count - earlier[i].count }));
  return d.some((b) => b.count < 0) ? later : d;
}

// The q-quantile (0..1) of cumulative buckets, interpolated linearly inside its bucket; null
// when no observation fell in. A quantile in the +Inf bucket is the largest finite bound.
export function histogramQuantile(q, cumulative) {
  if (!cumulative.length) return null;
  const count = cumulative[cumulative.length - 1].count;
  if (!(count > 0)) return null;
  const rank = q * count;
  let lowerBound = 0, lowerCount = 0;
  for (const b of cumulative) {
    if (b.count >= rank) {
      if (b.le === Infinity) return lowerBound;
      const inBucket = b.count - lowerCount;
      if (inBucket <= 0) return b.le;
      return lowerBound + (b.le - lowerBound) * ((rank - lowerCount) / inBucket);
    }
    lowerBound = b.le;
    lowerCount = b.count;
  }
  return lowerBound;
}
