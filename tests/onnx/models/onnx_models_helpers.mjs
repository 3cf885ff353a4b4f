// Shared pieces of the real-model checks: NumPy .npy files (f32 and int64, C order), a
// deterministic input, ONNX Runtime (npm onnxruntime-node) as the reference, and running the kiln
// binary.
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';

export const modelsDir = process.env.KILN_ONNX_MODELS_DIR ?? '';
export const kilnBinary = process.env.KILN_BINARY ?? '';

export function haveModels() {
  return modelsDir !== '' && fs.existsSync(path.join(modelsDir, 'node_modules', 'onnxruntime-node'));
}

export function modelPath(name) {
  return path.join(modelsDir, 'node_modules', '@gutenye', 'ocr-models', 'assets', name);
}

export function onnxRuntime() {
  return createRequire(path.join(modelsDir, 'package.json'))('onnxruntime-node');
}

// Writes `data` (a Float32Array, or a BigInt64Array as int64) as a C-order .npy file.
export function writeNpy(file, data, shape) {
  const descr = data instanceof BigInt64Array ? '<i8' : '<f4';
  let header = `{'descr': '${descr}', 'fortran_order': False, 'shape': (${shape.join(', ')}${shape.length === 1 ? ',' : ''}), }`;
  while ((10 + header.length + 1) % 64 !== 0) header += ' ';
  header += '\n';
  const pre = Buffer.alloc(10);
  pre.write('\x93NUMPY', 0, 'latin1');
  pre[6] = 1;
  pre.writeUInt16LE(header.length, 8);
  fs.writeFileSync(file, Buffer.concat([pre, Buffer.from(header, 'latin1'), Buffer.from(data.buffer, data.byteOffset, data.byteLength)]));
}

// Reads a C-order .npy file of f32 (as a Float32Array) or int64 (as a BigInt64Array).
export function readNpy(file) {
  const b = fs.readFileSync(file);
  const len = b.readUInt16LE(8);
  const header = b.subarray(10, 10 + len).toString('latin1');
  const int64 = header.includes("'<i8'");
  if (!int64 && !header.includes("'<f4'")) throw new Error(`${file}: not f32 or int64`);
  const shape = header.match(/\(([^)]*)\)/)[1].split(',').filter((s) => s.trim() !== '').map(Number);
  const bytes = b.subarray(10 + len);
  const buffer = bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.length);
  return { data: int64 ? new BigInt64Array(buffer) : new Float32Array(buffer), shape };
}

// Values in [-1, 1) from a fixed linear congruential sequence (the models' normalised pixel range).
export function deterministicInput(shape, seed = 12345) {
  const n = shape.reduce((a, b) => a * b, 1);
  const data = new Float32Array(n);
  let s = seed >>> 0;
  for (let i = 0; i < n; ++i) {
    s = (Math.imul(s, 1103515245) + 12345) >>> 0;
    data[i] = (s >>> 8) / 16777216 * 2 - 1;
  }
  return data;
}

// Runs kiln with `args`; returns { status, out } (stdout and stderr together).
// Synthetic text-line images [n, c, h, w], normalised as PaddleOCR's recognition expects
// ((pixel / 255 - 0.5) / 0.5): a light background, glyph-like boxes of dark horizontal and vertical
// strokes across the line, a little noise. Calibration and held-out inputs for the int8 tests.
export function textLineInput(shape, seed) {
  const [n, c, h, w] = shape;
  const data = new Float32Array(n * c * h * w);
  let s = seed >>> 0;
  const rnd = () => ((s = (Math.imul(s, 1103515245) + 12345) >>> 0) >>> 8) / 16777216;
  for (let b = 0; b < n; ++b) {
    const background = 0.6 + 0.35 * rnd(), ink = -0.9 + 0.3 * rnd();
    const img = new Float32Array(h * w).fill(background);
    for (let x = 4 + Math.floor(rnd() * 8); x < w - 8;) {
      const gw = 6 + Math.floor(rnd() * 14), top = 8 + Math.floor(rnd() * 8), bottom = h - 8 - Math.floor(rnd() * 8);
      for (let k = 0; k < 3; ++k) {
        if (rnd() < 0.5) {
          const y = top + Math.floor(rnd() * (bottom - top));
          for (let xx = x; xx < Math.min(w, x + gw); ++xx) img[y * w + xx] = img[(y + 1) * w + xx] = ink;
        } else {
          const xx = x + Math.floor(rnd() * gw);
          for (let y = top; y < bottom; ++y) for (let t = 0; t < 2 && xx + t < w; ++t) img[y * w + xx + t] = ink;
        }
      }
      x += gw + 2 + Math.floor(rnd() * 6);
    }
    for (let ch = 0; ch < c; ++ch) {
      for (let i = 0; i < h * w; ++i) data[(b * c + ch) * h * w + i] = img[i] + 0.05 * (rnd() - 0.5);
    }
  }
  return data;
}

export function kiln(args) {
  const r = spawnSync(kilnBinary, args, { encoding: 'utf8' });
  return { status: r.status, out: (r.stdout ?? '') + (r.stderr ?? '') };
}

export function kilnOk(args) {
  return execFileSync(kilnBinary, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
}
