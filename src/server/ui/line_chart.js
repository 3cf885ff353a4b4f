// A small line chart on a canvas: one shared time axis, several named series, a y axis from 0 to
// a rounded maximum, gaps where a value is null. `chart.data` is exactly what was drawn last.

const PALETTE = ['#d0621f', '#2f6fba', '#3b9a57', '#8a4fbf', '#b8860b'];

export class LineChart {
  // `canvas`: the element to draw on; `series`: [{label, color?}]; `format`: value -> axis text.
  constructor(canvas, series, { format = (v) => formatNumber(v), minMax = 1 } = {}) {
    this.canvas = canvas;
    this.format = format;
    this.minMax = minMax;
    this.data = { times: [], series: series.map((s, i) => ({ label: s.label, color: s.color || PALETTE[i], values: [] })) };
    new ResizeObserver(() => this.draw()).observe(canvas);
  }

  // times: [ms]; values: one array per series, as long as times.
  setData(times, values) {
    this.data.times = times.slice();
    this.data.series.forEach((s, i) => { s.values = values[i].slice(); });
    this.canvas.dataset.last = JSON.stringify(Object.fromEntries(
      this.data.series.map((s) => [s.label, s.values.length ? s.values[s.values.length - 1] : null])));
    this.draw();
  }

  draw() {
    const canvas = this.canvas;
    const dpr = window.devicePixelRatio || 1;
    const width = canvas.clientWidth, height = canvas.clientHeight;
    if (!width || !height) return;
    if (canvas.width !== Math.round(width * dpr) || canvas.height !== Math.round(height * dpr)) {
      canvas.width = Math.round(width * dpr);
      canvas.height = Math.round(height * dpr);
    }
    const ctx = canvas.getContext('2d');
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, width, height);
    const style = getComputedStyle(canvas);
    const ink = style.getPropertyValue('--chart-ink').trim() || '#555';
    const grid = style.getPropertyValue('--chart-grid').trim() || '#ddd';
    ctx.font = '11px system-ui, sans-serif';

    const { times, series } = this.data;
    let max = 0;
    for (const s of series) for (const v of s.values) if (v !== null && Number.isFinite(v)) max = Math.max(max, v);
    const top = niceCeiling(Math.max(max, this.minMax));
    const left = 48, right = 8, upper = 22, lower = 20;
    const plotW = width - left - right, plotH = height - upper - lower;

    // Grid and y labels: 0, 1/4, ... top.
    ctx.strokeStyle = grid;
    ctx.fillStyle = ink;
    ctx.lineWidth = 1;
    ctx.textAlign = 'right';
    ctx.textBaseline = 'middle';
    for (let i = 0; i <= 4; i++) {
      const y = upper + plotH - (plotH * i) / 4;
      ctx.beginPath();
      ctx.moveTo(left, Math.round(y) + 0.5);
      ctx.lineTo(left + plotW, Math.round(y) + 0.5);
      ctx.stroke();
      ctx.fillText(this.format((top * i) / 4), left - 6, y);
    }
    // Time labels: how long ago the first point was, and "now".
    ctx.textBaseline = 'top';
    if (times.length > 1) {
      ctx.textAlign = 'left';
      ctx.fillText(`-${Math.round((times[times.length - 1] - times[0]) / 1000)} s`, left, upper + plotH + 5);
      ctx.textAlign = 'right';
      ctx.fillText('now', left + plotW, upper + plotH + 5);
    }
    // Legend, with each series' latest value.
    ctx.textAlign = 'left';
    ctx.textBaseline = 'middle';
    let x = left;
    for (const s of series) {
      const last = s.values.length ? s.values[s.values.length - 1] : null;
      const text = `${s.label} ${last === null || last === undefined ? '–' : this.format(last)}`;
      ctx.fillStyle = s.color;
      ctx.fillRect(x, 7, 10, 4);
      ctx.fillStyle = ink;
      ctx.fillText(text, x + 14, 9);
      x += 14 + ctx.measureText(text).width + 14;
    }
    if (times.length < 2) return;
    const t0 = times[0], span = Math.max(times[times.length - 1] - t0, 1);
    ctx.lineWidth = 1.75;
    ctx.lineJoin = 'round';
    for (const s of series) {
      ctx.strokeStyle = s.color;
      ctx.beginPath();
      let pen = false;
      s.values.forEach((v, i) => {
        if (v === null || !Number.isFinite(v)) { pen = false; return; }
        const px = left + (plotW * (times[i] - t0)) / span;
        const py = upper + plotH - (plotH * Math.min(v, top)) / top;
        if (pen) ctx.lineTo(px, py);
        else ctx.moveTo(px, py);
        pen = true;
      });
      ctx.stroke();
    }
  }
}

// The smallest 1, 2 or 5 times a power of ten that is >= v.
function niceCeiling(v) {
  const p = 10 ** Math.floor(Math.log10(v));
  for (const m of [1, 2, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

export function formatNumber(v) {
  if (v === null || v === undefined || !Number.isFinite(v)) return '–';
  const a = Math.abs(v);
  if (Number.isInteger(v) && a < 1e4) return String(v);
  if (a >= 1e6) return `${(v / 1e6).toFixed(1)}M`;
  if (a >= 1e4) return `${(v / 1e3).toFixed(0)}k`;
  if (a >= 100) return v.toFixed(0);
  if (a >= 10) return v.toFixed(1);
  if (a === 0) return '0';
  return v.toFixed(2);
}
