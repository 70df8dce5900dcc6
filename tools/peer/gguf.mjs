// A GGUF header reader for the tests: where each metadata value and each tensor's
// data sit in a file's bytes, so a test can make a mutated copy of a model (one
// value or one tensor changed in place) and check that the comparison it guards
// fails. Reads GGUF v2/v3 as the specification lays it out; no writing of new
// keys, only same-size patches.

const TYPE_SIZE = { 0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8 };
export const GGUF_F32 = 6;

/* Parses buf's header: { kv: Map(key -> {type, offset}), tensors: Map(name -> {type, dims, offset}) }
 * where a kv's offset is that of its value and a tensor's the absolute offset of its data. */
export function ggufLayout(buf) {
  let p = 0;
  const u32 = () => { const v = buf.readUInt32LE(p); p += 4; return v; };
  const u64 = () => { const v = buf.readBigUInt64LE(p); p += 8; return Number(v); };
  const str = () => { const n = u64(); const s = buf.toString('utf8', p, p + n); p += n; return s; };
  if (buf.toString('latin1', 0, 4) !== 'GGUF') throw new Error('not a GGUF file');
  p = 4;
  const version = u32();
  if (version < 2) throw new Error(`GGUF version ${version} not supported here`);
  const nTensors = u64(), nKv = u64();
  const kv = new Map();
  const skip = (type) => {
    if (type === 8) { str(); return; }
    if (type === 9) { const t = u32(), n = u64(); for (let i = 0; i < n; i++) skip(t); return; }
    if (!(type in TYPE_SIZE)) throw new Error(`GGUF value type ${type} unknown`);
    p += TYPE_SIZE[type];
  };
  let alignment = 32;
  for (let i = 0; i < nKv; i++) {
    const key = str(), type = u32();
    kv.set(key, { type, offset: p });
    if (key === 'general.alignment' && type === 4) alignment = buf.readUInt32LE(p);
    skip(type);
  }
  const infos = [];
  for (let i = 0; i < nTensors; i++) {
    const name = str(), nDims = u32();
    const dims = [];
    for (let d = 0; d < nDims; d++) dims.push(u64());
    infos.push({ name, dims, type: u32(), rel: u64() });
  }
  const dataStart = Math.ceil(p / alignment) * alignment;
  const tensors = new Map(infos.map((t) => [t.name, { type: t.type, dims: t.dims, offset: dataStart + t.rel }]));
  return { kv, tensors };
}

/* A copy of buf with the f32 metadata value `key` replaced by f(old). */
export function withF32(buf, key, f) {
  const e = ggufLayout(buf).kv.get(key);
  if (!e || e.type !== GGUF_F32) throw new Error(`no f32 key ${key} in the file`);
  const out = Buffer.from(buf);
  out.writeFloatLE(f(out.readFloatLE(e.offset)), e.offset);
  return out;
}

/* A copy of buf with the u32 metadata value `key` replaced by f(old). */
export function withU32(buf, key, f) {
  const e = ggufLayout(buf).kv.get(key);
  if (!e || e.type !== 4) throw new Error(`no u32 key ${key} in the file`);
  const out = Buffer.from(buf);
  out.writeUInt32LE(f(out.readUInt32LE(e.offset)), e.offset);
  return out;
}

/* A copy of buf with each element of the F32 tensor `name` replaced by f(old, index). */
export function withF32Tensor(buf, name, f) {
  const t = ggufLayout(buf).tensors.get(name);
  if (!t) throw new Error(`no tensor ${name} in the file`);
  if (t.type !== 0) throw new Error(`tensor ${name} is of GGML type ${t.type}, not F32`);
  const out = Buffer.from(buf);
  const n = t.dims.reduce((a, b) => a * b, 1);
  for (let i = 0; i < n; i++) out.writeFloatLE(f(out.readFloatLE(t.offset + 4 * i), i), t.offset + 4 * i);
  return out;
}

/* A copy of buf read as another architecture: every occurrence of the name `from`
 * in the metadata (general.architecture's value and the `from.` prefix of its keys)
 * becomes `to`, which must be as long (so that no offset moves). */
export function withArch(buf, from, to) {
  if (Buffer.byteLength(from) !== Buffer.byteLength(to)) throw new Error(`'${from}' and '${to}' differ in length`);
  const { tensors } = ggufLayout(buf);
  const end = Math.min(...[...tensors.values()].map((t) => t.offset));
  const out = Buffer.from(buf);
  const f = Buffer.from(from), t = Buffer.from(to);
  let n = 0;
  for (let i = out.indexOf(f); i >= 0 && i < end; i = out.indexOf(f, i + f.length)) { t.copy(out, i); n++; }
  if (!n) throw new Error(`'${from}' is not in the metadata`);
  return out;
}
