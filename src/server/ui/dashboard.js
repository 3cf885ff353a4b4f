// The live dashboard: scrapes /metrics every few seconds, turns counters into rates and
// histograms into windowed percentiles, and draws them. Everything plotted is kept in
// `dashboard.history` (one point a scrape) and in each chart's `data`.

import { apiFetch, errorMessage } from './api.js';
import { parseMetrics, total, buckets, bucketDelta, histogramQuantile } from './prometheus.js';
import { LineChart, formatNumber } from './line_chart.js';

const KEEP_MS = 120000;  // points older than this leave the charts
const ms = (seconds) => (seconds === null ? null : seconds * 1000);
const percent = (ratio) => (ratio === null ? null : ratio * 100);

export class Dashboard {
  constructor() {
    this.scrapes = [];  // [{t, counters..., ttft, itl}]: the raw readings
    this.history = [];  // [{t, requests_per_s, ...}]: what the charts draw
    this.totals = {};
    this.scrapeCount = 0;
    this.state = 'starting';
    this.status = document.getElementById('metrics-status');
    this.refresh = document.getElementById('refresh');
    this.window = document.getElementById('window');
    this.tiles = document.getElementById('tiles');
    const ms1 = { format: (v) => formatNumber(v) };
    this.charts = {
      requests: new LineChart(document.getElementById('chart-requests'), [{ label: 'requests/s' }]),
      tokens: new LineChart(document.getElementById('chart-tokens'), [{ label: 'generated/s' }, { label: 'prompt/s' }]),
      running: new LineChart(document.getElementById('chart-running'), [{ label: 'running' }, { label: 'waiting' }]),
      cache: new LineChart(document.getElementById('chart-cache'), [{ label: 'KV usage %' }, { label: 'prefix hits %' }],
                           { minMax: 100 }),
      ttft: new LineChart(document.getElementById('chart-ttft'), [{ label: 'p50' }, { label: 'p90' }, { label: 'p99' }], ms1),
      itl: new LineChart(document.getElementById('chart-itl'), [{ label: 'p50' }, { label: 'p90' }, { label: 'p99' }], ms1),
    };
    this.refresh.addEventListener('change', () => this.schedule(0));
  }

  start() { this.schedule(0); }

  schedule(delay) {
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.scrape(), delay);
  }

  setStatus(state, text) {
    this.state = state;
    this.status.dataset.state = state;
    this.status.textContent = text;
  }

  async scrape() {
    try {
      const r = await apiFetch('/metrics', { signal: AbortSignal.timeout(5000) });
      if (r.status === 401) {
        this.setStatus('unauthorized', `/metrics needs the API key: enter it above (${await errorMessage(r)})`);
      } else if (!r.ok) {
        this.setStatus('error', `/metrics: ${await errorMessage(r)}`);
      } else {
        this.add(Date.now(), parseMetrics(await r.text()));
        this.setStatus('ok', `live · ${this.scrapeCount} scrapes`);
      }
    } catch (e) {
      this.setStatus('error', `/metrics does not answer: ${e.message}`);
    }
    this.schedule(Number(this.refresh.value));
  }

  add(t, samples) {
    this.scrapeCount++;
    const reading = {
      t,
      finished: total(samples, 'kiln_requests_finished_total'),
      failed: total(samples, 'kiln_requests_failed_total'),
      generated: total(samples, 'kiln_generation_tokens_total'),
      prompt: total(samples, 'kiln_prompt_tokens_total'),
      running: total(samples, 'kiln_requests_running'),
      waiting: total(samples, 'kiln_requests_waiting'),
      kv: total(samples, 'kiln_kv_cache_usage_ratio'),
      hits: total(samples, 'kiln_prefix_cache_hits_total'),
      queries: total(samples, 'kiln_prefix_cache_queries_total'),
      hitRate: total(samples, 'kiln_prefix_cache_hit_rate'),
      ttft: buckets(samples, 'kiln_time_to_first_token_seconds'),
      itl: buckets(samples, 'kiln_inter_token_latency_seconds'),
    };
    const previous = this.scrapes[this.scrapes.length - 1];
    this.scrapes.push(reading);
    while (this.scrapes.length > 2 && this.scrapes[1].t < t - KEEP_MS) this.scrapes.shift();
    this.totals = {
      requests_finished: reading.finished, requests_failed: reading.failed, generation_tokens: reading.generated,
      prompt_tokens: reading.prompt, prefix_hit_rate: reading.hitRate,
    };
    if (!previous) return this.render();

    const dt = (t - previous.t) / 1000;
    const rate = (key) => (reading[key] === null || previous[key] === null ? null : Math.max(0, reading[key] - previous[key]) / dt);
    // Percentiles over the chosen window: the buckets now minus those of the oldest scrape in it.
    const since = t - Number(this.window.value);
    const base = this.scrapes.find((s) => s.t >= since && s !== reading) || previous;
    const ttft = bucketDelta(reading.ttft, base.ttft);
    const itl = bucketDelta(reading.itl, base.itl);
    const dq = reading.queries - previous.queries;
    this.history.push({
      t,
      requests_per_s: rate('finished'),
      generation_tokens_per_s: rate('generated'),
      prompt_tokens_per_s: rate('prompt'),
      running: reading.running,
      waiting: reading.waiting,
      kv_usage_percent: percent(reading.kv),
      prefix_hit_percent: dq > 0 ? percent((reading.hits - previous.hits) / dq) : null,
      ttft_ms: [0.5, 0.9, 0.99].map((q) => ms(histogramQuantile(q, ttft))),
      itl_ms: [0.5, 0.9, 0.99].map((q) => ms(histogramQuantile(q, itl))),
    });
    while (this.history.length && this.history[0].t < t - KEEP_MS) this.history.shift();
    this.render();
  }

  render() {
    const h = this.history;
    const times = h.map((p) => p.t);
    const col = (key) => h.map((p) => p[key]);
    const q = (key, i) => h.map((p) => p[key][i]);
    this.charts.requests.setData(times, [col('requests_per_s')]);
    this.charts.tokens.setData(times, [col('generation_tokens_per_s'), col('prompt_tokens_per_s')]);
    this.charts.running.setData(times, [col('running'), col('waiting')]);
    this.charts.cache.setData(times, [col('kv_usage_percent'), col('prefix_hit_percent')]);
    this.charts.ttft.setData(times, [q('ttft_ms', 0), q('ttft_ms', 1), q('ttft_ms', 2)]);
    this.charts.itl.setData(times, [q('itl_ms', 0), q('itl_ms', 1), q('itl_ms', 2)]);
    this.renderTiles(h[h.length - 1]);
  }

  renderTiles(last) {
    const fmt = (v, unit = '') => (v === null || v === undefined ? '–' : formatNumber(v) + unit);
    const tiles = [
      ['requests/s', fmt(last?.requests_per_s)],
      ['tokens/s', fmt(last?.generation_tokens_per_s)],
      ['running', fmt(last?.running)],
      ['waiting', fmt(last?.waiting)],
      ['KV cache', fmt(last?.kv_usage_percent, ' %')],
      ['TTFT p50', fmt(last?.ttft_ms[0], ' ms')],
      ['ITL p50', fmt(last?.itl_ms[0], ' ms')],
      ['prefix hit rate', fmt(percent(this.totals.prefix_hit_rate), ' %')],
      ['requests done', fmt(this.totals.requests_finished)],
      ['tokens generated', fmt(this.totals.generation_tokens)],
      ['requests failed', fmt(this.totals.requests_failed)],
    ];
    this.tiles.replaceChildren(...tiles.map(([label, value]) => {
      const div = document.createElement('div');
      div.className = 'tile';
      const v = document.createElement('span');
      v.className = 'value';
      v.textContent = value;
      const l = document.createElement('span');
      l.className = 'label';
      l.textContent = label;
      div.append(v, l);
      return div;
    }));
  }
}
