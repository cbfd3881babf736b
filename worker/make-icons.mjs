// Draws the Shopping list's icons (a white basket on the app's teal) as PNG files in
// worker/icons/, with no dependency but Node's zlib: node worker/make-icons.mjs
import { deflateSync } from 'node:zlib';
import { writeFileSync, mkdirSync } from 'node:fs';

const TEAL = [15, 118, 110];
const WHITE = [255, 255, 255];

/** Whether the unit-square point (x, y) is in the basket (scaled by `s` about the centre). */
function basket(x, y, s) {
  x = (x - 0.5) / s + 0.5;
  y = (y - 0.5) / s + 0.5;
  const handle = y < 0.44 && Math.hypot(x - 0.5, y - 0.44) > 0.19 && Math.hypot(x - 0.5, y - 0.44) < 0.245;
  const rim = y >= 0.4 && y <= 0.48 && x >= 0.16 && x <= 0.84;
  const t = (y - 0.48) / 0.32; // 0 at the rim, 1 at the bottom
  const half = 0.3 - 0.08 * t;
  const body = t >= 0 && t <= 1 && Math.abs(x - 0.5) <= half;
  const slot = t > 0.18 && t < 0.82 && [-0.14, 0, 0.14].some((c) => Math.abs(x - 0.5 - c * (1 - 0.25 * t)) < 0.025);
  return handle || rim || (body && !slot);
}

/** Whether (x, y) is on the background: a rounded square, or the whole square if `bleed`. */
function background(x, y, bleed) {
  if (bleed) return true;
  const r = 0.2;
  const dx = Math.max(r - x, 0, x - (1 - r));
  const dy = Math.max(r - y, 0, y - (1 - r));
  return dx * dx + dy * dy <= r * r;
}

/** RGBA pixels of a `size` square icon, 4×4 samples a pixel. */
function draw(size, maskable) {
  const px = Buffer.alloc(size * size * 4);
  const n = 4;
  for (let j = 0; j < size; j++) {
    for (let i = 0; i < size; i++) {
      let bg = 0;
      let fg = 0;
      for (let a = 0; a < n; a++) {
        for (let b = 0; b < n; b++) {
          const x = (i + (a + 0.5) / n) / size;
          const y = (j + (b + 0.5) / n) / size;
          if (!background(x, y, maskable)) continue;
          bg++;
          if (basket(x, y, maskable ? 0.72 : 0.9)) fg++;
        }
      }
      const o = (j * size + i) * 4;
      for (let c = 0; c < 3; c++) px[o + c] = bg ? Math.round((TEAL[c] * (bg - fg) + WHITE[c] * fg) / bg) : 0;
      px[o + 3] = Math.round((255 * bg) / (n * n));
    }
  }
  return px;
}

const CRC = Array.from({ length: 256 }, (_, k) => {
  let c = k;
  for (let i = 0; i < 8; i++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
  return c >>> 0;
});
function crc32(buf) {
  let c = 0xffffffff;
  for (const byte of buf) c = CRC[(c ^ byte) & 0xff] ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}
function chunk(type, data) {
  const len = Buffer.alloc(4);
  len.writeUInt32BE(data.length);
  const body = Buffer.concat([Buffer.from(type, 'ascii'), data]);
  const crc = Buffer.alloc(4);
  crc.writeUInt32BE(crc32(body));
  return Buffer.concat([len, body, crc]);
}

/** A PNG file (8-bit RGBA, no filtering) of `size` × `size` pixels `px`. */
function png(size, px) {
  const header = Buffer.alloc(13);
  header.writeUInt32BE(size, 0);
  header.writeUInt32BE(size, 4);
  header.set([8, 6, 0, 0, 0], 8);
  const rows = Buffer.alloc(size * (size * 4 + 1));
  for (let j = 0; j < size; j++) px.copy(rows, j * (size * 4 + 1) + 1, j * size * 4, (j + 1) * size * 4);
  return Buffer.concat([Buffer.from([137, 80, 78, 71, 13, 10, 26, 10]), chunk('IHDR', header),
    chunk('IDAT', deflateSync(rows, { level: 9 })), chunk('IEND', Buffer.alloc(0))]);
}

const dir = new URL('./icons/', import.meta.url);
mkdirSync(dir, { recursive: true });
for (const [name, size, maskable] of [['icon-192.png', 192, false], ['icon-512.png', 512, false], ['icon-maskable-512.png', 512, true]]) {
  writeFileSync(new URL(name, dir), png(size, draw(size, maskable)));
  console.log(`worker/icons/${name}`);
}
